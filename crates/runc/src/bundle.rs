//! One OCI bundle per sandbox: its directory layout, the generated root filesystem and `/etc`,
//! the runtime spec (`config.json`) and the small record of our own (`sandbox.json`).
//!
//! ```text
//! <state>/sandboxes/<id>/
//!   config.json    the OCI runtime spec; thread id and generation are its annotations
//!   sandbox.json   created_at and the deadline set_timeout moves (the janitor enforces it)
//!   rootfs/        read-only inside: mount points, usrmerge symlinks and a generated /etc
//!   home/          the sandbox's /home/user, writable and kept across pauses: with a disk
//!                  quota, the mount point of home.img
//!   home.img       the home's filesystem, a sparse ext4 image of the quota's size (`volume`)
//!   run/           pid files of running commands
//! <state>/userns/<id>  the sandbox's user namespace, pinned by a bind mount
//! <state>/idranges/<slot>  the sandbox's host id range, allocated (see `idmap`)
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::config::SandboxLimits;
use super::idmap::{create_user_namespace, remove_user_namespace_pin, IdRange};
use super::image_root;
use super::volume::{self, VolumePool};
use threadbox_core::domain::Millis;

/// A restricted sandbox's resolver file: no name servers, since it has no network.
pub(crate) const RESTRICTED_RESOLV_CONF: &str =
    "# threadbox: this sandbox has no network, so no name servers.\n";

/// Under the state directory: one pinned user namespace per sandbox that has one.
pub(crate) const USERNS_DIR: &str = "userns";

pub(crate) const HOME: &str = "/home/user";

/// The container's pid 1. It must reap orphans (commands that leave background children behind
/// would otherwise fill the pid limit with zombies), which a shell's `wait` does. Its stdio goes
/// to /dev/null first, so runc's pipes close as soon as it is up.
const INIT_SCRIPT: &str =
    "exec </dev/null >/dev/null 2>&1; while :; do sleep 2147483647 & wait $!; done";

/// The container's init: the command runner (which also reaps), else a shell that only sleeps
/// and reaps.
fn init_args(runner: bool) -> Vec<&'static str> {
    if runner {
        vec![super::runner::INIT_PATH]
    } else {
        vec!["/bin/sh", "-c", INIT_SCRIPT]
    }
}

/// Paths runc masks and makes read-only in `/proc` and `/sys` (runc's and Docker's defaults).
const MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The root filesystem's tmpfs: room for /etc (the loader cache is the biggest file, under
/// 100 KiB) and a few dozen mount points and links.
const ROOTFS_TMPFS_OPTIONS: &str = "mode=755,size=4m,nr_inodes=1024";

/// Top-level directories that usrmerged distributions make symlinks into /usr.
const USRMERGE_DIRS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

#[derive(Clone, Debug)]
pub(crate) struct Bundle {
    dir: PathBuf,
}

impl Bundle {
    /// `id` must already be validated: it becomes a path component.
    pub fn new(sandboxes_dir: &Path, id: &str) -> Self {
        Self {
            dir: sandboxes_dir.join(id),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn exists(&self) -> bool {
        self.dir.is_dir()
    }
    /// Where `runc run` writes the container init's host pid.
    pub fn init_pid_file(&self) -> PathBuf {
        self.dir.join("init.pid")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }
    /// The home's filesystem image, where the sandbox has a disk quota.
    pub fn home_image(&self) -> PathBuf {
        self.dir.join("home.img")
    }
    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }
    /// Where the sandbox's user namespace is pinned (see `idmap::create_user_namespace`):
    /// `<state>/userns/<id>`, outside the bundle, so removing a bundle never meets a mount.
    pub fn userns_pin(&self) -> PathBuf {
        let id = self.dir.file_name().unwrap_or_default();
        let state_dir = self
            .dir
            .parent()
            .and_then(Path::parent)
            .unwrap_or(&self.dir);
        state_dir.join(USERNS_DIR).join(id)
    }
    fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
    /// An image sandbox's volume, managed files and image layer (see `image_root`).
    pub fn volume(&self) -> PathBuf {
        image_root::volume_dir(&self.dir)
    }
    pub fn managed(&self) -> PathBuf {
        image_root::managed_dir(&self.dir)
    }
    fn lower(&self) -> PathBuf {
        image_root::lower_dir(&self.dir)
    }
    /// Whether the sandbox's root is an image's (an overlay) rather than the host's `/usr`.
    pub fn has_image_root(&self) -> bool {
        image_root::is_image_sandbox(&self.dir)
    }
    fn record_path(&self) -> PathBuf {
        self.dir.join("sandbox.json")
    }

    pub fn read_record(&self) -> io::Result<SandboxRecord> {
        let bytes = fs::read(self.record_path())?;
        serde_json::from_slice(&bytes).map_err(io::Error::other)
    }

    /// Replace the record atomically, so a crash never leaves half a file.
    pub fn write_record(&self, record: &SandboxRecord) -> io::Result<()> {
        let tmp = self.dir.join(".sandbox.json.tmp");
        let bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
        // Synced: the deadline is what the janitor acts on, so it must not go back in time.
        write_file(&tmp, &bytes, 0o600)?.sync_all()?;
        fs::rename(&tmp, self.record_path())
    }

    /// How long ago the bundle directory was made or last had an entry added.
    pub fn age(&self) -> Option<Duration> {
        fs::metadata(&self.dir)
            .ok()?
            .modified()
            .ok()?
            .elapsed()
            .ok()
    }

    /// Delete the bundle, home included, whatever tree the sandbox left there. A home volume
    /// is unmounted and its image unlinked, whatever it holds; a plain home directory is walked
    /// (see `remove`: iterative, so no depth can overflow the stack; links are removed, never
    /// followed). Gone already is fine.
    pub fn remove(&self) -> io::Result<()> {
        // Rootless, nothing was mounted (and unmounting is refused anyway).
        if rustix::process::geteuid().is_root() {
            remove_user_namespace_pin(&self.userns_pin())?;
            // Unmounted first, or the walk below would go into the volume file by file; an
            // image's root (an overlay whose writable layer is on the volume) before the home
            // and the volume it holds.
            volume::unmount(&self.rootfs())?;
            volume::unmount(&self.lower())?;
            volume::unmount(&self.managed())?;
            volume::unmount(&self.home())?;
            volume::unmount(&self.volume())?;
        } else if let Err(e) = fs::remove_file(self.userns_pin()) {
            if e.kind() != io::ErrorKind::NotFound {
                return Err(e);
            }
        }
        use std::os::unix::ffi::OsStrExt;
        let (Some(parent), Some(name)) = (self.dir.parent(), self.dir.file_name()) else {
            return Err(io::Error::other(
                "a bundle directory has a parent and a name",
            ));
        };
        let parent = match fs::File::open(parent) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        };
        let name = std::ffi::CString::new(name.as_bytes()).map_err(io::Error::other)?;
        super::remove::remove_tree_at(&parent, &name)
    }
}

/// What we keep next to the spec: times the trait reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SandboxRecord {
    pub created_at: Millis,
    /// When the sandbox should be stopped unless its timeout is extended. Recorded only: the
    /// janitor enforces it.
    pub deadline: Option<Millis>,
    /// The sandbox's host id range. Records from before ranges existed have none: those
    /// sandboxes run without a user namespace, their ids the host's.
    #[serde(default = "legacy_ids")]
    pub ids: IdRange,
}

fn legacy_ids() -> IdRange {
    IdRange::IDENTITY
}

/// How the host's top-level directories look, decided once per provider: a usrmerged host has
/// `/bin -> usr/bin` and friends, which the rootfs copies as symlinks; an older host has real
/// directories, which are bind-mounted read-only.
#[derive(Clone, Debug)]
pub(crate) struct HostLayout {
    entries: Vec<(&'static str, TopLevel)>,
    login_shell: &'static str,
}

#[derive(Clone, Debug)]
enum TopLevel {
    Symlink(PathBuf),
    Dir,
}

impl HostLayout {
    pub fn probe() -> Self {
        let entries = USRMERGE_DIRS
            .iter()
            .filter_map(|&name| {
                let host = Path::new("/").join(name);
                let meta = fs::symlink_metadata(&host).ok()?;
                if meta.file_type().is_symlink() {
                    Some((name, TopLevel::Symlink(fs::read_link(&host).ok()?)))
                } else if meta.is_dir() {
                    Some((name, TopLevel::Dir))
                } else {
                    None
                }
            })
            .collect();
        let login_shell = if Path::new("/usr/bin/bash").exists() {
            "/bin/bash"
        } else {
            "/bin/sh"
        };
        Self {
            entries,
            login_shell,
        }
    }
}

/// Everything that varies between sandboxes' bundles.
pub(crate) struct BundleSpec<'a> {
    pub hostname: String,
    /// Stored as OCI annotations, which `runc state` and `runc list` hand back.
    pub annotations: BTreeMap<String, String>,
    pub env: &'a BTreeMap<String, String>,
    pub limits: &'a SandboxLimits,
    /// Cap swap at the memory limit (only where the kernel accounts for swap).
    pub swap_limit: bool,
    pub host: &'a HostLayout,
    /// The host ids the sandbox's user namespace maps to.
    pub ids: IdRange,
    /// Where the home's filesystem comes from, when it has a quota.
    pub home_volume: Option<&'a VolumePool>,
    /// The unpacked root of the image the sandbox starts from; `None` for the host's `/usr`.
    pub image: Option<&'a Path>,
    /// The init is the command runner, passed by `runc run` as fd 3 (see `runner`); else a
    /// shell that sleeps.
    pub runner: bool,
}

/// An image sandbox's login shell: every image has `/bin/sh`, not necessarily the host's.
const IMAGE_LOGIN_SHELL: &str = "/bin/sh";

/// Lay out a new bundle. The record is written first, so a crash part-way leaves a bundle that
/// the leftover sweep recognises by its age.
pub(crate) fn write_bundle(
    bundle: &Bundle,
    spec: &BundleSpec<'_>,
    record: &SandboxRecord,
) -> io::Result<()> {
    let mut dirs = fs::DirBuilder::new();
    // Searchable by all, listable by none: the container's root is a host id of its own range,
    // and runc sets up the root filesystem as that id, so it must be able to walk to rootfs/
    // and home/. The files next to them stay 0600 and root's.
    dirs.mode(0o711).create(bundle.dir())?;
    fs::set_permissions(bundle.dir(), fs::Permissions::from_mode(0o711))?;
    bundle.write_record(record)?;
    dirs.mode(0o700).create(bundle.run_dir())?;

    let ids = spec.ids;
    // Before the root: an image's root is seen through an idmapped mount made with it.
    if !ids.is_identity() && !ids.is_rootless() {
        let _span = tracing::debug_span!("userns.create").entered();
        create_user_namespace(ids, &bundle.userns_pin())?;
    }
    match spec.image {
        Some(image) => {
            let etc = etc_files(&spec.hostname, IMAGE_LOGIN_SHELL, ids.user_inside());
            let paths = image_root::BundlePaths {
                dir: bundle.dir().to_owned(),
                home: bundle.home(),
                home_image: bundle.home_image(),
                userns_pin: bundle.userns_pin(),
            };
            image_root::lay_out(&paths, image, ids, spec.home_volume, &etc)?;
        }
        None => lay_out_host_root(bundle, spec)?,
    }
    let _span = tracing::debug_span!("bundle.config").entered();
    let config = oci_config(bundle, spec);
    let bytes = serde_json::to_vec_pretty(&config).map_err(io::Error::other)?;
    write_file(&bundle.dir().join("config.json"), &bytes, 0o600).map(drop)
}

/// A sandbox on the host's `/usr`: its home (a volume when there is a quota) and a root of only
/// mount points, symlinks and a generated `/etc`, read-only inside.
fn lay_out_host_root(bundle: &Bundle, spec: &BundleSpec<'_>) -> io::Result<()> {
    let mut dirs = fs::DirBuilder::new();
    let ids = spec.ids;
    // The home: owned by the sandbox user (as the host sees it), private to it on the host.
    let home = bundle.home();
    dirs.mode(0o750).create(&home)?;
    let owner = ids.user_on_host();
    std::os::unix::fs::chown(&home, Some(owner.0), Some(owner.1))?;
    if let Some(pool) = spec.home_volume {
        let _span = tracing::debug_span!("mount.home").entered();
        pool.take(&bundle.home_image())?;
        volume::mount(&bundle.home_image(), &home, owner)?;
        fs::set_permissions(&home, fs::Permissions::from_mode(0o750))?;
    }

    // The root filesystem: only mount points, symlinks and /etc. It is mounted read-only. A
    // small tmpfs of its own, so the sandbox's mount table shows "/" and not where the bundle
    // lives on the host.
    let rootfs = bundle.rootfs();
    dirs.mode(0o755).create(&rootfs)?;
    // Rootless, there is no mounting on the host: the root is a plain directory (the sandbox
    // then sees the bundle's path as its root's source in /proc/mounts; nothing more).
    if !ids.is_rootless() {
        let _span = tracing::debug_span!("mount.rootfs").entered();
        volume::mount_tmpfs(&rootfs, ROOTFS_TMPFS_OPTIONS)?;
    }
    for dir in ["", "proc", "dev", "sys", "usr", "tmp", "home/user", "etc"] {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(rootfs.join(dir))?;
    }
    // runc gives a tmpfs the mode of the directory it is mounted on: /tmp must be 1777.
    fs::set_permissions(rootfs.join("tmp"), fs::Permissions::from_mode(0o1777))?;
    for (name, kind) in &spec.host.entries {
        match kind {
            TopLevel::Symlink(target) => std::os::unix::fs::symlink(target, rootfs.join(name))?,
            TopLevel::Dir => dirs.create(rootfs.join(name))?,
        }
    }
    let etc = rootfs.join("etc");
    for (name, contents) in etc_files(&spec.hostname, spec.host.login_shell, ids.user_inside()) {
        write_file(&etc.join(name), contents.as_bytes(), 0o644)?;
    }
    std::os::unix::fs::symlink("../proc/self/mounts", etc.join("mtab"))?;
    // The loader cache is generated from /usr's libraries, not host configuration; without it
    // the dynamic loader misses libraries that live in sub-directories of /usr/lib.
    if let Ok(cache) = fs::read("/etc/ld.so.cache") {
        write_file(&etc.join("ld.so.cache"), &cache, 0o644)?;
    }

    Ok(())
}

/// The sandbox's own `/etc`: just enough for names, users and the loader. Never the host's.
fn etc_files(
    hostname: &str,
    login_shell: &str,
    (uid, gid): (u32, u32),
) -> Vec<(&'static str, String)> {
    // Rootless, the sandbox's user is its namespace's uid 0 (see `rootless`): named `user`, and
    // the only root there is.
    let root = if uid == 0 {
        String::new()
    } else {
        "root:x:0:0:root:/root:/usr/sbin/nologin\n".to_owned()
    };
    let root_group = if gid == 0 { "" } else { "root:x:0:\n" };
    vec![
        (
            "passwd",
            format!(
                "{root}user:x:{uid}:{gid}:threadbox sandbox user:{HOME}:{login_shell}\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        (
            "group",
            // tty (5) owns /dev/pts entries.
            format!("{root_group}tty:x:5:\nuser:x:{gid}:\nnogroup:x:65534:\n"),
        ),
        ("hostname", format!("{hostname}\n")),
        // Each sandbox is a machine of its own (a fork too): systemd's format, 128 random bits.
        (
            "machine-id",
            format!("{}\n", uuid::Uuid::new_v4().simple()),
        ),
        (
            "hosts",
            format!(
                "127.0.0.1\tlocalhost\n127.0.1.1\t{hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            ),
        ),
        ("resolv.conf", RESTRICTED_RESOLV_CONF.to_owned()),
        (
            "nsswitch.conf",
            "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n\
             protocols: files\nservices: files\n"
                .to_owned(),
        ),
    ]
}

fn oci_config(bundle: &Bundle, spec: &BundleSpec<'_>) -> Value {
    let limits = spec.limits;
    let mut env: BTreeMap<&str, &str> = BTreeMap::from([
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("HOME", HOME),
        ("USER", "user"),
        ("LOGNAME", "user"),
        (
            "SHELL",
            if spec.image.is_some() {
                IMAGE_LOGIN_SHELL
            } else {
                spec.host.login_shell
            },
        ),
        ("LANG", "C.UTF-8"),
        ("TMPDIR", "/tmp"),
    ]);
    for (k, v) in spec.env {
        env.insert(k, v);
    }
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();

    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "nodev", "mode=1777", format!("size={}", limits.tmp_bytes)]}),
        json!({"destination": HOME, "type": "bind", "source": bundle.home(),
               "options": ["rbind", "rw", "nosuid", "nodev"]}),
    ];
    if spec.image.is_some() {
        mounts.extend(image_root::managed_mounts(bundle.dir()));
    } else {
        mounts.push(
            json!({"destination": "/usr", "type": "bind", "source": "/usr",
                           "options": ["rbind", "ro", "nosuid", "nodev"]}),
        );
        for (name, kind) in &spec.host.entries {
            if let TopLevel::Dir = kind {
                mounts.push(json!({"destination": format!("/{name}"), "type": "bind",
                                   "source": format!("/{name}"), "options": ["rbind", "ro", "nosuid", "nodev"]}));
            }
        }
    }

    let mut memory = json!({"limit": limits.memory_bytes});
    if spec.swap_limit {
        // OCI's swap is memory plus swap: equal to the limit means no swap at all.
        memory["swap"] = json!(limits.memory_bytes);
    }
    let no_caps: [&str; 0] = [];
    // A user namespace of its own, mapped onto the sandbox's host id range and owned by that
    // range's root: per-uid kernel limits and file ownership on the host are then the
    // sandbox's alone. runc 1.1 wants the mappings even when it joins a namespace.
    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "network"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
        json!({"type": "cgroup"}),
    ];
    let mut linux = json!({});
    if spec.ids.is_rootless() {
        // runc makes the namespace itself, as an unprivileged process may: mapping only the
        // caller's own ids.
        namespaces.push(json!({"type": "user"}));
    } else if !spec.ids.is_identity() {
        namespaces.push(json!({"type": "user", "path": bundle.userns_pin()}));
    }
    if !spec.ids.is_identity() {
        linux["uidMappings"] = spec.ids.oci_uid_mapping();
        linux["gidMappings"] = spec.ids.oci_gid_mapping();
    }

    let mut config = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": spec.ids.user_inside().0, "gid": spec.ids.user_inside().1},
            "args": init_args(spec.runner),
            "env": env,
            "cwd": HOME,
            "capabilities": {
                "bounding": no_caps, "effective": no_caps, "inheritable": no_caps,
                "permitted": no_caps, "ambient": no_caps
            },
            "noNewPrivileges": true
        },
        // An image's root is the sandbox's to write (its writable layer); the host's is not.
        "root": {"path": "rootfs", "readonly": spec.image.is_none()},
        "hostname": spec.hostname,
        "mounts": mounts,
        "annotations": spec.annotations,
        "linux": {
            "resources": {
                "devices": [{"allow": false, "access": "rwm"}],
                "memory": memory,
                "cpu": {"quota": u64::from(limits.cpu_millicores) * 100, "period": 100_000},
                "pids": {"limit": limits.pids}
            },
            // A fresh network namespace holds only loopback: no network unless a profile adds
            // one. The cgroup namespace hides the host's cgroup paths.
            "namespaces": namespaces,
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
            "seccomp": seccomp_profile()
        }
    });
    if let (Some(config), Some(extra)) = (config["linux"].as_object_mut(), linux.as_object()) {
        config.extend(extra.clone());
    }
    if spec.ids.is_rootless() {
        rootless_spec(&mut config);
    }
    config
}

/// What an unprivileged runc cannot do, taken out of the spec: cgroups (no memory, CPU, pid or
/// device limits: they need a cgroup subtree delegated to the user, which the provider does not
/// set up; `rootless::WEAKER` says so to the user), and a devpts owned by the host's `tty`
/// group, which is not mapped.
fn rootless_spec(config: &mut Value) {
    if let Some(linux) = config["linux"].as_object_mut() {
        linux.remove("resources");
    }
    if let Some(mounts) = config["mounts"].as_array_mut() {
        for mount in mounts.iter_mut().filter(|m| m["destination"] == "/dev/pts") {
            if let Some(options) = mount["options"].as_array_mut() {
                options.retain(|o| o != "gid=5");
            }
        }
    }
}

/// Defense in depth on top of "uid 1000, no capabilities": refuse the syscalls an unprivileged
/// process only needs to attack the kernel or other processes (at least Docker's default set). Above all, creating a user namespace (which would
/// hand the sandbox a full capability set over its own namespaces); glibc falls back from
/// clone3, whose flags seccomp cannot inspect, to clone when clone3 says ENOSYS.
fn seccomp_profile() -> Value {
    const EPERM: u32 = 1;
    const ENOSYS: u32 = 38;
    const CLONE_NEWUSER: u64 = 0x1000_0000;
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": [
            {
                // Everything Docker's default profile refuses a process without capabilities,
                // then what it also refuses since (io_uring), the new mount API, and what lets
                // one process read or steer another (ptrace, process_vm_*, pidfd_getfd, kcmp).
                "names": [
                    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime",
                    "create_module", "delete_module", "finit_module", "fsconfig", "fsmount",
                    "fsopen", "fspick", "get_kernel_syms", "get_mempolicy", "init_module",
                    "io_uring_enter", "io_uring_register", "io_uring_setup", "ioperm", "iopl",
                    "kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie",
                    "mbind", "mount", "mount_setattr", "move_mount", "move_pages",
                    "name_to_handle_at", "nfsservctl", "open_by_handle_at", "open_tree",
                    "perf_event_open", "pidfd_getfd", "pivot_root", "process_madvise",
                    "process_vm_readv", "process_vm_writev", "ptrace", "query_module",
                    "quotactl", "quotactl_fd", "reboot", "request_key", "set_mempolicy",
                    "setdomainname", "sethostname", "setns", "settimeofday", "stime",
                    "swapoff", "swapon", "sysfs", "syslog", "_sysctl", "umount", "umount2",
                    "uselib", "userfaultfd", "ustat", "vhangup", "vm86", "vm86old"
                ],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": EPERM
            },
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
            {
                "names": ["clone", "unshare"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": EPERM,
                "args": [{"index": 0, "value": CLONE_NEWUSER, "valueTwo": CLONE_NEWUSER,
                          "op": "SCMP_CMP_MASKED_EQ"}]
            }
        ]
    })
}

/// Write a file with `mode`. Not synced: a bundle half-written by a crash is swept as a
/// leftover, so only the record needs durability.
fn write_file(path: &Path, contents: &[u8], mode: u32) -> io::Result<fs::File> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    file.write_all(contents)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_has_the_isolation_the_issue_asks_for() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = Bundle::new(dir.path(), "rc-0123456789ab");
        let env = BTreeMap::from([("FOO".to_owned(), "bar".to_owned())]);
        let limits = SandboxLimits::default();
        let spec = BundleSpec {
            hostname: "tb-x".into(),
            annotations: BTreeMap::from([("threadbox.thread_id".into(), "t".into())]),
            env: &env,
            limits: &limits,
            swap_limit: true,
            host: &HostLayout::probe(),
            ids: IdRange::IDENTITY,
            home_volume: None,
            image: None,
            runner: false,
        };
        let config = oci_config(&bundle, &spec);
        assert_eq!(config["process"]["user"]["uid"], 1000);
        assert_eq!(config["process"]["noNewPrivileges"], true);
        assert_eq!(config["process"]["capabilities"]["bounding"], json!([]));
        assert_eq!(config["root"]["readonly"], true);
        assert_eq!(config["hostname"], "tb-x");
        assert_eq!(config["annotations"]["threadbox.thread_id"], "t");
        let resources = &config["linux"]["resources"];
        assert_eq!(resources["memory"]["limit"], 512 * 1024 * 1024);
        assert_eq!(resources["memory"]["swap"], 512 * 1024 * 1024);
        assert_eq!(resources["pids"]["limit"], 256);
        assert_eq!(resources["cpu"]["quota"], 100_000);
        let namespaces: Vec<&str> = config["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        for ns in ["pid", "network", "ipc", "uts", "mount"] {
            assert!(namespaces.contains(&ns), "{ns} missing");
        }
        let env = config["process"]["env"].as_array().unwrap();
        assert!(env.contains(&json!("FOO=bar")));
        assert!(env.contains(&json!("HOME=/home/user")));
        let tmp = config["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == "/tmp")
            .unwrap();
        assert!(tmp["options"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("size={}", 256 * 1024 * 1024))));
    }

    #[test]
    fn a_namespaced_sandbox_joins_its_pinned_user_namespace_with_its_range() {
        let dir = tempfile::tempdir().unwrap();
        let sandboxes = dir.path().join("sandboxes");
        let bundle = Bundle::new(&sandboxes, "rc-0123456789ab");
        let ids = super::super::idmap::IdRanges::new(dir.path().join("idranges"));
        std::fs::create_dir(dir.path().join("idranges")).unwrap();
        let ids = ids.allocate(&sandboxes.join("rc-0123456789ab")).unwrap();
        let (env, limits) = (BTreeMap::new(), SandboxLimits::default());
        let spec = BundleSpec {
            hostname: "tb-x".into(),
            annotations: BTreeMap::new(),
            env: &env,
            limits: &limits,
            swap_limit: false,
            host: &HostLayout::probe(),
            ids,
            home_volume: None,
            image: None,
            runner: false,
        };
        let config = oci_config(&bundle, &spec);
        let user = config["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["type"] == "user")
            .expect("a user namespace");
        assert_eq!(
            user["path"],
            json!(dir.path().join("userns/rc-0123456789ab"))
        );
        let mapping = json!([{"containerID": 0, "hostID": ids.host_uid(0), "size": 65536}]);
        assert_eq!(config["linux"]["uidMappings"], mapping);
        assert_eq!(config["linux"]["gidMappings"], mapping);
        assert!(ids.host_uid(0) >= 1_000_000_000);
        // Inside, still uid 1000.
        assert_eq!(config["process"]["user"]["uid"], 1000);
    }

    #[test]
    fn etc_is_generated_not_copied() {
        let files = etc_files(
            "tb-x",
            "/bin/sh",
            (
                super::super::idmap::SANDBOX_UID,
                super::super::idmap::SANDBOX_GID,
            ),
        );
        let passwd = &files.iter().find(|(n, _)| *n == "passwd").unwrap().1;
        assert!(passwd.contains("user:x:1000:1000:"));
        assert!(passwd.contains(":/home/user:/bin/sh"));
        let hosts = &files.iter().find(|(n, _)| *n == "hosts").unwrap().1;
        assert!(hosts.contains("tb-x"));
    }
}
