//! janitor: the scheduled sweep, run by EventBridge every minute.
//!
//! Each run re-drives unsent lifecycle events, walks the due-work index (idle pauses, retention,
//! stuck transitions, lost sandboxes) and, every [`Schedule::reconcile_every`] minutes,
//! reconciles with the provider's own list of sandboxes (orphans killed, drift corrected).
//!
//! # Time
//!
//! The sweep stops *starting* work at the earlier of `budget` after the run began and the Lambda
//! deadline minus `margin`; whatever it left is still due in the index and the next run (a minute
//! later) continues there. Work already started finishes on its own timeouts; if the runtime
//! kills the function first, the claim's lease expires and a later run recovers the thread.
//!
//! # Reconciliation
//!
//! Listing every sandbox at the provider costs a call plus one read per sandbox, so it runs on
//! one scheduled minute in `reconcile_every`: when the event's scheduled time, in whole minutes
//! since the epoch, is a multiple of it. With the default of 5 that is minutes :00, :05, :10...
//! of every hour. Using the event's time rather than the clock keeps a retried delivery of the
//! same event making the same choice.
//!
//! # Errors
//!
//! The invocation fails with error type [`JanitorError::ERROR_TYPE`] when the sweep counted
//! failures (a store, queue or provider call that did not succeed), so the function's error
//! metric is the janitor's health. Nothing is lost by it: the next run retries what failed.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::eventbridge::EventBridgeEvent;
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::Serialize;
use threadbox_core::usecases::{SweepOptions, SweepReport, Threadbox};
use threadbox_lambda::{Env, Setup, SetupError};

pub const RECONCILE_EVERY_VAR: &str = "THREADBOX_RECONCILE_EVERY_MINUTES";
pub const BUDGET_VAR: &str = "THREADBOX_SWEEP_BUDGET_SECS";
pub const MARGIN_VAR: &str = "THREADBOX_SWEEP_MARGIN_SECS";

/// A deadline this far in the past is not an overdue invocation but a placeholder: Lambda always
/// sends a real one, while emulators may not (`cargo lambda watch` sends a fixed 600000, ten
/// minutes after the epoch, and `Context::default()` has 0).
const PLACEHOLDER_AGE: Duration = Duration::from_secs(3600);

/// How a run spends its time, and how often it reconciles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Reconcile on one scheduled minute in this many (1: every run).
    pub reconcile_every: u64,
    /// The longest one run starts work for: below the one-minute schedule, so runs do not pile
    /// up on each other.
    pub budget: Duration,
    /// Left before the Lambda deadline for the work in flight to finish.
    pub margin: Duration,
}

impl Default for Schedule {
    fn default() -> Self {
        Self {
            reconcile_every: 5,
            budget: Duration::from_secs(45),
            margin: Duration::from_secs(10),
        }
    }
}

impl Schedule {
    /// `THREADBOX_RECONCILE_EVERY_MINUTES` (1 to 60, default 5), `THREADBOX_SWEEP_BUDGET_SECS`
    /// (1 to 840, default 45) and `THREADBOX_SWEEP_MARGIN_SECS` (1 to 300, default 10).
    pub fn from_env(env: &Env) -> Result<Self, SetupError> {
        let defaults = Self::default();
        Ok(Self {
            reconcile_every: env.whole_number(
                RECONCILE_EVERY_VAR,
                defaults.reconcile_every,
                1..=60,
            )?,
            budget: Duration::from_secs(env.whole_number(
                BUDGET_VAR,
                defaults.budget.as_secs(),
                1..=840,
            )?),
            margin: Duration::from_secs(env.whole_number(
                MARGIN_VAR,
                defaults.margin.as_secs(),
                1..=300,
            )?),
        })
    }

    /// Whether the run scheduled at `scheduled` (epoch seconds) reconciles.
    pub fn reconciles_at(&self, scheduled: i64) -> bool {
        scheduled.div_euclid(60) % self.reconcile_every as i64 == 0
    }

    /// How long a run may start work for, given the invocation's deadline (epoch milliseconds)
    /// and the time now. Without a real deadline (0, or a placeholder long past), the budget.
    pub fn time_to_work(&self, deadline_ms: u64, now: SystemTime) -> Duration {
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let deadline = Duration::from_millis(deadline_ms);
        if deadline + PLACEHOLDER_AGE < now {
            return self.budget;
        }
        deadline
            .saturating_sub(now)
            .saturating_sub(self.margin)
            .min(self.budget)
    }
}

/// What a run returns (and logs): the sweep's counts, and the choices the run made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JanitorReport {
    #[serde(flatten)]
    pub sweep: SweepReport,
    pub reconciled: bool,
    /// How long the run allowed itself to start work.
    pub time_to_work_ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum JanitorError {
    #[error("the sweep counted {failures} failures; the next run retries them: {report}")]
    SweepFailed { failures: usize, report: String },
}

impl JanitorError {
    /// The stable error type the invocation fails with.
    pub const ERROR_TYPE: &'static str = "Janitor.SweepFailed";
}

impl From<JanitorError> for Diagnostic {
    fn from(error: JanitorError) -> Self {
        Diagnostic {
            error_type: JanitorError::ERROR_TYPE.to_owned(),
            error_message: error.to_string(),
        }
    }
}

/// The handler, holding what every run needs.
#[derive(Clone)]
pub struct Janitor {
    tb: Threadbox,
    schedule: Schedule,
}

/// What `main` serves: the use cases and the schedule from the environment. With
/// `THREADBOX_TRANSITION_QUEUE_URL` set, the sweep hands its claims to that queue.
pub async fn build(setup: Setup) -> Result<Janitor, SetupError> {
    let mut tb = threadbox_lambda::threadbox(&setup.sdk, &setup.env, &setup.secrets).await?;
    // Claimed pauses and destroys go to the pause function's queue handler.
    if let Some(queue) = threadbox_lambda::transition_queue(&setup.sdk, &setup.env)? {
        tb = tb.with_transition_queue(Arc::new(queue));
    }
    Ok(Janitor::new(tb, Schedule::from_env(&setup.env)?))
}

impl Janitor {
    pub fn new(tb: Threadbox, schedule: Schedule) -> Self {
        Self { tb, schedule }
    }

    /// One scheduled run (see the module's docs).
    pub async fn handle(
        &self,
        event: LambdaEvent<EventBridgeEvent>,
    ) -> Result<JanitorReport, JanitorError> {
        let now = SystemTime::now();
        let scheduled = event.payload.time.map_or_else(
            || {
                now.duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64)
            },
            |t| t.timestamp(),
        );
        let reconciled = self.schedule.reconciles_at(scheduled);
        let time_to_work = self.schedule.time_to_work(event.context.deadline, now);
        let mut options = SweepOptions::for_duration(time_to_work);
        options.reconcile = reconciled;

        let span = tracing::info_span!("sweep", scheduled, reconciled);
        let sweep = {
            use tracing::Instrument;
            self.tb.sweep(options).instrument(span).await
        };
        let report = JanitorReport {
            sweep,
            reconciled,
            time_to_work_ms: time_to_work.as_millis() as u64,
        };
        let shown = serde_json::to_string(&report).unwrap_or_default();
        if report.sweep.failures > 0 {
            tracing::warn!(report = %shown, "janitor sweep had failures");
            return Err(JanitorError::SweepFailed {
                failures: report.sweep.failures,
                report: shown,
            });
        }
        if report.sweep.completed {
            tracing::info!(report = %shown, "janitor sweep");
        } else {
            tracing::warn!(report = %shown, "janitor sweep stopped at its deadline; the next run continues");
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use threadbox_core::domain::{Status, ThreadId};
    use threadbox_core::ports::ProviderError;
    use threadbox_testing::Op;
    use threadbox_tests::lambda::{context_with_deadline, fixture_json, LocalThreadbox};

    use super::*;

    fn scheduled_event(time: &str) -> LambdaEvent<EventBridgeEvent> {
        let mut json = fixture_json("eventbridge-scheduled.json");
        json["time"] = serde_json::Value::from(time);
        let payload: EventBridgeEvent = serde_json::from_value(json).unwrap();
        LambdaEvent::new(payload, context_with_deadline(Duration::from_secs(60)))
    }

    #[test]
    fn reconciliation_runs_on_every_nth_scheduled_minute() {
        let schedule = Schedule::default();
        let minute = |m: i64| 1_700_000_100 - 1_700_000_100 % 3600 + m * 60;
        let reconciling: Vec<i64> = (0..15)
            .filter(|m| schedule.reconciles_at(minute(*m)))
            .collect();
        assert_eq!(reconciling, vec![0, 5, 10]);
        // Seconds within the minute do not matter (EventBridge may deliver a little late).
        assert!(schedule.reconciles_at(minute(5) + 42));
        let every = Schedule {
            reconcile_every: 1,
            ..schedule
        };
        assert!((0..5).all(|m| every.reconciles_at(minute(m))));
    }

    #[test]
    fn the_run_stops_before_the_lambda_deadline_or_its_budget() {
        let schedule = Schedule::default();
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let deadline_in = |secs: u64| (1_700_000_000 + secs) * 1000;
        // A 90 s function timeout: the budget binds.
        assert_eq!(
            schedule.time_to_work(deadline_in(90), now),
            Duration::from_secs(45)
        );
        // A 30 s timeout: the deadline minus the margin binds.
        assert_eq!(
            schedule.time_to_work(deadline_in(30), now),
            Duration::from_secs(20)
        );
        // Less time left than the margin: start nothing.
        assert_eq!(schedule.time_to_work(deadline_in(5), now), Duration::ZERO);
        // No deadline given (a test context), or cargo lambda watch's fixed placeholder: the
        // budget.
        assert_eq!(schedule.time_to_work(0, now), Duration::from_secs(45));
        assert_eq!(schedule.time_to_work(600_000, now), Duration::from_secs(45));
    }

    #[test]
    fn settings_are_read_and_checked() {
        let schedule = Schedule::from_env(&Env::from_pairs(&[
            (RECONCILE_EVERY_VAR, "1"),
            (BUDGET_VAR, "20"),
        ]))
        .unwrap();
        assert_eq!(schedule.reconcile_every, 1);
        assert_eq!(schedule.budget, Duration::from_secs(20));
        assert_eq!(schedule.margin, Schedule::default().margin);
        let err = Schedule::from_env(&Env::from_pairs(&[(RECONCILE_EVERY_VAR, "0")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(RECONCILE_EVERY_VAR), "{err}");
    }

    /// A thread idle for longer than the idle pause, and the janitor (default schedule) over
    /// the same use cases.
    async fn with_idle_thread() -> (LocalThreadbox, ThreadId, Janitor) {
        let local = LocalThreadbox::new();
        let idle = ThreadId::parse("idle-thread").unwrap();
        local.tb.resolve(&idle).await.unwrap();
        local
            .clock
            .advance(local.tb.config.timers.idle_pause + Duration::from_secs(1));
        let janitor = Janitor::new(local.tb.clone(), Schedule::default());
        (local, idle, janitor)
    }

    #[tokio::test]
    async fn the_scheduled_event_pauses_idle_threads_and_reconciles_on_its_minute() {
        let (local, idle, janitor) = with_idle_thread().await;
        let busy = ThreadId::parse("busy-thread").unwrap();
        local.tb.resolve(&busy).await.unwrap();

        // The fixture's time is 22:15:00, a reconciling minute.
        let fixture: EventBridgeEvent =
            serde_json::from_value(fixture_json("eventbridge-scheduled.json")).unwrap();
        let event = LambdaEvent::new(fixture, context_with_deadline(Duration::from_secs(60)));
        let report = janitor.handle(event).await.unwrap();
        assert!(report.reconciled);
        assert!(report.sweep.completed);
        assert_eq!(report.sweep.paused, 1, "{report:?}");
        assert_eq!(report.sweep.failures, 0);
        let status = |t| {
            let tb = local.tb.clone();
            async move { tb.session(&t).await.unwrap().unwrap().status }
        };
        assert_eq!(status(idle).await, Status::Paused);
        assert_eq!(status(busy).await, Status::Active);

        // 22:16 is not a reconciling minute, and there is nothing left to do.
        let report = janitor
            .handle(scheduled_event("2023-11-14T22:16:00Z"))
            .await
            .unwrap();
        assert!(!report.reconciled);
        assert_eq!(report.sweep.paused, 0);

        // The report is what `cargo lambda invoke` prints: flat and complete.
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["reconciled"], false);
        assert_eq!(json["completed"], true);
    }

    #[tokio::test]
    async fn a_run_without_time_left_stops_and_leaves_the_work_due() {
        let (local, idle, janitor) = with_idle_thread().await;

        let mut event = scheduled_event("2023-11-14T22:16:00Z");
        event.context = context_with_deadline(Schedule::default().margin / 2);
        let report = janitor.handle(event).await.unwrap();
        assert!(!report.sweep.completed);
        assert_eq!(report.time_to_work_ms, 0);
        assert_eq!(report.sweep.paused, 0);

        // The next run, with time, continues where this one stopped.
        let report = janitor
            .handle(scheduled_event("2023-11-14T22:17:00Z"))
            .await
            .unwrap();
        assert_eq!(report.sweep.paused, 1);
        let session = local.tb.session(&idle).await.unwrap().unwrap();
        assert_eq!(session.status, Status::Paused);
    }

    #[tokio::test]
    async fn failures_fail_the_invocation_with_a_stable_error_type() {
        let (local, _, janitor) = with_idle_thread().await;
        local
            .provider
            .fail_next(Op::Pause, ProviderError::Unavailable("e2b is down".into()));

        let error = janitor
            .handle(scheduled_event("2023-11-14T22:16:00Z"))
            .await
            .unwrap_err();
        let diagnostic = Diagnostic::from(error);
        assert_eq!(diagnostic.error_type, "Janitor.SweepFailed");
        assert!(
            diagnostic.error_message.contains("\"failures\":1"),
            "{}",
            diagnostic.error_message
        );
    }
}
