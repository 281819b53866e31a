//! The E2B provider against the contract fake (`threadbox_testing::e2b_fake`): the
//! provider conformance suite, the error and retry rules, idempotent create, resume with a new
//! token, auto-pause and reconciliation, and a round trip through the use cases with the
//! provider chosen by configuration.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use threadbox_core::config::{ConfigError, Env};
use threadbox_core::domain::{Status, ThreadId};
use threadbox_core::ports::{
    CreateSandbox, ExecRequest, NetworkProfile, ProviderError, SandboxOwner, SandboxProvider,
    SandboxState,
};
use threadbox_core::usecases::{SweepOptions, Threadbox};
use threadbox_e2b::{E2bConfig, E2bProvider};
use threadbox_providers::ProviderConfig;
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::e2b_fake::{E2bFake, FakeOptions, FakeState, Fault, Route};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::provider_conformance::{create_request, fresh_owner};
use threadbox_testing::ManualClock;

/// The provider's settings for `fake`, read the way production reads them (from variables),
/// with short backoffs so retry tests stay quick.
fn config_for(fake: &E2bFake) -> E2bConfig {
    let env = Env::from_map(fake.env_vars());
    let mut config = E2bConfig::from_env(&env).expect("config");
    config.retry.base_delay = Duration::from_millis(10);
    config.retry.max_delay = Duration::from_millis(50);
    config
}

fn provider_for(fake: &E2bFake, edit: impl FnOnce(&mut E2bConfig)) -> E2bProvider {
    let mut config = config_for(fake);
    edit(&mut config);
    E2bProvider::new(config).expect("provider")
}

async fn setup() -> (E2bFake, E2bProvider) {
    let fake = E2bFake::start().await;
    let provider = provider_for(&fake, |_| {});
    (fake, provider)
}

async fn new_sandbox(p: &E2bProvider) -> String {
    p.create(create_request(fresh_owner(1)))
        .await
        .expect("create")
        .sandbox_id
}

fn info_path(id: &str) -> String {
    format!("/sandboxes/{id}")
}

// ---------------------------------------------------------------------------------------------
// The provider conformance suite, one test per promise.

async fn conformance_provider(_test: &str) -> Option<(E2bFake, Arc<dyn SandboxProvider>)> {
    let (fake, provider) = setup().await;
    Some((fake, Arc::new(provider)))
}

mod conformance {
    use super::conformance_provider;
    threadbox_testing::provider_conformance_tests!(conformance_provider);
}

// ---------------------------------------------------------------------------------------------
// Configuration.

#[test]
fn e2b_is_selected_by_configuration_and_a_missing_key_is_named() {
    let config = ProviderConfig::from_env(&Env::from_pairs(&[
        ("THREADBOX_PROVIDER", "e2b"),
        ("E2B_API_KEY", "e2b_test_key"),
    ]))
    .unwrap();
    assert_eq!(config.name(), "e2b");
    assert!(
        !format!("{config:?}").contains("e2b_test_key"),
        "{config:?}"
    );

    let err =
        ProviderConfig::from_env(&Env::from_pairs(&[("THREADBOX_PROVIDER", "e2b")])).unwrap_err();
    assert_eq!(err, ConfigError::Missing("E2B_API_KEY"));
}

#[tokio::test]
async fn the_key_is_sent_as_x_api_key_and_never_printed() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    p.info(&id).await.unwrap();
    for r in fake.requests_to("GET", &info_path(&id)) {
        assert_eq!(r.header("x-api-key"), Some(fake.api_key().as_str()));
    }
    assert!(!format!("{p:?}").contains(&fake.api_key()));
}

// ---------------------------------------------------------------------------------------------
// Errors and retries.

#[tokio::test]
async fn a_429_waits_for_retry_after_then_succeeds() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    fake.fail_next(Route::Info, Fault::rate_limited(1));
    let info = p.info(&id).await.expect("info after the rate limit");
    assert_eq!(info.state, SandboxState::Running);
    let tries = fake.requests_to("GET", &info_path(&id));
    assert_eq!(tries.len(), 2);
    assert_eq!(tries[0].status, 429);
    let waited = tries[1].at - tries[0].at;
    assert!(
        waited >= Duration::from_millis(950),
        "waited only {waited:?}"
    );
}

#[tokio::test]
async fn a_retry_after_past_the_budget_is_not_waited_for() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    fake.fail_next(Route::Info, Fault::rate_limited(120));
    let started = Instant::now();
    let err = p.info(&id).await.unwrap_err();
    assert_eq!(
        err,
        ProviderError::RateLimited {
            retry_after: Some(Duration::from_secs(120))
        }
    );
    assert!(err.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(fake.requests_to("GET", &info_path(&id)).len(), 1);
}

#[tokio::test]
async fn a_plain_text_502_is_retried_and_then_surfaced_typed() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    let html = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>";

    fake.fail_next(Route::Info, Fault::text(502, html));
    assert!(p.info(&id).await.is_ok(), "one 502 is retried away");

    fake.clear_requests();
    for _ in 0..4 {
        fake.fail_next(Route::Info, Fault::text(502, html));
    }
    match p.info(&id).await {
        Err(ProviderError::Unavailable(message)) => {
            assert!(
                message.contains("502") && message.contains("Bad Gateway"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fake.requests_to("GET", &info_path(&id)).len(),
        4,
        "the first attempt and three retries"
    );
}

#[tokio::test]
async fn should_retry_decides_over_the_status() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;

    fake.fail_next(
        Route::Info,
        Fault::json(500, "Error getting sandbox").with_header("Should-Retry", "true"),
    );
    p.info(&id)
        .await
        .expect("a 500 the server says to retry is retried");
    assert_eq!(fake.requests_to("GET", &info_path(&id)).len(), 2);

    fake.clear_requests();
    fake.fail_next(
        Route::Info,
        Fault::json(503, "busy").with_header("Should-Retry", "false"),
    );
    assert!(matches!(
        p.info(&id).await,
        Err(ProviderError::Unavailable(_))
    ));
    assert_eq!(fake.requests_to("GET", &info_path(&id)).len(), 1);
}

#[tokio::test]
async fn retries_are_bounded_in_count_and_in_time() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    for _ in 0..10 {
        fake.fail_next(Route::Info, Fault::json(503, "no capacity"));
    }
    assert!(p.info(&id).await.is_err());
    assert_eq!(fake.requests_to("GET", &info_path(&id)).len(), 4);

    // A budget smaller than the backoffs ends the retries early.
    let slow = provider_for(&fake, |c| {
        c.retry.max_retries = 10;
        c.retry.base_delay = Duration::from_millis(200);
        c.retry.max_delay = Duration::from_secs(1);
        c.retry.budget = Duration::from_millis(500);
    });
    fake.clear_requests();
    let started = Instant::now();
    assert!(slow.info(&id).await.is_err());
    let attempts = fake.requests_to("GET", &info_path(&id)).len();
    assert!((2..=4).contains(&attempts), "{attempts} attempts");
    // The budget (500 ms) plus one request, with room for a loaded machine; ten retries at
    // these backoffs would take several seconds.
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_concurrency_cap_is_retried_then_reported_as_a_rate_limit() {
    let fake = E2bFake::start_with(FakeOptions {
        max_concurrent: 1,
        ..FakeOptions::default()
    })
    .await;
    let p = provider_for(&fake, |_| {});
    new_sandbox(&p).await;
    fake.clear_requests();
    let err = p.create(create_request(fresh_owner(1))).await.unwrap_err();
    assert_eq!(err, ProviderError::RateLimited { retry_after: None });
    let creates = fake.requests_to("POST", "/v2/sandboxes");
    assert_eq!(
        creates.len(),
        4,
        "429 without Retry-After backs off and retries"
    );
    assert!(creates.iter().all(|r| r.status == 429));
    assert_eq!(fake.sandboxes_started(), 1);
}

#[tokio::test]
async fn a_sandbox_killed_elsewhere_reads_as_gone_on_the_data_plane() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    let other = provider_for(&fake, |_| {});
    other.exec(&id, ExecRequest::shell("true")).await.unwrap();
    p.kill(&id).await.unwrap();
    fake.clear_requests();
    // `other` still holds a token: the proxy answers 502 "not found", the control plane 404.
    assert_eq!(
        other.exec(&id, ExecRequest::shell("true")).await,
        Err(ProviderError::Gone(id.clone()))
    );
    assert_eq!(
        fake.requests_to("POST", "/process.Process/Start")[0].status,
        502
    );
    assert_eq!(
        other.read_file(&id, "/home/user/x").await,
        Err(ProviderError::Gone(id.clone()))
    );
}

#[tokio::test]
async fn a_bad_key_is_unauthorized_and_not_retried() {
    let fake = E2bFake::start().await;
    let p = provider_for(&fake, |c| {
        c.api_key = threadbox_e2b::Secret::new("e2b_wrong")
    });
    match p.list(&BTreeMap::new()).await {
        Err(ProviderError::Unauthorized(message)) => assert!(message.contains("Invalid API key")),
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.requests().len(), 1);
}

/// A key rotated in E2B's dashboard is refused on every control-plane call; the provider tells
/// its owner each time (so a deployed function fetches the rotated key), and nothing else
/// (a sandbox that is not there, a rate limit) is reported as a refused key.
#[tokio::test]
async fn a_refused_key_is_reported_to_whoever_holds_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    let fake = E2bFake::start().await;
    let refusals = Arc::new(AtomicUsize::new(0));
    let counted = refusals.clone();
    let p = provider_for(&fake, |_| {}).on_refused_key(move || {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    let id = new_sandbox(&p).await;
    assert_eq!(
        p.info("sandbox-that-is-not-there").await,
        Err(ProviderError::Gone("sandbox-that-is-not-there".into()))
    );
    fake.fail_next(Route::List, Fault::rate_limited(0));
    p.list(&BTreeMap::new())
        .await
        .expect("retried past the 429");
    assert_eq!(refusals.load(Ordering::SeqCst), 0);

    fake.rotate_api_key("e2b_rotated0123456789abcdef01234567");
    assert!(matches!(
        p.pause(&id).await,
        Err(ProviderError::Unauthorized(_))
    ));
    assert!(matches!(
        p.list(&BTreeMap::new()).await,
        Err(ProviderError::Unauthorized(_))
    ));
    assert_eq!(refusals.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn during_a_kill_connect_conflicts_and_the_sandbox_reads_as_gone() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    fake.set_kill_delay(Duration::from_millis(800));
    let p = Arc::new(p);
    let killer = {
        let (p, id) = (p.clone(), id.clone());
        tokio::spawn(async move { p.kill(&id).await })
    };
    while fake.sandbox(&id).map(|s| s.state) != Some(FakeState::Killing) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        matches!(p.connect(&id).await, Err(ProviderError::Conflict(m)) if m.contains("being killed"))
    );
    assert!(matches!(
        p.set_timeout(&id, Duration::from_secs(60)).await,
        Err(ProviderError::Conflict(_))
    ));
    assert_eq!(p.info(&id).await, Err(ProviderError::Gone(id.clone())));
    p.kill(&id).await.expect("a kill racing a kill succeeds");
    killer.await.unwrap().expect("kill");
    assert_eq!(p.connect(&id).await, Err(ProviderError::Gone(id.clone())));
}

#[tokio::test]
async fn an_unknown_template_is_an_invalid_request() {
    let fake = E2bFake::start().await;
    let p = provider_for(&fake, |c| c.template = "no-such-template".into());
    match p.create(create_request(fresh_owner(1))).await {
        Err(ProviderError::InvalidRequest(m)) => assert!(m.contains("no-such-template"), "{m}"),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Idempotent create.

#[tokio::test]
async fn create_sends_the_v2_body_with_an_idempotency_key() {
    let (fake, p) = setup().await;
    let owner = fresh_owner(3);
    let mut request = create_request(owner.clone());
    request.network = NetworkProfile::Networked {
        allow: Default::default(),
    };
    let id = p.create(request).await.unwrap().sandbox_id;

    let sandbox = fake.sandbox(&id).unwrap();
    assert!(sandbox.auto_pause, "threads pause at their deadline");
    assert!(sandbox.allow_internet_access);
    assert_eq!(sandbox.metadata, owner.to_metadata());
    assert_eq!(
        sandbox.env_vars.get("TB_CONFORMANCE").map(String::as_str),
        Some("yes")
    );
    assert_eq!(sandbox.end_at.0 - sandbox.started_at.0, 600_000);

    let creates = fake.requests_to("POST", "/v2/sandboxes");
    assert_eq!(
        creates[0].header("idempotency-key"),
        Some(E2bProvider::idempotency_key(&owner).as_str())
    );

    let restricted = p
        .create(create_request(fresh_owner(1)))
        .await
        .unwrap()
        .sandbox_id;
    assert!(!fake.sandbox(&restricted).unwrap().allow_internet_access);
}

#[tokio::test]
async fn two_creates_for_one_owner_make_one_sandbox() {
    let (fake, p) = setup().await;
    let owner = fresh_owner(1);
    let first = p.create(create_request(owner.clone())).await.unwrap();
    let second = p.create(create_request(owner.clone())).await.unwrap();
    assert_eq!(first.sandbox_id, second.sandbox_id);
    assert_eq!(fake.sandboxes_started(), 1);
    let keys: Vec<_> = fake
        .requests_to("POST", "/v2/sandboxes")
        .iter()
        .map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);

    // A new generation is a new sandbox.
    let next = SandboxOwner {
        generation: 2,
        ..owner
    };
    let third = p.create(create_request(next)).await.unwrap();
    assert_ne!(third.sandbox_id, first.sandbox_id);
    assert_eq!(fake.sandboxes_started(), 2);
}

#[tokio::test]
async fn a_lost_create_response_is_retried_into_the_same_sandbox() {
    let (fake, p) = setup().await;
    fake.lose_next_create_response();
    let created = p
        .create(create_request(fresh_owner(1)))
        .await
        .expect("create");
    assert_eq!(fake.sandboxes_started(), 1, "the retry was a replay");
    let creates = fake.requests_to("POST", "/v2/sandboxes");
    assert_eq!(
        creates.iter().map(|r| r.status).collect::<Vec<_>>(),
        [502, 201]
    );
    assert_eq!(fake.sandboxes()[0].sandbox_id, created.sandbox_id);
    // The replayed answer carries a token envd accepts.
    let out = p
        .exec(&created.sandbox_id, ExecRequest::shell("echo hi"))
        .await
        .unwrap();
    assert_eq!(out.stdout, "hi\n");
}

#[tokio::test]
async fn an_ambiguous_create_that_surfaced_is_found_again_by_the_next_create() {
    let fake = E2bFake::start().await;
    let p = provider_for(&fake, |c| c.retry.max_retries = 0);
    let owner = fresh_owner(1);
    fake.lose_next_create_response();
    let err = p.create(create_request(owner.clone())).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unavailable(_)), "{err:?}");
    assert_eq!(
        fake.sandboxes_started(),
        1,
        "the create happened all the same"
    );

    // What it left behind is tagged with its owner, so listing finds it ...
    let left = p.list(&owner.to_metadata()).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].owner(), Some(owner.clone()));
    // ... and the next create of the same generation gets it back instead of a second one.
    let again = p.create(create_request(owner)).await.unwrap();
    assert_eq!(again.sandbox_id, left[0].sandbox_id);
    assert_eq!(fake.sandboxes_started(), 1);
}

#[tokio::test]
async fn a_reused_key_with_another_body_is_refused() {
    let (fake, p) = setup().await;
    let owner = fresh_owner(1);
    p.create(create_request(owner.clone())).await.unwrap();
    let mut other = create_request(owner);
    other.env.insert("DIFFERENT".into(), "1".into());
    assert!(matches!(
        p.create(other).await,
        Err(ProviderError::InvalidRequest(m)) if m.contains("different request body")
    ));
    assert_eq!(fake.sandboxes_started(), 1);
}

// ---------------------------------------------------------------------------------------------
// Resume and tokens.

#[tokio::test]
async fn a_resume_issues_a_new_token_that_is_used_from_then_on() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    // Another process that talked to the sandbox before the resume.
    let other = provider_for(&fake, |_| {});
    assert_eq!(
        other
            .exec(&id, ExecRequest::shell("echo a"))
            .await
            .unwrap()
            .stdout,
        "a\n"
    );
    let old = fake.sandbox(&id).unwrap().token;

    p.pause(&id).await.unwrap();
    let connected = p.connect(&id).await.unwrap();
    assert!(connected.resumed);
    assert_eq!(
        connected.provider_session_id, None,
        "tokens stay out of records"
    );
    let new = fake.sandbox(&id).unwrap().token;
    assert_ne!(old, new);

    // envd refuses the old token ...
    let refused = reqwest::Client::new()
        .post(format!("{}/process.Process/CloseStdin", fake.envd_url()))
        .header("E2b-Sandbox-Id", &id)
        .header("X-Access-Token", &old)
        .json(&serde_json::json!({"process": {"pid": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    // ... the resuming process uses the new one at once ...
    fake.clear_requests();
    assert_eq!(
        p.exec(&id, ExecRequest::shell("echo b"))
            .await
            .unwrap()
            .stdout,
        "b\n"
    );
    let starts = fake.requests_to("POST", "/process.Process/Start");
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0].header("x-access-token"), Some(new.as_str()));

    // ... and the other process, refused once, reads the new token and carries on.
    fake.clear_requests();
    assert_eq!(
        other
            .exec(&id, ExecRequest::shell("echo c"))
            .await
            .unwrap()
            .stdout,
        "c\n"
    );
    let statuses: Vec<u16> = fake
        .requests_to("POST", "/process.Process/Start")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [401, 200]);
}

/// The fake's injected latencies (what `benches/wake.rs` sets to E2B's published figures): a
/// resume takes its delay with the sandbox paused until it answers, and every envd request
/// waits its own; the answers are what they are without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_latencies_slow_the_resume_and_envd_and_change_no_answer() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    p.pause(&id).await.unwrap();
    let (resume, envd) = (Duration::from_millis(1000), Duration::from_millis(150));
    fake.set_resume_delay(resume);
    fake.set_envd_delay(envd);
    let p = Arc::new(p);
    let started = Instant::now();
    let connecting = {
        let (p, id) = (p.clone(), id.clone());
        tokio::spawn(async move { p.connect(&id).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        fake.sandbox(&id).unwrap().state,
        FakeState::Paused,
        "a resume under way leaves the sandbox paused"
    );
    let connected = connecting.await.unwrap().expect("connect");
    assert!(connected.resumed);
    assert!(started.elapsed() >= resume, "{:?}", started.elapsed());
    assert_eq!(fake.sandbox(&id).unwrap().state, FakeState::Running);

    let started = Instant::now();
    let out = p.exec(&id, ExecRequest::shell("echo woke")).await.unwrap();
    assert!(started.elapsed() >= envd, "{:?}", started.elapsed());
    assert_eq!((out.exit_code, out.stdout.as_str()), (Some(0), "woke\n"));
    let connects = fake.requests_to("POST", "/connect");
    assert_eq!(
        connects.iter().map(|r| r.status).collect::<Vec<_>>(),
        [201],
        "one connect, answered once the resume was done"
    );
}

#[tokio::test]
async fn a_process_that_never_saw_the_sandbox_reads_its_token() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    let fresh = provider_for(&fake, |_| {});
    assert!(fresh.read_file(&id, "/home/user/none").await.is_err());
    fresh.write_file(&id, "/home/user/f", b"x").await.unwrap();
    assert_eq!(p.read_file(&id, "/home/user/f").await.unwrap(), b"x");
}

#[tokio::test]
async fn an_unresumable_memory_snapshot_falls_back_to_the_disk() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    p.write_file(&id, "/home/user/kept", b"disk").await.unwrap();
    p.pause(&id).await.unwrap();
    fake.set_guest_unresponsive(&id);
    let connected = p.connect(&id).await.expect("connect");
    assert!(connected.resumed);
    assert_eq!(
        fake.requests_to("POST", "/connect")
            .iter()
            .map(|r| r.status)
            .collect::<Vec<_>>(),
        [409, 201]
    );
    assert_eq!(p.read_file(&id, "/home/user/kept").await.unwrap(), b"disk");
}

// ---------------------------------------------------------------------------------------------
// Deadlines.

#[tokio::test]
async fn at_its_deadline_a_sandbox_pauses_and_every_call_says_so() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    fake.advance(Duration::from_secs(601));

    let info = p.info(&id).await.unwrap();
    assert_eq!(info.state, SandboxState::Paused);
    assert_eq!(info.deadline, None);
    let listed = p.list(&info.metadata).await.unwrap();
    assert_eq!(listed[0].state, SandboxState::Paused);
    assert!(matches!(
        p.exec(&id, ExecRequest::shell("true")).await,
        Err(ProviderError::Conflict(m)) if m.contains("paused")
    ));
    assert!(matches!(
        p.set_timeout(&id, Duration::from_secs(60)).await,
        Err(ProviderError::Conflict(m)) if m.contains("paused")
    ));
    p.pause(&id)
        .await
        .expect("pausing a paused sandbox succeeds");

    assert!(p.connect(&id).await.unwrap().resumed);
    assert_eq!(
        p.exec(&id, ExecRequest::shell("echo up"))
            .await
            .unwrap()
            .stdout,
        "up\n"
    );
}

#[tokio::test]
async fn a_keep_alive_moves_the_deadline_past_the_timeout() {
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    p.set_timeout(&id, Duration::from_secs(3600)).await.unwrap();
    fake.advance(Duration::from_secs(601));
    assert_eq!(p.info(&id).await.unwrap().state, SandboxState::Running);
    fake.advance(Duration::from_secs(3000));
    assert_eq!(p.info(&id).await.unwrap().state, SandboxState::Paused);
}

#[tokio::test]
async fn list_pages_through_next_tokens() {
    let fake = E2bFake::start_with(FakeOptions {
        max_concurrent: 500,
        ..FakeOptions::default()
    })
    .await;
    let p = provider_for(&fake, |_| {});
    let mut ids = Vec::new();
    for _ in 0..205 {
        ids.push(new_sandbox(&p).await);
    }
    let mut listed: Vec<String> = p
        .list(&BTreeMap::new())
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.sandbox_id)
        .collect();
    listed.sort();
    ids.sort();
    assert_eq!(listed, ids);
    let pages = fake.requests_to("GET", "/v2/sandboxes");
    assert_eq!(pages.len(), 3);
    assert!(pages[1]
        .query
        .as_deref()
        .unwrap_or_default()
        .contains("nextToken="));
}

// ---------------------------------------------------------------------------------------------
// A round trip through the use cases.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_pause_resume_and_the_janitor_through_the_use_cases() {
    let fake = E2bFake::start().await;
    let mut env = fake.env_vars();
    env.insert("THREADBOX_PROVIDER".into(), "e2b".into());
    let ProviderConfig::E2b(config) = ProviderConfig::from_env(&Env::from_map(env)).unwrap() else {
        panic!("THREADBOX_PROVIDER=e2b selects E2B");
    };
    let provider = Arc::new(E2bProvider::new(*config).unwrap());

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("threadbox.db");
    let store = SqliteSessionStore::open(&db).unwrap();
    let events = SqliteQueue::open(&db, "lifecycle", QueueConfig::default()).unwrap();
    let clock = Arc::new(ManualClock::default());
    let tb = Threadbox::new(
        Arc::new(store),
        provider.clone(),
        Arc::new(events),
        clock.clone(),
        test_config(),
    );
    let thread = ThreadId::parse("slack:T1:C1:1712345678.000100").unwrap();

    // Resolve creates, tagged with the thread and generation.
    let handle = tb.resolve(&thread).await.unwrap();
    assert!(handle.created);
    assert_eq!(handle.provider, "e2b");
    let sandbox = fake.sandbox(&handle.sandbox_id).unwrap();
    assert_eq!(
        sandbox
            .metadata
            .get("threadbox.thread_id")
            .map(String::as_str),
        Some("slack:T1:C1:1712345678.000100")
    );
    let out = tb
        .exec(&thread, ExecRequest::shell("echo hi > note && cat note"))
        .await
        .unwrap();
    assert_eq!(out.stdout, "hi\n");

    // Pause and resume by request.
    assert_eq!(tb.pause(&thread).await.unwrap().status, Status::Paused);
    assert_eq!(
        fake.sandbox(&handle.sandbox_id).unwrap().state,
        FakeState::Paused
    );
    let resumed = tb.resume(&thread).await.unwrap();
    assert!(resumed.resumed);
    assert_eq!(resumed.sandbox_id, handle.sandbox_id);
    assert_eq!(
        fake.sandbox(&handle.sandbox_id).unwrap().state,
        FakeState::Running
    );

    // E2B pauses it at its deadline; the janitor folds that into the record.
    fake.advance(tb.config.sandbox_timeout + Duration::from_secs(1));
    assert_eq!(
        fake.sandbox(&handle.sandbox_id).unwrap().state,
        FakeState::Paused
    );
    let report = tb
        .sweep(SweepOptions::for_duration(Duration::from_secs(30)))
        .await;
    assert_eq!(report.corrected, 1, "{report:?}");
    assert_eq!(report.failures, 0, "{report:?}");
    assert_eq!(
        tb.session(&thread).await.unwrap().unwrap().status,
        Status::Paused
    );

    // The next message resumes the same sandbox, files intact.
    let out = tb
        .exec(&thread, ExecRequest::shell("cat note"))
        .await
        .unwrap();
    assert_eq!(out.stdout, "hi\n");
    assert_eq!(
        tb.session(&thread).await.unwrap().unwrap().status,
        Status::Active
    );

    // A sandbox tagged with a thread no record points to is an orphan: the sweep kills it.
    let orphan_owner = SandboxOwner {
        thread_id: ThreadId::parse("orphaned-thread").unwrap(),
        generation: 1,
    };
    let orphan = provider
        .create(CreateSandbox {
            image: threadbox_core::domain::ImageName::host(),
            owner: orphan_owner,
            network: NetworkProfile::Restricted,
            timeout: Duration::from_secs(600),
            env: BTreeMap::new(),
        })
        .await
        .unwrap();
    let report = tb
        .sweep(SweepOptions::for_duration(Duration::from_secs(30)))
        .await;
    assert_eq!(report.orphans_killed, 1, "{report:?}");
    assert!(fake.sandbox(&orphan.sandbox_id).is_none());
    assert!(
        fake.sandbox(&handle.sandbox_id).is_some(),
        "the thread's own sandbox lives"
    );

    // Destroy kills it at E2B.
    tb.destroy(&thread, threadbox_core::domain::Cause::User)
        .await
        .unwrap();
    assert!(fake.sandboxes().is_empty());
}

#[tokio::test]
async fn a_network_change_reaches_the_sandbox_in_place() {
    use threadbox_core::ports::{Allowlist, NetworkProfile};
    let (fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    let home = fake.sandbox(&id).unwrap().home;
    std::fs::write(home.join("kept.txt"), "still here").unwrap();

    let listed = NetworkProfile::Networked {
        allow: Allowlist::parse(["pkg.test", "203.0.113.0/24"]).unwrap(),
    };
    p.set_network(&id, &listed).await.expect("set network");
    assert_eq!(
        fake.sandbox(&id).unwrap().network,
        Some(
            serde_json::json!({"allowOut": ["pkg.test", "203.0.113.0/24"], "denyOut": ["0.0.0.0/0"]})
        )
    );
    p.set_network(&id, &NetworkProfile::Restricted)
        .await
        .expect("restrict");
    assert_eq!(
        fake.sandbox(&id).unwrap().network,
        Some(serde_json::json!({"denyOut": ["0.0.0.0/0"]}))
    );
    let everything = NetworkProfile::Networked {
        allow: Allowlist::everything_public(),
    };
    p.set_network(&id, &everything).await.expect("open");
    // Every public address: only the private, link-local and metadata networks stay denied.
    let network = fake.sandbox(&id).unwrap().network.unwrap();
    assert_eq!(network.get("allowOut"), None, "{network}");
    let denied = network["denyOut"].as_array().unwrap();
    assert!(
        denied.contains(&serde_json::json!("169.254.0.0/16")),
        "{network}"
    );
    assert!(
        !denied.contains(&serde_json::json!("0.0.0.0/0")),
        "{network}"
    );
    assert_eq!(
        std::fs::read_to_string(home.join("kept.txt")).unwrap(),
        "still here",
        "the same sandbox, files kept"
    );

    p.kill(&id).await.unwrap();
    let gone = p.set_network(&id, &listed).await.unwrap_err();
    assert!(matches!(gone, ProviderError::Gone(_)), "{gone:?}");
}

/// Credentials at egress on E2B: the operator's headers (read from the variable the Lambda
/// functions get by reference) become the `rules` of a networked sandbox's `network`, for the
/// hosts its allowlist reaches, on create and on every change; the sandbox's own variables
/// never hold them; and the fake refuses rules E2B could not apply.
#[tokio::test]
async fn operator_credentials_become_e2b_rules_and_never_sandbox_variables() {
    use threadbox_core::ports::{Allowlist, NetworkProfile};
    use threadbox_e2b::EGRESS_CREDENTIALS_VAR;
    const SECRET: &str = "Bearer tb-secret-e2b-0123456789";
    let fake = E2bFake::start().await;
    let credentials = format!(
        r#"{{"pkg.test": {{"Authorization": "{SECRET}"}}, "other.test": {{"X-Key": "o"}}}}"#
    );
    let env = Env::from_map(fake.env_vars())
        .overlay(BTreeMap::from([(EGRESS_CREDENTIALS_VAR, credentials)]));
    let config = E2bConfig::from_env(&env).expect("config");
    assert!(!format!("{config:?}").contains("tb-secret"), "{config:?}");
    let p = E2bProvider::new(config).unwrap();

    let mut request = create_request(fresh_owner(1));
    request.network = NetworkProfile::Networked {
        allow: Allowlist::parse(["pkg.test"]).unwrap(),
    };
    let id = p.create(request).await.expect("create").sandbox_id;
    let rules = serde_json::json!({
        "pkg.test": [{"transform": {"headers": {"authorization": SECRET}}}]
    });
    let sandbox = fake.sandbox(&id).unwrap();
    assert_eq!(sandbox.network.as_ref().unwrap()["rules"], rules);
    assert!(
        !format!("{:?}", sandbox.env_vars).contains("tb-secret"),
        "{:?}",
        sandbox.env_vars
    );

    // A change keeps them (PUT replaces the whole network), a restriction drops them.
    let everything = NetworkProfile::Networked {
        allow: Allowlist::everything_public(),
    };
    p.set_network(&id, &everything).await.expect("open");
    let network = fake.sandbox(&id).unwrap().network.unwrap();
    assert_eq!(network["rules"]["pkg.test"], rules["pkg.test"]);
    assert_eq!(
        network["rules"]["other.test"][0]["transform"]["headers"]["x-key"],
        "o"
    );
    p.set_network(&id, &NetworkProfile::Restricted)
        .await
        .expect("restrict");
    assert_eq!(
        fake.sandbox(&id).unwrap().network.unwrap().get("rules"),
        None
    );

    // What E2B could not apply is a 400 naming the rule.
    let put = |body: serde_json::Value| {
        let url = format!("{}/sandboxes/{id}/network", fake.api_url());
        let key = fake.api_key();
        async move {
            reqwest::Client::new()
                .put(url)
                .header("X-API-Key", key)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    for bad in [
        serde_json::json!({"rules": ["pkg.test"]}),
        serde_json::json!({"rules": {"10.0.0.1": [{"transform": {"headers": {"x": "y"}}}]}}),
        serde_json::json!({"rules": {"pkg.test": []}}),
        serde_json::json!({"rules": {"pkg.test": [{"headers": {"x": "y"}}]}}),
        serde_json::json!({"rules": {"pkg.test": [{"transform": {"headers": {"a b": "y"}}}]}}),
        serde_json::json!({"rules": {"pkg.test": [{"transform": {"headers": {"x": "y\r\nz"}}}]}}),
    ] {
        let response = put(bad.clone()).await;
        assert_eq!(response.status(), 400, "{bad}");
    }
    let fine = put(serde_json::json!({"rules": rules})).await;
    assert_eq!(fine.status(), 204);
    p.kill(&id).await.unwrap();
}

#[tokio::test]
async fn a_command_as_root_asks_envd_for_the_root_user() {
    let (_fake, p) = setup().await;
    let id = new_sandbox(&p).await;
    let mut as_root = ExecRequest::shell("echo $USER");
    as_root.user = threadbox_core::ports::SandboxUser::Root;
    assert_eq!(p.exec(&id, as_root).await.unwrap().stdout, "root\n");
    let as_user = ExecRequest::shell("echo $USER");
    assert_eq!(p.exec(&id, as_user).await.unwrap().stdout, "user\n");
}
