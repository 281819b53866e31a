//! Checkpoints, restore and fork on runc, against creating a sandbox in the same run. Prints
//! figures; asserts nothing about time. Run with runc installed (as root: each home a volume
//! with its quota; as an ordinary user: rootless):
//!
//! ```text
//! cargo bench -p threadbox-runc --bench runc_checkpoints
//! ```
//!
//! For homes of 50 MB and 500 MB (and 2 GB with `THREADBOX_BENCH_BIG_HOME=1`; the quota is
//! raised to fit), filled with 1 MiB files of random bytes while a process appends to a log in
//! the home: the time a checkpoint takes and the sandbox's stall (how long it was frozen), a
//! restore, and a fork's time to its first command against a fresh create's time to its first
//! command. Medians of `THREADBOX_BENCH_ROUNDS` rounds (3).
//!
//! `THREADBOX_BENCH_DIR=/mnt/xfs` puts the state (homes and checkpoints) on another filesystem,
//! and `THREADBOX_BENCH_NO_QUOTA=1` makes each home a plain directory there instead of a volume:
//! on XFS or btrfs the copies are then clones (`FICLONE`), which is the copy-on-write case.
//! `THREADBOX_BENCH_COLD=1` (as root) writes back and drops the page cache before each
//! checkpoint, so the home is read from the disk, as after a thread sat idle.
//! `THREADBOX_BENCH_FORK_AFTER_RESTORE_MS` is the pause between a round's restore and its fork
//! (200 by default; 0 forks a home every file of which was just rewritten).

use std::time::{Duration, Instant};

use threadbox_core::domain::CheckpointId;
use threadbox_core::ports::{
    CreateSandbox, ExecRequest, ForkSandbox, NetworkProfile, SandboxProvider,
};
use threadbox_runc::{DiskQuota, RuncProvider};

#[path = "../tests/support/sandboxes.rs"]
mod sandboxes;
use sandboxes::{bench_request, bench_runc, state_config};

fn request(n: usize) -> CreateSandbox {
    bench_request("bench-checkpoints", n, NetworkProfile::Restricted)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort_unstable();
    values[values.len() / 2]
}

async fn sh(p: &RuncProvider, id: &str, script: &str) {
    let mut request = ExecRequest::shell(script);
    request.timeout = Duration::from_secs(600);
    let out = p.exec(id, request).await.expect("exec");
    assert_eq!(out.exit_code, Some(0), "{script}: {}", out.stderr);
}

/// A fresh sandbox's create and its first command, timed together.
async fn create_to_first_command(p: &RuncProvider, n: usize) -> (String, Duration) {
    let started = Instant::now();
    let id = p.create(request(n)).await.expect("create").sandbox_id;
    sh(p, &id, "true").await;
    (id, started.elapsed())
}

/// The untimed pause between a round's restore and its fork (see `one_size`);
/// `THREADBOX_BENCH_FORK_AFTER_RESTORE_MS` changes it (0: the fork right after the restore).
static AFTER_RESTORE: std::sync::LazyLock<Duration> = std::sync::LazyLock::new(|| {
    Duration::from_millis(
        std::env::var("THREADBOX_BENCH_FORK_AFTER_RESTORE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200),
    )
});

struct Figures {
    checkpoint: Vec<Duration>,
    stall: Vec<Duration>,
    restore: Vec<Duration>,
    fork: Vec<Duration>,
    create: Vec<Duration>,
}

/// Write back dirty pages and drop the page cache (as root), for a cold read of the home.
fn drop_caches() {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop the page cache (as root)");
}

async fn one_size(
    p: &RuncProvider,
    mb: usize,
    rounds: usize,
    cold: bool,
    next: &mut usize,
) -> Figures {
    let (source, _) = create_to_first_command(p, *next).await;
    *next += 1;
    sh(
        p,
        &source,
        &format!("mkdir -p data && for i in $(seq 1 {mb}); do head -c 1048576 /dev/urandom > data/f$i; done"),
    )
    .await;
    // A writer while the checkpoints are taken, as an agent's build would be.
    sh(
        p,
        &source,
        "nohup sh -c 'while :; do date >> log; sleep 0.01; done' >/dev/null 2>&1 &",
    )
    .await;
    let mut f = Figures {
        checkpoint: Vec::new(),
        stall: Vec::new(),
        restore: Vec::new(),
        fork: Vec::new(),
        create: Vec::new(),
    };
    for _ in 0..rounds {
        let cp = CheckpointId::generate();
        if cold {
            drop_caches();
        }
        let started = Instant::now();
        let taken = p
            .checkpoint(&source, &cp, u64::MAX)
            .await
            .expect("checkpoint");
        f.checkpoint.push(started.elapsed());
        f.stall.push(taken.stalled);

        let started = Instant::now();
        p.restore(&source, &cp).await.expect("restore");
        f.restore.push(started.elapsed());
        // A restore rewrites every file of the home, and a live copy's second pass copies again
        // every file changed within 100 ms of its first (their ctimes cannot tell it otherwise):
        // a fork within that window copies the home twice. The fork below is of a home at work
        // (the writer still appends), as a user's next action after an undo would find it.
        tokio::time::sleep(*AFTER_RESTORE).await;

        let started = Instant::now();
        let forked = p
            .fork(ForkSandbox {
                source: source.clone(),
                checkpoint: None,
                create: request(*next),
            })
            .await
            .expect("fork")
            .sandbox_id;
        *next += 1;
        sh(p, &forked, "true").await;
        f.fork.push(started.elapsed());

        let (fresh, took) = create_to_first_command(p, *next).await;
        *next += 1;
        f.create.push(took);

        for id in [forked, fresh] {
            p.kill(&id).await.expect("kill");
        }
        let thread = p
            .info(&source)
            .await
            .expect("info")
            .owner()
            .expect("owner")
            .thread_id;
        p.delete_checkpoint(&thread, &cp).await.expect("delete");
    }
    p.kill(&source).await.expect("kill the source");
    f
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(runc) = bench_runc("runc_checkpoints") else {
        return;
    };
    let rounds: usize = std::env::var("THREADBOX_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let mut sizes = vec![50, 500];
    if std::env::var_os("THREADBOX_BENCH_BIG_HOME").is_some() {
        sizes.push(2048);
    }
    let dir = match std::env::var_os("THREADBOX_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(base),
        None => tempfile::tempdir(),
    }
    .expect("temp dir");
    let mut config = state_config(dir.path(), runc);
    if std::env::var_os("THREADBOX_BENCH_NO_QUOTA").is_some() {
        config.limits.disk = None;
    }
    if let Some(disk) = config.limits.disk.as_mut() {
        *disk = DiskQuota {
            bytes: 4 << 30,
            ..DiskQuota::default()
        };
    }
    let cold = std::env::var_os("THREADBOX_BENCH_COLD").is_some();
    let p = RuncProvider::open(config).await.expect("open provider");
    println!(
        "runc checkpoints ({}{}, medians of {rounds} rounds; a writer appends to the home throughout)",
        match (p.is_rootless(), p.config().limits.disk.is_some()) {
            (true, _) => "rootless",
            (false, true) => "root, home volumes",
            (false, false) => "root, plain-directory homes",
        },
        if cold { ", page cache dropped before each checkpoint" } else { "" }
    );
    println!("home    checkpoint  stall     restore   fork→1st cmd  create→1st cmd  fork/create");
    let mut next = 0;
    for mb in sizes {
        let f = one_size(&p, mb, rounds, cold, &mut next).await;
        let (fork, create) = (median(f.fork), median(f.create));
        println!(
            "{:>4} MB  {:>7.0} ms  {:>5.0} ms  {:>6.0} ms  {:>9.0} ms  {:>11.0} ms  {:>9.2}",
            mb,
            ms(median(f.checkpoint)),
            ms(median(f.stall)),
            ms(median(f.restore)),
            ms(fork),
            ms(create),
            fork.as_secs_f64() / create.as_secs_f64(),
        );
    }
}
