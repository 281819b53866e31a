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

/// A `templateID` naming a registered image chooses the new thread's image; `base` keeps the
/// deployment's default; the answers (create, info, list, connect) name the thread's image as
/// its template, and a later create naming another is a conflict.
#[tokio::test]
async fn a_template_naming_a_registered_image_chooses_the_threads_image() {
    let api = Api::new();
    api.provider.register_image("python");
    let create = |key: &'static str, template: &'static str| {
        let api = &api;
        async move {
            let request = Request::post("/e2b/v2/sandboxes")
                .header("x-api-key", KEY)
                .header("content-type", "application/json")
                .header("idempotency-key", key)
                .body(Body::from(json!({ "templateID": template }).to_string()))
                .unwrap();
            api.send(request).await
        }
    };
    let py = create("py-run", "python").await;
    assert_eq!(py.status, StatusCode::CREATED, "{:?}", py.json());
    assert_eq!(py.json()["templateID"], "python");
    let thread = ThreadId::parse("py-run").unwrap();
    let session = api.tb.load(&thread).await.unwrap();
    assert_eq!(session.image.as_str(), "python");
    let sandbox = session.sandbox_id.unwrap();
    assert_eq!(api.provider.image_of(&sandbox).unwrap().as_str(), "python");
    let id = py.json()["sandboxID"].as_str().unwrap().to_owned();
    let info = api
        .control(Method::GET, &format!("/sandboxes/{id}"), None)
        .await;
    assert_eq!(info.json()["templateID"], "python", "{:?}", info.json());

    // `base` again: the thread as it is, still python; `host` asked for by name: a conflict.
    let again = create("py-run", "base").await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(again.json()["templateID"], "python");
    let other = create("py-run", "host").await;
    let m = other.expect_e2b_error(StatusCode::CONFLICT);
    assert!(m.contains("PUT /v1/threads/py-run/image"), "{m}");

    // `base` for a new thread: the default image, host here, answered as `base`.
    let plain = create("plain-run", "base").await;
    assert_eq!(plain.json()["templateID"], "base");
    let plain = api.tb.load(&ThreadId::parse("plain-run").unwrap()).await;
    assert!(plain.unwrap().image.is_host());
    assert_eq!(api.provider.creates(), 2);
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
    assert!(m.contains("one of host (GET /v1/images)"), "{m}");
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
    let unknown_token = envd_token(&api.key, &unknown, Some(&key_scope(KEY)));
    let reply = api
        .envd(
            &unknown,
            &unknown_token,
            "filesystem.Filesystem/Stat",
            json!({"path": "/"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(reply.json()["message"], "The sandbox was not found");
    for bad in [unknown_token.as_str(), "", "x.y"] {
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

    assert_eq!(
        health(&api, &id, Some(&token)).await,
        StatusCode::NO_CONTENT
    );

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
    // A part is streamed into the sandbox as a raw upload is, so it may be as large as the
    // provider's upload limit (100 MiB here), not what the server would hold in memory; past
    // that, 413 and nothing written.
    let part = |size: usize| {
        let mut body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big\"\r\n\r\n"
        )
        .into_bytes();
        body.extend(std::iter::repeat_n(b'x', size));
        body.extend(format!("\r\n--{boundary}--\r\n").into_bytes());
        body
    };
    let large = api
        .files(
            Method::POST,
            "path=large",
            at,
            &content_type,
            part(40 << 20),
        )
        .await;
    assert_eq!(
        large.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&large.body)
    );
    let stat = api.fs(at, "Stat", json!({"path": "large"})).await.json();
    assert_eq!(stat["entry"]["size"], (40u64 << 20).to_string());
    api.fs(at, "Remove", json!({"path": "large"})).await;
    let oversized = api
        .files(
            Method::POST,
            "path=big",
            at,
            &content_type,
            part((100 << 20) + 1),
        )
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
    // A polled watcher answers what changed since it was last asked (`WatchDir`, streamed, is
    // run by the SDK tests); a folder that is not there is not found.
    let made = api.fs(at, "CreateWatcher", json!({"path": "notes"})).await;
    assert_eq!(
        made.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let watcher = made.json()["watcherId"].as_str().unwrap().to_owned();
    api.fs(at, "MakeDir", json!({"path": "notes/new"})).await;
    api.fs(at, "Remove", json!({"path": "notes/b.txt"})).await;
    let asked = json!({ "watcherId": watcher });
    let events = api.fs(at, "GetWatcherEvents", asked.clone()).await.json();
    assert_eq!(
        events["events"],
        json!([
            {"name": "b.txt", "type": "EVENT_TYPE_REMOVE"},
            {"name": "new", "type": "EVENT_TYPE_CREATE"},
        ]),
        "{events}"
    );
    let quiet = api.fs(at, "GetWatcherEvents", asked.clone()).await.json();
    assert_eq!(quiet["events"], json!([]), "{quiet}");
    let removed = api.fs(at, "RemoveWatcher", asked.clone()).await;
    assert_eq!(removed.status, StatusCode::OK);
    let gone = api.fs(at, "GetWatcherEvents", asked).await;
    assert_eq!(gone.json()["code"], "not_found");
    let nowhere = api
        .fs(at, "CreateWatcher", json!({"path": "nowhere"}))
        .await;
    assert_eq!(nowhere.json()["code"], "not_found");
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

/// A `GET /health` to `sandbox`, with `token` when given.
async fn health(api: &Api, sandbox: &str, token: Option<&str>) -> StatusCode {
    let mut request = Request::get("/e2b/health").header("e2b-sandbox-id", sandbox);
    if let Some(token) = token {
        request = request.header("x-access-token", token);
    }
    api.send(request.body(Body::empty()).unwrap()).await.status
}

#[tokio::test]
async fn without_its_token_envd_does_not_tell_which_sandboxes_exist() {
    // Sandbox ids are thread names in hex, and thread names can be guessed
    // ("support-ticket-4711"): with no key and no token, a caller must not learn which threads
    // exist, as threadbox's own API answers 401 before it looks.
    let api = Api::new();
    let created = api
        .create(Some("support-ticket-4711"), json!({}))
        .await
        .json();
    let id = created["sandboxID"].as_str().unwrap().to_owned();
    let token = created["envdAccessToken"].as_str().unwrap().to_owned();
    let unknown = sandbox_id(&ThreadId::parse("support-ticket-4712").unwrap());
    for sandbox in [id.as_str(), unknown.as_str()] {
        assert_eq!(
            health(&api, sandbox, None).await,
            StatusCode::UNAUTHORIZED,
            "{sandbox}"
        );
        assert_eq!(
            health(&api, sandbox, Some("x.y")).await,
            StatusCode::UNAUTHORIZED,
            "{sandbox}"
        );
        for bad in ["", "x.y", token.as_str()] {
            if sandbox == id && bad == token {
                continue;
            }
            api.fs((sandbox, bad), "Stat", json!({"path": "/"}))
                .await
                .expect_e2b_error(StatusCode::UNAUTHORIZED);
        }
    }
    // With its token: there (204), or the proxy's 502 for one that is gone, as the SDKs expect.
    assert_eq!(
        health(&api, &id, Some(&token)).await,
        StatusCode::NO_CONTENT
    );
    let gone_token = envd_token(&api.key, &unknown, Some(&key_scope(KEY)));
    assert_eq!(
        health(&api, &unknown, Some(&gone_token)).await,
        StatusCode::BAD_GATEWAY
    );
    // E2B's legacy `<id>-<clientID>` form takes the sandbox's own token.
    let legacy = format!("{id}-threadbox");
    let stat = api
        .fs((&legacy, &token), "Stat", json!({"path": "/"}))
        .await;
    assert_eq!(
        stat.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&stat.body)
    );
}

#[tokio::test]
async fn a_file_named_with_control_characters_downloads() {
    // Code in the sandbox names its files as it likes; reading one back must not fail on the
    // name (a header value cannot hold a line break).
    let api = Api::new();
    let created = api.create(Some("odd-names"), json!({})).await.json();
    let at = (
        created["sandboxID"].as_str().unwrap(),
        created["envdAccessToken"].as_str().unwrap(),
    );
    for (query, name) in [
        ("path=a%0Ab%01.txt", "a\nb\u{1}.txt"),
        ("path=caf%C3%A9%22%5C.txt", "café\"\\.txt"),
    ] {
        let written = api
            .files(Method::POST, query, at, "application/octet-stream", "x")
            .await;
        assert_eq!(written.status, StatusCode::OK, "{name:?}");
        assert_eq!(written.json()[0]["name"], name);
        let read = api.files(Method::GET, query, at, "", "").await;
        assert_eq!(
            read.status,
            StatusCode::OK,
            "{name:?}: {}",
            String::from_utf8_lossy(&read.body)
        );
        assert_eq!(&read.body[..], b"x");
        let disposition = read.headers["content-disposition"].to_str().unwrap();
        assert!(disposition.starts_with("inline; filename"), "{disposition}");
    }
}

#[tokio::test]
async fn a_multipart_upload_is_held_to_the_upload_limit_in_all() {
    // Each part is held to the part limit, and the parts together to the provider's upload
    // limit (100 MiB for the in-memory provider), as one raw upload or one PUT is.
    let api = Api::new();
    let created = api.create(Some("many-parts"), json!({})).await.json();
    let at = (
        created["sandboxID"].as_str().unwrap(),
        created["envdAccessToken"].as_str().unwrap(),
    );
    let boundary = "XyZ";
    let mut body = Vec::new();
    for _ in 0..4 {
        body.extend(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
                 filename=\"part\"\r\n\r\n"
            )
            .into_bytes(),
        );
        body.extend(std::iter::repeat_n(b'x', 30 << 20));
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").into_bytes());
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let reply = api
        .files(Method::POST, "path=big", at, &content_type, body)
        .await;
    let m = reply.expect_e2b_error(StatusCode::PAYLOAD_TOO_LARGE);
    assert!(m.contains(&(100u64 << 20).to_string()), "{m}");
    // A body that declares more than the limit is refused before any part is written.
    let part = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
         filename=\"small\"\r\n\r\nsmall\r\n--{boundary}--\r\n"
    );
    let declared = Request::post("/e2b/files?path=declared")
        .header("e2b-sandbox-id", at.0)
        .header("x-access-token", at.1)
        .header("content-type", &content_type)
        .header("content-length", (101u64 << 20).to_string())
        .body(Body::from(part))
        .unwrap();
    api.send(declared)
        .await
        .expect_e2b_error(StatusCode::PAYLOAD_TOO_LARGE);
    api.files(Method::GET, "path=declared", at, "", "")
        .await
        .expect_e2b_error(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_list_reads_a_bounded_share_of_the_threads_per_call() {
    // A metadata filter that matches nothing must not make one call read every thread the
    // deployment has (threadbox's own list reads one page per call): a call reads at most
    // 1,000 threads and says where to go on with `X-Next-Token`, even on an empty page.
    use threadbox_core::domain::{Change, Millis, Session, Timers};
    let api = Api::new();
    for i in 0..1100 {
        let change = Change {
            event_id: format!("seed-{i}"),
            now: Millis(1),
            detail: None,
        };
        let thread = ThreadId::parse(&format!("s-{i:04}")).unwrap();
        let (session, event) = Session::new_creating(thread, "memory", change, &Timers::default());
        api.tb.store.insert_new(&session, &[event]).await.unwrap();
    }
    api.create(Some("zz-gold"), json!({"team": "gold"})).await;
    let first = api
        .control(Method::GET, "/v2/sandboxes?metadata=team%3Dgold", None)
        .await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.json(),
        json!([]),
        "the first 1,000 threads hold no match"
    );
    let token = first.headers["x-next-token"].to_str().unwrap().to_owned();
    let rest = api
        .control(
            Method::GET,
            &format!("/v2/sandboxes?metadata=team%3Dgold&nextToken={token}"),
            None,
        )
        .await;
    assert_eq!(
        rest.json()[0]["sandboxID"],
        sandbox_id(&ThreadId::parse("zz-gold").unwrap())
    );
    assert!(rest.headers.get("x-next-token").is_none());
    // The deprecated list has no pages: past what one call reads, it says to use v2.
    let m = api
        .control(Method::GET, "/sandboxes", None)
        .await
        .expect_e2b_error(StatusCode::BAD_REQUEST);
    assert!(m.contains("/v2/sandboxes"), "{m}");
}

#[tokio::test]
async fn malformed_envd_requests_are_refused_before_anything_runs() {
    let api = Api::new();
    let created = api.create(Some("frames"), json!({})).await.json();
    let (id, token) = (
        created["sandboxID"].as_str().unwrap(),
        created["envdAccessToken"].as_str().unwrap(),
    );
    let start = |content_type: &'static str, body: Vec<u8>| {
        let request = Request::post("/e2b/process.Process/Start")
            .header("e2b-sandbox-id", id)
            .header("x-access-token", token)
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap();
        api.send(request)
    };
    let envelope = |flags: u8, declared: u32, payload: &[u8]| {
        let mut frame = vec![flags];
        frame.extend(declared.to_be_bytes());
        frame.extend(payload);
        frame
    };
    let message = br#"{"process":{"cmd":"true"}}"#;
    let len = message.len() as u32;
    let mut two = envelope(0, len, message);
    two.extend(envelope(0, len, message));
    for (why, body, code) in [
        ("no envelope", b"{}".to_vec(), "invalid_argument"),
        ("compressed", envelope(1, len, message), "invalid_argument"),
        (
            "too short",
            envelope(0, len + 1, message),
            "invalid_argument",
        ),
        (
            "too long",
            envelope(0, len - 1, message),
            "invalid_argument",
        ),
        ("giant", envelope(0, u32::MAX, message), "invalid_argument"),
        ("two messages", two, "invalid_argument"),
        (
            "not UTF-8",
            envelope(0, 3, b"\xff\xfe\xfd"),
            "invalid_argument",
        ),
        ("no cmd", envelope(0, 2, b"{}"), "invalid_argument"),
        (
            "past the body limit",
            envelope(0, 2 << 20, &vec![b' '; 2 << 20]),
            "resource_exhausted",
        ),
    ] {
        let reply = start("application/connect+json", body).await;
        // Connect's streaming error: HTTP 200, one end-of-stream envelope naming the error.
        assert_eq!(reply.status, StatusCode::OK, "{why}");
        assert_eq!(reply.body[0], 2, "{why}: an end-of-stream envelope");
        let end: Value = serde_json::from_slice(&reply.body[5..]).unwrap();
        assert_eq!(end["error"]["code"], code, "{why}: {end}");
    }
    let reply = start("application/json", message.to_vec()).await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Unary calls: not UTF-8, unknown fields (ignored, as protojson readers may), wrong types.
    let raw = |body: &'static [u8]| {
        let request = Request::post("/e2b/filesystem.Filesystem/Stat")
            .header("e2b-sandbox-id", id)
            .header("x-access-token", token)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        api.send(request)
    };
    let bad = raw(b"{\"path\": \"\xff\"}").await;
    assert_eq!(bad.json()["code"], "invalid_argument");
    let bad = raw(br#"{"path": 7}"#).await;
    assert_eq!(bad.json()["code"], "invalid_argument");
    let unknown = raw(br#"{"path": "/home/user", "future": {"x": 1}}"#).await;
    assert_eq!(
        unknown.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&unknown.body)
    );
}

#[tokio::test]
async fn a_create_cannot_name_a_thread_threadbox_would_not() {
    // Both ways of naming a thread go through threadbox's thread id rules: length, characters,
    // the warm pool's reserved names. Nothing is made for any of them.
    let api = Api::new();
    let long = "x".repeat(129);
    for bad in [
        long.as_str(),
        "a/b",
        "../x",
        "a%2Fb",
        "pool:member-1",
        "a\tb",
    ] {
        api.create(Some(bad), json!({}))
            .await
            .expect_e2b_error(StatusCode::BAD_REQUEST);
        api.create(None, json!({ "threadbox_thread": bad }))
            .await
            .expect_e2b_error(StatusCode::BAD_REQUEST);
    }
    assert_eq!(api.provider.creates(), 0, "nothing made");
    // The longest name is taken, and reads back from its sandbox id.
    let longest = "x".repeat(128);
    let made = api.create(Some(&longest), json!({})).await;
    assert_eq!(made.status, StatusCode::CREATED);
    let id = made.json()["sandboxID"].as_str().unwrap().to_owned();
    api.control(Method::GET, &format!("/sandboxes/{id}"), None)
        .await
        .json()["sandboxID"]
        .as_str()
        .map(|got| assert_eq!(got, id))
        .unwrap();
}

#[tokio::test]
async fn a_deep_list_dir_does_not_write_the_threads_record_per_folder() {
    // A ListDir of depth N reads every folder it walks through; a hold taken for each (two
    // writes of the thread's record apiece) would make one call up to 20,000 writes.
    let api = Api::new();
    let created = api.create(Some("deep-list"), json!({})).await.json();
    let at = (
        created["sandboxID"].as_str().unwrap(),
        created["envdAccessToken"].as_str().unwrap(),
    );
    for i in 0..20 {
        let made = api
            .fs(at, "MakeDir", json!({ "path": format!("tree/{i}/leaf") }))
            .await;
        assert_eq!(made.status, StatusCode::OK);
    }
    let thread = ThreadId::parse("deep-list").unwrap();
    let before = api.tb.load(&thread).await.unwrap().version;
    let listed = api
        .fs(at, "ListDir", json!({"path": "tree", "depth": 3}))
        .await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.json()["entries"].as_array().unwrap().len(), 40);
    let after = api.tb.load(&thread).await.unwrap().version;
    assert!(
        after - before <= 2,
        "{} writes of the record for one ListDir",
        after - before
    );
}

#[tokio::test]
async fn a_compressed_upload_is_refused_not_written_compressed() {
    // The SDKs' `gzip=True` sends the body gzipped with `Content-Encoding: gzip`; written as it
    // came, the file would hold the compressed bytes. Refused, naming it, and nothing written.
    let api = Api::new();
    let created = api.create(Some("gzipped"), json!({})).await.json();
    let (id, token) = (
        created["sandboxID"].as_str().unwrap(),
        created["envdAccessToken"].as_str().unwrap(),
    );
    let upload = Request::post("/e2b/files?path=z.txt")
        .header("e2b-sandbox-id", id)
        .header("x-access-token", token)
        .header("content-type", "application/octet-stream")
        .header("content-encoding", "gzip")
        .body(Body::from(vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0]))
        .unwrap();
    let m = api
        .send(upload)
        .await
        .expect_e2b_error(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(m.contains("gzip"), "{m}");
    api.files(Method::GET, "path=z.txt", (id, token), "", "")
        .await
        .expect_e2b_error(StatusCode::NOT_FOUND);
}

/// A polled watcher is its sandbox's: another sandbox's token neither reads nor removes it.
/// And they are bounded: past 8 of one sandbox, a new one is `resource_exhausted`.
#[tokio::test]
async fn watchers_are_their_sandboxes_own_and_bounded() {
    let api = Api::new();
    let sandbox = |reply: Reply| {
        let made = reply.json();
        (
            made["sandboxID"].as_str().unwrap().to_owned(),
            made["envdAccessToken"].as_str().unwrap().to_owned(),
        )
    };
    let (a, a_token) = sandbox(api.create(Some("t-watch-a"), json!({})).await);
    let (b, b_token) = sandbox(api.create(Some("t-watch-b"), json!({})).await);
    let (a, b) = (
        (a.as_str(), a_token.as_str()),
        (b.as_str(), b_token.as_str()),
    );
    let made = api.fs(a, "CreateWatcher", json!({"path": "/tmp"})).await;
    assert_eq!(
        made.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&made.body)
    );
    let asked = json!({"watcherId": made.json()["watcherId"]});
    for method in ["GetWatcherEvents", "RemoveWatcher"] {
        let other = api.fs(b, method, asked.clone()).await;
        assert_eq!(other.json()["code"], "not_found", "{method}");
    }
    let mine = api.fs(a, "GetWatcherEvents", asked).await;
    assert_eq!(mine.status, StatusCode::OK);
    // 8 fill a sandbox's watchers; the next is refused, naming the limit.
    for _ in 0..8 {
        let more = api.fs(b, "CreateWatcher", json!({"path": "/tmp"})).await;
        assert_eq!(more.status, StatusCode::OK);
    }
    let refused = api
        .fs(b, "CreateWatcher", json!({"path": "/tmp"}))
        .await
        .json();
    assert_eq!(refused["code"], "resource_exhausted", "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains('8'),
        "{refused}"
    );
    // Another sandbox's are its own count.
    let again = api.fs(a, "CreateWatcher", json!({"path": "/tmp"})).await;
    assert_eq!(again.status, StatusCode::OK);
}
