//! The warm pool conformance suite (`usecases::warm_pool`): new threads taking members under
//! concurrency, the janitor tending and draining the pool, and reconciliation telling members
//! from orphans, through the use cases over a real store and queue. Every backend runs these,
//! from the one list in `suites.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use threadbox_core::domain::{
    pool_key, Cause, MemberState, NetworkProfile, PoolMember, Status, ThreadId,
};
use threadbox_core::ports::{
    CreateSandbox, DurableQueue, SandboxOwner, SandboxProvider, SessionStore, WarmPoolStore,
};
use threadbox_core::usecases::{SweepOptions, Threadbox, WarmPool};

use super::lifecycle_conformance::test_config;
use super::{InMemoryProvider, ManualClock};

struct Setup {
    tb: Threadbox,
    pool: Arc<dyn WarmPoolStore>,
    provider: Arc<InMemoryProvider>,
    clock: Arc<ManualClock>,
}

const MAX_AGE: Duration = Duration::from_secs(600);

fn setup(
    store: Arc<dyn SessionStore>,
    pool: Arc<dyn WarmPoolStore>,
    events: Arc<dyn DurableQueue>,
    size: usize,
) -> Setup {
    let provider = InMemoryProvider::new();
    let clock = Arc::new(ManualClock::default());
    let tb = Threadbox::new(
        store,
        provider.clone(),
        events,
        clock.clone(),
        test_config(),
    )
    .with_warm_pool(WarmPool {
        store: pool.clone(),
        size,
        max_age: MAX_AGE,
    });
    Setup {
        tb,
        pool,
        provider,
        clock,
    }
}

fn tid(s: &str) -> ThreadId {
    ThreadId::parse(s).unwrap()
}

async fn sweep(tb: &Threadbox) -> threadbox_core::usecases::SweepReport {
    tb.sweep(SweepOptions::for_duration(Duration::from_secs(60)))
        .await
}

/// The unclaimed members of the restricted pool, by state.
async fn members(pool: &dyn WarmPoolStore) -> Vec<PoolMember> {
    pool.unclaimed(&pool_key(&NetworkProfile::Restricted), 200)
        .await
        .unwrap()
}

/// A new thread takes a ready member: bound in one write, the member claimed by it, and the
/// next sweep makes a replacement.
pub async fn a_new_thread_takes_a_ready_member_and_the_pool_refills(
    store: Arc<dyn SessionStore>,
    pool: Arc<dyn WarmPoolStore>,
    events: Arc<dyn DurableQueue>,
) {
    let s = setup(store.clone(), pool, events, 2);
    let report = sweep(&s.tb).await;
    assert_eq!(report.pool.created, 2, "{report:?}");
    let ready = members(s.pool.as_ref()).await;
    assert_eq!(ready.len(), 2);
    assert!(ready.iter().all(|m| m.state == MemberState::Ready));
    assert_eq!(s.provider.creates(), 2);

    let thread = tid("pool-first");
    let handle = s.tb.resolve(&thread).await.unwrap();
    assert!(handle.created && handle.pooled, "{handle:?}");
    assert_eq!(s.provider.creates(), 2, "no create was waited for");
    let taken = ready
        .iter()
        .find(|m| m.sandbox_id.as_deref() == Some(handle.sandbox_id.as_str()))
        .expect("the thread got a member's sandbox");
    let claimed = s.pool.member(&taken.member_id).await.unwrap().unwrap();
    assert_eq!(claimed.state, MemberState::Claimed);
    let claim = claimed.claimed.expect("the claim names its thread");
    assert_eq!(
        (claim.thread_id, claim.generation),
        (thread.clone(), handle.generation)
    );
    let record = store.load(&thread).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Active);
    assert_eq!(
        record.pool_member.as_deref(),
        Some(taken.member_id.as_str())
    );
    let history = store.events_after(&thread, 0, 10).await.unwrap();
    let bound = history.last().unwrap();
    assert_eq!(bound.to, Status::Active);
    assert!(
        bound.detail.as_deref().unwrap_or("").contains("warm pool"),
        "{bound:?}"
    );

    // The thread works like any other: it pauses and resumes on its member's sandbox.
    s.tb.pause(&thread).await.unwrap();
    let again = s.tb.resolve(&thread).await.unwrap();
    assert!(again.resumed && !again.pooled);
    assert_eq!(again.sandbox_id, handle.sandbox_id);

    let report = sweep(&s.tb).await;
    assert_eq!(report.pool.created, 1, "{report:?}");
    assert_eq!(members(s.pool.as_ref()).await.len(), 2);
    assert_eq!(
        report.orphans_killed, 0,
        "the claimed member is its thread's: {report:?}"
    );
    assert!(s.provider.live_ids().contains(&handle.sandbox_id));
}

/// Members are kept per image: a pool fills for the default image and every image a Slack
/// scope gets, a thread on image X takes only a member of X (never one of `host`, however many
/// are ready), and creates one of X when X's pool is empty.
pub async fn a_thread_on_an_image_takes_only_a_member_of_that_image(
    store: Arc<dyn SessionStore>,
    pool: Arc<dyn WarmPoolStore>,
    events: Arc<dyn DurableQueue>,
) {
    use threadbox_core::domain::{image_pool_key, ImageDefaults, ImageName};
    use threadbox_core::usecases::ResolveOptions;
    let mut s = setup(store.clone(), pool, events, 2);
    s.provider.register_image("py");
    let py = ImageName::parse("py").unwrap();
    s.tb.config.images = ImageDefaults::new(ImageName::host())
        .with_slack_setting("T1=py")
        .unwrap();
    let report = sweep(&s.tb).await;
    assert_eq!(report.pool.created, 4, "two of each image: {report:?}");
    let py_members = s
        .pool
        .unclaimed(&image_pool_key(&NetworkProfile::Restricted, &py), 10)
        .await
        .unwrap();
    assert_eq!(py_members.len(), 2);
    for m in &py_members {
        assert_eq!(m.image, py, "the record keeps its image");
        let id = m.sandbox_id.as_deref().unwrap();
        assert_eq!(s.provider.image_of(id), Some(py.clone()));
    }
    assert_eq!(members(s.pool.as_ref()).await.len(), 2, "host's pool");
    let py_sandboxes: HashSet<String> = py_members
        .iter()
        .filter_map(|m| m.sandbox_id.clone())
        .collect();

    // Asked for by name, and by the Slack workspace's default: both take py members.
    let asked =
        s.tb.resolve_with(
            &tid("image-asked"),
            ResolveOptions {
                image: Some(py.clone()),
                ..ResolveOptions::default()
            },
        )
        .await
        .unwrap();
    let scoped =
        s.tb.resolve(&tid("slack:T1:C1:1767225600.000100"))
            .await
            .unwrap();
    for handle in [&asked, &scoped] {
        assert!(handle.pooled, "{handle:?}");
        assert!(py_sandboxes.contains(&handle.sandbox_id), "{handle:?}");
        let record = store.load(&handle.thread_id).await.unwrap().unwrap();
        assert_eq!(record.image, py);
    }
    // py's pool is empty now; host's two are ready, and never given to a py thread.
    let third =
        s.tb.resolve_with(
            &tid("image-third"),
            ResolveOptions {
                image: Some(py.clone()),
                ..ResolveOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(third.created && !third.pooled, "{third:?}");
    assert_eq!(s.provider.image_of(&third.sandbox_id), Some(py.clone()));
    assert_eq!(members(s.pool.as_ref()).await.len(), 2, "host's untouched");
    assert_eq!(s.provider.creates(), 5);

    // A host thread takes a host member.
    let host = s.tb.resolve(&tid("image-host")).await.unwrap();
    assert!(host.pooled && !py_sandboxes.contains(&host.sandbox_id));
    assert_eq!(
        s.provider.image_of(&host.sandbox_id),
        Some(ImageName::host())
    );

    // The next sweep tops both pools up again.
    let report = sweep(&s.tb).await;
    assert_eq!(report.pool.created, 3, "{report:?}");
}

/// 64 new threads at once over a pool of 16: every thread gets its own sandbox, no member is
/// bound twice, and those that found no member created one.
pub async fn sixty_four_new_threads_never_share_a_member(
    store: Arc<dyn SessionStore>,
    pool: Arc<dyn WarmPoolStore>,
    events: Arc<dyn DurableQueue>,
) {
    let s = setup(store.clone(), pool, events, 16);
    sweep(&s.tb).await;
    let ready = members(s.pool.as_ref()).await;
    assert_eq!(ready.len(), 16);
    let member_of: HashMap<String, String> = ready
        .iter()
        .map(|m| (m.sandbox_id.clone().unwrap(), m.member_id.clone()))
        .collect();

    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let tb = s.tb.clone();
            tokio::spawn(async move { tb.resolve(&tid(&format!("storm-{i}"))).await })
        })
        .collect();
    let mut sandboxes = HashSet::new();
    let mut pooled = 0;
    for task in tasks {
        let handle = task
            .await
            .unwrap()
            .expect("every new thread gets a sandbox");
        assert!(
            sandboxes.insert(handle.sandbox_id.clone()),
            "sandbox {} was given to two threads",
            handle.sandbox_id
        );
        assert_eq!(
            handle.pooled,
            member_of.contains_key(&handle.sandbox_id),
            "{handle:?}"
        );
        if handle.pooled {
            pooled += 1;
            let member = s
                .pool
                .member(&member_of[&handle.sandbox_id])
                .await
                .unwrap()
                .unwrap();
            assert_eq!(member.state, MemberState::Claimed);
            assert_eq!(member.claimed.unwrap().thread_id, handle.thread_id);
        }
    }
    eprintln!("{pooled} of 64 new threads took a member of 16");
    assert!(pooled >= 1, "some threads took members");
    assert_eq!(
        s.provider.creates(),
        16 + (64 - pooled) as u64,
        "every thread without a member got exactly one create"
    );
    assert_eq!(
        members(s.pool.as_ref())
            .await
            .iter()
            .filter(|m| m.state == MemberState::Ready)
            .count(),
        16 - pooled,
        "members nobody took are still ready"
    );
}

/// The janitor retires members past their age and members the provider lost, replaces them,
/// and a pool set to size 0 drains.
pub async fn old_and_lost_members_are_replaced_and_size_zero_drains(
    store: Arc<dyn SessionStore>,
    pool: Arc<dyn WarmPoolStore>,
    events: Arc<dyn DurableQueue>,
) {
    let s = setup(store.clone(), pool.clone(), events.clone(), 2);
    sweep(&s.tb).await;
    let first = members(s.pool.as_ref()).await;
    assert_eq!(first.len(), 2);

    // The provider loses one: the next sweep notices it missing from the listing.
    s.clock.advance(Duration::from_secs(1));
    s.provider.forget(first[0].sandbox_id.as_deref().unwrap());
    let report = sweep(&s.tb).await;
    assert_eq!(
        (report.pool.retired, report.pool.created),
        (1, 1),
        "{report:?}"
    );

    // Past the age limit every member is replaced, and the old sandboxes are killed.
    s.clock.advance(MAX_AGE);
    let report = sweep(&s.tb).await;
    assert_eq!(
        (report.pool.retired, report.pool.created),
        (2, 2),
        "{report:?}"
    );
    let now: Vec<String> = members(s.pool.as_ref())
        .await
        .into_iter()
        .filter_map(|m| m.sandbox_id)
        .collect();
    assert_eq!(now.len(), 2);
    let mut live = s.provider.live_ids();
    live.sort();
    let mut expected = now.clone();
    expected.sort();
    assert_eq!(live, expected, "only the current members' sandboxes live");

    // Size 0: the pool drains and nothing is made.
    let drained = s.tb.clone().with_warm_pool(WarmPool {
        store: pool,
        size: 0,
        max_age: MAX_AGE,
    });
    let report = sweep(&drained).await;
    assert_eq!(
        (report.pool.retired, report.pool.created),
        (2, 0),
        "{report:?}"
    );
    assert!(s.provider.live_ids().is_empty());
    let handle = drained.resolve(&tid("after-drain")).await.unwrap();
    assert!(handle.created && !handle.pooled);
}

/// Reconciliation knows members from orphans: a ready member and a claimed one are left alone,
/// a pool-tagged sandbox with no record is killed, and destroying a thread drops its member's
/// record with its sandbox.
pub async fn reconciliation_knows_members_from_orphans(
    store: Arc<dyn SessionStore>,
    pool: Arc<dyn WarmPoolStore>,
    events: Arc<dyn DurableQueue>,
) {
    let s = setup(store.clone(), pool, events, 1);
    sweep(&s.tb).await;
    let member = members(s.pool.as_ref()).await.remove(0);
    let thread = tid("pool-owner");
    let handle = s.tb.resolve(&thread).await.unwrap();
    assert!(handle.pooled);
    let report = sweep(&s.tb).await;
    assert_eq!(report.orphans_killed, 0, "{report:?}");

    // A sandbox tagged as a member nobody recorded (a creator that died before writing).
    let stray = s
        .provider
        .create(CreateSandbox {
            image: threadbox_core::domain::ImageName::host(),
            owner: SandboxOwner {
                thread_id: ThreadId::pool_member("0123456789abcdef0123456789abcdef"),
                generation: 0,
            },
            network: NetworkProfile::Restricted,
            timeout: Duration::from_secs(60),
            env: Default::default(),
        })
        .await
        .unwrap();
    let report = sweep(&s.tb).await;
    assert_eq!(report.orphans_killed, 1, "{report:?}");
    assert!(!s.provider.live_ids().contains(&stray.sandbox_id));
    assert!(s.provider.live_ids().contains(&handle.sandbox_id));

    // Destroying the thread kills its sandbox and drops the claimed member's record.
    s.tb.destroy(&thread, Cause::User).await.unwrap();
    assert!(!s.provider.live_ids().contains(&handle.sandbox_id));
    assert_eq!(s.pool.member(&member.member_id).await.unwrap(), None);
}

/// A thread whose member's sandbox the provider lost gets a replacement (from the pool, here)
/// and the lost member's record goes with it.
pub async fn a_lost_members_record_goes_with_its_replacement(
    store: Arc<dyn SessionStore>,
    pool: Arc<dyn WarmPoolStore>,
    events: Arc<dyn DurableQueue>,
) {
    let s = setup(store.clone(), pool, events, 1);
    sweep(&s.tb).await;
    let thread = tid("pool-lost");
    let first = s.tb.resolve(&thread).await.unwrap();
    assert!(first.pooled);
    let lost = store
        .load(&thread)
        .await
        .unwrap()
        .unwrap()
        .pool_member
        .unwrap();
    sweep(&s.tb).await; // refills the pool

    s.provider.forget(&first.sandbox_id);
    s.clock.advance(test_config().timers.idle_pause);
    let report = sweep(&s.tb).await;
    assert_eq!(report.corrected, 1, "{report:?}");
    let record = store.load(&thread).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Active);
    assert_ne!(
        record.sandbox_id.as_deref(),
        Some(first.sandbox_id.as_str())
    );
    let replacement = record
        .pool_member
        .expect("the replacement came from the pool");
    assert_ne!(replacement, lost);
    assert_eq!(
        s.pool.member(&lost).await.unwrap(),
        None,
        "the lost member's record is gone"
    );
    assert_eq!(
        s.pool.member(&replacement).await.unwrap().unwrap().state,
        MemberState::Claimed
    );
}

/// The janitor retiring every member (all past their age) while new threads claim them: each
/// member is either taken or retired, never both, so no thread is left on a killed sandbox.
pub async fn a_retire_racing_claims_never_kills_a_taken_member(
    store: Arc<dyn SessionStore>,
    pool: Arc<dyn WarmPoolStore>,
    events: Arc<dyn DurableQueue>,
) {
    let s = setup(store.clone(), pool, events, 8);
    sweep(&s.tb).await;
    // The members the sweep below retires. Its refill makes new ones, which a slow thread may
    // take after the retiring is done: those were never at risk.
    let aged = s.provider.live_ids();
    s.clock.advance(MAX_AGE);
    let janitor = {
        let tb = s.tb.clone();
        tokio::spawn(async move { sweep(&tb).await })
    };
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let tb = s.tb.clone();
            tokio::spawn(async move { tb.resolve(&tid(&format!("race-{i}"))).await })
        })
        .collect();
    let mut handles = Vec::new();
    for t in threads {
        handles.push(t.await.unwrap().expect("every new thread gets a sandbox"));
    }
    let report = janitor.await.unwrap();
    let pooled = handles.iter().filter(|h| h.pooled).count();
    let took_aged = handles
        .iter()
        .filter(|h| h.pooled && aged.contains(&h.sandbox_id))
        .count();
    let live = s.provider.live_ids();
    for handle in &handles {
        assert!(
            live.contains(&handle.sandbox_id),
            "{} was killed under its thread ({pooled} took members, the sweep retired {}): {handle:?}",
            handle.sandbox_id,
            report.pool.retired
        );
    }
    assert!(
        took_aged + report.pool.retired <= 8,
        "a member both taken and retired: {took_aged} aged members taken, {} retired",
        report.pool.retired
    );
}
