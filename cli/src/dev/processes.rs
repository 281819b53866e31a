//! The background-process watcher: what keeps a running process's hold honest in `threadbox
//! dev`. Every few seconds it looks at each thread holding a process hold (one provider call per
//! thread), records the ends it finds (event and hold release, in one write), and renews the
//! hold of each process whose output grew, so a process keeps its thread awake while it works
//! and for its idle limit after. Lambda has no such resident loop; there the API's own reads do
//! this (see `usecases::processes`).
//!
//! What a look finds depends on what the sandbox holds, and a sandbox is hostile: a FIFO
//! planted in a process record, a process table at its limit, a provider call that hangs. So
//! no thread's look can hold up another's: each runs on a task of its own, at most
//! [`CONCURRENT_LOOKS`] at once, within [`LOOK_DEADLINE`] (far below any default idle limit); a
//! look still under way when the next pass comes is left to finish, not started twice. A look
//! that runs out of time is dropped (its command in the sandbox killed with it), logged, and
//! its thread marked slow: slow threads are looked at in a lane of their own ([`SLOW_LOOKS`] at
//! once), so however many there are, they never take the places of the others.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use threadbox_core::domain::ThreadId;
use threadbox_core::usecases::Threadbox;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// How often the watcher looks.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(2);
/// The longest one thread's look may take before it is given up for this pass.
pub const LOOK_DEADLINE: Duration = Duration::from_secs(10);
/// Threads looked at at once.
const CONCURRENT_LOOKS: usize = 8;
/// Threads whose last look ran out of time looked at at once, apart from the others.
const SLOW_LOOKS: usize = 2;

/// What the watcher keeps about one thread between passes.
#[derive(Default)]
struct Watched {
    /// Per process: the output offset seen last time (taken by a look under way).
    seen: Option<HashMap<String, u64>>,
    /// Its last look ran out of time.
    slow: bool,
}

enum Outcome {
    Looked,
    Failed(threadbox_core::usecases::UseCaseError),
    TimedOut,
}

/// Look every `interval`, giving each thread's look `deadline` (`LOOK_DEADLINE` in `dev`).
pub async fn run(
    tb: Threadbox,
    interval: Duration,
    deadline: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut watched: HashMap<ThreadId, Watched> = HashMap::new();
    let lanes = (
        Arc::new(Semaphore::new(CONCURRENT_LOOKS)),
        Arc::new(Semaphore::new(SLOW_LOOKS)),
    );
    let mut looks: JoinSet<(ThreadId, HashMap<String, u64>, Outcome)> = JoinSet::new();
    // After a failure (a locked or unreachable store), look less often, up to once a minute,
    // so a stuck store is not kept busier by the watcher than by the requests it serves.
    let mut wait = interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
        while let Some(done) = looks.try_join_next() {
            let Ok((thread, seen, outcome)) = done else {
                continue;
            };
            let entry = watched.entry(thread.clone()).or_default();
            entry.seen = Some(seen);
            match outcome {
                Outcome::Looked => {
                    if entry.slow {
                        tracing::info!(thread_id = %thread, "background processes answer in time again");
                    }
                    entry.slow = false;
                }
                Outcome::Failed(error) => {
                    tracing::warn!(thread_id = %thread, %error, "checking background processes failed");
                }
                Outcome::TimedOut => {
                    tracing::warn!(
                        thread_id = %thread,
                        deadline_ms = deadline.as_millis() as u64,
                        "looking at background processes ran out of time; the thread is looked \
                         at apart from the others until it answers in time"
                    );
                    entry.slow = true;
                }
            }
        }
        let threads = match tb.threads_with_processes().await {
            Ok(threads) => {
                wait = interval;
                threads
            }
            Err(error) => {
                tracing::warn!(%error, "listing threads with background processes failed");
                wait = (wait * 2).min(Duration::from_secs(60));
                continue;
            }
        };
        // Forget threads with no process hold left, unless their look is still under way.
        watched.retain(|thread, w| w.seen.is_none() || threads.contains(thread));
        for thread in threads {
            let entry = watched.entry(thread.clone()).or_insert_with(|| Watched {
                seen: Some(HashMap::new()),
                slow: false,
            });
            // `None`: its look from an earlier pass is still under way.
            let Some(mut seen) = entry.seen.take() else {
                continue;
            };
            let lane = if entry.slow { &lanes.1 } else { &lanes.0 }.clone();
            let tb = tb.clone();
            looks.spawn(async move {
                let Ok(_place) = lane.acquire_owned().await else {
                    return (thread, seen, Outcome::Looked);
                };
                let outcome =
                    match tokio::time::timeout(deadline, tb.check_processes(&thread, &mut seen))
                        .await
                    {
                        Ok(Ok(_)) => Outcome::Looked,
                        Ok(Err(error)) => Outcome::Failed(error),
                        Err(_) => Outcome::TimedOut,
                    };
                (thread, seen, outcome)
            });
        }
    }
    looks.abort_all();
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use async_trait::async_trait;
    use threadbox_core::domain::Cause;
    use threadbox_core::ports::{
        Clock, Connected, CreateSandbox, CreatedSandbox, ExecCommand, ExecRequest, ExecResult,
        ProcessInfo, ProcessState, ProviderError, SandboxInfo, SandboxProvider, StartProcess,
        SystemClock,
    };
    use threadbox_core::usecases::{Config, ProcessRequest};
    use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
    use threadbox_testing::InMemoryProvider;

    use super::*;

    /// The in-memory provider, with background processes of its own: in the sandbox named
    /// `hanging`, looking at them never answers (a FIFO planted in a record, say); elsewhere
    /// the process started last prints on every look, until told it has ended.
    struct Processes {
        inner: Arc<InMemoryProvider>,
        hanging: std::sync::Mutex<Option<String>>,
        last_started: std::sync::Mutex<String>,
        printed: AtomicU64,
        ended: AtomicBool,
    }

    fn info(id: &str, state: ProcessState, output_bytes: u64) -> ProcessInfo {
        ProcessInfo {
            id: id.into(),
            command: "busy".into(),
            pty: false,
            state,
            exit_code: (state == ProcessState::Exited).then_some(0),
            started_at: None,
            ended_at: None,
            output_bytes,
            output_start: 0,
        }
    }

    #[async_trait]
    impl SandboxProvider for Processes {
        fn name(&self) -> &str {
            "memory"
        }
        async fn create(&self, r: CreateSandbox) -> Result<CreatedSandbox, ProviderError> {
            self.inner.create(r).await
        }
        async fn connect(&self, id: &str) -> Result<Connected, ProviderError> {
            self.inner.connect(id).await
        }
        async fn pause(&self, id: &str) -> Result<(), ProviderError> {
            self.inner.pause(id).await
        }
        async fn kill(&self, id: &str) -> Result<(), ProviderError> {
            self.inner.kill(id).await
        }
        async fn set_timeout(&self, id: &str, t: Duration) -> Result<(), ProviderError> {
            self.inner.set_timeout(id, t).await
        }
        async fn info(&self, id: &str) -> Result<SandboxInfo, ProviderError> {
            self.inner.info(id).await
        }
        async fn list(
            &self,
            m: &BTreeMap<String, String>,
        ) -> Result<Vec<SandboxInfo>, ProviderError> {
            self.inner.list(m).await
        }
        async fn exec(&self, id: &str, r: ExecRequest) -> Result<ExecResult, ProviderError> {
            self.inner.exec(id, r).await
        }
        async fn read_file(&self, id: &str, path: &str) -> Result<Vec<u8>, ProviderError> {
            self.inner.read_file(id, path).await
        }
        async fn write_file(&self, id: &str, path: &str, c: &[u8]) -> Result<(), ProviderError> {
            self.inner.write_file(id, path, c).await
        }
        async fn start_process(
            &self,
            _id: &str,
            r: StartProcess,
        ) -> Result<ProcessInfo, ProviderError> {
            *self.last_started.lock().unwrap() = r.id.clone();
            Ok(info(&r.id, ProcessState::Running, 0))
        }
        async fn list_processes(&self, id: &str) -> Result<Vec<ProcessInfo>, ProviderError> {
            if self.hanging.lock().unwrap().as_deref() == Some(id) {
                std::future::pending::<()>().await;
            }
            let printed = self.printed.fetch_add(10, Ordering::SeqCst) + 10;
            let state = if self.ended.load(Ordering::SeqCst) {
                ProcessState::Exited
            } else {
                ProcessState::Running
            };
            let id = self.last_started.lock().unwrap().clone();
            Ok(vec![info(&id, state, printed)])
        }
    }

    /// One thread whose look never answers holds up no other: the busy thread's hold (a short
    /// idle limit) stays live while its process prints, and its end is recorded, while the
    /// other thread's look hangs. Looked at one after another, as before, the hanging look
    /// (its thread sorts first) held every pass, and the busy thread's hold ran out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hanging_thread_stalls_no_other_threads_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadbox.db");
        let provider = Arc::new(Processes {
            inner: InMemoryProvider::new(),
            hanging: std::sync::Mutex::new(None),
            last_started: std::sync::Mutex::new(String::new()),
            printed: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        });
        let tb = Threadbox::new(
            Arc::new(SqliteSessionStore::open(&path).unwrap()),
            provider.clone(),
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap()),
            Arc::new(SystemClock),
            Config::default(),
        );
        let start = |idle: u64| ProcessRequest {
            command: ExecCommand::Shell("busy".into()),
            cwd: None,
            env: BTreeMap::new(),
            pty: None,
            output_chunks: 1,
            idle_limit: Duration::from_secs(idle),
            user: Default::default(),
        };
        let hanging = ThreadId::parse("a-hanging").unwrap();
        let busy = ThreadId::parse("b-busy").unwrap();
        tb.start_process(&hanging, start(600)).await.unwrap();
        let sandbox = tb.session(&hanging).await.unwrap().unwrap().sandbox_id;
        *provider.hanging.lock().unwrap() = sandbox;
        let started = tb.start_process(&busy, start(2)).await.unwrap();

        let (stop, stopped) = watch::channel(false);
        let watcher = tokio::spawn(run(
            tb.clone(),
            Duration::from_millis(100),
            Duration::from_secs(1),
            stopped,
        ));
        // Six seconds: three of the busy process's idle limits, six of the deadline.
        let until = std::time::Instant::now() + Duration::from_secs(6);
        while std::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let session = tb.session(&busy).await.unwrap().unwrap();
            let now = SystemClock.now();
            assert!(
                session
                    .live_holds(now)
                    .any(|h| h.hold_id.ends_with(&started.id)),
                "the busy process's hold ran out while it printed: {:?}",
                session.holds
            );
        }
        provider.ended.store(true, Ordering::SeqCst);
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let events = tb.events(&busy, 0, 100).await.unwrap();
            if events.iter().any(|e| {
                e.cause == Cause::Process
                    && e.detail.as_deref().is_some_and(|d| d.contains("exited"))
            }) {
                break;
            }
            assert!(
                std::time::Instant::now() < until,
                "the end was never recorded: {events:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), watcher)
            .await
            .expect("the watcher stops promptly, a look still hanging")
            .unwrap();
    }
}
