//! `threadbox threads …` as a user runs it: the real binary against the real API router, served on
//! a free loopback port over a SQLite file and the in-memory sandbox provider (so no root or runc
//! is needed). Checks what people see (tables, timelines, raw exec output), what scripts see
//! (`--json`), and the exit status of every kind of failure.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use threadbox_api::http::{router, ApiAuth};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{ProviderError, SystemClock};
use threadbox_core::usecases::{Config, HoldRequest, Threadbox};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::{InMemoryProvider, Op};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;

/// The API on a free port; the server task ends with the test's runtime.
struct Api {
    url: String,
    tb: Threadbox,
    provider: Arc<InMemoryProvider>,
    _dir: tempfile::TempDir,
}

impl Api {
    async fn start(auth: ApiAuth) -> Api {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
        let queue =
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
        let provider = InMemoryProvider::new();
        let tb = Threadbox::new(
            store,
            provider.clone(),
            queue,
            Arc::new(SystemClock),
            Config::default(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = router(tb.clone(), auth);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Api {
            url,
            tb,
            provider,
            _dir: dir,
        }
    }

    async fn run(&self, args: &[&str]) -> Run {
        cli(&self.url, args, &[]).await
    }

    /// A command of its own rather than under `threads` (`cost`), against this API.
    async fn cli_run(&self, args: &[&str]) -> Run {
        Run::of(support::cli_command(&self.url, args)).await
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Run `command` to its end.
    async fn of(mut command: tokio::process::Command) -> Run {
        let output = command.output().await.expect("run threadbox");
        Run {
            code: output.status.code().expect("exited, not killed"),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
    }

    #[track_caller]
    fn ok(self) -> Run {
        assert_eq!(
            self.code, 0,
            "stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout))
    }

    /// A failure: the status, and stderr as `error: <message> (<code>)` with nothing on stdout.
    #[track_caller]
    fn failed(&self, code: i32, error_code: &str) {
        assert_eq!(self.code, code, "stderr:\n{}", self.stderr);
        assert!(self.stdout.is_empty(), "stdout:\n{}", self.stdout);
        assert!(
            self.stderr.starts_with("error: ") && self.stderr.trim_end().ends_with(error_code),
            "stderr:\n{}",
            self.stderr
        );
    }
}

async fn cli(url: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = support::cli_command(url, &[&["threads"], args].concat());
    command.envs(env.iter().copied());
    Run::of(command).await
}

fn tid(id: &str) -> ThreadId {
    ThreadId::parse(id).unwrap()
}

#[tokio::test]
async fn list_and_show_as_tables_and_json() {
    let api = Api::start(ApiAuth::disabled()).await;
    assert_eq!(api.run(&["list"]).await.ok().stdout, "no threads yet\n");

    let created = api.run(&["resolve", "alpha"]).await.ok();
    assert_eq!(
        created.stdout,
        "alpha: active, sandbox mem-1 (generation 1), created\n"
    );
    api.run(&["resolve", "slack:T1:C2:1700.5"]).await.ok();
    let again = api.run(&["resolve", "alpha"]).await.ok();
    assert_eq!(
        again.stdout,
        "alpha: active, sandbox mem-1 (generation 1)\n"
    );

    let table = api.run(&["list"]).await.ok().stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    // With each thread's usage (times only: this API knows no sandbox size).
    assert_eq!(
        lines[0],
        "THREAD              STATUS  IDLE  GEN  SANDBOX  HOLDS  RUNNING  PAUSED"
    );
    assert!(
        lines[1].starts_with("alpha               active  0s    1    mem-1    0"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("slack:T1:C2:1700.5  active"),
        "{table}"
    );

    let listed = api.run(&["list", "--json"]).await.ok().json();
    let threads = listed["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    assert_eq!(threads[0]["thread_id"], "alpha");
    assert_eq!(threads[0]["status"], "active");
    assert!(threads[0]["idle_seconds"].is_u64());
    let one = api
        .run(&["list", "--limit", "1", "--json"])
        .await
        .ok()
        .json();
    assert_eq!(one["threads"].as_array().unwrap().len(), 1);

    let shown = api.run(&["show", "alpha"]).await.ok().stdout;
    assert!(
        shown.starts_with("thread       alpha\nstatus       active\n"),
        "{shown}"
    );
    assert!(
        shown.contains("sandbox      mem-1 (memory, generation 1)\n"),
        "{shown}"
    );
    assert!(shown.contains("\nSEQ    AT "), "{shown}");
    assert!(shown.contains("  - → creating           user"), "{shown}");
    assert!(shown.contains("  creating → active      user"), "{shown}");
    assert!(shown.contains("\nrunning      "), "{shown}");
    assert!(shown.contains("\npaused       0s\n"), "{shown}");

    let detail = api.run(&["show", "alpha", "--json"]).await.ok().json();
    assert_eq!(detail["session"]["status"], "active");
    assert_eq!(detail["events"].as_array().unwrap().len(), 2);
    assert_eq!(detail["usage"]["paused_ms"], 0);

    let cost = api.cli_run(&["cost"]).await;
    assert_eq!(cost.code, 0, "{}", cost.stderr);
    assert!(
        cost.stdout
            .starts_with("2 threads (2 active), over each thread's whole history\n"),
        "{}",
        cost.stdout
    );
    let report: serde_json::Value =
        serde_json::from_str(&api.cli_run(&["cost", "--json"]).await.stdout).unwrap();
    assert_eq!(report["threads"], 2);
    assert_eq!(report["paused_ms"], 0);
}

#[tokio::test]
async fn pause_resume_reset_and_the_event_timeline() {
    let api = Api::start(ApiAuth::disabled()).await;
    api.run(&["resolve", "demo"]).await.ok();

    let paused = api.run(&["pause", "demo"]).await.ok();
    assert_eq!(
        paused.stdout,
        "demo: paused, sandbox mem-1 (generation 1)\n"
    );
    let resumed = api.run(&["resume", "demo", "--json"]).await.ok().json();
    assert_eq!(resumed["status"], "active");
    assert_eq!(resumed["resumed"], true);

    let timeline = api.run(&["events", "demo"]).await.ok().stdout;
    let changes: Vec<String> = timeline
        .lines()
        .skip(1)
        .map(|l| {
            l.split("  ")
                .filter(|p| !p.is_empty())
                .nth(2)
                .unwrap()
                .trim()
                .to_owned()
        })
        .collect();
    assert_eq!(
        changes,
        [
            "- → creating",
            "creating → active",
            "active → pausing",
            "pausing → paused",
            "paused → resuming",
            "resuming → active"
        ],
        "{timeline}"
    );

    // Scripts get one event per line, and can continue after a sequence number.
    let stream = api
        .run(&["events", "demo", "--after-seq", "4", "--json"])
        .await
        .ok()
        .stdout;
    let seqs: Vec<u64> = stream
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [5, 6]);
    let none = api.run(&["events", "demo", "--after-seq", "6"]).await.ok();
    assert_eq!(none.stdout, "no events after seq 6\n");

    let reset = api.run(&["reset", "demo"]).await.ok().stdout;
    assert!(
        reset.starts_with("demo: active, sandbox mem-2 (generation 2), created\n"),
        "{reset}"
    );
    assert!(reset.contains("every file in it were destroyed"), "{reset}");
}

#[tokio::test]
async fn exec_passes_output_and_the_exit_status_through() {
    let api = Api::start(ApiAuth::disabled()).await;
    // The in-memory provider answers every command with the command line on stdout.
    let run = api
        .run(&["exec", "box", "--", "echo", "hi there"])
        .await
        .ok();
    assert_eq!(run.stdout, "echo hi there");
    assert_eq!(run.stderr, "");
    let run = api
        .run(&["exec", "box", "-c", "ls | wc -l", "--json"])
        .await
        .ok();
    let result = run.json();
    assert_eq!(result["exit_code"], 0);
    assert_eq!(result["stdout"], "ls | wc -l");
    assert_eq!(api.provider.commands(), ["echo hi there", "ls | wc -l"]);

    // A command its timeout killed exits 124 and says why.
    api.provider.set_exec_delay(Duration::from_secs(1));
    let run = api
        .run(&["exec", "box", "--timeout", "50ms", "--", "sleep", "5"])
        .await;
    assert_eq!(run.code, 124, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        "threadbox: the command timed out after 50ms and was killed\n"
    );
}

#[tokio::test]
async fn each_kind_of_failure_has_its_exit_status() {
    let api = Api::start(ApiAuth::disabled()).await;

    // 3: no such thread.
    api.run(&["show", "nobody"])
        .await
        .failed(3, "(unknown_thread)");
    api.run(&["events", "nobody", "--follow"])
        .await
        .failed(3, "(unknown_thread)");

    // 4: the thread's state forbids it.
    api.tb
        .acquire_hold(
            &tid("held"),
            HoldRequest::new("agent", Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let held = api.run(&["pause", "held"]).await;
    held.failed(4, "(held)");
    api.run(&["resolve", "gone"]).await.ok();
    api.run(&["pause", "gone"]).await.ok();
    api.tb
        .destroy(&tid("gone"), threadbox_core::domain::Cause::User)
        .await
        .unwrap();
    api.run(&["resume", "gone"])
        .await
        .failed(4, "(illegal_transition)");

    // 2: a bad command line (caught here) or a request the server refuses.
    let bad = api.run(&["show", "no spaces allowed"]).await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("no spaces allowed"), "{}", bad.stderr);
    api.run(&["exec", "box", "--timeout", "11m", "--", "true"])
        .await
        .failed(2, "(invalid_request)");
    api.run(&["exec", "box", "--cwd", "relative", "--", "true"])
        .await
        .failed(2, "(invalid_path)");
    let bad_url = cli("localhost:1", &["list"], &[]).await;
    bad_url.failed(2, "must be an http:// or https:// URL");

    // 5: busy or unreachable, worth retrying.
    api.provider
        .fail_next(Op::Exec, ProviderError::Unavailable("provider down".into()));
    let down = api.run(&["exec", "box", "--", "true"]).await;
    down.failed(5, "(provider_error)");
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let unreachable = cli(&closed, &["list"], &[]).await;
    assert_eq!(unreachable.code, 5, "{}", unreachable.stderr);
    assert!(
        unreachable.stderr.starts_with(&format!(
            "error: cannot reach threadbox at {closed}/v1/threads"
        )),
        "{}",
        unreachable.stderr
    );
    assert!(
        unreachable.stderr.contains("is `threadbox dev` running?"),
        "{}",
        unreachable.stderr
    );

    // 1: something that is not threadbox answered.
    let other = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(|| async { "plain text, not JSON" });
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    };
    let foreign = cli(&other, &["list"], &[]).await;
    assert_eq!(foreign.code, 1, "{}", foreign.stderr);
    assert!(
        foreign.stderr.contains("not threadbox's JSON"),
        "{}",
        foreign.stderr
    );
}

#[tokio::test]
async fn api_keys_come_from_the_flag_or_the_environment() {
    let api = Api::start(ApiAuth::new(["k-123"])).await;
    api.run(&["list"]).await.failed(6, "(unauthorized)");
    api.run(&["list", "--api-key", "wrong"])
        .await
        .failed(6, "(unauthorized)");
    api.run(&["list", "--api-key", "k-123"]).await.ok();
    cli(&api.url, &["list"], &[("THREADBOX_API_KEY", "k-123")])
        .await
        .ok();
}

#[tokio::test]
async fn follow_prints_new_events_as_they_happen() {
    let api = Api::start(ApiAuth::disabled()).await;
    api.run(&["resolve", "watched"]).await.ok();
    let mut child = support::follow_events(&api.url, "watched", "100ms");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(next_event(&mut lines).await, (1, "creating".to_owned()));
    assert_eq!(next_event(&mut lines).await, (2, "active".to_owned()));
    api.tb.pause(&tid("watched")).await.unwrap();
    assert_eq!(next_event(&mut lines).await, (3, "pausing".to_owned()));
    assert_eq!(next_event(&mut lines).await, (4, "paused".to_owned()));
    assert!(child.try_wait().unwrap().is_none(), "follow keeps going");
    child.kill().await.unwrap();
}

/// The next event a follower printed, as (seq, to).
async fn next_event(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> (u64, String) {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("an event within 10s")
        .unwrap()
        .expect("still following");
    let event: Value = serde_json::from_str(&line).unwrap();
    (
        event["seq"].as_u64().unwrap(),
        event["to"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn network_changes_a_threads_profile_and_refuses_a_bad_one() {
    let api = Api::start(ApiAuth::disabled()).await;
    api.run(&["resolve", "demo"]).await.ok();

    let set = api
        .run(&["network", "demo", "networked:pypi.org,*.pythonhosted.org"])
        .await
        .ok();
    // The in-memory provider, like runc, cannot change a made sandbox's network.
    assert_eq!(
        set.stdout,
        "demo: network networked (allow: pypi.org, *.pythonhosted.org) (next sandbox): \
         recorded; the sandbox keeps the network it was made with (the provider cannot change \
         it in place) and the thread's next one gets this profile (POST .../reset for one now: \
         its files are lost)\n"
    );
    api.run(&["reset", "demo"]).await.ok();
    let session = api.tb.session(&tid("demo")).await.unwrap().unwrap();
    assert_eq!(
        session.network.describe(),
        "networked (allow: pypi.org, *.pythonhosted.org)"
    );
    assert_eq!(
        api.provider
            .network_of(session.sandbox_id.as_deref().unwrap())
            .map(|n| n.describe()),
        Some(session.network.describe()),
        "the next sandbox is made with it"
    );

    let again = api
        .run(&[
            "network",
            "demo",
            "networked:pypi.org,*.pythonhosted.org",
            "--json",
        ])
        .await
        .ok()
        .json();
    assert_eq!(again["applied"], "unchanged");

    // A bad profile never reaches the server: a usage error naming the entry.
    let bad = api.run(&["network", "demo", "networked:a.*.test"]).await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("a.*.test"), "{}", bad.stderr);
    api.run(&["network", "nope", "restricted"])
        .await
        .failed(3, "(unknown_thread)");
}
