//! The background-process watcher: what keeps a running process's hold honest in `threadbox
//! dev`. Every few seconds it looks at each thread holding a process hold (one provider call per
//! thread), records the ends it finds (event and hold release, in one write), and renews the
//! hold of each process whose output grew, so a process keeps its thread awake while it works
//! and for its idle limit after. Lambda has no such resident loop; there the API's own reads do
//! this (see `usecases::processes`).

use std::collections::HashMap;
use std::time::Duration;

use threadbox_shared::domain::ThreadId;
use threadbox_shared::usecases::Threadbox;
use tokio::sync::watch;

/// How often the watcher looks.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(2);

pub async fn run(tb: Threadbox, interval: Duration, mut shutdown: watch::Receiver<bool>) {
    // Per thread, per process: the output offset seen last time.
    let mut seen: HashMap<ThreadId, HashMap<String, u64>> = HashMap::new();
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
        seen.retain(|thread, _| threads.contains(thread));
        for thread in threads {
            let offsets = seen.entry(thread.clone()).or_default();
            if let Err(error) = tb.check_processes(&thread, offsets).await {
                tracing::warn!(thread_id = %thread, %error, "checking background processes failed");
            }
        }
    }
}
