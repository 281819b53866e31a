//! What images cost on runc: the first unpack of a 100 MB and a 500 MB image, a sandbox's create
//! → first command from an image against the host image in the same run (issue 33's goal: at
//! most 1.2×), and the disk 20 sandboxes of one image take (the goal: the image once, plus what
//! each wrote). Figures only, printed; nothing is asserted. Run as root with runc installed:
//!
//! ```text
//! cargo bench -p threadbox-runc --bench images
//! THREADBOX_BENCH_RUNS=20 THREADBOX_TEST_DEBIAN_IMAGE=~/.cache/threadbox/test-images/debian-bookworm-minbase.tar \
//!   cargo bench -p threadbox-runc --bench images
//! ```
//!
//! - **Unpack**: root filesystem tarballs of 100 MB and 500 MB made here (Debian's static busybox
//!   and 50 KiB files of random bytes, so nothing compresses or deduplicates), each unpacked into
//!   a fresh store three times (`ImageStore::unpack`: the tarball's digest, then every entry
//!   through the unpacker's checks); the median, and MB/s.
//! - **Create → first command**: `create` then `exec true`, alternating an image sandbox and a
//!   host one, `THREADBOX_BENCH_RUNS` of each (10 by default), each killed after, untimed; the
//!   image is the Debian one `scripts/test.sh` builds when `THREADBOX_TEST_DEBIAN_IMAGE` names it,
//!   else the 100 MB image. Medians, p90s and their ratio. Both with the default disk quota.
//! - **Disk for 20 sandboxes**: 20 sandboxes of the image, each writing 1 MiB into `/opt` as
//!   root; the image's bytes in the store (once), and what each sandbox's volume takes on the
//!   host's disk (its sparse `home.img`'s allocated blocks: the home, the writable layer and the
//!   filesystem's own metadata), against 20 copies of the image.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use threadbox_core::domain::ImageName;
use threadbox_core::ports::{ExecCommand, ExecRequest, SandboxProvider, SandboxUser};
use threadbox_runc::image::{ImageSource, ImageStore};
use threadbox_runc::{ImageRegistration, RuncProvider};

#[path = "../tests/support/sandboxes.rs"]
mod sandboxes;
use sandboxes::{bench_request, bench_runc, state_config, KillAll};
use threadbox_testing::bench::percentile;

const DEFAULT_RUNS: usize = 10;
const GOAL_RATIO: f64 = 1.2;
const FILE_BYTES: usize = 50 * 1024;

fn main() {
    let Some(runc) = bench_runc("images") else {
        return;
    };
    if !rustix::process::geteuid().is_root() {
        eprintln!("images bench skipped: images need root");
        return;
    }
    let runs = std::env::var("THREADBOX_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_RUNS);
    let dir =
        tempfile::tempdir_in(std::env::var("THREADBOX_BENCH_DIR").unwrap_or("/var/tmp".into()))
            .expect("scratch directory");
    println!("images bench: runc at {}", runc.display());

    let tar_100 = make_tarball(dir.path(), 100);
    let tar_500 = make_tarball(dir.path(), 500);
    for (mb, tar) in [(100, &tar_100), (500, &tar_500)] {
        let times: Vec<Duration> = (0..3)
            .map(|round| {
                let store =
                    ImageStore::open(dir.path().join(format!("store-{mb}-{round}"))).unwrap();
                let source = ImageSource::parse(tar.to_str().unwrap()).unwrap();
                let started = Instant::now();
                store.unpack(&source).expect("unpack");
                let took = started.elapsed();
                std::fs::remove_dir_all(dir.path().join(format!("store-{mb}-{round}"))).unwrap();
                took
            })
            .collect();
        let median = percentile(&times, 0.5);
        println!(
            "first unpack, {mb} MB image ({} files): median {median:.0} ms of 3 ({:.0} MB/s)",
            mb * 1024 * 1024 / FILE_BYTES,
            mb as f64 / (median / 1000.0)
        );
    }

    let (name, source) = match std::env::var_os("THREADBOX_TEST_DEBIAN_IMAGE").map(PathBuf::from) {
        Some(path) if path.is_file() => ("debian", path),
        _ => ("synthetic-100mb", tar_100.clone()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(sandboxes_of(dir.path(), runc, name, &source, runs));
}

async fn sandboxes_of(dir: &Path, runc: PathBuf, name: &str, source: &Path, runs: usize) {
    let mut config = state_config(dir, runc);
    let image = ImageName::parse(name).unwrap();
    config.images = vec![ImageRegistration {
        name: image.clone(),
        source: source.display().to_string(),
        setup: None,
    }];
    let _kill = KillAll(config.clone());
    let p = RuncProvider::open(config).await.expect("open");
    let stored = p.images().into_iter().find(|i| i.name == image).unwrap();
    let image_bytes = stored.size_bytes.unwrap_or_default();

    let mut next = 0;
    let (mut with_image, mut with_host) = (Vec::new(), Vec::new());
    for round in 0..runs * 2 {
        let chosen = if round % 2 == 0 {
            image.clone()
        } else {
            ImageName::host()
        };
        let mut request = bench_request("images", next, Default::default());
        next += 1;
        request.image = chosen.clone();
        let started = Instant::now();
        let id = p.create(request).await.expect("create").sandbox_id;
        run(&p, &id, "true", SandboxUser::User).await;
        let took = started.elapsed();
        p.kill(&id).await.expect("kill");
        if chosen.is_host() {
            with_host.push(took)
        } else {
            with_image.push(took)
        }
    }
    let (image_ms, host_ms) = (percentile(&with_image, 0.5), percentile(&with_host, 0.5));
    println!(
        "create -> first command, {runs} runs each: image {name} median {image_ms:.1} ms (p90 {:.1}), \
         host median {host_ms:.1} ms (p90 {:.1}); image / host {:.2} (goal <= {GOAL_RATIO}: {})",
        percentile(&with_image, 0.9),
        percentile(&with_host, 0.9),
        image_ms / host_ms,
        if image_ms / host_ms <= GOAL_RATIO { "met" } else { "not met" }
    );

    let mut ids = Vec::new();
    for _ in 0..20 {
        let mut request = bench_request("images", next, Default::default());
        next += 1;
        request.image = image.clone();
        let id = p.create(request).await.expect("create").sandbox_id;
        run(
            &p,
            &id,
            "mkdir -p /opt && head -c 1048576 /dev/urandom > /opt/mine && sync",
            SandboxUser::Root,
        )
        .await;
        ids.push(id);
    }
    let volumes: Vec<u64> = ids
        .iter()
        .map(|id| {
            let image = dir.join("state/sandboxes").join(id).join("home.img");
            std::fs::metadata(&image)
                .map(|m| m.blocks() * 512)
                .unwrap_or_default()
        })
        .collect();
    let store_bytes = du(&dir.join("state/images"));
    let each = volumes.iter().sum::<u64>() as f64 / volumes.len() as f64;
    let total = store_bytes as f64 + volumes.iter().sum::<u64>() as f64;
    println!(
        "disk for 20 sandboxes of {name} ({:.1} MB of files), each having written 1 MiB: the store \
         {:.1} MB (the image once) + {:.1} MB per sandbox's volume (home, writable layer, ext4's \
         own metadata) = {:.1} MB, against {:.1} MB for 20 copies of the image",
        image_bytes as f64 / 1e6,
        store_bytes as f64 / 1e6,
        each / 1e6,
        total / 1e6,
        20.0 * image_bytes as f64 / 1e6
    );
    for id in ids {
        p.kill(&id).await.expect("kill");
    }
}

async fn run(p: &RuncProvider, id: &str, cmd: &str, user: SandboxUser) {
    let result = p
        .exec(
            id,
            ExecRequest {
                command: ExecCommand::Shell(cmd.into()),
                cwd: None,
                env: BTreeMap::new(),
                stdin: None,
                timeout: Duration::from_secs(60),
                output_cap: 4096,
                user,
            },
        )
        .await
        .expect("exec");
    assert_eq!(result.exit_code, Some(0), "{cmd}: {}", result.stderr);
}

/// Bytes the files under `path` take on disk (allocated blocks, each hard link once).
fn du(path: &Path) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if seen.insert((meta.dev(), meta.ino())) {
                total += meta.blocks() * 512;
            }
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

/// A root filesystem tarball of about `mb` MB: busybox, `sh`, and 50 KiB files of random bytes.
fn make_tarball(dir: &Path, mb: usize) -> PathBuf {
    let path = dir.join(format!("image-{mb}mb.tar"));
    let mut builder = tar::Builder::new(std::fs::File::create(&path).unwrap());
    builder
        .append_path_with_name("/bin/busybox", "bin/busybox")
        .expect("busybox-static (apt-get install busybox-static)");
    let mut link = tar::Header::new_gnu();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_size(0);
    link.set_mode(0o777);
    link.set_uid(0);
    link.set_gid(0);
    link.set_mtime(0);
    builder.append_link(&mut link, "bin/sh", "busybox").unwrap();
    let mut rng_state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut data = vec![0u8; FILE_BYTES];
    for n in 0..mb * 1024 * 1024 / FILE_BYTES {
        for chunk in data.chunks_mut(8) {
            // xorshift: incompressible enough, and no dependency for it.
            rng_state ^= rng_state << 13;
            rng_state ^= rng_state >> 7;
            rng_state ^= rng_state << 17;
            chunk.copy_from_slice(&rng_state.to_le_bytes()[..chunk.len()]);
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(FILE_BYTES as u64);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(
                &mut header,
                format!("usr/share/data/{}/{n}.bin", n / 1000),
                &data[..],
            )
            .unwrap();
    }
    builder.into_inner().unwrap().flush().unwrap();
    path
}
