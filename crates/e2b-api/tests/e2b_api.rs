//! The E2B API driven in-process (`tower::ServiceExt::oneshot`) over a real SQLite store and
//! queue, the in-memory provider and a manual clock: the control plane's calls and their E2B
//! shapes and errors, threads named by a create, the key and envd token checks, `/files` and the
//! filesystem service. Processes need a provider that runs them: `cli/tests/e2b_sdk.rs` drives
//! them with the real SDKs on runc.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use threadbox_api::http::{key_scope, ApiAuth};
use threadbox_api::live::{TokenKey, TokenSecret};
use threadbox_core::domain::{Status, ThreadId};
use threadbox_core::usecases::{Config, Threadbox};
use threadbox_e2b_api::ids::{envd_token, sandbox_id};
use threadbox_e2b_api::{routes, E2bApi};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::{InMemoryProvider, ManualClock};

const KEY: &str = "e2b-test-key-0123456789abcdef0123456789";

struct Api {
    router: Router,
    tb: Threadbox,
    provider: Arc<InMemoryProvider>,
    key: TokenKey,
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

    /// E2B's error body: `{"code": <the status>, "message": ...}`.
    #[track_caller]
    fn expect_e2b_error(&self, status: StatusCode) -> String {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        let body = self.json();
        assert_eq!(body["code"], status.as_u16(), "{body}");
        body["message"].as_str().expect("a message").to_owned()
    }
}

impl Api {
    fn new() -> Self {
        Self::with(ApiAuth::new([KEY]))
    }

    fn with(auth: ApiAuth) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
        let queue =
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
        let provider = InMemoryProvider::new();
        let config = Config {
            settle_poll: Duration::from_millis(5),
            settle_wait: Duration::from_secs(20),
            ..Config::default()
        };
        let tb = Threadbox::new(
            store,
            provider.clone(),
            queue,
            Arc::new(ManualClock::default()),
            config,
        );
        let key =
            TokenKey::new(TokenSecret::new("a-test-token-secret-of-32-bytes-or-more").unwrap());
        let api = E2bApi::new(tb.clone(), auth, key.clone());
        Self {
            router: routes(api),
            tb,
            provider,
            key,
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

    /// A control-plane call with the key.
    async fn control(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        let request = Request::builder()
            .method(method)
            .uri(format!("/e2b{path}"))
            .header("x-api-key", KEY)
            .header("content-type", "application/json");
        let body = body.map_or(Body::empty(), |b| Body::from(b.to_string()));
        self.send(request.body(body).unwrap()).await
    }

    async fn create(&self, idempotency_key: Option<&str>, metadata: Value) -> Reply {
        let mut request = Request::post("/e2b/v2/sandboxes")
            .header("x-api-key", KEY)
            .header("content-type", "application/json");
        if let Some(k) = idempotency_key {
            request = request.header("idempotency-key", k);
        }
        let body = json!({"templateID": "base", "metadata": metadata, "envVars": {}});
        self.send(request.body(Body::from(body.to_string())).unwrap())
            .await
    }

    /// An envd unary call to `sandbox` with `token`.
    async fn envd(&self, sandbox: &str, token: &str, method: &str, body: Value) -> Reply {
        let request = Request::post(format!("/e2b/{method}"))
            .header("e2b-sandbox-id", sandbox)
            .header("e2b-sandbox-port", "49983")
            .header("x-access-token", token)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        self.send(request).await
    }

    /// A `filesystem.Filesystem` call to `sandbox` with `token`.
    async fn fs(&self, (sandbox, token): (&str, &str), method: &str, body: Value) -> Reply {
        let method = format!("filesystem.Filesystem/{method}");
        self.envd(sandbox, token, &method, body).await
    }

    /// A `/files` call to `sandbox` with `token`.
    async fn files(
        &self,
        method: Method,
        query: &str,
        (sandbox, token): (&str, &str),
        content_type: &str,
        body: impl Into<Body>,
    ) -> Reply {
        let request = Request::builder()
            .method(method)
            .uri(format!("/e2b/files?{query}"))
            .header("e2b-sandbox-id", sandbox)
            .header("x-access-token", token)
            .header("content-type", content_type)
            .body(body.into())
            .unwrap();
        self.send(request).await
    }

    async fn status(&self, thread: &str) -> Status {
        self.tb
            .load(&ThreadId::parse(thread).unwrap())
            .await
            .unwrap()
            .status
    }
}

#[tokio::test]
async fn a_create_names_its_thread_and_the_same_name_gives_the_same_sandbox() {
    let api = Api::new();
    let first = api
        .create(Some("agent-run-1"), json!({"owner": "ana"}))
        .await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.json());
    let sandbox = first.json();
    let id = sandbox["sandboxID"].as_str().unwrap().to_owned();
    assert_eq!(id, sandbox_id(&ThreadId::parse("agent-run-1").unwrap()));
    assert_eq!(sandbox["templateID"], "base");
    assert!(sandbox["envdAccessToken"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    assert!(sandbox["envdVersion"].as_str().is_some());

    let again = api.create(Some("agent-run-1"), json!({})).await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(again.json()["sandboxID"], id.as_str());
    assert_eq!(api.provider.creates(), 1, "one sandbox for the thread");

    let by_metadata = api
        .create(None, json!({"threadbox_thread": "agent-run-1"}))
        .await;
    assert_eq!(by_metadata.json()["sandboxID"], id.as_str());
    let fresh = api.create(None, json!({})).await;
    assert_ne!(
        fresh.json()["sandboxID"],
        id.as_str(),
        "no name: a thread of its own"
    );
    assert_eq!(api.provider.creates(), 2);

    let info = api
        .control(Method::GET, &format!("/sandboxes/{id}"), None)
        .await;
    assert_eq!(info.status, StatusCode::OK);
    let info = info.json();
    assert_eq!(info["state"], "running");
    assert_eq!(
        info["metadata"],
        json!({"owner": "ana"}),
        "the first create's metadata"
    );
    assert_eq!(info["lifecycle"]["onTimeout"], "pause");
}

#[tokio::test]
async fn concurrent_creates_of_one_new_thread_make_one_sandbox() {
    let api = Arc::new(Api::new());
    let creates = (0..8).map(|_| {
        let api = api.clone();
        tokio::spawn(async move { api.create(Some("busy-thread"), json!({})).await })
    });
    let mut ids = Vec::new();
    for create in creates {
        let reply = create.await.unwrap();
        assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.json());
        ids.push(reply.json()["sandboxID"].as_str().unwrap().to_owned());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1);
    assert_eq!(api.provider.creates(), 1);
}

#[tokio::test]
async fn pause_connect_kill_answer_as_e2b_does() {
    let api = Api::new();
    let id = api.create(Some("t-life"), json!({})).await.json()["sandboxID"]
        .as_str()
        .unwrap()
        .to_owned();
    let pause = api
        .control(Method::POST, &format!("/sandboxes/{id}/pause"), None)
        .await;
    assert_eq!(pause.status, StatusCode::NO_CONTENT);
    assert_eq!(api.status("t-life").await, Status::Paused);
    let again = api
        .control(
            Method::POST,
            &format!("/sandboxes/{id}/pause"),
            Some(json!({})),
        )
        .await;
    assert!(again
        .expect_e2b_error(StatusCode::CONFLICT)
        .contains("already paused"));
    let timeout = api
        .control(
            Method::POST,
            &format!("/sandboxes/{id}/timeout"),
            Some(json!({"timeout": 60})),
        )
        .await;
    timeout.expect_e2b_error(StatusCode::NOT_FOUND);
    let info = api
        .control(Method::GET, &format!("/sandboxes/{id}"), None)
        .await
        .json();
    assert_eq!(info["state"], "paused");

    let resumed = api
        .control(
            Method::POST,
            &format!("/v2/sandboxes/{id}/connect"),
            Some(json!({})),
        )
        .await;
    assert_eq!(resumed.status, StatusCode::CREATED, "resumed by this call");
    assert_eq!(
        resumed.json()["sandboxID"],
        id.as_str(),
        "the same id across pause and resume"
    );
    assert_eq!(api.status("t-life").await, Status::Active);
    let attached = api
        .control(Method::POST, &format!("/v2/sandboxes/{id}/connect"), None)
        .await;
    assert_eq!(attached.status, StatusCode::OK, "already running");
    let timeout = api
        .control(
            Method::POST,
            &format!("/sandboxes/{id}/timeout"),
            Some(json!({"timeout": 60})),
        )
        .await;
    assert_eq!(timeout.status, StatusCode::NO_CONTENT);
    api.control(
        Method::POST,
        &format!("/sandboxes/{id}/timeout"),
        Some(json!({})),
    )
    .await
    .expect_e2b_error(StatusCode::BAD_REQUEST);

    let kill = api
        .control(Method::DELETE, &format!("/sandboxes/{id}"), None)
        .await;
    assert_eq!(kill.status, StatusCode::NO_CONTENT);
    assert_eq!(api.status("t-life").await, Status::Destroyed);
    let message = api
        .control(Method::DELETE, &format!("/sandboxes/{id}"), None)
        .await
        .expect_e2b_error(StatusCode::NOT_FOUND);
    assert!(message.contains("doesn't exist"), "{message}");
    api.control(Method::GET, &format!("/sandboxes/{id}"), None)
        .await
        .expect_e2b_error(StatusCode::NOT_FOUND);
    api.control(Method::POST, &format!("/v2/sandboxes/{id}/connect"), None)
        .await
        .expect_e2b_error(StatusCode::NOT_FOUND);
    api.control(Method::GET, "/sandboxes/NOT-AN-ID", None)
        .await
        .expect_e2b_error(StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn list_filters_by_state_and_metadata_and_pages() {
    let api = Api::new();
    for (name, team) in [("l-a", "red"), ("l-b", "red"), ("l-c", "blue")] {
        api.create(Some(name), json!({"team": team, "path": "a/b&c"}))
            .await;
    }
    let b = sandbox_id(&ThreadId::parse("l-b").unwrap());
    api.control(Method::POST, &format!("/sandboxes/{b}/pause"), None)
        .await;

    let list = |query: &'static str| api.control(Method::GET, query, None);
    let all = list("/v2/sandboxes").await;
    assert_eq!(all.status, StatusCode::OK);
    assert_eq!(all.json().as_array().unwrap().len(), 3);
    let running = list("/v2/sandboxes?state=running").await.json();
    assert_eq!(running.as_array().unwrap().len(), 2);
    let paused = list("/v2/sandboxes?state=paused").await.json();
    assert_eq!(paused[0]["sandboxID"], b.as_str());
    assert_eq!(paused[0]["state"], "paused");
    // The SDKs' encoding: each key and value URL-encoded, the pairs form-encoded, and the
    // whole encoded once more as the query value.
    let red = list("/v2/sandboxes?metadata=team%3Dred").await.json();
    assert_eq!(red.as_array().unwrap().len(), 2);
    let both = list("/v2/sandboxes?metadata=team%3Dred%26path%3Da%25252Fb%252526c&state=running")
        .await
        .json();
    assert_eq!(both.as_array().unwrap().len(), 1);
    let v1 = list("/sandboxes").await.json();
    assert_eq!(
        v1.as_array().unwrap().len(),
        2,
        "v1 lists running sandboxes"
    );

    let page = list("/v2/sandboxes?limit=2").await;
    assert_eq!(page.json().as_array().unwrap().len(), 2);
    let token = page.headers["x-next-token"].to_str().unwrap().to_owned();
    let rest = api
        .control(
            Method::GET,
            &format!("/v2/sandboxes?limit=2&nextToken={token}"),
            None,
        )
        .await;
    assert_eq!(rest.json().as_array().unwrap().len(), 1);
    assert!(rest.headers.get("x-next-token").is_none());
    list("/v2/sandboxes?state=gone")
        .await
        .expect_e2b_error(StatusCode::BAD_REQUEST);
    list("/v2/sandboxes?limit=500")
        .await
        .expect_e2b_error(StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn bad_keys_bodies_and_features_get_e2b_errors() {
    let api = Api::new();
    for key in [None, Some("wrong-key")] {
        let mut request =
            Request::post("/e2b/v2/sandboxes").header("content-type", "application/json");
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        let reply = api
            .send(
                request
                    .body(Body::from(r#"{"templateID":"base"}"#))
                    .unwrap(),
            )
            .await;
        reply.expect_e2b_error(StatusCode::UNAUTHORIZED);
    }
    assert_eq!(api.provider.creates(), 0);
    let reply = |body: &str| {
        let request = Request::post("/e2b/v2/sandboxes")
            .header("x-api-key", KEY)
            .body(Body::from(body.to_owned()))
            .unwrap();
        api.send(request)
    };
    let long_env = format!(
        r#"{{"templateID":"base","envVars":{{"A":"{}"}}}}"#,
        "x".repeat(200 << 10)
    );
    let huge = format!(
        r#"{{"templateID":"base","metadata":{{"k":"{}"}}}}"#,
        "x".repeat(2 << 20)
    );
    for (body, status) in [
        ("{", StatusCode::BAD_REQUEST),
        (r#"{"metadata":{}}"#, StatusCode::BAD_REQUEST),
        (
            r#"{"templateID":"base","timeout":0}"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            r#"{"templateID":"base","envVars":{"A=B":"1"}}"#,
            StatusCode::BAD_REQUEST,
        ),
        (&long_env, StatusCode::BAD_REQUEST),
        (
            r#"{"templateID":"base","metadata":{"threadbox_thread":"a b"}}"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            r#"{"templateID":"base","network":{"denyOut":[]}}"#,
            StatusCode::NOT_IMPLEMENTED,
        ),
        (&huge, StatusCode::PAYLOAD_TOO_LARGE),
    ] {
        reply(body).await.expect_e2b_error(status);
    }
    let m = reply(r#"{"templateID":"my-template"}"#)
        .await
        .expect_e2b_error(StatusCode::BAD_REQUEST);
    assert!(m.contains("my-template"), "{m}");
    assert_eq!(
        api.provider.creates(),
        0,
        "nothing made by a refused create"
    );

    let m = api
        .control(Method::POST, "/v3/templates", Some(json!({})))
        .await
        .expect_e2b_error(StatusCode::NOT_IMPLEMENTED);
    assert!(m.contains("templates"), "{m}");
    api.control(Method::GET, "/nowhere", None)
        .await
        .expect_e2b_error(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn envd_checks_the_sandbox_and_its_token_then_serves_files() {
    let api = Api::new();
    let created = api.create(Some("files-thread"), json!({})).await.json();
    let id = created["sandboxID"].as_str().unwrap().to_owned();
    let token = created["envdAccessToken"].as_str().unwrap().to_owned();

    // The proxy's 502 for what is not there; envd's 401 for a wrong token.
    let unknown = sandbox_id(&ThreadId::parse("never-made").unwrap());
    let reply = api
        .envd(
            &unknown,
            &token,
            "filesystem.Filesystem/Stat",
            json!({"path": "/"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(reply.json()["message"], "The sandbox was not found");
    let other = envd_token(&api.key, &unknown, Some(&key_scope(KEY)));
    for bad in [other.as_str(), "", "x.y"] {
        let reply = api
            .envd(&id, bad, "filesystem.Filesystem/Stat", json!({"path": "/"}))
            .await;
        reply.expect_e2b_error(StatusCode::UNAUTHORIZED);
    }
    // A token minted for a key that is no longer configured is refused.
    let removed = envd_token(
        &api.key,
        &id,
        Some(&key_scope("a-key-that-was-removed-0000000000")),
    );
    api.envd(
        &id,
        &removed,
        "filesystem.Filesystem/Stat",
        json!({"path": "/"}),
    )
    .await
    .expect_e2b_error(StatusCode::UNAUTHORIZED);

    let health = Request::get("/e2b/health")
        .header("e2b-sandbox-id", &id)
        .body(Body::empty())
        .unwrap();
    assert_eq!(api.send(health).await.status, StatusCode::NO_CONTENT);

    let at = (id.as_str(), token.as_str());
    let written = api
        .files(
            Method::POST,
            "path=notes/a.txt",
            at,
            "application/octet-stream",
            "hello",
        )
        .await;
    assert_eq!(
        written.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&written.body)
    );
    assert_eq!(written.json()[0]["path"], "/home/user/notes/a.txt");
    let boundary = "XyZ";
    let multipart = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.txt\"\r\n\
         Content-Type: application/octet-stream\r\n\r\nsecond\r\n--{boundary}--\r\n"
    );
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let written = api
        .files(
            Method::POST,
            "path=/home/user/notes/b.txt",
            at,
            &content_type,
            multipart,
        )
        .await;
    assert_eq!(written.status, StatusCode::OK);
    let read = api.files(Method::GET, "path=notes/b.txt", at, "", "").await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(&read.body[..], b"second");
    let missing = api.files(Method::GET, "path=nope.txt", at, "", "").await;
    let m = missing.expect_e2b_error(StatusCode::NOT_FOUND);
    assert!(m.contains("does not exist"), "{m}");
    let traversal = api
        .files(Method::GET, "path=../../etc/passwd", at, "", "")
        .await;
    traversal.expect_e2b_error(StatusCode::BAD_REQUEST);
    // A part past the multipart limit: 413, and nothing written.
    let mut big = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big\"\r\n\r\n"
    )
    .into_bytes();
    big.extend(std::iter::repeat_n(b'x', 40 << 20));
    big.extend(format!("\r\n--{boundary}--\r\n").into_bytes());
    let oversized = api
        .files(Method::POST, "path=big", at, &content_type, big)
        .await;
    oversized.expect_e2b_error(StatusCode::PAYLOAD_TOO_LARGE);
    let big = api.files(Method::GET, "path=big", at, "", "").await;
    big.expect_e2b_error(StatusCode::NOT_FOUND);

    let listed = api
        .fs(at, "ListDir", json!({"path": "notes", "depth": 1}))
        .await;
    assert_eq!(
        listed.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&listed.body)
    );
    let names: Vec<String> = listed.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["a.txt", "b.txt"]);
    let stat = api
        .fs(at, "Stat", json!({"path": "notes/a.txt"}))
        .await
        .json();
    assert_eq!(stat["entry"]["type"], "FILE_TYPE_FILE");
    assert_eq!(stat["entry"]["size"], "5");
    let gone = api.fs(at, "Stat", json!({"path": "notes/zzz"})).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.json()["code"], "not_found");
    let removed = api.fs(at, "Remove", json!({"path": "notes/a.txt"})).await;
    assert_eq!(removed.status, StatusCode::OK);
    let watch = api.fs(at, "WatchDir", json!({"path": "notes"})).await;
    assert_eq!(watch.status, StatusCode::NOT_IMPLEMENTED);
    assert_eq!(watch.json()["code"], "unimplemented");
    let bad = api.fs(at, "Stat", json!({"nope": 1})).await;
    assert_eq!(bad.json()["code"], "invalid_argument");

    // Killed: the proxy's 502 again.
    api.control(Method::DELETE, &format!("/sandboxes/{id}"), None)
        .await;
    let after = api.fs(at, "Stat", json!({"path": "/"})).await;
    assert_eq!(after.status, StatusCode::BAD_GATEWAY);
}

#[tokio::test]
async fn without_keys_only_this_machines_tools_get_in() {
    let api = Api::with(ApiAuth::disabled());
    // Any key, as the SDKs insist on sending one; from a program, not a web page.
    let created = api.create(Some("local"), json!({})).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let created = created.json();
    let (id, token) = (
        created["sandboxID"].as_str().unwrap(),
        created["envdAccessToken"].as_str().unwrap(),
    );
    let stat = api
        .fs((id, token), "Stat", json!({"path": "/home/user"}))
        .await;
    assert_eq!(
        stat.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&stat.body)
    );
    // A page on another site cannot drive it (the API's loopback-only rule).
    let cross_site = Request::post("/e2b/v2/sandboxes")
        .header("x-api-key", "anything")
        .header("origin", "https://evil.example")
        .body(Body::from(r#"{"templateID":"base"}"#))
        .unwrap();
    let refused = api.send(cross_site).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.json()["code"], 403);
    // A token minted while keys were configured names a key this server does not have.
    let keyed = envd_token(&api.key, id, Some(&key_scope(KEY)));
    api.fs((id, &keyed), "Stat", json!({"path": "/"}))
        .await
        .expect_e2b_error(StatusCode::UNAUTHORIZED);
}
