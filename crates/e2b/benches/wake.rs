//! The wake on E2B: a command sent to a paused thread, to its first byte of output, through
//! threadbox's use cases over the real E2B provider, against E2B's contract fake on 127.0.0.1
//! with E2B's published latencies injected. Figures only, nothing asserted on a time:
//!
//! ```text
//! cargo bench -p threadbox-e2b --bench wake
//! THREADBOX_BENCH_RUNS=30 cargo bench -p threadbox-e2b --bench wake
//! ```
//!
//! threadbox here is the use cases (`Threadbox`) over `E2bProvider`, the SQLite store and the
//! SQLite lifecycle queue, as `threadbox dev` wires them, without its HTTP layer (the runc side
//! of the same figure is `crates/runc/benches/floor.rs`). A thread is created, then each round
//! (`THREADBOX_BENCH_RUNS`, 15 by default, after one untimed round) pauses it through the use
//! cases, untimed, and times `exec_streaming` of `echo woke` to it (it resumes and runs in the
//! same call) to the first output byte. Against it, in the same run, interleaved and in
//! alternating order: a bare E2B client (plain HTTP, no store, no retries) doing the least an
//! E2B client can do to wake its own paused sandbox: `POST /v2/sandboxes/{id}/connect`, then
//! envd's `process.Process/Start` of the same command, to its first byte.
//!
//! The injected latencies (`E2bFake::set_resume_delay`, `E2bFake::set_envd_delay`):
//!
//! - **resume**: 1 s. E2B's documentation: "Resuming a sandbox takes about 1 second"
//!   (<https://e2b.dev/docs/sandbox/persistence>, "Limitations while in beta"; the same page's
//!   source is `docs/sandbox/persistence.mdx` in `e2b-dev/docs`).
//! - **envd round trip**: 20 ms, an **assumption**: E2B publishes no figure for a request to
//!   envd; 20 ms stands for a client in the same region as E2B's sandbox hosts, over a
//!   connection kept open. Each envd request is held that long before the fake handles it.
//!
//! The floor they imply is resume + one envd round trip, one after the other. threadbox leaves
//! E2B's `autoResume` off on purpose (a sandbox must not wake behind the session record's back;
//! see `crates/e2b/src/control.rs`), so nothing reaches envd before the connect has answered:
//! until then E2B's proxy answers 502 for the paused sandbox, and the connect's answer carries
//! the envd token the command must present. What could overlap is threadbox's own work (its
//! store writes) with the connect; what cannot is the connect and the command. The figures say
//! whether threadbox adds anything over that floor: the ratio to the bare client and the
//! overhead in milliseconds, once with E2B's latencies and once with none injected (threadbox's
//! own cost on E2B's path, loopback and the fake's process start being all that is left).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use threadbox_core::config::Env;
use threadbox_core::domain::{Cause, ThreadId};
use threadbox_core::ports::{DurableQueue, ExecCommand, ExecRequest, OutputChunk, SystemClock};
use threadbox_core::usecases::{Config, Threadbox};
use threadbox_e2b::{wire, E2bConfig, E2bProvider};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::bench::{self, load_average, percentile};
use threadbox_testing::e2b_fake::E2bFake;

const DEFAULT_RUNS: usize = 15;
/// "Resuming a sandbox takes about 1 second": <https://e2b.dev/docs/sandbox/persistence>.
const E2B_RESUME: Duration = Duration::from_secs(1);
/// An assumption (E2B publishes no figure): one round trip to envd from the same region.
const ENVD_ROUND_TRIP: Duration = Duration::from_millis(20);
/// The timeout a connect grants, as the provider asks (`E2B_TIMEOUT_SECS`' default).
const CONNECT_TIMEOUT_SECS: u64 = 900;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Let the fake settle (the paused sandbox's processes, the previous stream) before a timed call.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

fn echo_woke() -> ExecRequest {
    ExecRequest {
        command: ExecCommand::Argv(vec!["echo".into(), "woke".into()]),
        ..ExecRequest::shell("true")
    }
}

/// threadbox's wake: `exec_streaming` to the paused thread, to its first byte of output.
async fn wake(tb: &Threadbox, id: &ThreadId) -> Duration {
    let (sink, mut chunks) = tokio::sync::mpsc::channel::<OutputChunk>(16);
    let started = Instant::now();
    let run = tb.exec_streaming(id, echo_woke(), sink);
    let first = async {
        loop {
            match chunks.recv().await {
                Some(chunk) if !chunk.bytes().is_empty() => return started.elapsed(),
                Some(_) => continue,
                None => panic!("the woken command printed nothing"),
            }
        }
    };
    let (out, first) = tokio::join!(run, first);
    let out = out.expect("exec in a paused thread");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    first
}

/// The least an E2B client does to wake its own paused sandbox: plain HTTP on one kept-alive
/// client, no store, no retries.
struct BareClient {
    http: reqwest::Client,
    api: String,
    envd: String,
    key: String,
    sandbox_id: String,
}

impl BareClient {
    async fn create(fake: &E2bFake) -> Self {
        let http = reqwest::Client::new();
        let created: Value = http
            .post(format!("{}/v2/sandboxes", fake.api_url()))
            .header("X-API-Key", fake.api_key())
            .json(
                &json!({"templateID": "base", "timeout": CONNECT_TIMEOUT_SECS, "autoPause": true}),
            )
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("create the bare client's sandbox")
            .json()
            .await
            .expect("create's answer");
        Self {
            http,
            api: fake.api_url(),
            envd: fake.envd_url(),
            key: fake.api_key(),
            sandbox_id: created["sandboxID"].as_str().expect("sandboxID").to_owned(),
        }
    }

    async fn control(&self, method: reqwest::Method, path: &str, body: Value) -> reqwest::Response {
        self.http
            .request(method, format!("{}{path}", self.api))
            .header("X-API-Key", &self.key)
            .json(&body)
            .send()
            .await
            .expect("a control-plane call")
    }

    async fn pause(&self) {
        let path = format!("/sandboxes/{}/pause", self.sandbox_id);
        let status = self
            .control(reqwest::Method::POST, &path, json!({}))
            .await
            .status();
        assert_eq!(status, 204, "pause the bare client's sandbox");
    }

    async fn kill(&self) {
        let path = format!("/sandboxes/{}", self.sandbox_id);
        self.control(reqwest::Method::DELETE, &path, json!({}))
            .await;
    }

    /// Connect (the resume), then Start `echo woke` with the token it answered, to the first
    /// byte of output; the rest of the stream is read after the clock stops.
    async fn wake(&self) -> Duration {
        let started = Instant::now();
        let path = format!("/v2/sandboxes/{}/connect", self.sandbox_id);
        let connected = self
            .control(
                reqwest::Method::POST,
                &path,
                json!({"timeout": CONNECT_TIMEOUT_SECS}),
            )
            .await;
        assert_eq!(connected.status(), 201, "the connect did not resume");
        let connected: Value = connected.json().await.expect("connect's answer");
        let token = connected["envdAccessToken"].as_str().unwrap_or_default();
        let body = wire::message_frame(&json!({
            "process": {"cmd": "echo", "args": ["woke"]},
            "stdin": false,
        }));
        let mut stream = self
            .http
            .post(format!("{}/process.Process/Start", self.envd))
            .header("content-type", "application/connect+json")
            .header("connect-protocol-version", "1")
            .header("E2b-Sandbox-Id", &self.sandbox_id)
            .header("X-Access-Token", token)
            .body(body)
            .send()
            .await
            .expect("Start");
        assert_eq!(stream.status(), 200, "Start");
        let mut frames = Frames::default();
        let mut first = None;
        let mut output = Vec::new();
        while let Some(bytes) = stream.chunk().await.expect("Start's stream") {
            frames.buf.extend_from_slice(&bytes);
            while let Some(event) = frames.next() {
                if let Some(data) = event.pointer("/event/data/stdout").and_then(Value::as_str) {
                    first.get_or_insert_with(|| started.elapsed());
                    output.push(data.to_owned());
                }
            }
        }
        assert!(!output.is_empty(), "the woken command printed nothing");
        first.expect("a first byte")
    }
}

/// Connect envelopes off a stream: flags, a big-endian u32 length, then JSON. The end-of-stream
/// envelope (flag 0x02) is skipped; a bad envelope stops the benchmark.
#[derive(Default)]
struct Frames {
    buf: Vec<u8>,
}

impl Frames {
    fn next(&mut self) -> Option<Value> {
        loop {
            if self.buf.len() < 5 {
                return None;
            }
            let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
            let end = 5 + len as usize;
            if self.buf.len() < end {
                return None;
            }
            let flags = self.buf[0];
            let payload: Value =
                serde_json::from_slice(&self.buf[5..end]).expect("a JSON Connect envelope");
            self.buf.drain(..end);
            if flags & 0x02 == 0 {
                return Some(payload);
            }
        }
    }
}

/// One setting of the injected latencies and what it measured.
struct Scenario {
    name: &'static str,
    resume: Duration,
    envd: Duration,
    ours: Vec<Duration>,
    bare: Vec<Duration>,
    /// The requests one wake made, threadbox's and the bare client's (the last round's).
    ours_calls: Vec<String>,
    bare_calls: Vec<String>,
}

impl Scenario {
    fn new(name: &'static str, resume: Duration, envd: Duration) -> Self {
        Self {
            name,
            resume,
            envd,
            ours: Vec::new(),
            bare: Vec::new(),
            ours_calls: Vec::new(),
            bare_calls: Vec::new(),
        }
    }

    /// What the injected latencies alone cost: the resume, then one envd round trip.
    fn implied_floor(&self) -> Duration {
        self.resume + self.envd
    }
}

/// The requests the fake saw since it was last cleared, ids elided: `POST /v2/sandboxes/{id}/connect`.
fn calls(fake: &E2bFake, sandbox_ids: &[&str]) -> Vec<String> {
    fake.requests()
        .iter()
        .map(|r| {
            let path = sandbox_ids
                .iter()
                .fold(r.path.clone(), |p, id| p.replace(id, "{id}"));
            format!("{} {path}", r.method)
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs = bench::runs(DEFAULT_RUNS);
    let load_before = load_average();
    let fake = E2bFake::start().await;
    let env = Env::from_map(fake.env_vars());
    let provider =
        Arc::new(E2bProvider::new(E2bConfig::from_env(&env).expect("config")).expect("provider"));
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("threadbox.db");
    let store = Arc::new(SqliteSessionStore::open(&db).expect("open the store"));
    let events: Arc<dyn DurableQueue> =
        Arc::new(SqliteQueue::open(&db, "lifecycle", QueueConfig::default()).expect("queue"));
    let tb = Threadbox::new(
        store,
        provider,
        events,
        Arc::new(SystemClock),
        Config::default(),
    );

    let thread = ThreadId::parse("e2b-wake").expect("thread id");
    let handle = tb.resolve(&thread).await.expect("the thread");
    let out = tb.exec(&thread, echo_woke()).await.expect("first command");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let bare = BareClient::create(&fake).await;
    let ids = [handle.sandbox_id.as_str(), bare.sandbox_id.as_str()];

    let mut scenarios = [
        Scenario::new(
            "E2B's published resume, 20 ms envd (assumed)",
            E2B_RESUME,
            ENVD_ROUND_TRIP,
        ),
        Scenario::new("none injected", Duration::ZERO, Duration::ZERO),
    ];
    for scenario in &mut scenarios {
        fake.set_resume_delay(scenario.resume);
        fake.set_envd_delay(scenario.envd);
        for n in 0..=runs {
            let ours_first = n % 2 == 0;
            for side in [ours_first, !ours_first] {
                if side {
                    tb.pause(&thread).await.expect("pause the thread");
                    settle().await;
                    fake.clear_requests();
                    let took = wake(&tb, &thread).await;
                    scenario.ours_calls = calls(&fake, &ids);
                    if n > 0 {
                        scenario.ours.push(took);
                    }
                } else {
                    bare.pause().await;
                    settle().await;
                    fake.clear_requests();
                    let took = bare.wake().await;
                    scenario.bare_calls = calls(&fake, &ids);
                    if n > 0 {
                        scenario.bare.push(took);
                    }
                }
            }
        }
    }
    fake.set_resume_delay(Duration::ZERO);
    fake.set_envd_delay(Duration::ZERO);

    print_report(&scenarios, runs, &load_before);

    tb.destroy(&thread, Cause::User).await.expect("destroy");
    bare.kill().await;
    let left = fake.sandboxes().len();
    if left > 0 {
        eprintln!("warning: {left} sandboxes left in the fake after the bench");
    }
}

fn print_report(scenarios: &[Scenario], runs: usize, load_before: &str) {
    println!();
    println!(
        "the wake on E2B: threadbox (use cases, E2B provider, SQLite store and queue) against a \
         bare E2B client, on E2B's contract fake (127.0.0.1), {runs} rounds, interleaved; each \
         times a command (`echo woke`) sent to a paused sandbox, to its first output byte"
    );
    println!(
        "load average (1, 5, 15 min) at the start: {load_before}; at the end: {}",
        load_average()
    );
    println!(
        "| injected latencies | resume | envd round trip | floor they imply (resume + envd, sequential) | bare E2B client median ms (p90) | threadbox wake median ms (p90) | wake / bare | threadbox over bare, ms | wake / implied floor |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in scenarios {
        let (ours, bare) = (percentile(&s.ours, 0.5), percentile(&s.bare, 0.5));
        let floor = ms(s.implied_floor());
        println!(
            "| {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.1} ({:.1}) | {:.1} ({:.1}) | {:.3} | {:+.1} | {} |",
            s.name,
            ms(s.resume),
            ms(s.envd),
            floor,
            bare,
            percentile(&s.bare, 0.9),
            ours,
            percentile(&s.ours, 0.9),
            ours / bare,
            ours - bare,
            if floor > 0.0 {
                format!("{:.3}", ours / floor)
            } else {
                "–".into()
            }
        );
    }
    for s in scenarios.iter().take(1) {
        println!(
            "requests one wake made: threadbox {:?}; bare client {:?}",
            s.ours_calls, s.bare_calls
        );
    }
    println!(
        "(resume: E2B's \"about 1 second\", https://e2b.dev/docs/sandbox/persistence; envd round \
         trip: an assumption, E2B publishes none. autoResume stays off, so the connect and the \
         command cannot overlap: envd is unreachable until the connect answers, and its answer \
         carries the token the command presents. Only threadbox's own store writes could overlap \
         the connect.)"
    );
}
