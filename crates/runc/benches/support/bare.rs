//! The runc command line on a bundle the provider wrote, with nothing of the provider around
//! it: what the benchmarks measure threadbox against, in the same run on the same bundle.

#![allow(dead_code)] // each benchmark that includes this uses part of it

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{CreateSandbox, NetworkProfile, SandboxOwner, SandboxProvider};
use threadbox_runc::{RuncConfig, RuncProvider};

/// The provider a benchmark measures, and a second one on a state directory of its own that
/// only writes the bundles bare runc runs. Neither has a disk quota (the home is a plain
/// directory), so both start the same sandbox. `None`, said on stderr, where runc's provider
/// cannot open here.
pub async fn providers(
    bench: &str,
    mut config: RuncConfig,
    dir: &Path,
) -> Option<(std::sync::Arc<RuncProvider>, RuncProvider)> {
    config.limits.disk = None;
    let mut bare_config = config.clone();
    bare_config.state_dir = dir.join("bare");
    let provider = match RuncProvider::open(config).await {
        Ok(p) => std::sync::Arc::new(p),
        Err(why) => {
            eprintln!("{bench} bench skipped: cannot open the runc provider: {why}");
            return None;
        }
    };
    let bundle_maker = RuncProvider::open(bare_config)
        .await
        .expect("open the bare bundle's provider");
    Some((provider, bundle_maker))
}

pub struct BareRunc {
    pub binary: PathBuf,
    pub root: PathBuf,
    pub bundle: PathBuf,
    /// runc's stderr, read only when a call fails (a file, so no pipe is waited on).
    pub stderr: PathBuf,
}

impl BareRunc {
    /// The bare row's runc, and its bundle: one `bundle_maker` wrote (the sandbox's id
    /// returned), its container stopped, the bundle kept.
    pub async fn on_copy_of(
        bundle_maker: &RuncProvider,
        runc: PathBuf,
        dir: &Path,
    ) -> (BareRunc, String) {
        let source = bundle_maker
            .create(CreateSandbox {
                image: threadbox_core::domain::ImageName::host(),
                owner: SandboxOwner {
                    thread_id: ThreadId::parse("bench-bare-bundle").expect("thread id"),
                    generation: 1,
                },
                network: NetworkProfile::Restricted,
                timeout: Duration::from_secs(3600),
                env: Default::default(),
            })
            .await
            .expect("create the bare bundle")
            .sandbox_id;
        let bare = BareRunc {
            binary: runc,
            root: bundle_maker.config().runc_root(),
            bundle: bundle_maker.config().sandboxes_dir().join(&source),
            stderr: dir.join("runc-stderr.log"),
        };
        bare.remove(&source).await;
        bare.with_shell_init();
        println!(
            "runc: {}; bare bundle {} (written by the provider, its container stopped)",
            bare.binary.display(),
            bare.bundle.display()
        );
        (bare, source)
    }

    /// Bare runc has no command runner to start from a descriptor: its bundle's init is the
    /// shell that sleeps and reaps, which threadbox's containers ran before the runner.
    fn with_shell_init(&self) {
        let path = Path::new(&self.bundle).join("config.json");
        let text = std::fs::read_to_string(&path).expect("the bare bundle's config.json");
        let mut config: serde_json::Value = serde_json::from_str(&text).expect("config.json");
        config["process"]["args"] = serde_json::json!([
            "/bin/sh",
            "-c",
            "exec </dev/null >/dev/null 2>&1; while :; do sleep 2147483647 & wait $!; done"
        ]);
        std::fs::write(&path, config.to_string()).expect("write config.json");
    }

    /// `runc --root R <args>`, stdio to /dev/null (stderr to a file); panics when it fails.
    pub async fn call<S: AsRef<OsStr>>(&self, args: &[S]) {
        let stderr = std::fs::File::create(&self.stderr).expect("stderr file");
        let status = tokio::process::Command::new(&self.binary)
            .arg("--root")
            .arg(&self.root)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .status()
            .await
            .expect("spawn runc");
        if !status.success() {
            let said = std::fs::read_to_string(&self.stderr).unwrap_or_default();
            let args: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
            panic!("runc {} failed ({status}): {said}", args.join(" "));
        }
    }

    /// One call, timed.
    pub async fn timed<S: AsRef<OsStr>>(&self, args: &[S]) -> Duration {
        let started = Instant::now();
        self.call(args).await;
        started.elapsed()
    }

    /// `runc exec <id> <argv>` with its stdout piped: the time to its first byte and to its end.
    pub async fn exec_first_byte(&self, id: &str, argv: &[&str]) -> (Duration, Duration) {
        use tokio::io::AsyncReadExt;
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&self.binary)
            .arg("--root")
            .arg(&self.root)
            .arg("exec")
            .arg(id)
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn runc exec");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut byte = [0u8; 1];
        let read = stdout
            .read(&mut byte)
            .await
            .expect("read runc exec's output");
        assert_eq!(read, 1, "runc exec printed nothing");
        let first = started.elapsed();
        let mut rest = Vec::new();
        stdout.read_to_end(&mut rest).await.expect("read the rest");
        assert!(child.wait().await.expect("wait").success());
        (first, started.elapsed())
    }

    /// The container's init pid, or `None` when runc has no such container; with the time the
    /// `runc state` call took.
    pub async fn init_pid(&self, id: &str) -> (Option<i32>, Duration) {
        let started = Instant::now();
        let out = tokio::process::Command::new(&self.binary)
            .arg("--root")
            .arg(&self.root)
            .args(["state", id])
            .stdin(Stdio::null())
            .output()
            .await
            .expect("spawn runc state");
        let took = started.elapsed();
        if !out.status.success() {
            return (None, took);
        }
        let state: serde_json::Value = serde_json::from_slice(&out.stdout).expect("runc state");
        (Some(state["pid"].as_i64().unwrap_or(0) as i32), took)
    }

    /// `runc run --detach` of a container on the bundle: the time it took.
    pub async fn run(&self, id: &str) -> Duration {
        let bundle = self.bundle.as_os_str();
        self.timed(&[
            OsStr::new("run"),
            OsStr::new("--detach"),
            OsStr::new("--bundle"),
            bundle,
            OsStr::new(id),
        ])
        .await
    }

    /// The timed part of a cold create: start a container on the bundle, run `true` in it.
    pub async fn run_and_exec(&self, id: &str) -> (Duration, Duration) {
        let started = Instant::now();
        self.run(id).await;
        let ran = started.elapsed();
        self.call(&["exec", id, "true"]).await;
        (ran, started.elapsed())
    }

    /// Kill the container's init, reap it (this process is the provider's child subreaper, so
    /// orphaned inits come to it; a zombie would keep `runc delete` polling), and delete it.
    /// Returns how long its `runc state` took.
    pub async fn remove(&self, id: &str) -> Duration {
        let (Some(pid), took) = self.init_pid(id).await else {
            return Duration::ZERO;
        };
        if pid > 0 {
            // A paused container's init dies of SIGKILL only once thawed.
            let _ = tokio::process::Command::new(&self.binary)
                .arg("--root")
                .arg(&self.root)
                .args(["resume", id])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
            tokio::task::spawn_blocking(move || kill_and_reap(pid))
                .await
                .expect("reaper");
        }
        self.call(&["delete", "--force", id]).await;
        took
    }
}

fn kill_and_reap(pid: i32) {
    // SAFETY: plain system calls on a pid runc just reported as this container's init.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let mut status = 0;
        // SAFETY: as above; `status` is ours.
        let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if reaped == pid {
            return;
        }
        if reaped < 0 {
            // Not our child: dead enough once it is a zombie or gone.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
            if matches!(state, None | Some('Z') | Some('X')) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("container init {pid} still alive after SIGKILL");
}
