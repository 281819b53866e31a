//! The checkpoint routes driven in-process over a real SQLite session store, queue and
//! checkpoint store, and the in-memory provider (which copies its files like a provider with
//! checkpoints): every route's answer and status, the lifecycle events, retention, the quota
//! refusal, and what each bad input answers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, ApiAuth};
use threadbox_core::domain::{Cause, CheckpointRetention, ThreadId};
use threadbox_core::usecases::{Config, Threadbox};
use threadbox_sqlite::{QueueConfig, SqliteCheckpointStore, SqliteQueue, SqliteSessionStore};
use threadbox_testing::{InMemoryProvider, ManualClock};

struct Api {
    router: Router,
    tb: Threadbox,
    provider: Arc<InMemoryProvider>,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    #[track_caller]
    fn expect(&self, status: StatusCode) -> Value {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        self.json()
    }

    #[track_caller]
    fn expect_error(&self, status: StatusCode, code: &str) -> String {
        let body = self.expect(status);
        assert_eq!(body["error"]["code"], code, "{body}");
        body["error"]["message"].as_str().unwrap().to_owned()
    }
}

impl Api {
    fn new(retention: CheckpointRetention) -> Self {
        Self::with_config(retention, Config::default())
    }

    fn with_config(retention: CheckpointRetention, config: Config) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
        let queue =
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
        let checkpoints = Arc::new(SqliteCheckpointStore::open(&path).unwrap());
        let provider = InMemoryProvider::new();
        let clock = Arc::new(ManualClock::default());
        let config = Config {
            settle_poll: Duration::from_millis(5),
            ..config
        };
        let tb = Threadbox::new(store, provider.clone(), queue, clock.clone(), config)
            .with_checkpoints(checkpoints, retention);
        Self {
            router: router(tb.clone(), ApiAuth::disabled()),
            tb,
            provider,
            clock,
            _dir: dir,
        }
    }

    async fn send(&self, method: Method, uri: &str, body: Option<Value>) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        let body = match body {
            Some(body) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(body.to_string())
            }
            None => Body::empty(),
        };
        let response = self
            .router
            .clone()
            .oneshot(request.body(body).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn write(&self, thread: &str, path: &str, text: &str) {
        let uri = format!("/v1/threads/{thread}/files{path}");
        let response = self
            .router
            .clone()
            .oneshot(
                Request::put(&uri)
                    .body(Body::from(text.to_owned()))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "PUT {uri}: {}",
            response.status()
        );
    }

    async fn read(&self, thread: &str, path: &str) -> Option<String> {
        let reply = self
            .send(
                Method::GET,
                &format!("/v1/threads/{thread}/files{path}"),
                None,
            )
            .await;
        (reply.status == StatusCode::OK).then(|| String::from_utf8_lossy(&reply.body).into())
    }

    async fn take(&self, thread: &str, label: Option<&str>) -> Value {
        let body = label.map(|l| json!({ "label": l }));
        let uri = format!("/v1/threads/{thread}/checkpoints");
        self.send(Method::POST, &uri, body)
            .await
            .expect(StatusCode::CREATED)
    }

    async fn causes(&self, thread: &str) -> Vec<(Cause, Option<String>)> {
        let events = self
            .tb
            .store
            .events_after(&ThreadId::parse(thread).unwrap(), 0, 1000)
            .await
            .unwrap();
        events.into_iter().map(|e| (e.cause, e.detail)).collect()
    }
}

fn roomy() -> CheckpointRetention {
    CheckpointRetention::default()
}

#[tokio::test]
async fn a_checkpoint_is_taken_listed_restored_and_deleted() {
    let api = Api::new(roomy());
    api.write("t-1", "/home/user/a.txt", "first").await;
    let cp = api.take("t-1", Some("before the change")).await;
    assert_eq!(cp["thread_id"], "t-1");
    assert_eq!(cp["label"], "before the change");
    assert_eq!(cp["cause"], "user");
    assert_eq!(cp["bytes"], 5);
    assert!(cp["id"].as_str().unwrap().starts_with("cp-"));
    let id = cp["id"].as_str().unwrap().to_owned();

    api.write("t-1", "/home/user/a.txt", "second").await;
    api.write("t-1", "/home/user/new.txt", "made after").await;
    api.clock.advance(Duration::from_secs(1));
    let later = api.take("t-1", None).await;
    assert!(later.get("label").is_none(), "no label, no field: {later}");

    let listed = api
        .send(Method::GET, "/v1/threads/t-1/checkpoints", None)
        .await
        .expect(StatusCode::OK);
    let ids: Vec<&str> = listed["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![later["id"].as_str().unwrap(), id.as_str()],
        "newest first"
    );

    let restored = api
        .send(
            Method::POST,
            "/v1/threads/t-1/restore",
            Some(json!({ "checkpoint": id })),
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(restored["checkpoint"]["id"], id.as_str());
    assert_eq!(restored["stopped"], json!([]));
    assert_eq!(
        api.read("t-1", "/home/user/a.txt").await.as_deref(),
        Some("first")
    );
    assert_eq!(
        api.read("t-1", "/home/user/new.txt").await,
        None,
        "made since: gone"
    );

    let causes = api.causes("t-1").await;
    let restore = causes
        .iter()
        .find(|(c, _)| *c == Cause::Restore)
        .expect("a restore event");
    assert!(restore.1.as_deref().unwrap().contains(&id), "{restore:?}");
    assert_eq!(
        causes
            .iter()
            .filter(|(c, _)| *c == Cause::Checkpoint)
            .count(),
        2
    );

    let deleted = api
        .send(
            Method::DELETE,
            &format!("/v1/threads/t-1/checkpoints/{id}"),
            None,
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(deleted["id"], id.as_str());
    api.send(
        Method::DELETE,
        &format!("/v1/threads/t-1/checkpoints/{id}"),
        None,
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "unknown_checkpoint");
    api.send(
        Method::POST,
        "/v1/threads/t-1/restore",
        Some(json!({ "checkpoint": id })),
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "unknown_checkpoint");
    assert_eq!(
        api.provider.checkpoint_copies(),
        1,
        "the deleted one's copy is gone"
    );
}

#[tokio::test]
async fn a_fork_copies_the_home_into_a_new_thread_and_both_say_so() {
    let api = Api::new(roomy());
    api.write("src", "/home/user/plan.md", "plan A").await;
    let cp = api.take("src", None).await;
    api.write("src", "/home/user/plan.md", "plan B").await;

    let now = api
        .send(
            Method::POST,
            "/v1/threads/src/fork",
            Some(json!({ "thread": "fork-now" })),
        )
        .await
        .expect(StatusCode::CREATED);
    assert_eq!(now["thread_id"], "fork-now");
    assert_eq!(now["created"], true);
    assert_eq!(
        api.read("fork-now", "/home/user/plan.md").await.as_deref(),
        Some("plan B")
    );

    let at = api
        .send(
            Method::POST,
            "/v1/threads/src/fork",
            Some(json!({ "thread": "fork-then", "checkpoint": cp["id"], "network": "restricted" })),
        )
        .await
        .expect(StatusCode::CREATED);
    assert_ne!(at["sandbox_id"], now["sandbox_id"]);
    assert_eq!(
        api.read("fork-then", "/home/user/plan.md").await.as_deref(),
        Some("plan A")
    );
    assert_eq!(
        api.read("src", "/home/user/plan.md").await.as_deref(),
        Some("plan B"),
        "the source is untouched"
    );

    let source_events = api.causes("src").await;
    let forks: Vec<_> = source_events
        .iter()
        .filter(|(c, _)| *c == Cause::Fork)
        .collect();
    assert_eq!(forks.len(), 2, "{source_events:?}");
    assert!(forks[0].1.as_deref().unwrap().contains("fork-now"));
    let new_events = api.causes("fork-then").await;
    let fork = new_events
        .iter()
        .find(|(c, _)| *c == Cause::Fork)
        .expect("the fork's event");
    assert!(fork.1.as_deref().unwrap().contains("src"), "{fork:?}");

    // Refusals: the new thread exists, unknown thread, bad ids, another thread's checkpoint.
    api.send(
        Method::POST,
        "/v1/threads/src/fork",
        Some(json!({ "thread": "fork-now" })),
    )
    .await
    .expect_error(StatusCode::CONFLICT, "thread_exists");
    api.send(
        Method::POST,
        "/v1/threads/nope/fork",
        Some(json!({ "thread": "x-1" })),
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "unknown_thread");
    api.send(
        Method::POST,
        "/v1/threads/src/fork",
        Some(json!({ "thread": "bad id!" })),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_thread_id");
    api.send(
        Method::POST,
        "/v1/threads/src/fork",
        Some(json!({ "thread": "src" })),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_request");
    api.send(
        Method::POST,
        "/v1/threads/src/fork",
        Some(json!({ "thread": "x-2", "checkpoint": "cp-../../etc" })),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_checkpoint_id");
    let theirs = api.take("fork-now", None).await;
    api.send(
        Method::POST,
        "/v1/threads/src/fork",
        Some(json!({ "thread": "x-3", "checkpoint": theirs["id"] })),
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "unknown_checkpoint");
    api.send(
        Method::POST,
        "/v1/threads/src/restore",
        Some(json!({ "checkpoint": theirs["id"] })),
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "unknown_checkpoint");
    for refused in ["x-1", "x-2", "x-3"] {
        assert!(api
            .tb
            .store
            .load(&ThreadId::parse(refused).unwrap())
            .await
            .unwrap()
            .is_none());
    }
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let api = Api::new(roomy());
    api.write("t-1", "/home/user/a.txt", "x").await;
    api.send(Method::POST, "/v1/threads/nope/checkpoints", None)
        .await
        .expect_error(StatusCode::NOT_FOUND, "unknown_thread");
    api.send(Method::GET, "/v1/threads/nope/checkpoints", None)
        .await
        .expect_error(StatusCode::NOT_FOUND, "unknown_thread");
    let long = "é".repeat(201);
    api.send(
        Method::POST,
        "/v1/threads/t-1/checkpoints",
        Some(json!({ "label": long })),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_request");
    api.send(
        Method::POST,
        "/v1/threads/t-1/checkpoints",
        Some(json!({ "labels": "x" })),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_json");
    api.send(
        Method::DELETE,
        "/v1/threads/t-1/checkpoints/not-an-id",
        None,
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_checkpoint_id");
    api.send(Method::POST, "/v1/threads/t-1/restore", None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_json");
    api.send(
        Method::POST,
        "/v1/threads/t-1/restore",
        Some(json!({ "checkpoint": "cp-x" })),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_checkpoint_id");
    api.send(
        Method::POST,
        "/v1/threads/t-1/fork",
        Some(json!({ "thread": "t-2", "network": "wide open" })),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_network");
    let listed = api
        .send(Method::GET, "/v1/threads/t-1/checkpoints", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(listed["checkpoints"], json!([]));
    assert_eq!(api.provider.checkpoint_copies(), 0);
}

#[tokio::test]
async fn retention_drops_the_oldest_and_the_cap_refuses_with_the_numbers() {
    let mib = 1u64 << 20;
    let api = Api::new(CheckpointRetention::new(2, mib).unwrap());
    api.write("t-1", "/home/user/a.txt", "small").await;
    let first = api.take("t-1", None).await;
    api.clock.advance(Duration::from_secs(1));
    api.take("t-1", None).await;
    api.clock.advance(Duration::from_secs(1));
    api.take("t-1", None).await;
    let listed = api
        .send(Method::GET, "/v1/threads/t-1/checkpoints", None)
        .await
        .expect(StatusCode::OK);
    let kept = listed["checkpoints"].as_array().unwrap();
    assert_eq!(kept.len(), 2);
    assert!(
        kept.iter().all(|c| c["id"] != first["id"]),
        "the oldest went"
    );
    assert_eq!(api.provider.checkpoint_copies(), 2, "with its copy");
    let dropped = api.causes("t-1").await;
    assert!(dropped.iter().any(|(c, d)| *c == Cause::Checkpoint
        && d.as_deref()
            .unwrap()
            .contains(first["id"].as_str().unwrap())));

    api.write("t-1", "/home/user/big.bin", &"x".repeat(2 * mib as usize))
        .await;
    let message = api
        .send(Method::POST, "/v1/threads/t-1/checkpoints", None)
        .await
        .expect_error(StatusCode::INSUFFICIENT_STORAGE, "checkpoint_quota");
    assert!(message.contains(&(2 * mib + 5).to_string()), "{message}");
    assert!(message.contains(&mib.to_string()), "{message}");
    assert_eq!(
        api.provider.checkpoint_copies(),
        2,
        "nothing kept of the refused one"
    );
}

#[tokio::test]
async fn exec_with_checkpoint_takes_one_first_and_names_it() {
    let api = Api::new(roomy());
    let reply = api
        .send(
            Method::POST,
            "/v1/threads/t-new/exec",
            Some(json!({ "cmd": "echo hi", "checkpoint": true })),
        )
        .await;
    let body = reply.expect(StatusCode::OK);
    let id = body["checkpoint"]["id"]
        .as_str()
        .expect("the checkpoint")
        .to_owned();
    assert_eq!(body["checkpoint"]["cause"], "turn");
    assert_eq!(reply.headers["threadbox-checkpoint"], id.as_str());
    let plain = api
        .send(
            Method::POST,
            "/v1/threads/t-new/exec",
            Some(json!({ "cmd": "echo hi" })),
        )
        .await
        .expect(StatusCode::OK);
    assert!(plain.get("checkpoint").is_none());
}

#[tokio::test]
async fn checkpoints_go_with_the_thread_when_it_is_destroyed_but_not_with_a_reset() {
    let api = Api::new(roomy());
    api.write("t-1", "/home/user/a.txt", "kept").await;
    let cp = api.take("t-1", None).await;
    api.send(Method::POST, "/v1/threads/t-1/reset", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        api.read("t-1", "/home/user/a.txt").await,
        None,
        "a fresh sandbox"
    );
    api.send(
        Method::POST,
        "/v1/threads/t-1/restore",
        Some(json!({ "checkpoint": cp["id"] })),
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(
        api.read("t-1", "/home/user/a.txt").await.as_deref(),
        Some("kept"),
        "undoing a reset"
    );

    let thread = ThreadId::parse("t-1").unwrap();
    api.tb.destroy(&thread, Cause::User).await.unwrap();
    assert_eq!(api.provider.checkpoint_copies(), 0);
    let listed = api
        .send(Method::GET, "/v1/threads/t-1/checkpoints", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(listed["checkpoints"], json!([]));
}

#[tokio::test]
async fn without_a_checkpoint_store_the_routes_say_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threadbox.db");
    let tb = Threadbox::new(
        Arc::new(SqliteSessionStore::open(&path).unwrap()),
        InMemoryProvider::new(),
        Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap()),
        Arc::new(ManualClock::default()),
        Config::default(),
    );
    tb.resolve(&ThreadId::parse("t-1").unwrap()).await.unwrap();
    let response = router(tb, ApiAuth::disabled())
        .oneshot(
            Request::post("/v1/threads/t-1/checkpoints")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_IMPLEMENTED);
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["code"], "unsupported");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not configured"),
        "{body}"
    );
}

#[tokio::test]
async fn a_provider_without_checkpoints_answers_501_naming_itself_and_changes_nothing() {
    let api = Api::new(roomy());
    api.write("src", "/home/user/a.txt", "x").await;
    let cp = api.take("src", None).await;
    api.provider.refuse_checkpoints(true);
    let events_before = api.causes("src").await.len();
    let creates_before = api.provider.creates();
    for (method, uri, body) in [
        (Method::POST, "/v1/threads/src/checkpoints", None),
        (
            Method::POST,
            "/v1/threads/src/restore",
            Some(json!({ "checkpoint": cp["id"] })),
        ),
        (
            Method::POST,
            "/v1/threads/src/fork",
            Some(json!({ "thread": "never-made" })),
        ),
    ] {
        let message = api
            .send(method.clone(), uri, body)
            .await
            .expect_error(StatusCode::NOT_IMPLEMENTED, "unsupported");
        assert!(message.contains("memory provider"), "{uri}: {message}");
    }
    // Nothing was written or made: no thread for the fork, no event, no sandbox.
    api.send(Method::GET, "/v1/threads/never-made", None)
        .await
        .expect_error(StatusCode::NOT_FOUND, "unknown_thread");
    assert_eq!(api.causes("src").await.len(), events_before);
    assert_eq!(api.provider.creates(), creates_before);
    // What the records alone answer still works: the list, and a delete.
    let listed = api
        .send(Method::GET, "/v1/threads/src/checkpoints", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(listed["checkpoints"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_fork_carries_the_sources_labels_and_env_and_names_its_source() {
    use std::collections::BTreeMap;
    use threadbox_core::domain::THREAD_LABEL;
    use threadbox_core::usecases::ResolveOptions;
    let api = Api::new(roomy());
    let src = ThreadId::parse("src").unwrap();
    let labels = BTreeMap::from([
        ("team".to_owned(), "blue".to_owned()),
        (THREAD_LABEL.to_owned(), "src".to_owned()),
    ]);
    let env = BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]);
    api.tb
        .resolve_with(
            &src,
            ResolveOptions {
                labels: labels.clone(),
                env: env.clone(),
                ..ResolveOptions::default()
            },
        )
        .await
        .unwrap();
    api.send(
        Method::POST,
        "/v1/threads/src/fork",
        Some(json!({ "thread": "fork-1" })),
    )
    .await
    .expect(StatusCode::CREATED);
    let fork = api
        .tb
        .store
        .load(&ThreadId::parse("fork-1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fork.env, env);
    assert_eq!(fork.labels["team"], "blue");
    assert_eq!(
        fork.labels[THREAD_LABEL], "fork-1",
        "the label naming a thread names the fork"
    );
    assert_eq!(fork.labels.len(), 2);
    assert_eq!(fork.forked_from, Some(src.clone()));
    let source = api.tb.store.load(&src).await.unwrap().unwrap();
    assert_eq!((source.labels, source.forked_from), (labels, None));
}

#[tokio::test]
async fn a_fork_that_failed_is_made_again_by_the_same_fork_and_by_nothing_else() {
    use threadbox_core::domain::Status;
    use threadbox_core::ports::ProviderError;
    use threadbox_testing::Op;
    let api = Api::new(roomy());
    api.write("src", "/home/user/plan.md", "plan A").await;
    api.write("other", "/home/user/plan.md", "other plan").await;
    let load = |thread: &'static str| {
        let store = api.tb.store.clone();
        async move {
            store
                .load(&ThreadId::parse(thread).unwrap())
                .await
                .unwrap()
                .unwrap()
        }
    };

    // The fork's sandbox is not made: its thread is left `error`, naming its source.
    api.provider.fail_next(
        Op::Create,
        ProviderError::Internal("the host fell over".into()),
    );
    let fork = |source: &'static str, thread: &'static str| {
        let api = &api;
        async move {
            api.send(
                Method::POST,
                &format!("/v1/threads/{source}/fork"),
                Some(json!({ "thread": thread })),
            )
            .await
        }
    };
    fork("src", "fk").await.expect(StatusCode::BAD_GATEWAY);
    let failed = load("fk").await;
    assert_eq!(failed.status, Status::Error);
    assert_eq!(failed.forked_from.as_ref().map(|t| t.as_str()), Some("src"));

    // Another source cannot take it over.
    fork("other", "fk")
        .await
        .expect_error(StatusCode::CONFLICT, "thread_exists");

    // The same fork again makes it, with the source's files.
    let made = fork("src", "fk").await.expect(StatusCode::CREATED);
    assert_eq!(made["thread_id"], "fk");
    assert_eq!(
        api.read("fk", "/home/user/plan.md").await.as_deref(),
        Some("plan A")
    );
    assert_eq!(load("fk").await.status, Status::Active);
    // Made once, it is taken: a fork into it again is refused.
    fork("src", "fk")
        .await
        .expect_error(StatusCode::CONFLICT, "thread_exists");

    // A thread in error that was never a fork is taken too.
    api.provider.fail_next(
        Op::Create,
        ProviderError::Internal("the host fell over".into()),
    );
    api.send(Method::POST, "/v1/threads/plain/resolve", None)
        .await
        .expect(StatusCode::BAD_GATEWAY);
    assert_eq!(load("plain").await.status, Status::Error);
    fork("src", "plain")
        .await
        .expect_error(StatusCode::CONFLICT, "thread_exists");
}

#[tokio::test]
async fn the_thread_shows_what_its_checkpoints_hold_and_cost_a_month() {
    let unpriced = Api::new(roomy());
    unpriced.write("t-1", "/home/user/a.txt", "12345").await;
    unpriced.take("t-1", None).await;
    let shown = unpriced
        .send(Method::GET, "/v1/threads/t-1", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(shown["checkpoints"]["count"], 1);
    assert_eq!(shown["checkpoints"]["bytes"], 5);
    assert!(
        shown["checkpoints"].get("usd_per_month").is_none(),
        "no storage price, no cost: {shown}"
    );

    let mut config = Config::default();
    config.pricing.usd_per_stored_gib_month = Some(0.08);
    let priced = Api::with_config(roomy(), config);
    let half_mib = "x".repeat(512 * 1024);
    priced.write("t-1", "/home/user/big.txt", &half_mib).await;
    priced.take("t-1", None).await;
    priced.take("t-1", None).await;
    let shown = priced
        .send(Method::GET, "/v1/threads/t-1", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(shown["checkpoints"]["count"], 2);
    assert_eq!(shown["checkpoints"]["bytes"], 1 << 20);
    let usd = shown["checkpoints"]["usd_per_month"].as_f64().unwrap();
    assert!(
        (usd - 0.08 / 1024.0).abs() < 1e-12,
        "1 MiB at $0.08 a GiB-month: {usd}"
    );
}
