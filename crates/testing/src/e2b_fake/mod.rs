//! A contract fake of E2B: its control plane and envd, served by axum on 127.0.0.1, built from
//! `docs/e2b.md` (the v2 endpoints and idempotency of §2, the status matrix of §3, the envd
//! protocol of §6 to §8).
//!
//! Two listeners, as in E2B: the API (`api_url`) and envd (`envd_url`, reached the way E2B's
//! SDK reaches the shared sandbox host: one base URL, the sandbox named by the `E2b-Sandbox-Id`
//! header, or by a `49983-<id>.` host name).
//!
//! # Control plane
//! - `X-API-Key` must match, else 401 with E2B's JSON error body.
//! - `POST /v2/sandboxes`: `templateID` required and known (404 otherwise), `timeout` 300 s when
//!   omitted, `> 0` and within the plan's maximum (400 otherwise); every sandbox is secured (it
//!   gets an `envdAccessToken`). With an `Idempotency-Key` (`[a-z0-9-]{1,255}`): the same key and
//!   body replay the first 201 without starting anything; a different body is 422
//!   `idempotency_request_mismatch`; a create still running is 409 `idempotency_in_progress`; a
//!   failed create forgets its key; keys live 24 h. Above `max_concurrent` sandboxes: 429.
//! - `POST /v2/sandboxes/{id}/connect`: running → 200 and the deadline only extended; paused →
//!   201, resumed under the same id with a fresh deadline and, with `rotate_tokens` (the
//!   default), a new access token: envd refuses the old one from then on. (E2B's current
//!   server derives the token from the id, so it stays the same; rotation is the stricter case a
//!   provider must survive.) Pausing → waits, then resumes; killing → 409; unknown → 404.
//!   [`E2bFake::set_resume_delay`] makes the resume take that long (the sandbox paused until
//!   it answers), as E2B's own resume does.
//! - `POST /sandboxes/{id}/pause`: 204; already paused → 409; while killing → 409; 404.
//! - `DELETE /sandboxes/{id}`: 204 (running or paused); while another kill runs → 409 (E2B's
//!   answer there is unconfirmed); unknown or killed → 404.
//! - `POST /sandboxes/{id}/timeout`: 204 (may shorten); paused → 404; pausing or killing → 409.
//! - `GET /sandboxes/{id}` and `GET /v2/sandboxes` (state and metadata filters, the metadata
//!   value decoded three times as E2B does, `limit`, `nextToken`, `X-Next-Token` only when more
//!   remain, `X-Total-Running`); pausing shows as paused, killing as absent.
//! - Deadlines: at `endAt` a running sandbox is paused when created with `autoPause`, else
//!   killed. The fake's clock is wall time plus [`E2bFake::advance`].
//!
//! # envd
//! - A sandbox that is not running (paused, killed, unknown) gets the proxy's 502
//!   `{"sandboxId","message":"The sandbox was not found","code":502}`; a missing or stale
//!   `X-Access-Token` gets envd's 401 JSON. [`E2bFake::set_envd_delay`] holds every envd
//!   request that long first: the network round trip to the sandbox's host.
//! - `process.Process/Start` speaks Connect streaming with the JSON codec: `start`, `data`
//!   (base64 stdout/stderr), `end` (no `exitCode` when 0; -1 and `signal: killed` for a signal),
//!   then the end-of-stream frame: `{}`, `invalid_argument` when the process cannot start, and
//!   `deadline_exceeded` after `Connect-Timeout-Ms` killed it. Keepalives when asked.
//!   `SendInput`, `CloseStdin` and `SendSignal` are the unary calls.
//! - `GET`/`POST /files` move raw bytes (`application/octet-stream`; multipart is not
//!   implemented); 404 `path '<p>' does not exist`, 400 for a directory.
//!
//! # What runs
//! Commands run for real: envd's `Start` executes the requested `cmd` and `args` (E2B's SDK
//! and the provider send `/bin/bash -l -c <line>`) in its own process group, with a clean
//! environment (PATH, HOME, USER, the sandbox's `envVars`, the request's `envs`). Each runs in a
//! fresh user and mount namespace (`unshare --user --map-root-user --mount`, util-linux) where
//! the sandbox's own directories are bound over `/home` and `/tmp`, so `/home/user` and `/tmp`
//! are the sandbox's, exactly the paths a command sees on E2B, with no rewriting of arguments
//! or output. `/files` serves the same two trees (and refuses paths outside them). Everything
//! else is the host's, read as usual: this is a protocol fake for tests, not a sandbox. It needs
//! user namespaces (Debian's default) or root. That is what lets the provider conformance suite
//! mean something: exit codes, output, stdin, timeouts and files behave as on a Linux sandbox.

// Handlers answer early with a ready `Response`; boxing every one of them would only add noise
// to test support.
#[allow(clippy::result_large_err)]
mod api;
#[allow(clippy::result_large_err)]
mod envd;
mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use threadbox_core::domain::Millis;

pub use state::FakeState;
use state::World;

/// The canonical not-found message (Go `%q`, so the quotes are part of the text).
pub(crate) fn not_found_message(id: &str) -> String {
    format!("Sandbox \"{id}\" doesn't exist or you don't have access to it")
}

#[derive(Clone, Debug)]
pub struct FakeOptions {
    pub api_key: String,
    /// Template ids or aliases that exist.
    pub templates: Vec<String>,
    /// The plan's longest timeout (Pro: 24 h).
    pub max_timeout: Duration,
    /// Resume issues a new envd token (see the module doc).
    pub rotate_tokens: bool,
    /// Live sandboxes allowed at once; create above it gets 429.
    pub max_concurrent: usize,
}

impl Default for FakeOptions {
    fn default() -> Self {
        Self {
            api_key: "e2b_0123456789abcdef0123456789abcdef".into(),
            templates: vec!["base".into()],
            max_timeout: Duration::from_secs(24 * 3600),
            rotate_tokens: true,
            max_concurrent: 100,
        }
    }
}

/// Which endpoint an injected fault answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    Create,
    Connect,
    Pause,
    Kill,
    SetTimeout,
    Info,
    List,
    /// Any envd request.
    Envd,
}

/// A canned response served instead of handling a request (once per injection).
#[derive(Clone, Debug)]
pub struct Fault {
    pub status: u16,
    pub body: String,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
}

impl Fault {
    /// E2B's JSON error body `{"code", "message"}`.
    pub fn json(status: u16, message: &str) -> Self {
        Self {
            status,
            body: serde_json::json!({"code": status, "message": message}).to_string(),
            content_type: "application/json".into(),
            headers: Vec::new(),
        }
    }

    /// A body that is not JSON, as proxies in front of E2B send (`upstream request timeout`).
    pub fn text(status: u16, body: &str) -> Self {
        Self {
            status,
            body: body.into(),
            content_type: "text/plain; charset=utf-8".into(),
            headers: Vec::new(),
        }
    }

    /// E2B's rate limiter tripping (docs/e2b.md §5): 429 with `RateLimit-*` and `Retry-After`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::json(429, "Rate limit exceeded")
            .with_header("RateLimit-Limit", "20000")
            .with_header("RateLimit-Remaining", "0")
            .with_header("RateLimit-Reset", &retry_after_secs.to_string())
            .with_header("Retry-After", &retry_after_secs.to_string())
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Lowercased names.
    pub headers: BTreeMap<String, String>,
    pub status: u16,
    /// When it arrived (monotonic), to check waits between retries.
    pub at: std::time::Instant,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// A sandbox as a test may inspect it.
#[derive(Clone, Debug)]
pub struct SandboxView {
    pub sandbox_id: String,
    /// The `templateID` it was created from.
    pub template_id: String,
    pub state: FakeState,
    pub metadata: BTreeMap<String, String>,
    pub env_vars: BTreeMap<String, String>,
    pub auto_pause: bool,
    pub allow_internet_access: bool,
    /// The `network` object it was made with, or last changed to.
    pub network: Option<serde_json::Value>,
    pub token: String,
    pub started_at: Millis,
    pub end_at: Millis,
    /// The host directory behind its `/home/user`.
    pub home: PathBuf,
}

/// A running fake. Dropping it stops both listeners and deletes every sandbox directory.
pub struct E2bFake {
    world: Arc<World>,
    api: SocketAddr,
    envd: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl E2bFake {
    pub async fn start() -> Self {
        Self::start_with(FakeOptions::default()).await
    }

    pub async fn start_with(options: FakeOptions) -> Self {
        let root = std::env::temp_dir().join(format!("e2b-fake-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&root).expect("create the fake's directory");
        let world = Arc::new(World::new(options, root));
        let api_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake API");
        let envd_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake envd");
        let api = api_listener.local_addr().expect("local address");
        let envd = envd_listener.local_addr().expect("local address");
        let api_router = api::router(world.clone());
        let envd_router = envd::router(world.clone());
        // E2B's servers are Go's net/http, whose connections have Nagle's algorithm off; so do
        // the fake's, or a streamed answer's second small write waits for the client's delayed
        // ACK (40 ms on Linux) and every timing taken against the fake carries it.
        let no_delay = |tcp: &mut tokio::net::TcpStream| {
            let _ = tcp.set_nodelay(true);
        };
        let (api_listener, envd_listener) = (
            api_listener.tap_io(no_delay),
            envd_listener.tap_io(no_delay),
        );
        let tasks = vec![
            tokio::spawn(async move {
                let _ = axum::serve(api_listener, api_router).await;
            }),
            tokio::spawn(async move {
                let _ = axum::serve(envd_listener, envd_router).await;
            }),
        ];
        Self {
            world,
            api,
            envd,
            tasks,
        }
    }

    pub fn api_url(&self) -> String {
        format!("http://{}", self.api)
    }

    pub fn envd_url(&self) -> String {
        format!("http://{}", self.envd)
    }

    /// The key the API accepts now.
    pub fn api_key(&self) -> String {
        self.world.api_key.lock().unwrap().clone()
    }

    /// Replace the API key, as rotating it in E2B's dashboard does: from now on the old key is
    /// answered 401 on every control-plane route.
    pub fn rotate_api_key(&self, new_key: &str) {
        *self.world.api_key.lock().unwrap() = new_key.to_owned();
    }

    /// The environment a process needs to use this fake: `E2B_API_KEY`, `E2B_API_URL` and
    /// `E2B_SANDBOX_URL`.
    pub fn env_vars(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("E2B_API_KEY".to_owned(), self.api_key()),
            ("E2B_API_URL".to_owned(), self.api_url()),
            ("E2B_SANDBOX_URL".to_owned(), self.envd_url()),
        ])
    }

    /// The fake's clock now (epoch ms).
    pub fn now(&self) -> Millis {
        self.world.now()
    }

    /// Move the fake's clock forward; deadlines that pass pause or kill their sandboxes.
    pub fn advance(&self, by: Duration) {
        self.world.advance(by);
    }

    /// Serve `fault` for the next request to `route`, instead of handling it.
    pub fn fail_next(&self, route: Route, fault: Fault) {
        self.world
            .lock()
            .faults
            .entry(route)
            .or_default()
            .push_back(fault);
    }

    /// The next create is carried out (and recorded under its idempotency key), but its answer
    /// is lost on the way back: the client sees a plain-text 502 from the proxy.
    pub fn lose_next_create_response(&self) {
        self.world.lock().lose_next_create_response = true;
    }

    pub fn set_pause_delay(&self, delay: Duration) {
        self.world.lock().pause_delay = delay;
    }

    pub fn set_kill_delay(&self, delay: Duration) {
        self.world.lock().kill_delay = delay;
    }

    pub fn set_create_delay(&self, delay: Duration) {
        self.world.lock().create_delay = delay;
    }

    /// How long a connect that resumes a paused sandbox takes before it answers 201 (E2B
    /// publishes "about 1 second"). The sandbox stays paused meanwhile: envd answers 502, and
    /// a kill in that time wins (the connect then answers as the status matrix says). Zero (the
    /// default) resumes at once; connects to running sandboxes are never delayed.
    pub fn set_resume_delay(&self, delay: Duration) {
        self.world.lock().resume_delay = delay;
    }

    /// A delay before every envd request is handled (before the proxy looks the sandbox up, so
    /// before a process starts and before its first byte): the network round trip to the
    /// sandbox's host, which loopback does not have. Zero by default.
    pub fn set_envd_delay(&self, delay: Duration) {
        self.world.lock().envd_delay = delay;
    }

    /// The sandbox's next memory resume fails with `sandbox_snapshot_guest_agent_unresponsive`.
    pub fn set_guest_unresponsive(&self, sandbox_id: &str) {
        if let Some(s) = self.world.lock().sandboxes.get_mut(sandbox_id) {
            s.guest_unresponsive = true;
        }
    }

    /// Every sandbox that exists (killing ones included), by id.
    pub fn sandboxes(&self) -> Vec<SandboxView> {
        self.world.lock().sandboxes.values().map(view).collect()
    }

    pub fn sandbox(&self, sandbox_id: &str) -> Option<SandboxView> {
        self.world.lock().sandboxes.get(sandbox_id).map(view)
    }

    /// How many sandboxes create has actually started (replayed creates do not count).
    pub fn sandboxes_started(&self) -> u64 {
        self.world.lock().started
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.world.lock_raw().requests.clone()
    }

    /// Requests to paths that end with `suffix` and use `method`.
    pub fn requests_to(&self, method: &str, suffix: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.ends_with(suffix))
            .collect()
    }

    pub fn clear_requests(&self) {
        self.world.lock_raw().requests.clear();
    }
}

impl Drop for E2bFake {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        let mut inner = self.world.lock_raw();
        let ids: Vec<String> = inner.sandboxes.keys().cloned().collect();
        for id in ids {
            inner.remove(&id);
        }
        drop(inner);
        let _ = std::fs::remove_dir_all(&self.world.root);
    }
}

fn view(s: &state::Sandbox) -> SandboxView {
    SandboxView {
        sandbox_id: s.id.clone(),
        template_id: s.template_id.clone(),
        state: s.state,
        metadata: s.metadata.clone(),
        env_vars: s.env_vars.clone(),
        auto_pause: s.auto_pause,
        allow_internet_access: s.allow_internet_access,
        network: s.network.clone(),
        token: s.token.clone(),
        started_at: s.started_at,
        end_at: s.end_at,
        home: s.home(),
    }
}
