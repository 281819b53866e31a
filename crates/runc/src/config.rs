//! Settings for the runc provider: where its state lives and the limits every sandbox gets.

use std::path::PathBuf;
use std::time::Duration;

use super::programs::find_program;
use threadbox_core::domain::{ImageName, ImageSetup};
use threadbox_core::ports::DEFAULT_FILE_CAP;

/// The resource profile every sandbox of one provider runs under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Memory limit in bytes. Swap is capped to the same figure where the kernel accounts for
    /// swap, so a sandbox cannot page its way past the limit.
    pub memory_bytes: u64,
    /// CPU time in thousandths of a core (1000 is one full core).
    pub cpu_millicores: u32,
    /// Most processes and threads alive at once; this is what stops a fork bomb.
    pub pids: u32,
    /// Size of the `/tmp` tmpfs in bytes. Its pages also count against `memory_bytes`.
    pub tmp_bytes: u64,
    /// Largest file any process in the sandbox may write (RLIMIT_FSIZE): past it the write fails
    /// with EFBIG and the process gets SIGXFSZ.
    pub file_size_bytes: u64,
    /// The hard limit on `/home/user` (a filesystem of its own, see the `volume` module);
    /// `None` leaves it a plain directory on the host's disk, limited only by that disk.
    pub disk: Option<DiskQuota>,
}

/// How much `/home/user` may hold: bytes and files (inodes). Past either, writes get ENOSPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskQuota {
    /// The filesystem's size. It holds its own metadata too (journal and inode tables, about
    /// 5% at the default inode count), so a little less is free for files.
    pub bytes: u64,
    pub inodes: u64,
}

impl Default for DiskQuota {
    /// 2 GiB and 262,144 files (one per 8 KiB).
    fn default() -> Self {
        Self {
            bytes: 2 << 30,
            inodes: 262_144,
        }
    }
}

impl DiskQuota {
    /// The smallest quota an ext4 filesystem with a journal holds comfortably.
    pub const MIN_BYTES: u64 = 16 << 20;
    pub const MIN_INODES: u64 = 128;
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 512 * 1024 * 1024,
            cpu_millicores: 1000,
            pids: 256,
            tmp_bytes: 256 * 1024 * 1024,
            file_size_bytes: 1024 * 1024 * 1024,
            disk: Some(DiskQuota::default()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RuncConfig {
    /// Everything the provider keeps lives here: runc's own state (`runc/`) and one bundle per
    /// sandbox (`sandboxes/<id>/`). A new provider over the same directory finds the same
    /// sandboxes.
    pub state_dir: PathBuf,
    /// The runc binary. [`RuncConfig::new`] looks it up on `PATH` and in the sbin directories
    /// a non-root `PATH` often lacks.
    pub runc_binary: PathBuf,
    pub limits: SandboxLimits,
    /// Upper bound on any single runc call (create, pause, state...). A call that takes longer
    /// is killed and reported as `ProviderError::Unavailable`.
    pub call_timeout: Duration,
    /// Largest file the file API reads or writes.
    pub file_cap: u64,
    /// Make this process a child subreaper and reap the container inits and command wrappers
    /// that runc leaves orphaned, instead of relying on the host's pid 1 (see the `process`
    /// module). This is a process-wide setting: orphans of any of this process's descendants
    /// then come to it, and the provider reaps only its own. Turn it off if something else in
    /// the process manages orphans.
    pub reap_orphans: bool,
    /// Run even when the runc binary lacks the fix for a known container escape (see the
    /// `version` module). Off: opening the provider refuses, naming the CVE and the upgrade.
    pub allow_unpatched_runtime: bool,
    /// Commands one sandbox (one thread) may run at once; past it exec answers
    /// `ProviderError::LimitReached` (`too_many_commands_in_thread`).
    pub max_commands_per_sandbox: usize,
    /// Commands all sandboxes together may run at once (`too_many_commands`).
    pub max_commands: usize,
    /// Sandboxes alive at once, paused ones included since they keep their memory
    /// (`too_many_sandboxes`).
    pub max_sandboxes: usize,
    /// Give each new sandbox a user namespace of its own, mapped onto a host id range no other
    /// sandbox uses (see the `idmap` module), so per-uid kernel limits and host file ownership
    /// are per sandbox. On by default; off runs sandboxes as host uid 1000, as before.
    pub user_namespaces: bool,
    /// The host's table of allocated id ranges (see the `idmap` module), shared by every
    /// provider on the host so no two sandboxes ever get the same host ids, whichever state
    /// directory they live in.
    pub id_ranges_dir: PathBuf,
    /// Where the state goes when the sandboxes could not reach `state_dir` (a directory above
    /// it lets no one else pass, like a 0700 home): a directory of its own here, with
    /// `state_dir` a symlink to it. See the `placement` module.
    pub host_state_dir: PathBuf,
    /// Home volumes kept formatted ahead of creates (with `limits.disk`), so a create only
    /// mounts one; see the `volume` module.
    pub spare_volumes: usize,
    /// Networked sandboxes: the resolver the egress proxy asks, operator exceptions to the
    /// always-refused networks, and the proxy's bounds (see the `network` module).
    pub network: super::network::NetworkConfig,
    /// Images the operator registered (`threadbox dev --image NAME=SOURCE`), unpacked into
    /// `images_dir` when the provider opens; `host` (the host's `/usr`) is always there too.
    pub images: Vec<ImageRegistration>,
    /// Start each new container with the command runner as its init (see the `runner`
    /// module), where this build has one, so the user's commands start without a `runc exec`.
    /// Off, new containers start without it and their commands go through `runc exec` (the
    /// `floor` benchmark's "before"); a container made with one keeps using it.
    pub command_runner: bool,
}

/// One image an operator registered on runc: its name, its source as the operator wrote it (see
/// `image::ImageSource::parse`), and what new sandboxes of it run before their first command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRegistration {
    pub name: ImageName,
    pub source: String,
    pub setup: Option<ImageSetup>,
}

/// The warm pool a host running runc sandboxes keeps per network profile unless told otherwise
/// (`threadbox dev --warm-pool`). Members cost only memory here (no running time is billed), and
/// with the pool refilled on each take, this many absorbs a burst of new threads arriving
/// faster than one create (the `floor` benchmark's burst row says how many of 10 in a second
/// took a member).
pub const DEFAULT_WARM_POOL: usize = 2;

/// The default host-wide table of allocated id ranges.
pub const HOST_ID_RANGES_DIR: &str = "/var/lib/threadbox/idranges";

/// The default home of state directories the sandboxes could not reach where they were asked for.
pub const HOST_STATE_DIR: &str = "/var/lib/threadbox/state";

/// Host-wide caps that fit this machine: 32 running commands per core, and as many sandboxes as
/// fit in its memory at each sandbox's memory limit.
pub fn host_caps(limits: &SandboxLimits) -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let kib: u64 = info
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(4 << 30);
    let sandboxes = (memory / limits.memory_bytes.max(1)).max(1) as usize;
    (cores * 32, sandboxes)
}

impl RuncConfig {
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        let limits = SandboxLimits::default();
        let (max_commands, max_sandboxes) = host_caps(&limits);
        Self {
            state_dir: state_dir.into(),
            runc_binary: find_runc().unwrap_or_else(|| PathBuf::from("runc")),
            limits,
            call_timeout: Duration::from_secs(30),
            file_cap: DEFAULT_FILE_CAP,
            reap_orphans: true,
            allow_unpatched_runtime: false,
            max_commands_per_sandbox: 4,
            max_commands,
            max_sandboxes,
            user_namespaces: true,
            id_ranges_dir: PathBuf::from(HOST_ID_RANGES_DIR),
            host_state_dir: PathBuf::from(HOST_STATE_DIR),
            spare_volumes: 2,
            network: Default::default(),
            images: Vec::new(),
            command_runner: true,
        }
    }

    /// runc's `--root`: its container state, kept inside our state directory so it survives
    /// restarts of this process (runc's default, /run/runc, is a tmpfs shared with every other
    /// runc user on the host).
    pub fn runc_root(&self) -> PathBuf {
        self.state_dir.join("runc")
    }

    /// Where the per-sandbox bundles live.
    pub fn sandboxes_dir(&self) -> PathBuf {
        self.state_dir.join("sandboxes")
    }

    /// The image store: one unpacked root per image digest (see the `image` module).
    pub fn images_dir(&self) -> PathBuf {
        self.state_dir.join("images")
    }

    /// Home volumes formatted ahead of creates (see the `volume` module).
    pub fn volumes_dir(&self) -> PathBuf {
        self.state_dir.join("volumes")
    }

    /// Where a state directory kept its own id table before the table became the host's;
    /// moved into `id_ranges_dir` when the provider opens.
    pub(crate) fn legacy_id_ranges_dir(&self) -> PathBuf {
        self.state_dir.join("idranges")
    }
}

/// Can this process run runc sandboxes? The runc binary if so; otherwise why not, in words
/// fit for a skipped test or a CLI falling back to another provider.
pub fn host_can_run_sandboxes() -> Result<PathBuf, String> {
    if super::rootless::is_rootless() {
        super::rootless::check_host()?;
    }
    find_runc().ok_or_else(|| "runc is not installed (apt-get install runc)".into())
}

/// The runc binary on `PATH`, or in the sbin directories where distributions install it.
pub fn find_runc() -> Option<PathBuf> {
    find_program("runc")
}
