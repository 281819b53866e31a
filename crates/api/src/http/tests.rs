//! The router driven in-process (`tower::ServiceExt::oneshot`) over a real SQLite store and queue
//! on a temporary file, the in-memory provider and a manual clock. Every route's happy path and
//! every kind of bad input, each asserting the status and the error code.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, ApiAuth, MAX_FILE_BODY, MAX_JSON_BODY};
use threadbox_core::domain::{Cause, GonePolicy, ThreadId};
use threadbox_core::ports::ProviderError;
use threadbox_core::usecases::{Config, HoldRequest, Threadbox};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::{InMemoryProvider, ManualClock, Op};

pub(super) struct Api {
    router: Router,
    pub(super) tb: Threadbox,
    pub(super) provider: Arc<InMemoryProvider>,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

pub(super) struct Reply {
    pub(super) status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    pub(super) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The error code, checking the whole error shape on the way.
    fn error_code(&self) -> String {
        let body = self.json();
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "error without a message: {body}"
        );
        body["error"]["code"].as_str().unwrap().to_owned()
    }

    #[track_caller]
    pub(super) fn expect_error(&self, status: StatusCode, code: &str) {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(self.error_code(), code);
    }
}

fn config() -> Config {
    Config {
        settle_poll: Duration::from_millis(5),
        settle_wait: Duration::from_secs(20),
        ..Config::default()
    }
}

impl Api {
    pub(super) fn new() -> Self {
        Self::with(ApiAuth::disabled(), config())
    }

    fn with(auth: ApiAuth, config: Config) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
        let queue =
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
        let provider = InMemoryProvider::new();
        let clock = Arc::new(ManualClock::default());
        let tb = Threadbox::new(store, provider.clone(), queue, clock.clone(), config);
        Self {
            router: router(tb.clone(), auth),
            tb,
            provider,
            clock,
            _dir: dir,
        }
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
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

    pub(super) async fn call(&self, method: Method, uri: &str) -> Reply {
        self.send(
            Request::builder()
                .method(method)
                .uri(uri)
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    pub(super) async fn post_json(&self, uri: &str, body: impl Into<Body>) -> Reply {
        self.send(
            Request::post(uri)
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.into())
                .unwrap(),
        )
        .await
    }

    async fn put(&self, uri: &str, body: impl Into<Body>) -> Reply {
        self.send(Request::put(uri).body(body.into()).unwrap())
            .await
    }

    pub(super) async fn resolve(&self, thread: &str) -> Value {
        let reply = self
            .call(Method::POST, &format!("/v1/threads/{thread}/resolve"))
            .await;
        assert!(reply.status.is_success(), "{}", reply.json());
        reply.json()
    }
}

fn tid(s: &str) -> ThreadId {
    ThreadId::parse(s).unwrap()
}

#[tokio::test]
async fn healthz_is_public() {
    let api = Api::with(ApiAuth::new(["k1"]), config());
    let reply = api.call(Method::GET, "/healthz").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json(), json!({ "ok": true }));
}

#[tokio::test]
async fn resolve_creates_once_then_returns_the_same_sandbox() {
    let api = Api::new();
    let first = api.call(Method::POST, "/v1/threads/t1/resolve").await;
    assert_eq!(first.status, StatusCode::CREATED);
    let first = first.json();
    assert_eq!(first["thread_id"], "t1");
    assert_eq!(first["status"], "active");
    assert_eq!(first["created"], true);
    assert_eq!(first["provider"], "memory");

    let again = api.call(Method::POST, "/v1/threads/t1/resolve").await;
    assert_eq!(again.status, StatusCode::OK);
    let again = again.json();
    assert_eq!(again["created"], false);
    assert_eq!(again["sandbox_id"], first["sandbox_id"]);
    assert_eq!(api.provider.creates(), 1);
}

#[tokio::test]
async fn pause_then_resume() {
    let api = Api::new();
    api.resolve("t1").await;
    api.clock.advance(Duration::from_secs(5));

    let paused = api.call(Method::POST, "/v1/threads/t1/pause").await;
    assert_eq!(paused.status, StatusCode::OK);
    let paused = paused.json();
    assert_eq!(paused["status"], "paused");
    assert_eq!(paused["thread_id"], "t1");
    assert_eq!(paused["idle_seconds"], 0, "a user pause is activity");

    let resumed = api.call(Method::POST, "/v1/threads/t1/resume").await;
    assert_eq!(resumed.status, StatusCode::OK);
    let resumed = resumed.json();
    assert_eq!(resumed["status"], "active");
    assert_eq!(resumed["resumed"], true);
}

#[tokio::test]
async fn reset_says_the_files_are_gone() {
    let api = Api::new();
    let first = api.resolve("t1").await;
    let put = api
        .put("/v1/threads/t1/files/home/user/a.txt", "data")
        .await;
    assert_eq!(put.status, StatusCode::OK);

    let reset = api.call(Method::POST, "/v1/threads/t1/reset").await;
    assert_eq!(reset.status, StatusCode::OK);
    let reset = reset.json();
    assert_eq!(reset["files_lost"], true);
    assert!(reset["message"].as_str().unwrap().contains("destroyed"));
    assert_eq!(reset["status"], "active");
    assert_ne!(reset["sandbox_id"], first["sandbox_id"]);
    assert_eq!(
        reset["generation"].as_u64().unwrap(),
        first["generation"].as_u64().unwrap() + 1
    );
    // The file went with the old sandbox: not there, as every provider says it.
    api.call(Method::GET, "/v1/threads/t1/files/home/user/a.txt")
        .await
        .expect_error(StatusCode::NOT_FOUND, "file_not_found");
}

#[tokio::test]
async fn gets_on_an_unknown_thread_are_404_and_create_nothing() {
    let api = Api::new();
    for uri in [
        "/v1/threads/ghost",
        "/v1/threads/ghost/events",
        "/v1/threads/ghost/files/home/user/a.txt",
        "/v1/threads/ghost/files/home/user?list=true",
        "/v1/threads/ghost/files/home/user/a.txt?stat=true",
    ] {
        api.call(Method::GET, uri)
            .await
            .expect_error(StatusCode::NOT_FOUND, "unknown_thread");
    }
    assert_eq!(api.provider.creates(), 0, "no sandbox");
    assert!(
        api.tb.session(&tid("ghost")).await.unwrap().is_none(),
        "no record"
    );
}

#[tokio::test]
async fn a_get_reads_a_paused_sandbox_without_waking_it_or_writing() {
    let api = Api::new();
    api.resolve("t1").await;
    api.put("/v1/threads/t1/files/home/user/a.txt", "kept")
        .await;
    let paused = api.call(Method::POST, "/v1/threads/t1/pause").await;
    assert_eq!(paused.json()["status"], "paused");
    let before = api.tb.session(&tid("t1")).await.unwrap().unwrap();
    let connects = api.provider.connects();

    let read = api
        .call(Method::GET, "/v1/threads/t1/files/home/user/a.txt")
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(&read.body[..], b"kept");
    let listed = api
        .call(Method::GET, "/v1/threads/t1/files/home/user?list=true")
        .await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.json()["entries"][0]["name"], "a.txt");
    let stat = api
        .call(
            Method::GET,
            "/v1/threads/t1/files/home/user/a.txt?stat=true",
        )
        .await;
    assert_eq!(stat.status, StatusCode::OK);

    let after = api.tb.session(&tid("t1")).await.unwrap().unwrap();
    assert_eq!(after.version, before.version, "nothing was written");
    assert_eq!(api.provider.connects(), connects, "nothing was resumed");
    let sandbox = before.sandbox_id.unwrap();
    assert_eq!(
        api.provider.state_of(&sandbox),
        Some(threadbox_core::ports::SandboxState::Paused)
    );
}

#[tokio::test]
async fn a_get_never_replaces_a_lost_sandbox() {
    let api = Api::new();
    let first = api.resolve("t1").await;
    let sandbox = first["sandbox_id"].as_str().unwrap().to_owned();
    threadbox_core::ports::SandboxProvider::kill(api.provider.as_ref(), &sandbox)
        .await
        .unwrap();
    let creates = api.provider.creates();

    api.call(Method::GET, "/v1/threads/t1/files/home/user/a.txt")
        .await
        .expect_error(StatusCode::CONFLICT, "no_sandbox");
    assert_eq!(api.provider.creates(), creates, "a GET recreates nothing");
    // The next use that may change things does: exec recreates by the thread's policy.
    let exec = api
        .post_json("/v1/threads/t1/exec", r#"{"cmd": "true"}"#)
        .await;
    assert_eq!(exec.status, StatusCode::OK, "{}", exec.json());
    assert_eq!(api.provider.creates(), creates + 1);
}

#[tokio::test]
async fn bad_numbers_and_cursors_are_400s_not_wraps() {
    let api = Api::new();
    api.resolve("t1").await;
    api.resolve("t2").await;
    // 2^63 would wrap to a negative seq and replay the thread from its first event.
    for after in ["9223372036854775808", "18446744073709551615"] {
        let reply = api
            .call(
                Method::GET,
                &format!("/v1/threads/t1/events?after_seq={after}"),
            )
            .await;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_query");
        assert!(reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 9223372036854775807"));
    }
    for bad in ["-1", "1e3", "18446744073709551616"] {
        api.call(
            Method::GET,
            &format!("/v1/threads/t1/events?after_seq={bad}"),
        )
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_query");
    }
    let last = api
        .call(
            Method::GET,
            "/v1/threads/t1/events?after_seq=9223372036854775807",
        )
        .await;
    assert_eq!(last.status, StatusCode::OK);
    assert_eq!(last.json()["events"], json!([]));

    for cursor in ["", "%20", "a%2Fb", &"x".repeat(200)] {
        api.call(Method::GET, &format!("/v1/threads?cursor={cursor}"))
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid_query");
    }
    // Any thread id is a position, existing or not.
    let page = api.call(Method::GET, "/v1/threads?cursor=t1").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.json()["threads"][0]["thread_id"], "t2");
}

#[tokio::test]
async fn oversized_arguments_and_environment_are_400_naming_the_limit() {
    let api = Api::new();
    let big = "x".repeat(130 * 1024);
    for body in [
        json!({"argv": ["echo", big]}),
        json!({"cmd": big}),
        json!({"cmd": "true", "env": {"BIG": big}}),
    ] {
        let reply = api.post_json("/v1/threads/t1/exec", body.to_string()).await;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_request");
        let message = reply.json()["error"]["message"].to_string();
        assert!(message.contains("at most 131071 bytes"), "{message}");
    }
    assert_eq!(api.provider.creates(), 0, "refused before anything ran");
}

#[tokio::test]
async fn capacity_limits_are_429_for_the_thread_and_503_for_the_host_with_retry_after() {
    use threadbox_core::ports::Limit;
    let api = Api::new();
    api.resolve("t1").await;
    for (limit, status, secs) in [
        (Limit::CommandsInSandbox, StatusCode::TOO_MANY_REQUESTS, 2),
        (Limit::Commands, StatusCode::SERVICE_UNAVAILABLE, 5),
    ] {
        api.provider.fail_next(
            Op::Exec,
            ProviderError::LimitReached {
                limit,
                message: "over the limit".into(),
                retry_after: Duration::from_secs(secs),
            },
        );
        let reply = api
            .post_json("/v1/threads/t1/exec", r#"{"cmd": "true"}"#)
            .await;
        reply.expect_error(status, limit.code());
        assert_eq!(
            reply.headers[header::RETRY_AFTER].to_str().unwrap(),
            secs.to_string()
        );
    }
}

#[tokio::test]
async fn host_paths_in_provider_failures_stay_out_of_answers() {
    let api = Api::new();
    api.resolve("t1").await;
    api.provider.fail_next(
        Op::Exec,
        ProviderError::Internal(
            "cannot remove /var/lib/threadbox/sandboxes/rc-1/home: Device or resource busy".into(),
        ),
    );
    let reply = api
        .post_json("/v1/threads/t1/exec", r#"{"cmd": "true"}"#)
        .await;
    reply.expect_error(StatusCode::BAD_GATEWAY, "provider_error");
    let message = reply.json()["error"]["message"].to_string();
    assert!(!message.contains("/var/lib"), "{message}");
    assert!(message.contains("server log"), "{message}");
}

#[tokio::test]
async fn show_returns_the_session_and_its_last_twenty_events() {
    let api = Api::new();
    api.resolve("t1").await;
    for _ in 0..6 {
        api.tb.pause(&tid("t1")).await.unwrap();
        api.tb.resume(&tid("t1")).await.unwrap();
    }
    api.clock.advance(Duration::from_secs(42));

    let reply = api.call(Method::GET, "/v1/threads/t1").await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = reply.json();
    let session = &body["session"];
    assert_eq!(session["status"], "active");
    assert_eq!(session["idle_seconds"], 42);
    let last_seq = session["last_seq"].as_u64().unwrap();
    assert!(last_seq > 20, "the test needs more than 20 events");
    let events = body["events"].as_array().unwrap();
    assert_eq!(events.len(), 20);
    assert_eq!(events[19]["seq"].as_u64().unwrap(), last_seq);
    assert_eq!(events[0]["seq"].as_u64().unwrap(), last_seq - 19);
}

#[tokio::test]
async fn list_pages_with_a_cursor() {
    let api = Api::new();
    for t in ["a1", "b2", "c3"] {
        api.resolve(t).await;
    }
    api.clock.advance(Duration::from_secs(90));

    let first = api.call(Method::GET, "/v1/threads?limit=2").await;
    assert_eq!(first.status, StatusCode::OK);
    let first = first.json();
    let threads = first["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    assert_eq!(threads[0]["thread_id"], "a1");
    assert_eq!(threads[0]["status"], "active");
    assert_eq!(threads[0]["idle_seconds"], 90);
    let next = first["next"].as_str().expect("a next cursor");

    let second = api
        .call(
            Method::GET,
            &format!("/v1/threads?limit=2&cursor={}", urlencode(next)),
        )
        .await
        .json();
    let threads = second["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1);
    assert_eq!(threads[0]["thread_id"], "c3");
    assert!(second.get("next").is_none(), "last page: {second}");

    api.call(Method::GET, "/v1/threads?limit=0")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_query");
    api.call(Method::GET, "/v1/threads?limit=lots")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_query");
}

/// Enough percent-encoding for the cursors the stores produce (thread ids and offsets).
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn events_page_after_a_sequence_number() {
    let api = Api::new();
    api.resolve("t1").await;
    api.tb.pause(&tid("t1")).await.unwrap();

    let all = api.call(Method::GET, "/v1/threads/t1/events").await;
    assert_eq!(all.status, StatusCode::OK);
    let all = all.json();
    let seqs: Vec<u64> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4], "creating, active, pausing, paused");
    assert_eq!(all["next_after_seq"], 4);

    let page = api
        .call(Method::GET, "/v1/threads/t1/events?after_seq=1&limit=2")
        .await
        .json();
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["seq"], 2);
    assert_eq!(events[0]["from"], "creating");
    assert_eq!(events[0]["to"], "active");
    assert_eq!(events[0]["cause"], "user");
    assert_eq!(page["next_after_seq"], 3);

    api.call(Method::GET, "/v1/threads/t1/events?limit=100000")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_query");
    api.call(Method::GET, "/v1/threads/t1/events?after_seq=-1")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_query");
}

#[tokio::test]
async fn exec_runs_a_shell_line_or_an_argv() {
    let api = Api::new();
    let reply = api
        .post_json(
            "/v1/threads/t1/exec",
            json!({ "cmd": "echo hello", "cwd": "/home/user", "env": { "A": "1" },
                    "stdin": "in", "timeout_ms": 5000 })
            .to_string(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let result = reply.json();
    assert_eq!(result["exit_code"], 0);
    // The in-memory provider echoes the command line as stdout.
    assert_eq!(result["stdout"], "echo hello");
    assert_eq!(result["stderr"], "");
    assert_eq!(result["timed_out"], false);
    assert_eq!(result["truncated"], false);
    assert_eq!(result["out_of_memory"], false);
    assert!(result["duration_ms"].is_u64());

    let reply = api
        .post_json(
            "/v1/threads/t1/exec",
            json!({ "argv": ["ls", "-l"] }).to_string(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(api.provider.commands(), vec!["echo hello", "ls -l"]);
    assert_eq!(api.provider.creates(), 1, "exec creates on first use, once");
}

#[tokio::test]
async fn exec_rejects_bad_bodies_without_touching_the_sandbox() {
    let api = Api::new();
    let bad_requests = [
        (
            json!({ "cmd": "ls", "argv": ["ls"] }),
            "invalid_request",
            "not both",
        ),
        (json!({}), "invalid_request", "give cmd"),
        (json!({ "cmd": "  " }), "invalid_request", "empty"),
        (json!({ "argv": [] }), "invalid_request", "program name"),
        (
            json!({ "cmd": "ls", "timeout_ms": 0 }),
            "invalid_request",
            "timeout_ms",
        ),
        (
            json!({ "cmd": "ls", "timeout_ms": 600_001 }),
            "invalid_request",
            "timeout_ms",
        ),
        (
            json!({ "cmd": "ls", "env": { "A=B": "1" } }),
            "invalid_request",
            "A=B",
        ),
        (
            json!({ "cmd": "ls", "cwd": "/home/../etc" }),
            "invalid_path",
            "'..'",
        ),
    ];
    for (body, code, needle) in bad_requests {
        let reply = api.post_json("/v1/threads/t1/exec", body.to_string()).await;
        reply.expect_error(StatusCode::BAD_REQUEST, code);
        let message = reply.json()["error"]["message"].to_string();
        assert!(message.contains(needle), "{body}: {message}");
    }

    let malformed = api.post_json("/v1/threads/t1/exec", "{\"cmd\": ").await;
    malformed.expect_error(StatusCode::BAD_REQUEST, "invalid_json");
    assert!(malformed.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("malformed JSON"));
    api.post_json("/v1/threads/t1/exec", json!({ "cmd": 7 }).to_string())
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_json");
    api.post_json(
        "/v1/threads/t1/exec",
        json!({ "cmd": "ls", "shell": "bash" }).to_string(),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_json");

    let no_type = api
        .send(
            Request::post("/v1/threads/t1/exec")
                .body(Body::from(json!({ "cmd": "ls" }).to_string()))
                .unwrap(),
        )
        .await;
    no_type.expect_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");

    let oversized = json!({ "cmd": "true", "stdin": "x".repeat(MAX_JSON_BODY) }).to_string();
    api.post_json("/v1/threads/t1/exec", oversized)
        .await
        .expect_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");

    assert_eq!(api.provider.creates(), 0, "bad input changes nothing");
    assert!(api.tb.session(&tid("t1")).await.unwrap().is_none());
}

#[tokio::test]
async fn files_put_get_list_stat_delete() {
    let api = Api::new();
    let put = api
        .put("/v1/threads/t1/files/home/user/a.txt", "hello file")
        .await;
    assert_eq!(put.status, StatusCode::OK);
    assert_eq!(
        put.json(),
        json!({ "path": "/home/user/a.txt", "size": 10 })
    );

    let get = api
        .call(Method::GET, "/v1/threads/t1/files/home/user/a.txt")
        .await;
    assert_eq!(get.status, StatusCode::OK);
    assert_eq!(
        get.headers[header::CONTENT_TYPE],
        "application/octet-stream"
    );
    assert_eq!(&get.body[..], b"hello file");

    let list = api
        .call(Method::GET, "/v1/threads/t1/files/home/user?list=true")
        .await;
    assert_eq!(list.status, StatusCode::OK);
    let list = list.json();
    assert_eq!(list["path"], "/home/user");
    assert_eq!(list["entries"][0]["name"], "a.txt");
    assert_eq!(list["entries"][0]["kind"], "file");

    let stat = api
        .call(
            Method::GET,
            "/v1/threads/t1/files/home/user/a.txt?stat=true",
        )
        .await;
    assert_eq!(stat.status, StatusCode::OK);
    assert_eq!(stat.json()["size"], 10);

    api.call(
        Method::GET,
        "/v1/threads/t1/files/home/user?list=true&stat=true",
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "invalid_query");

    api.put("/v1/threads/t1/files/home/user/dir/b.txt", "in a folder")
        .await;
    let deleted = api
        .call(
            Method::DELETE,
            "/v1/threads/t1/files/home/user/dir?recursive=true",
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let deleted = api
        .call(Method::DELETE, "/v1/threads/t1/files/home/user/a.txt")
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let list = api
        .call(Method::GET, "/v1/threads/t1/files/home/user?list=true")
        .await
        .json();
    assert_eq!(list["entries"], json!([]));
}

#[tokio::test]
async fn file_bodies_may_pass_the_json_limit_but_not_the_file_limit() {
    let api = Api::new();
    let two_mib = vec![7u8; 2 * MAX_JSON_BODY];
    let put = api
        .put("/v1/threads/t1/files/home/user/big.bin", two_mib.clone())
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.json());
    let get = api
        .call(Method::GET, "/v1/threads/t1/files/home/user/big.bin")
        .await;
    assert_eq!(get.body.len(), two_mib.len());

    api.put(
        "/v1/threads/t1/files/home/user/huge.bin",
        vec![0u8; MAX_FILE_BODY + 1],
    )
    .await
    .expect_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}

#[tokio::test]
async fn bad_paths_are_refused_before_anything_runs() {
    let api = Api::new();
    for uri in [
        "/v1/threads/t1/files/home/../etc/passwd",
        "/v1/threads/t1/files/home/%2e%2e/etc/passwd",
        "/v1/threads/t1/files/home/user/..",
        "/v1/threads/t1/files/home/a%00b",
    ] {
        api.call(Method::GET, uri)
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid_path");
        api.put(uri, "x")
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid_path");
        api.call(Method::DELETE, uri)
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid_path");
    }
    assert_eq!(api.provider.creates(), 0, "nothing was resolved");
}

#[tokio::test]
async fn bad_thread_ids_are_400_naming_the_problem() {
    let api = Api::new();
    let long = "x".repeat(129);
    for (uri, needle) in [
        (
            "/v1/threads/bad%20id/resolve".to_owned(),
            "' ' at position 3",
        ),
        (format!("/v1/threads/{long}/resolve"), "129 characters"),
        ("/v1/threads/slack:t1:C2/resolve".to_owned(), "team id"),
        // A warm pool member's tag: no caller may take one over by its name.
        (
            "/v1/threads/pool:0123456789abcdef0123456789abcdef/resolve".to_owned(),
            "reserved for warm pool members",
        ),
    ] {
        let reply = api.call(Method::POST, &uri).await;
        reply.expect_error(StatusCode::BAD_REQUEST, "invalid_thread_id");
        let message = reply.json()["error"]["message"].to_string();
        assert!(message.contains(needle), "{uri}: {message}");
    }
    api.call(Method::GET, "/v1/threads/bad%20id/files/a")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_thread_id");
    assert_eq!(api.provider.creates(), 0);
}

#[tokio::test]
async fn unknown_threads_are_404() {
    let api = Api::new();
    for (method, uri) in [
        (Method::GET, "/v1/threads/nobody"),
        (Method::GET, "/v1/threads/nobody/events"),
        (Method::POST, "/v1/threads/nobody/pause"),
        (Method::POST, "/v1/threads/nobody/resume"),
    ] {
        api.call(method, uri)
            .await
            .expect_error(StatusCode::NOT_FOUND, "unknown_thread");
    }
    assert!(api.tb.session(&tid("nobody")).await.unwrap().is_none());
}

#[tokio::test]
async fn state_conflicts_are_409() {
    let api = Api::new();
    api.resolve("gone").await;
    api.tb.destroy(&tid("gone"), Cause::User).await.unwrap();
    let reply = api.call(Method::POST, "/v1/threads/gone/pause").await;
    reply.expect_error(StatusCode::CONFLICT, "illegal_transition");
    assert!(reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("destroyed"));

    api.tb
        .acquire_hold(
            &tid("held"),
            HoldRequest::new("agent", Duration::from_secs(60)),
        )
        .await
        .unwrap();
    api.call(Method::POST, "/v1/threads/held/pause")
        .await
        .expect_error(StatusCode::CONFLICT, "held");
}

#[tokio::test]
async fn an_expired_thread_is_409_until_reset() {
    let api = Api::with(
        ApiAuth::disabled(),
        Config {
            gone_policy_api: GonePolicy::Expire,
            ..config()
        },
    );
    let first = api.resolve("t1").await;
    api.tb.pause(&tid("t1")).await.unwrap();
    api.provider.forget(first["sandbox_id"].as_str().unwrap());

    let mut reply = api.call(Method::POST, "/v1/threads/t1/resume").await;
    if reply.status.is_success() {
        // Depending on timing the resume itself may fold the loss in; the next call then refuses.
        reply = api.call(Method::POST, "/v1/threads/t1/resolve").await;
    }
    reply.expect_error(StatusCode::CONFLICT, "thread_expired");
    api.call(Method::POST, "/v1/threads/t1/resolve")
        .await
        .expect_error(StatusCode::CONFLICT, "thread_expired");

    let reset = api.call(Method::POST, "/v1/threads/t1/reset").await;
    assert_eq!(reset.status, StatusCode::OK, "{}", reset.json());
}

#[tokio::test]
async fn busy_is_409_and_unavailable_503_both_with_retry_after() {
    let api = Api::with(
        ApiAuth::disabled(),
        Config {
            settle_wait: Duration::from_millis(200),
            ..config()
        },
    );
    // A creator that never finishes holds the creation lease; a second caller gives up in time.
    api.provider.hang_after_create(true);
    let router = api.router.clone();
    let stuck = tokio::spawn(async move {
        router
            .oneshot(
                Request::post("/v1/threads/t1/resolve")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
    });
    while api.provider.creates() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reply = api.call(Method::POST, "/v1/threads/t1/resolve").await;
    reply.expect_error(StatusCode::CONFLICT, "busy");
    assert_eq!(reply.headers[header::RETRY_AFTER], "1");
    assert_eq!(reply.json()["error"]["retry_after"], 1);
    stuck.abort();

    api.provider.hang_after_create(false);
    api.provider
        .fail_next(Op::Create, ProviderError::Unavailable("engine down".into()));
    let reply = api.call(Method::POST, "/v1/threads/t2/resolve").await;
    reply.expect_error(StatusCode::SERVICE_UNAVAILABLE, "provider_error");
    assert!(reply.headers.contains_key(header::RETRY_AFTER));
}

#[tokio::test]
async fn bearer_keys_guard_the_api() {
    let api = Api::with(ApiAuth::new(["key-one", "key-two"]), config());
    let missing = api.call(Method::POST, "/v1/threads/t1/resolve").await;
    missing.expect_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(
        missing.headers[header::WWW_AUTHENTICATE],
        "Bearer realm=\"threadbox\""
    );

    let with_key = |key: &str| {
        Request::post("/v1/threads/t1/resolve")
            .header(header::AUTHORIZATION, format!("Bearer {key}"))
            .body(Body::empty())
            .unwrap()
    };
    api.send(with_key("key-three"))
        .await
        .expect_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(api.provider.creates(), 0, "refused calls change nothing");

    assert_eq!(
        api.send(with_key("key-two")).await.status,
        StatusCode::CREATED
    );
    assert_eq!(api.send(with_key("key-one")).await.status, StatusCode::OK);

    // Authentication runs before the body is read: a bad key never costs a big upload.
    api.put("/v1/threads/t1/files/home/user/a", vec![0u8; 1024])
        .await
        .expect_error(StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn without_keys_cross_site_browsers_are_refused() {
    let api = Api::new();
    let from = |origin: &str| {
        Request::post("/v1/threads/t1/reset")
            .header(header::ORIGIN, origin)
            .body(Body::empty())
            .unwrap()
    };
    api.send(from("https://evil.example"))
        .await
        .expect_error(StatusCode::FORBIDDEN, "forbidden_origin");
    assert!(api.tb.session(&tid("t1")).await.unwrap().is_none());
    api.resolve("t1").await;
    assert_eq!(
        api.send(from("http://127.0.0.1:8787")).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_error_shape() {
    let api = Api::new();
    api.call(Method::GET, "/nope")
        .await
        .expect_error(StatusCode::NOT_FOUND, "not_found");
    api.call(Method::GET, "/v1/threads/t1/resolve")
        .await
        .expect_error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
}

/// `Accept: text/event-stream` turns an exec into server-sent events: the output, then `exit`;
/// a command that cannot run ends with an `error` event carrying what a plain call would have
/// answered (status, code, Retry-After's seconds).
#[tokio::test]
async fn exec_streams_its_output_as_server_sent_events() {
    use threadbox_core::ports::Limit;
    let api = Api::new();
    let streamed = |body: &'static str| {
        Request::post("/v1/threads/t1/exec")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "text/event-stream")
            .body(Body::from(body))
            .unwrap()
    };
    let reply = api.send(streamed(r#"{"cmd": "echo hi"}"#)).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.headers[header::CONTENT_TYPE].to_str().unwrap(),
        "text/event-stream"
    );
    let text = String::from_utf8(reply.body.to_vec()).unwrap();
    let events: Vec<(&str, Value)> = text
        .split("\n\n")
        .filter(|block| block.starts_with("event:"))
        .map(|block| {
            let mut lines = block.lines();
            let name = lines.next().unwrap().trim_start_matches("event:").trim();
            let data = lines.next().unwrap().trim_start_matches("data:").trim();
            (name, serde_json::from_str(data).unwrap())
        })
        .collect();
    assert_eq!(events.len(), 2, "{text}");
    assert_eq!(events[0], ("stdout", json!({"text": "echo hi"})));
    assert_eq!(events[1].0, "exit");
    assert_eq!(events[1].1["exit_code"], 0);
    assert_eq!(events[1].1["timed_out"], false);

    api.provider.fail_next(
        Op::Exec,
        ProviderError::LimitReached {
            limit: Limit::CommandsInSandbox,
            message: "over the limit".into(),
            retry_after: Duration::from_secs(2),
        },
    );
    let reply = api.send(streamed(r#"{"cmd": "true"}"#)).await;
    let text = String::from_utf8(reply.body.to_vec()).unwrap();
    let error = text
        .split("\n\n")
        .find(|block| block.starts_with("event: error") || block.starts_with("event:error"))
        .unwrap_or_else(|| panic!("no error event in {text}"));
    let data: Value = serde_json::from_str(
        error
            .lines()
            .nth(1)
            .unwrap()
            .trim_start_matches("data:")
            .trim(),
    )
    .unwrap();
    assert_eq!(data["code"], "too_many_commands_in_thread");
    assert_eq!(data["status"], 429);
    assert_eq!(data["retry_after"], 2);

    // A bad body is still a plain 400 before anything streams.
    api.send(streamed(r#"{"cmd": ""}"#))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_request");
}

/// The rest of the file API over HTTP: a directory made with `PUT ?dir=true`, paths found with
/// `GET ?glob=` (relative to the path) and lines with `GET ?grep=`; options that do not go
/// together are a 400 naming them.
#[tokio::test]
async fn directories_globs_and_greps_over_http() {
    let api = Api::new();
    api.resolve("t1").await;
    let made = api
        .put("/v1/threads/t1/files/home/user/src?dir=true", Body::empty())
        .await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.json());
    assert_eq!(made.json()["kind"], "dir");
    let put = api
        .put(
            "/v1/threads/t1/files/home/user/src/main.rs",
            "fn main() {}\n",
        )
        .await;
    assert_eq!(put.status, StatusCode::OK);

    let globbed = api
        .call(Method::GET, "/v1/threads/t1/files/home/user?glob=src/*.rs")
        .await;
    assert_eq!(globbed.status, StatusCode::OK, "{}", globbed.json());
    assert_eq!(globbed.json()["paths"], json!(["/home/user/src/main.rs"]));
    let grepped = api
        .call(
            Method::GET,
            "/v1/threads/t1/files/home/user/src?grep=fn%20main",
        )
        .await;
    assert_eq!(grepped.status, StatusCode::OK, "{}", grepped.json());
    let matches = &grepped.json()["matches"];
    assert_eq!(matches[0]["path"], "/home/user/src/main.rs", "{matches}");
    assert_eq!(matches[0]["line_number"], 1);

    for uri in [
        "/v1/threads/t1/files/home/user?glob=*.rs&list=true",
        "/v1/threads/t1/files/home/user?glob=/etc/*",
        "/v1/threads/t1/files/home/user?dir=true",
    ] {
        api.call(Method::GET, uri)
            .await
            .expect_error(StatusCode::BAD_REQUEST, "invalid_query");
    }
    api.put("/v1/threads/t1/files/home/user/x?dir=true", "contents")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_request");
}

#[tokio::test]
async fn a_thread_shows_its_usage_and_a_listing_carries_it_on_request() {
    let api = Api::new();
    api.resolve("t1").await;
    api.clock.advance(Duration::from_secs(600));
    let shown = api.call(Method::GET, "/v1/threads/t1").await.json();
    let usage = &shown["usage"];
    assert_eq!(usage["running_ms"], 600_000, "{usage}");
    assert_eq!(usage["paused_ms"], 0);
    assert_eq!(usage["by_state"]["active"], 600_000);
    assert_eq!(usage["complete"], true);
    assert_eq!(usage["generations"][0]["generation"], 1);
    assert!(
        usage.get("cost").is_none(),
        "no size configured: times only"
    );

    let plain = api.call(Method::GET, "/v1/threads").await.json();
    assert!(plain["threads"][0].get("usage").is_none(), "{plain}");
    let since = api.tb.clock.now().0 - 60_000;
    let listed = api
        .call(
            Method::GET,
            &format!("/v1/threads?usage=true&usage_since={since}"),
        )
        .await
        .json();
    assert_eq!(
        listed["threads"][0]["usage"]["running_ms"], 60_000,
        "{listed}"
    );
    api.call(Method::GET, "/v1/threads?usage_since=0")
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_query");
}

pub(super) async fn put_json(api: &Api, uri: &str, body: Value) -> Reply {
    api.send(
        Request::put(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn resolve_takes_a_network_profile_for_a_new_thread_only() {
    let api = Api::new();
    let body = json!({ "network": { "networked": { "allow": ["pkg.test", "203.0.113.0/24"] } } });
    let created = api
        .post_json("/v1/threads/t1/resolve", body.to_string())
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json());
    let sandbox = created.json()["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(
        serde_json::to_value(api.provider.network_of(&sandbox).unwrap()).unwrap(),
        body["network"],
        "the sandbox was made with the thread's profile"
    );

    // The same profile again, or none: the thread as it is.
    let again = api
        .post_json("/v1/threads/t1/resolve", body.to_string())
        .await;
    assert_eq!(again.status, StatusCode::OK);
    // A JSON `null` or `{}` is no body at all (clients that always send JSON send these).
    for nothing in ["null", "{}"] {
        let again = api
            .post_json("/v1/threads/t1/resolve", nothing.to_owned())
            .await;
        assert_eq!(again.status, StatusCode::OK, "{nothing}: {}", again.json());
    }
    assert_eq!(api.resolve("t1").await["sandbox_id"], sandbox);

    // Another profile: 409 naming the route that changes it.
    let other = api
        .post_json(
            "/v1/threads/t1/resolve",
            json!({ "network": "networked" }).to_string(),
        )
        .await;
    other.expect_error(StatusCode::CONFLICT, "network_conflict");
    assert!(
        other.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("PUT /v1/threads/t1/network"),
        "{}",
        other.json()
    );

    // GET shows it with the session.
    let shown = api.call(Method::GET, "/v1/threads/t1").await.json();
    assert_eq!(shown["session"]["network"], body["network"]);
    let plain = api.resolve("t2").await;
    let shown = api.call(Method::GET, "/v1/threads/t2").await.json();
    assert_eq!(shown["session"]["network"], "restricted", "{plain}");
    assert_eq!(api.provider.creates(), 2);
}

#[tokio::test]
async fn a_thread_shows_what_its_network_refused_where_the_provider_counts_it() {
    let api = Api::new();
    let body = json!({ "network": { "networked": { "allow": ["pkg.test"] } } });
    let created = api
        .post_json("/v1/threads/t1/resolve", body.to_string())
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json());
    let shown = api.call(Method::GET, "/v1/threads/t1").await.json();
    let refusals = &shown["sandbox"]["network_refusals"];
    assert_eq!(refusals["lookups"], 0, "{shown}");
    assert_eq!(refusals["recent"], json!([]));

    api.provider.refuse_in_next_exec("other.test", 6);
    let ran = api
        .post_json(
            "/v1/threads/t1/exec",
            r#"{"cmd": "curl https://other.test/"}"#,
        )
        .await;
    assert_eq!(ran.json()["exit_code"], 6, "{}", ran.json());
    let shown = api.call(Method::GET, "/v1/threads/t1").await.json();
    let refusals = &shown["sandbox"]["network_refusals"];
    assert_eq!(refusals["lookups"], 1, "{shown}");
    assert_eq!(refusals["connections"], 0);
    let recent = refusals["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 1, "{refusals}");
    assert_eq!(recent[0]["destination"], "other.test");
    assert_eq!(recent[0]["by"], "dns");
    assert_eq!(recent[0]["reason"], "not_allowed");
    assert_eq!(recent[0]["times"], 1);
    assert!(recent[0]["at"].as_i64().is_some(), "{refusals}");

    // A restricted thread's sandbox has nothing to count with: no field, not a zero.
    api.resolve("t2").await;
    let shown = api.call(Method::GET, "/v1/threads/t2").await.json();
    assert!(shown["sandbox"].is_object(), "{shown}");
    assert!(
        shown["sandbox"].get("network_refusals").is_none(),
        "{shown}"
    );
}

#[tokio::test]
async fn bad_network_profiles_are_400s_naming_the_entry_and_create_nothing() {
    let api = Api::new();
    let many: Vec<String> = (0..10_000).map(|i| format!("h{i}.test")).collect();
    for (body, code, names) in [
        (
            json!({ "network": { "networked": { "allow": ["ok.test", "203.0.113.0/33"] } } }),
            "invalid_network",
            "203.0.113.0/33",
        ),
        (
            json!({ "network": { "networked": { "allow": ["a.*.test"] } } }),
            "invalid_network",
            "a.*.test",
        ),
        (
            json!({ "network": { "networked": { "allow": many } } }),
            "invalid_network",
            "10000 entries",
        ),
        (json!({ "network": "open" }), "invalid_network", "open"),
        (json!({ "network": 7 }), "invalid_network", "network"),
        (json!({ "netwrk": "restricted" }), "invalid_json", "netwrk"),
    ] {
        for reply in [
            api.post_json("/v1/threads/t1/resolve", body.to_string())
                .await,
            put_json(&api, "/v1/threads/t1/network", body.clone()).await,
        ] {
            reply.expect_error(StatusCode::BAD_REQUEST, code);
            let message = reply.json()["error"]["message"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(message.contains(names), "{body}: {message}");
        }
    }
    let malformed = api.post_json("/v1/threads/t1/resolve", "{").await;
    malformed.expect_error(StatusCode::BAD_REQUEST, "invalid_json");
    let text = api
        .send(
            Request::post("/v1/threads/t1/resolve")
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from(r#"{"network":"restricted"}"#))
                .unwrap(),
        )
        .await;
    text.expect_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    let empty = put_json(&api, "/v1/threads/t1/network", json!({})).await;
    empty.expect_error(StatusCode::BAD_REQUEST, "invalid_json");
    assert_eq!(api.provider.creates(), 0);
    assert!(api.tb.store.load(&tid("t1")).await.unwrap().is_none());
}

#[tokio::test]
async fn put_network_records_the_change_with_a_user_event() {
    let api = Api::new();
    let unknown = put_json(
        &api,
        "/v1/threads/t1/network",
        json!({ "network": "networked" }),
    )
    .await;
    unknown.expect_error(StatusCode::NOT_FOUND, "unknown_thread");

    let sandbox = api.resolve("t1").await["sandbox_id"].clone();
    let reply = put_json(
        &api,
        "/v1/threads/t1/network",
        json!({ "network": "networked" }),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let body = reply.json();
    assert_eq!(body["applied"], "next_sandbox", "{body}");
    assert_eq!(body["session"]["network"], "networked");
    assert_eq!(
        body["session"]["sandbox_id"], sandbox,
        "the sandbox is kept"
    );

    let events = api.call(Method::GET, "/v1/threads/t1/events").await.json();
    let last = events["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["cause"], "user");
    assert_eq!(last["from"], "active");
    assert_eq!(last["to"], "active");
    assert_eq!(last["detail"], "network: networked (every public address)");

    let same = put_json(
        &api,
        "/v1/threads/t1/network",
        json!({ "network": "networked" }),
    )
    .await;
    assert_eq!(same.json()["applied"], "unchanged");

    api.provider.support_live_network(true);
    let live = put_json(
        &api,
        "/v1/threads/t1/network",
        json!({ "network": "restricted" }),
    )
    .await;
    assert_eq!(live.json()["applied"], "live");
    assert_eq!(
        api.provider.network_of(sandbox.as_str().unwrap()),
        Some(threadbox_core::ports::NetworkProfile::Restricted)
    );
}
