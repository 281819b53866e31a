//! The budget conformance suite (`usecases::budget`): create caps under a storm, compute budgets
//! pausing threads (never destroying them), and nothing changing with budgets off, through the
//! use cases over a real store, queue and window counter. Every backend runs these, from the one
//! list in `suites.rs`.

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::domain::{
    BudgetExceeded, BudgetScope, Budgeted, Budgets, Cause, Millis, Pricing, SandboxSize, Status,
    ThreadId,
};
use threadbox_core::ports::{Clock, DurableQueue, SessionStore, WindowCounter};
use threadbox_core::usecases::{Config, HoldRequest, Threadbox, UseCaseError};

use super::{InMemoryProvider, ManualClock};

/// 2026-11-01T00:00:00Z.
const DAY0: i64 = 1_793_491_200_000;
const HOUR: i64 = 3_600_000;

/// A moment on the first test day.
fn at(hours: i64, minutes: i64) -> Millis {
    Millis(DAY0 + hours * HOUR + minutes * 60_000)
}

/// Sandboxes of 2 vCPUs: a second of running is 2 vCPU-seconds.
const VCPUS: f64 = 2.0;

struct Setup {
    tb: Threadbox,
    provider: Arc<InMemoryProvider>,
    clock: Arc<ManualClock>,
}

fn setup(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
    counter: Arc<dyn WindowCounter>,
    budgets: Budgets,
    start: Millis,
) -> Setup {
    let provider = InMemoryProvider::new();
    let clock = Arc::new(ManualClock::new(start));
    let config = Config {
        settle_poll: Duration::from_millis(5),
        settle_wait: Duration::from_secs(20),
        pricing: Pricing::unpriced(SandboxSize {
            vcpus: VCPUS,
            memory_gib: 0.5,
        }),
        budgets,
        ..Config::default()
    };
    let tb = Threadbox::new(store, provider.clone(), events, clock.clone(), config)
        .with_budget_counter(counter);
    Setup {
        tb,
        provider,
        clock,
    }
}

fn tid(s: &str) -> ThreadId {
    ThreadId::parse(s).unwrap()
}

/// The budget refusal in `result`, or a panic saying what came instead.
#[track_caller]
fn refusal<T: std::fmt::Debug>(result: Result<T, UseCaseError>) -> BudgetExceeded {
    match result {
        Err(UseCaseError::Budget(exceeded)) => exceeded,
        other => panic!("expected a budget refusal, got {other:?}"),
    }
}

/// 24 new threads of one workspace at once against a cap of 5 an hour: exactly 5 sandboxes are
/// created, every other resolve is refused before a record is written or the provider asked,
/// another workspace is unaffected, and the next hour has slots again.
pub async fn a_create_storm_past_the_cap_creates_exactly_the_cap(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
    counter: Arc<dyn WindowCounter>,
) {
    let s = setup(
        store,
        events,
        counter,
        Budgets {
            scope_creates_per_hour: Some(5),
            ..Budgets::default()
        },
        at(10, 30),
    );
    s.provider.set_create_delay(Duration::from_millis(20));
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let tb = s.tb.clone();
            let thread = tid(&format!("slack:TSTORM:C1:{i}.0"));
            tokio::spawn(async move { (thread.clone(), tb.resolve(&thread).await) })
        })
        .collect();
    let mut created = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        let (thread, result) = task.await.unwrap();
        match result {
            Ok(handle) => {
                assert!(handle.created);
                created.push(thread);
            }
            Err(error) => {
                assert_eq!(error.code(), "create_budget_exceeded", "{error}");
                let exceeded = refusal::<()>(Err(error));
                assert_eq!(exceeded.retry_after(), Duration::from_secs(30 * 60));
                assert!(
                    exceeded.to_string().contains("Slack workspace TSTORM"),
                    "{exceeded}"
                );
                refused.push(thread);
            }
        }
    }
    assert_eq!(created.len(), 5, "exactly the cap: {created:?}");
    assert_eq!(s.provider.creates(), 5, "refusals never reach the provider");
    for thread in &refused {
        assert!(
            s.tb.store.load(thread).await.unwrap().is_none(),
            "a refused create writes no record: {thread}"
        );
    }

    // Another workspace has its own cap; the next hour has new slots.
    assert!(
        s.tb.resolve(&tid("slack:TOTHER:C1:1.0"))
            .await
            .unwrap()
            .created
    );
    s.clock.set(at(11, 0));
    assert!(s.tb.resolve(&refused[0]).await.unwrap().created);
    // Resolving a thread that has its sandbox is not a create.
    s.tb.resolve(&created[0]).await.unwrap();
    assert_eq!(s.provider.creates(), 7);
}

/// Resolves racing on one new thread create one sandbox, and the slots the losers took come
/// back: with a cap of 2, a second thread is still created afterwards and only a third refused.
pub async fn slots_taken_by_a_lost_race_are_given_back(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
    counter: Arc<dyn WindowCounter>,
) {
    let s = setup(
        store,
        events,
        counter,
        Budgets {
            scope_creates_per_hour: Some(2),
            ..Budgets::default()
        },
        at(9, 0),
    );
    s.provider.set_create_delay(Duration::from_millis(20));
    let same = tid("slack:TRACE:C1:1.0");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let tb = s.tb.clone();
            let thread = same.clone();
            tokio::spawn(async move { tb.resolve(&thread).await })
        })
        .collect();
    for task in tasks {
        // A loser may be refused while racers still hold slots; none may create a second one.
        match task.await.unwrap() {
            Ok(_) | Err(UseCaseError::Budget(_)) => {}
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(s.provider.creates(), 1, "one thread, one sandbox");
    assert!(
        s.tb.resolve(&tid("slack:TRACE:C1:2.0"))
            .await
            .unwrap()
            .created
    );
    refusal(s.tb.resolve(&tid("slack:TRACE:C1:3.0")).await);
    assert_eq!(s.provider.creates(), 2);
}

/// A thread running past its day's compute is paused by the janitor with cause `budget`, its
/// sandbox kept; its resolves and commands are refused until the next UTC day, when it resumes
/// the same sandbox. A thread found over budget by a resolve is paused by that resolve.
pub async fn a_thread_over_its_compute_budget_is_paused_and_kept(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
    counter: Arc<dyn WindowCounter>,
) {
    let check = Duration::from_secs(60);
    let s = setup(
        store,
        events,
        counter,
        Budgets {
            // 60 s of running at 2 vCPUs.
            thread_compute_per_day: Some(120),
            check_every: check,
            ..Budgets::default()
        },
        at(22, 0),
    );
    let runs_on = tid("budget-runs-on");
    let first = s.tb.resolve(&runs_on).await.unwrap();
    s.clock.advance(Duration::from_secs(30));
    s.tb.resolve(&runs_on).await.unwrap();
    let session = s.tb.store.load(&runs_on).await.unwrap().unwrap();
    assert_eq!(
        session.next_action_at,
        Some(s.clock.now().plus(check)),
        "while a budget is set, a running thread is due for a check, not only at idle"
    );

    // Nobody calls; the janitor finds it past its budget (91 s × 2 vCPUs = 182 vCPU-seconds).
    s.clock.advance(Duration::from_secs(61));
    let report =
        s.tb.sweep(threadbox_core::usecases::SweepOptions::for_duration(
            Duration::from_secs(30),
        ))
        .await;
    assert_eq!(report.paused, 1, "{report:?}");
    let session = s.tb.store.load(&runs_on).await.unwrap().unwrap();
    assert_eq!(session.status, Status::Paused);
    assert_eq!(
        session.sandbox_id.as_deref(),
        Some(first.sandbox_id.as_str())
    );
    let events = s.tb.store.events_after(&runs_on, 0, 100).await.unwrap();
    let budget: Vec<_> = events
        .iter()
        .filter(|e| e.cause == Cause::Budget)
        .map(|e| e.to)
        .collect();
    assert_eq!(budget, vec![Status::Pausing, Status::Paused]);
    let claim = events.iter().find(|e| e.cause == Cause::Budget).unwrap();
    assert_eq!(
        claim.detail.as_deref(),
        Some("thread budget-runs-on: 182 of 120 vCPU-seconds today")
    );
    assert_eq!(s.provider.kills(), 0, "never destroyed");
    assert!(s.provider.live_ids().contains(&first.sandbox_id));

    // Refused until midnight UTC, resume and commands alike, and it stays paused.
    let connects = s.provider.connects();
    let exceeded = refusal(s.tb.resolve(&runs_on).await);
    assert_eq!(
        exceeded,
        BudgetExceeded::Compute {
            who: Budgeted::Thread(runs_on.clone()),
            thread_id: runs_on.clone(),
            used_vcpu_secs: 182,
            limit_vcpu_secs: 120,
            now: s.clock.now(),
            resets_at: Millis(DAY0 + 24 * HOUR),
        }
    );
    assert_eq!(exceeded.retry_after(), Duration::from_secs(2 * 3600 - 91));
    refusal(
        s.tb.acquire_hold(&runs_on, HoldRequest::new("exec", Duration::from_secs(60)))
            .await,
    );
    // A reset would destroy the sandbox and then be refused a new one: refused first, kept.
    refusal(s.tb.reset(&runs_on).await);
    assert_eq!(s.provider.kills(), 0);
    assert_eq!(s.provider.connects(), connects, "nothing was resumed");
    assert_eq!(
        s.tb.store.load(&runs_on).await.unwrap().unwrap().status,
        Status::Paused
    );

    // A resolve that finds an active thread over its budget pauses it itself.
    let busy = tid("budget-busy");
    s.tb.resolve(&busy).await.unwrap();
    s.clock.advance(Duration::from_secs(65));
    refusal(s.tb.resolve(&busy).await);
    let session = s.tb.store.load(&busy).await.unwrap().unwrap();
    assert_eq!(session.status, Status::Paused);

    // The next UTC day: a new budget, the same sandbox resumed.
    s.clock.set(Millis(DAY0 + 24 * HOUR + 5_000));
    let handle = s.tb.resolve(&runs_on).await.unwrap();
    assert!(handle.resumed);
    assert_eq!(handle.sandbox_id, first.sandbox_id);
    assert_eq!(handle.generation, first.generation);
}

/// A workspace's threads share one day's compute: each thread's use is charged once however
/// often it is checked, the thread that crosses the budget is paused and refused, new threads
/// of the workspace are refused, the janitor pauses the rest, and another workspace runs on.
pub async fn a_scope_over_its_compute_budget_pauses_its_threads(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
    counter: Arc<dyn WindowCounter>,
) {
    let check = Duration::from_secs(60);
    let s = setup(
        store,
        events,
        counter,
        Budgets {
            // 100 s of running at 2 vCPUs, all the workspace's threads together.
            scope_compute_per_day: Some(200),
            check_every: check,
            ..Budgets::default()
        },
        at(9, 0),
    );
    let t1 = tid("slack:TBUD:C1:1.0");
    let t2 = tid("slack:TBUD:C1:2.0");
    s.tb.resolve(&t1).await.unwrap();
    s.tb.resolve(&t2).await.unwrap();
    s.clock.advance(Duration::from_secs(40));
    // t1 has run 80 vCPU-seconds: charged once, however often it is checked.
    for _ in 0..3 {
        s.tb.resolve(&t1).await.unwrap();
    }
    s.tb.resolve(&t2).await.unwrap();
    s.clock.advance(Duration::from_secs(15));
    // 110 + 110: t1 brings the workspace to 190, t2 takes it to 220.
    s.tb.resolve(&t1).await.unwrap();
    let exceeded = refusal(s.tb.resolve(&t2).await);
    match &exceeded {
        BudgetExceeded::Compute {
            who,
            used_vcpu_secs,
            limit_vcpu_secs,
            ..
        } => {
            assert_eq!(who, &Budgeted::Scope(BudgetScope::SlackTeam("TBUD".into())));
            assert_eq!((*used_vcpu_secs, *limit_vcpu_secs), (220, 200));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.tb.store.load(&t2).await.unwrap().unwrap().status,
        Status::Paused
    );
    // A new thread of the workspace is refused before anything is made.
    let creates = s.provider.creates();
    refusal(s.tb.resolve(&tid("slack:TBUD:C1:3.0")).await);
    assert_eq!(s.provider.creates(), creates);

    // Another workspace runs on; the janitor pauses t1, which nobody calls.
    let other = tid("slack:TOK:C1:1.0");
    s.tb.resolve(&other).await.unwrap();
    s.clock.advance(check + Duration::from_secs(1));
    let report =
        s.tb.sweep(threadbox_core::usecases::SweepOptions::for_duration(
            Duration::from_secs(30),
        ))
        .await;
    assert_eq!(report.paused, 1, "{report:?}");
    let t1_events = s.tb.store.events_after(&t1, 0, 100).await.unwrap();
    assert_eq!(
        t1_events.last().map(|e| (e.to, e.cause)),
        Some((Status::Paused, Cause::Budget))
    );
    assert_eq!(
        s.tb.store.load(&other).await.unwrap().unwrap().status,
        Status::Active
    );
    assert_eq!(s.provider.kills(), 0);
}

/// An API key is a scope of its own: its cap counts the threads it creates (whatever their ids
/// name), another key's are apart, and a call without a key (authentication off) has no scope
/// cap.
pub async fn an_api_key_is_a_scope_of_its_own(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
    counter: Arc<dyn WindowCounter>,
) {
    let s = setup(
        store,
        events,
        counter,
        Budgets {
            scope_creates_per_hour: Some(1),
            ..Budgets::default()
        },
        at(12, 0),
    );
    let key_a = BudgetScope::ApiKey("aaaaaaaaaaaa".into());
    let key_b = BudgetScope::ApiKey("bbbbbbbbbbbb".into());
    let (for_a, for_b) = (
        s.tb.for_caller(Some(key_a.clone())),
        s.tb.for_caller(Some(key_b)),
    );
    for_a.resolve(&tid("api-1")).await.unwrap();
    match refusal(for_a.resolve(&tid("api-2")).await) {
        BudgetExceeded::Creates { scope, limit, .. } => {
            assert_eq!((scope, limit), (key_a.clone(), 1));
        }
        other => panic!("{other:?}"),
    }
    for_b.resolve(&tid("api-2")).await.unwrap();
    // A key naming a Slack thread is still the key: its cap, not the workspace's.
    match refusal(for_a.resolve(&tid("slack:TANY:C1:1.0")).await) {
        BudgetExceeded::Creates { scope, .. } => assert_eq!(scope, key_a),
        other => panic!("{other:?}"),
    }
    s.tb.resolve(&tid("api-3")).await.unwrap();
    assert_eq!(s.provider.creates(), 3);
}

/// With budgets off (the default) nothing is counted or refused, and a running thread is due
/// only when it goes idle, as before budgets.
pub async fn without_budgets_nothing_changes(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
    counter: Arc<dyn WindowCounter>,
) {
    let s = setup(store, events, counter, Budgets::default(), at(8, 0));
    for i in 0..12 {
        assert!(
            s.tb.resolve(&tid(&format!("slack:TFREE:C1:{i}.0")))
                .await
                .unwrap()
                .created
        );
    }
    let thread = tid("slack:TFREE:C1:0.0");
    // Ten hours of activity, a resolve every five minutes: never refused, never paused.
    for _ in 0..120 {
        s.clock.advance(Duration::from_secs(300));
        s.tb.resolve(&thread).await.unwrap();
    }
    let session = s.tb.store.load(&thread).await.unwrap().unwrap();
    assert_eq!(session.status, Status::Active);
    assert_eq!(
        session.next_action_at,
        Some(session.last_activity_at.plus(s.tb.config.timers.idle_pause))
    );
    assert_eq!(s.provider.pauses(), 0);
}
