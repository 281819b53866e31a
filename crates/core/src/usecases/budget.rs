//! Budgets at work (the limits and their windows are `domain::budget`): a scope's cap on new
//! sandboxes per hour, and the compute a thread and its scope may use per UTC day.
//!
//! **Creates.** A resolve that would create a sandbox first takes one of its scope's slots for
//! the hour (`WindowCounter::take_below`: one conditional write, so N concurrent creates with a
//! cap of K get exactly K slots). A refused take writes nothing and happens before the session
//! record is written or the provider asked, so a storm past the cap costs one counter write per
//! request. A slot taken by a resolve that then does not create (another resolve of the same
//! thread won the creation lease, or the record write failed) is given back. Recreating a
//! sandbox the provider lost is not a new thread's create and takes no slot.
//!
//! **Compute.** A thread's use today is read from its own lifecycle events (`domain::usage`,
//! from 00:00 UTC): exact, and only read while a compute budget is set. A scope's use is a
//! counter per scope and day, charged with each thread's use as it is seen: the thread's
//! "charged so far today" counter is raised to its use (`raise` answers how much it rose, so
//! two racing checks charge each vCPU-millisecond once) and the rise is added to the scope's.
//! A crash between the two loses the rise (the scope is undercharged, never charged twice).
//!
//! Where the checks run:
//! - every resolve (and so every exec, file operation and Slack command, which resolve first):
//!   a thread over a budget is refused with `compute_budget_exceeded` (429 until the next UTC
//!   day); an active one is also paused; a reset is refused before it destroys anything;
//! - the janitor: while a compute budget is set, every write of an active record makes it due
//!   again within `Budgets::check_every`, so the sweep looks at running threads that nobody is
//!   calling and pauses one that crossed its budget mid-run (overshoot: at most `check_every`
//!   plus the janitor's period).
//!
//! A budget pause is the normal conditional pause (claim `pausing` on the version read, then the
//! provider's pause), with cause `budget`; it never destroys. Like a pause asked for by a person
//! it freezes background processes, but it never interrupts a running command: a thread with a
//! live command hold is paused by the first check after the command ends.
//!
//! **Whose budget.** Work done for a caller is charged to the caller: the API key a request,
//! an MCP call or a WebSocket frame came with (whatever thread id it names, a `slack:` one
//! included, so a key cannot step around its own cap by naming threads of a workspace). Work
//! with no caller (Slack's events and the worker, the janitor, a server without API keys) is
//! charged to the scope the thread's id names, its Slack workspace, or to none. The janitor
//! knows no caller, so it checks API threads against the thread budget only, and their running
//! time is charged to the key at its next call.
//!
//! The caller is part of the [`Threadbox`] value itself ([`Threadbox::for_caller`]), not of
//! the task running it: each way in binds it once where it authenticates (the HTTP API's key
//! check, a WebSocket connection's token) and every use case, and every task or service that
//! work is handed to, carries it along with the handle it was given. Nothing can drop it by
//! spawning.

use std::sync::Arc;

use crate::domain::{
    charged_key, creates_key, day_of, hour_of, scope_compute_key, vcpu_ms, BudgetExceeded,
    BudgetScope, Budgeted, Cause, Command, Millis, Session, Status, ThreadId,
};
use crate::ports::WindowCounter;

use super::error::UseCaseError;
use super::threadbox::{Step, Threadbox};

/// Counts outlive their window by this much, so a count read at the window's edge is still there.
const COUNT_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// A create slot taken for this hour: give it back if no sandbox is created with it.
#[derive(Debug)]
pub(crate) struct CreateSlot {
    key: String,
    expires_at: Millis,
}

impl Threadbox {
    /// The same threadbox acting for `caller` (the budget scope of the API key that asked; `None`
    /// with authentication off): everything done through it is charged to that scope.
    pub fn for_caller(&self, caller: Option<BudgetScope>) -> Self {
        Self {
            caller,
            ..self.clone()
        }
    }

    /// Who this threadbox acts for (`for_caller`); `None` for the process's own work.
    pub fn caller(&self) -> Option<&BudgetScope> {
        self.caller.as_ref()
    }

    /// The budgets' counter, when the process has one.
    pub fn with_budget_counter(mut self, counter: Arc<dyn WindowCounter>) -> Self {
        self.budget_counter = Some(counter);
        self
    }

    /// The scope whose budgets `thread_id`'s work counts against: the caller's, else the Slack
    /// workspace its id names, else none.
    fn budget_scope(&self, thread_id: &ThreadId) -> Option<BudgetScope> {
        self.caller
            .clone()
            .or_else(|| BudgetScope::of_thread(thread_id))
    }

    /// The counter for scope limits; `None` when no scope limit is set, or (refused at start-up
    /// by every wiring) no counter was given.
    fn scope_counter(&self) -> Option<&Arc<dyn WindowCounter>> {
        self.budget_counter.as_ref()
    }

    /// Take a create slot for `thread_id`'s scope, or refuse with `create_budget_exceeded`
    /// before anything is written. `None`: no cap applies.
    pub(crate) async fn take_create_slot(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Option<CreateSlot>, UseCaseError> {
        let (Some(cap), Some(counter)) = (
            self.config.budgets.scope_creates_per_hour,
            self.scope_counter(),
        ) else {
            return Ok(None);
        };
        let Some(scope) = self.budget_scope(thread_id) else {
            return Ok(None);
        };
        let now = self.clock.now();
        let (hour, next_hour) = hour_of(now);
        let key = creates_key(&scope, hour);
        let expires_at = next_hour.plus(COUNT_GRACE);
        match counter.take_below(&key, cap, expires_at, now).await? {
            Some(_) => Ok(Some(CreateSlot { key, expires_at })),
            None => {
                tracing::info!(%thread_id, %scope, cap, "create refused: the scope's hourly cap is reached");
                Err(UseCaseError::Budget(BudgetExceeded::Creates {
                    scope,
                    thread_id: thread_id.clone(),
                    limit: cap,
                    now,
                    resets_at: next_hour,
                }))
            }
        }
    }

    /// Give back a slot no sandbox was created with. Best effort: a failure leaves the hour one
    /// create short, which the log says.
    pub(crate) async fn give_back(&self, slot: CreateSlot) {
        let Some(counter) = self.scope_counter() else {
            return;
        };
        if let Err(error) = counter
            .add(&slot.key, -1, slot.expires_at, self.clock.now())
            .await
        {
            tracing::warn!(%error, key = %slot.key, "giving back an unused create slot failed");
        }
    }

    /// Whether `thread_id` (with its record, when it has one) is over a compute budget today,
    /// charging its scope with what it ran since last seen. `None`: within budget, or no compute
    /// budget is set.
    pub(crate) async fn compute_exceeded(
        &self,
        thread_id: &ThreadId,
        session: Option<&Session>,
    ) -> Result<Option<BudgetExceeded>, UseCaseError> {
        let budgets = &self.config.budgets;
        if !budgets.counts_compute() {
            return Ok(None);
        }
        let now = self.clock.now();
        let (day, next_day) = day_of(now);
        let vcpus = self.config.pricing.size.map_or(1.0, |size| size.vcpus);
        let used = match session {
            Some(s) => vcpu_ms(self.usage_of(s, Some(day), now).await?.running_ms, vcpus),
            None => 0,
        };
        let exceeded = |who, used: u64, limit: u64| BudgetExceeded::Compute {
            who,
            thread_id: thread_id.clone(),
            used_vcpu_secs: used / 1000,
            limit_vcpu_secs: limit,
            now,
            resets_at: next_day,
        };
        if let Some(limit) = budgets.thread_compute_per_day {
            if used >= limit.saturating_mul(1000) {
                return Ok(Some(exceeded(
                    Budgeted::Thread(thread_id.clone()),
                    used,
                    limit,
                )));
            }
        }
        let (Some(limit), Some(counter), Some(scope)) = (
            budgets.scope_compute_per_day,
            self.scope_counter(),
            self.budget_scope(thread_id),
        ) else {
            return Ok(None);
        };
        let expires_at = next_day.plus(COUNT_GRACE);
        let rise = match used {
            0 => 0,
            used => {
                counter
                    .raise(&charged_key(thread_id, day), used, expires_at, now)
                    .await?
            }
        };
        let total = counter
            .add(
                &scope_compute_key(&scope, day),
                i64::try_from(rise).unwrap_or(i64::MAX),
                expires_at,
                now,
            )
            .await?;
        Ok((total >= limit.saturating_mul(1000))
            .then(|| exceeded(Budgeted::Scope(scope), total, limit)))
    }

    /// Claim the pause of an active thread whose compute budget is used: the normal claim
    /// (`pausing`, conditional on the version read) with cause `budget`; the caller carries it
    /// out with `finish_pause` (or hands it off). `None` when there is nothing to claim: not
    /// active, a command running (the next check pauses it), or another writer first.
    pub(crate) async fn claim_budget_pause(
        &self,
        current: &Session,
        exceeded: &BudgetExceeded,
    ) -> Result<Option<Session>, UseCaseError> {
        if current.status != Status::Active || current.has_live_command_hold(self.clock.now()) {
            return Ok(None);
        }
        let detail = match exceeded {
            BudgetExceeded::Compute {
                who,
                used_vcpu_secs,
                limit_vcpu_secs,
                ..
            } => format!("{who}: {used_vcpu_secs} of {limit_vcpu_secs} vCPU-seconds today"),
            BudgetExceeded::Creates { .. } => exceeded.to_string(),
        };
        match self
            .step(current, Command::Pause, Cause::Budget, Some(detail), |_| {})
            .await?
        {
            Step::Moved(claimed) => {
                tracing::info!(thread_id = %current.thread_id, %exceeded, "pausing a thread over its compute budget");
                Ok(Some(claimed))
            }
            Step::NoOp | Step::Conflict => Ok(None),
        }
    }

    /// Pause an active thread over its budget here and now (a resolve found it): claim, then
    /// the provider's pause. Whatever comes of it, the caller is refused with `exceeded`: a
    /// pause that fails is logged and left to the janitor (a claim whose lease runs out is
    /// recovered; a thread still active is checked again).
    pub(crate) async fn pause_for_budget(&self, current: &Session, exceeded: &BudgetExceeded) {
        let paused = match self.claim_budget_pause(current, exceeded).await {
            Ok(Some(claimed)) => self.finish_pause(claimed, Cause::Budget).await.map(drop),
            Ok(None) => Ok(()),
            Err(error) => Err(error),
        };
        if let Err(error) = paused {
            tracing::warn!(thread_id = %current.thread_id, %error, "pausing a thread over its budget failed; the janitor retries");
        }
    }

    /// While a compute budget is set, an active record is due again within `check_every`, so
    /// the janitor sees a thread that runs on without calls (`Threadbox::write` applies this to
    /// every write).
    pub(crate) fn due_for_budget_check(&self, next: &mut Session) {
        let budgets = &self.config.budgets;
        if next.status != Status::Active || !budgets.counts_compute() {
            return;
        }
        let check_at = self.clock.now().plus(budgets.check_every);
        next.next_action_at = Some(next.next_action_at.map_or(check_at, |at| at.min(check_at)));
    }
}
