//! The fake's world: sandboxes and their lifecycle, its clock, idempotency records, injected
//! faults and the request log. Handlers lock it briefly and never across an await.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use threadbox_core::domain::Millis;

use super::{FakeOptions, Fault, RecordedRequest, Route};

/// E2B's internal states (docs/e2b.md §3): `pausing` shows as paused, `killing` as gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeState {
    Running,
    Pausing,
    Paused,
    Killing,
}

impl FakeState {
    /// What info and list report.
    pub fn public(self) -> &'static str {
        match self {
            FakeState::Running => "running",
            FakeState::Pausing | FakeState::Paused => "paused",
            FakeState::Killing => "killing",
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Sandbox {
    pub id: String,
    pub template_id: String,
    pub client_id: String,
    pub metadata: BTreeMap<String, String>,
    pub env_vars: BTreeMap<String, String>,
    pub auto_pause: bool,
    pub allow_internet_access: bool,
    /// The `network` object of the create, or of the last `PUT /sandboxes/{id}/network`.
    pub network: Option<Value>,
    pub state: FakeState,
    pub started_at: Millis,
    /// Running: the deadline. Paused: when it paused.
    pub end_at: Millis,
    pub token: String,
    /// The sandbox's own directory on the host: `home/` is bound over `/home` and `tmp/` over
    /// `/tmp` for its processes.
    pub dir: PathBuf,
    /// The next memory resume fails as E2B's does for an unresponsive guest agent.
    pub guest_unresponsive: bool,
}

impl Sandbox {
    /// The host directory behind the sandbox's `/home/user`.
    pub fn home(&self) -> PathBuf {
        self.dir.join("home").join("user")
    }

    /// The host directory behind the sandbox's `/tmp`.
    pub fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }
}

pub(super) enum Idempotent {
    InFlight,
    Done(Value),
}

pub(super) struct IdempotencyRecord {
    pub body: Value,
    pub outcome: Idempotent,
    pub expires_at: Millis,
}

/// A process's stdin pipe, shared by SendInput and CloseStdin; `None` once closed.
pub(super) type StdinPipe = Arc<tokio::sync::Mutex<Option<tokio::process::ChildStdin>>>;

/// A process started through envd, for SendInput/CloseStdin/SendSignal and for killing it
/// with its sandbox.
pub(super) struct Process {
    pub sandbox_id: String,
    /// Its process group (it leads one), so a kill reaches its children too.
    pub pgid: u32,
    pub stdin: Option<StdinPipe>,
}

#[derive(Default)]
pub(super) struct Inner {
    pub sandboxes: BTreeMap<String, Sandbox>,
    pub idempotency: HashMap<String, IdempotencyRecord>,
    pub faults: HashMap<Route, VecDeque<Fault>>,
    pub lose_next_create_response: bool,
    pub requests: Vec<RecordedRequest>,
    /// Sandboxes actually started by create (replays do not count).
    pub started: u64,
    pub processes: HashMap<u32, Process>,
    pub pause_delay: Duration,
    pub kill_delay: Duration,
    pub create_delay: Duration,
    /// How long a connect takes to bring a paused sandbox back (it stays paused meanwhile).
    pub resume_delay: Duration,
    /// Added to every envd request before the proxy routes it: the network round trip to the
    /// sandbox's host.
    pub envd_delay: Duration,
}

pub(super) struct World {
    pub options: FakeOptions,
    /// The key the API accepts now: `options.api_key` until a test rotates it.
    pub api_key: Mutex<String>,
    pub root: PathBuf,
    offset: Mutex<Duration>,
    inner: Mutex<Inner>,
}

impl World {
    pub fn new(options: FakeOptions, root: PathBuf) -> Self {
        Self {
            api_key: Mutex::new(options.api_key.clone()),
            options,
            root,
            offset: Mutex::new(Duration::ZERO),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The fake's clock: wall time plus whatever tests advanced it by.
    pub fn now(&self) -> Millis {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Millis((wall + *self.offset.lock().unwrap()).as_millis() as i64)
    }

    pub fn advance(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
        drop(self.lock());
    }

    /// The state, with deadlines applied first: everything anyone observes is up to date.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        let now = self.now();
        let mut inner = self.inner.lock().unwrap();
        inner.evict(now);
        inner
    }

    /// The state without applying deadlines (for the request log).
    pub fn lock_raw(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }
}

impl Inner {
    /// E2B's evictor (docs/e2b.md §4): at its deadline a running sandbox is paused when it was
    /// created with `autoPause`, killed otherwise.
    fn evict(&mut self, now: Millis) {
        let due: Vec<String> = self
            .sandboxes
            .values()
            .filter(|s| s.state == FakeState::Running && s.end_at <= now)
            .map(|s| s.id.clone())
            .collect();
        for id in due {
            let auto_pause = self.sandboxes[&id].auto_pause;
            if auto_pause {
                let s = self.sandboxes.get_mut(&id).expect("listed above");
                s.state = FakeState::Paused;
                // endAt of a paused sandbox is when it paused, which was its deadline.
                tracing::debug!(sandbox_id = %id, "fake E2B auto-paused a sandbox at its deadline");
            } else {
                self.remove(&id);
                tracing::debug!(sandbox_id = %id, "fake E2B killed a sandbox at its deadline");
            }
        }
        self.idempotency.retain(|_, r| r.expires_at > now);
    }

    /// Forget a sandbox for good: its processes are killed and its files deleted.
    pub fn remove(&mut self, id: &str) {
        if let Some(sandbox) = self.sandboxes.remove(id) {
            let pids: Vec<u32> = self
                .processes
                .iter()
                .filter(|(_, p)| p.sandbox_id == id)
                .map(|(pid, _)| *pid)
                .collect();
            for pid in pids {
                if let Some(p) = self.processes.remove(&pid) {
                    kill_group(p.pgid, "KILL");
                }
            }
            let _ = std::fs::remove_dir_all(&sandbox.dir);
        }
    }

    pub fn take_fault(&mut self, route: Route) -> Option<Fault> {
        self.faults.get_mut(&route).and_then(VecDeque::pop_front)
    }
}

/// Signal a process group. A fake has no business linking libc for this; `kill(1)` does it.
pub(super) fn kill_group(pgid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args(["-s", signal, "--", &format!("-{pgid}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// A random lowercase-hex string (E2B ids and tokens are `[a-z0-9]`).
pub(super) fn random_hex(len: usize) -> String {
    let mut out = String::new();
    while out.len() < len {
        out.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    out.truncate(len);
    out
}
