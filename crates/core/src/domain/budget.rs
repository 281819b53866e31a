//! Budgets: how much compute a thread, and a workspace or API key (a scope), may use per UTC
//! day, and how many new sandboxes a scope may create per hour. Pure: the settings, the windows
//! they are counted in, the keys they are counted under, and the refusal a caller sees.
//!
//! Compute is resource-time in vCPU-seconds: a sandbox's running time (as `domain::usage`
//! counts it from the thread's events: creating, active, pausing, resuming) times its vCPUs (the
//! configured sandbox size; 1 when no size is known). Paused time is free, as on E2B. Days are
//! UTC days, hours are UTC clock hours: every process agrees on where a window starts without
//! asking anyone.

use std::fmt;
use std::time::Duration;

use super::thread_id::ThreadId;
use super::time::Millis;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The variables that set the budgets (all unset: no budgets).
pub const THREAD_COMPUTE_BUDGET_VAR: &str = "THREADBOX_THREAD_COMPUTE_BUDGET";
pub const SCOPE_COMPUTE_BUDGET_VAR: &str = "THREADBOX_SCOPE_COMPUTE_BUDGET";
pub const SCOPE_CREATES_PER_HOUR_VAR: &str = "THREADBOX_SCOPE_CREATES_PER_HOUR";
pub const BUDGET_CHECK_SECS_VAR: &str = "THREADBOX_BUDGET_CHECK_SECS";

/// The operator's budgets. Every limit is off (`None`) by default, and with all of them off
/// nothing is counted or checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budgets {
    /// vCPU-seconds one thread's sandboxes may run per UTC day.
    pub thread_compute_per_day: Option<u64>,
    /// vCPU-seconds all the threads of one scope may run per UTC day.
    pub scope_compute_per_day: Option<u64>,
    /// New sandboxes one scope may create per UTC clock hour.
    pub scope_creates_per_hour: Option<u64>,
    /// While a compute budget is set, how often the janitor looks at a running thread that has
    /// nothing else due: the most a running thread overshoots its budget by, plus the janitor's
    /// own period.
    pub check_every: Duration,
}

/// The default of [`Budgets::check_every`].
pub const DEFAULT_BUDGET_CHECK: Duration = Duration::from_secs(5 * 60);

impl Default for Budgets {
    fn default() -> Self {
        Self {
            thread_compute_per_day: None,
            scope_compute_per_day: None,
            scope_creates_per_hour: None,
            check_every: DEFAULT_BUDGET_CHECK,
        }
    }
}

/// The largest compute budget taken, in vCPU-seconds (a thousand vCPUs all day is under a
/// tenth of it); more is a misplaced unit.
pub const MAX_COMPUTE_BUDGET: u64 = 100_000_000_000;
/// The largest hourly create cap taken.
pub const MAX_CREATES_PER_HOUR: u64 = 1_000_000;
/// The shortest and longest janitor check interval, in seconds.
pub const BUDGET_CHECK_SECS: std::ops::RangeInclusive<u64> = 10..=3600;

impl Budgets {
    /// Read the budgets with `whole_number(variable, default, range)` (a reader over
    /// `config::Env`), in one place so every process names the same variables. A limit of 0
    /// (the default, and what CloudFormation passes for an unset parameter) is off.
    pub fn read<E>(
        whole_number: impl Fn(&'static str, u64, std::ops::RangeInclusive<u64>) -> Result<u64, E>,
    ) -> Result<Self, E> {
        let limit =
            |variable, max| whole_number(variable, 0, 0..=max).map(|n| (n > 0).then_some(n));
        Ok(Self {
            thread_compute_per_day: limit(THREAD_COMPUTE_BUDGET_VAR, MAX_COMPUTE_BUDGET)?,
            scope_compute_per_day: limit(SCOPE_COMPUTE_BUDGET_VAR, MAX_COMPUTE_BUDGET)?,
            scope_creates_per_hour: limit(SCOPE_CREATES_PER_HOUR_VAR, MAX_CREATES_PER_HOUR)?,
            check_every: Duration::from_secs(whole_number(
                BUDGET_CHECK_SECS_VAR,
                DEFAULT_BUDGET_CHECK.as_secs(),
                BUDGET_CHECK_SECS,
            )?),
        })
    }

    /// Whether a compute budget (thread or scope) is set.
    pub fn counts_compute(&self) -> bool {
        self.thread_compute_per_day.is_some() || self.scope_compute_per_day.is_some()
    }

    /// Whether a limit needs the shared window counter (scope limits do; a thread's compute is
    /// read from its own events).
    pub fn needs_counter(&self) -> bool {
        self.scope_compute_per_day.is_some() || self.scope_creates_per_hour.is_some()
    }
}

/// Who a scope budget belongs to: the Slack workspace of a Slack thread, or the API key of the
/// caller of the HTTP API.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BudgetScope {
    SlackTeam(String),
    /// A key's id (a digest of it, never the key).
    ApiKey(String),
}

impl BudgetScope {
    /// How counter keys name the scope.
    pub fn key(&self) -> String {
        match self {
            BudgetScope::SlackTeam(team) => format!("team:{team}"),
            BudgetScope::ApiKey(id) => format!("key:{id}"),
        }
    }

    /// The scope [`BudgetScope::key`] names; `None` for anything else.
    pub fn from_key(key: &str) -> Option<BudgetScope> {
        let valid = |id: &str| {
            (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
        };
        match key.split_once(':')? {
            ("team", team) if valid(team) => Some(BudgetScope::SlackTeam(team.to_owned())),
            ("key", id) if valid(id) => Some(BudgetScope::ApiKey(id.to_owned())),
            _ => None,
        }
    }

    /// The scope of a thread as far as its id says: a Slack thread's workspace.
    pub fn of_thread(thread_id: &ThreadId) -> Option<BudgetScope> {
        thread_id
            .slack_team()
            .map(|team| BudgetScope::SlackTeam(team.to_owned()))
    }
}

impl fmt::Display for BudgetScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetScope::SlackTeam(team) => write!(f, "Slack workspace {team}"),
            BudgetScope::ApiKey(id) => write!(f, "API key {id}"),
        }
    }
}

/// The UTC day `now` falls in: its start and the start of the next.
pub fn day_of(now: Millis) -> (Millis, Millis) {
    let start = now.0.div_euclid(DAY_MS) * DAY_MS;
    (Millis(start), Millis(start + DAY_MS))
}

/// The UTC clock hour `now` falls in: its start and the start of the next.
pub fn hour_of(now: Millis) -> (Millis, Millis) {
    let start = now.0.div_euclid(HOUR_MS) * HOUR_MS;
    (Millis(start), Millis(start + HOUR_MS))
}

/// Counter key of a scope's new sandboxes in the hour starting at `hour`.
pub fn creates_key(scope: &BudgetScope, hour: Millis) -> String {
    format!("budget:creates:{}:{}", scope.key(), hour.0)
}

/// Counter key of a scope's compute (vCPU-milliseconds) on the day starting at `day`.
pub fn scope_compute_key(scope: &BudgetScope, day: Millis) -> String {
    format!("budget:compute:{}:{}", scope.key(), day.0)
}

/// Counter key of how much of a thread's compute on the day starting at `day` has been charged
/// to its scope (vCPU-milliseconds, only ever raised).
pub fn charged_key(thread_id: &ThreadId, day: Millis) -> String {
    format!("budget:charged:{}:{}", thread_id.as_str(), day.0)
}

/// vCPU-milliseconds of `running_ms` on a sandbox of `vcpus` (rounded down).
pub fn vcpu_ms(running_ms: u64, vcpus: f64) -> u64 {
    (running_ms as f64 * vcpus).floor() as u64
}

/// What went over its budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Budgeted {
    Thread(ThreadId),
    Scope(BudgetScope),
}

impl fmt::Display for Budgeted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Budgeted::Thread(id) => write!(f, "thread {id}"),
            Budgeted::Scope(scope) => scope.fmt(f),
        }
    }
}

/// A budget refused the work. `now` is when it was decided, so the message can say how long
/// until the window resets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BudgetExceeded {
    /// The day's compute is used: the thread is paused (never destroyed) and new work waits for
    /// the next UTC day.
    Compute {
        who: Budgeted,
        thread_id: ThreadId,
        used_vcpu_secs: u64,
        limit_vcpu_secs: u64,
        now: Millis,
        resets_at: Millis,
    },
    /// The scope created its hour's sandboxes; nothing was created or written.
    Creates {
        scope: BudgetScope,
        thread_id: ThreadId,
        limit: u64,
        now: Millis,
        resets_at: Millis,
    },
}

impl BudgetExceeded {
    /// The stable code callers branch on.
    pub fn code(&self) -> &'static str {
        match self {
            BudgetExceeded::Compute { .. } => "compute_budget_exceeded",
            BudgetExceeded::Creates { .. } => "create_budget_exceeded",
        }
    }

    /// When the window that refused resets.
    pub fn resets_at(&self) -> Millis {
        match self {
            BudgetExceeded::Compute { resets_at, .. }
            | BudgetExceeded::Creates { resets_at, .. } => *resets_at,
        }
    }

    /// How long until then (at least a second): the `Retry-After` of the refusal.
    pub fn retry_after(&self) -> Duration {
        let now = match self {
            BudgetExceeded::Compute { now, .. } | BudgetExceeded::Creates { now, .. } => *now,
        };
        self.resets_at().since(now).max(Duration::from_secs(1))
    }

    /// When the window resets, in words: `00:00 UTC (in 3 h 12 min)`.
    pub fn resets_in_words(&self) -> String {
        let at = self.resets_at().0.rem_euclid(DAY_MS);
        let secs = self.retry_after().as_secs();
        let wait = match secs {
            0..=119 => format!("{secs} s"),
            120..=3599 => format!("{} min", secs.div_ceil(60)),
            _ => {
                let minutes = secs.div_ceil(60);
                format!("{} h {} min", minutes / 60, minutes % 60)
            }
        };
        format!(
            "{:02}:{:02} UTC (in {wait})",
            at / HOUR_MS,
            (at % HOUR_MS) / 60_000
        )
    }
}

impl fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetExceeded::Compute {
                who,
                thread_id,
                used_vcpu_secs,
                limit_vcpu_secs,
                ..
            } => write!(
                f,
                "{who} has used its compute budget for today ({used_vcpu_secs} of \
                 {limit_vcpu_secs} vCPU-seconds; running seconds times the sandbox's vCPUs), so \
                 thread {thread_id} is paused with its files kept and runs again when the budget \
                 resets at {}",
                self.resets_in_words()
            ),
            BudgetExceeded::Creates {
                scope,
                thread_id,
                limit,
                ..
            } => write!(
                f,
                "{scope} has created its {limit} new sandboxes for this hour, so none was \
                 created for thread {thread_id}; the cap resets at {}",
                self.resets_in_words()
            ),
        }
    }
}

impl std::error::Error for BudgetExceeded {}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-01T00:00:00Z.
    const T0: i64 = 1_793_491_200_000;

    #[test]
    fn windows_are_utc_days_and_clock_hours() {
        let now = Millis(T0 + 13 * HOUR_MS + 25 * 60_000);
        assert_eq!(day_of(now), (Millis(T0), Millis(T0 + DAY_MS)));
        assert_eq!(
            hour_of(now),
            (Millis(T0 + 13 * HOUR_MS), Millis(T0 + 14 * HOUR_MS))
        );
        assert_eq!(day_of(Millis(T0)).0, Millis(T0), "midnight starts its day");
    }

    #[test]
    fn refusals_say_what_when_and_in_which_unit() {
        let thread_id = ThreadId::parse("slack:T1:C1:1.1").unwrap();
        let now = Millis(T0 + 20 * HOUR_MS + 48 * 60_000);
        let compute = BudgetExceeded::Compute {
            who: Budgeted::Scope(BudgetScope::of_thread(&thread_id).unwrap()),
            thread_id: thread_id.clone(),
            used_vcpu_secs: 7_230,
            limit_vcpu_secs: 7_200,
            now,
            resets_at: day_of(now).1,
        };
        assert_eq!(compute.code(), "compute_budget_exceeded");
        assert_eq!(
            compute.retry_after(),
            Duration::from_secs(3 * 3600 + 12 * 60)
        );
        let text = compute.to_string();
        assert!(text.starts_with("Slack workspace T1 has used"), "{text}");
        assert!(text.contains("7230 of 7200 vCPU-seconds"), "{text}");
        assert!(text.contains("00:00 UTC (in 3 h 12 min)"), "{text}");

        let creates = BudgetExceeded::Creates {
            scope: BudgetScope::ApiKey("ab12".into()),
            thread_id,
            limit: 5,
            now,
            resets_at: hour_of(now).1,
        };
        assert_eq!(creates.code(), "create_budget_exceeded");
        assert_eq!(creates.retry_after(), Duration::from_secs(12 * 60));
        assert!(creates
            .to_string()
            .contains("API key ab12 has created its 5 new sandboxes"));
        assert!(creates.to_string().contains("21:00 UTC (in 12 min)"));
    }

    #[test]
    fn resource_time_is_running_time_times_vcpus() {
        assert_eq!(vcpu_ms(1_500, 2.0), 3_000);
        assert_eq!(vcpu_ms(1_000, 0.5), 500);
        assert!(!Budgets::default().counts_compute());
        assert!(!Budgets::default().needs_counter());
    }

    #[test]
    fn settings_are_off_at_zero_and_read_by_name() {
        let read = |values: &'static [(&'static str, u64)]| {
            Budgets::read(|name, default, range| {
                let n = values
                    .iter()
                    .find(|(v, _)| *v == name)
                    .map_or(default, |(_, n)| *n);
                if range.contains(&n) {
                    Ok(n)
                } else {
                    Err(name)
                }
            })
        };
        assert_eq!(read(&[]).unwrap(), Budgets::default());
        let set = read(&[
            (THREAD_COMPUTE_BUDGET_VAR, 3_600),
            (SCOPE_CREATES_PER_HOUR_VAR, 20),
            (BUDGET_CHECK_SECS_VAR, 60),
        ])
        .unwrap();
        assert_eq!(set.thread_compute_per_day, Some(3_600));
        assert_eq!(set.scope_compute_per_day, None);
        assert_eq!(set.scope_creates_per_hour, Some(20));
        assert_eq!(set.check_every, Duration::from_secs(60));
        assert!(set.counts_compute() && set.needs_counter());
        assert_eq!(
            read(&[(BUDGET_CHECK_SECS_VAR, 1)]).unwrap_err(),
            BUDGET_CHECK_SECS_VAR
        );
    }
}
