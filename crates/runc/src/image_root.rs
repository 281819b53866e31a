//! A sandbox started from a registered image (see `image`): its root is an overlay of the
//! image's unpacked files under a writable layer of its own.
//!
//! ```text
//! <bundle>/
//!   volume/          the home's filesystem (home.img) when there is a quota, else a directory
//!     home/          the sandbox's /home/user (bound onto <bundle>/home)
//!     layers/upper/  what the sandbox wrote outside its home: apt, pip, /usr/local, /etc
//!     layers/work/   overlayfs's scratch directory
//!   rootfs/          the overlay: the image below, layers/upper above (nosuid, nodev)
//!   managed/         what threadbox keeps for the sandbox, bound read-only into its root:
//!     etc/{resolv.conf,hosts,hostname}, run/threadbox/certs/ (the trust store when networked)
//! ```
//!
//! **Ownership.** The image's files are unpacked once, owned by the ids its tar entries name
//! (root is host uid 0). Each sandbox sees them through an idmapped mount made with its own user
//! namespace, so the image's root is the sandbox's root and its uid 1000 the sandbox's user,
//! while the files on the host keep their ids and every sandbox of the image shares them. The
//! overlay is mounted by the host's root over that idmapped layer, so what the sandbox copies up
//! or creates lands in its writable layer owned by its own host range (overlayfs supports
//! idmapped layers since Linux 5.19). The writable layer lives on the home's volume: the
//! sandbox's writes anywhere count against its one disk quota, survive pause and resume, and
//! go with the sandbox.
//!
//! **What the host writes.** Files threadbox changes while the sandbox runs (its resolver as the
//! network profile changes, the trust store) are never written through the sandbox's root, which
//! its root user can rearrange (a symlinked `/etc` would point a host-side write anywhere): they
//! live in `managed/`, outside the root, and are bound onto their places. The few files written
//! into the root itself (`/etc/passwd`, `/etc/group`, `/etc/machine-id`) are written before the
//! sandbox starts, through `openat2(RESOLVE_IN_ROOT)`, so even the image's own symlinks resolve
//! inside the image.

use std::ffi::CString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use serde_json::{json, Value};

use super::idmap::IdRange;
use super::volume;

/// Inside an image sandbox: where its trust store lives (the image's own
/// `/etc/ssl/certs/ca-certificates.crt` stays the image's, for its package manager to update).
pub(crate) const IMAGE_TRUST_DIR: &str = "/run/threadbox/certs";

/// The files threadbox keeps for an image sandbox and binds onto its root, by their path
/// inside (`managed/` mirrors it).
const MANAGED_FILES: &[&str] = &["/etc/resolv.conf", "/etc/hosts", "/etc/hostname"];
const MANAGED_DIRS: &[&str] = &["/run/threadbox"];
/// Room for the resolver, hosts and the trust store (the host's CA bundle is about 200 KiB).
const MANAGED_TMPFS_OPTIONS: &str = "mode=711,size=4m,nr_inodes=256";

/// Where an image sandbox's parts are in its bundle (`bundle`'s paths, passed in so this module
/// and `bundle` do not name each other).
pub(crate) struct BundlePaths {
    pub dir: PathBuf,
    pub home: PathBuf,
    pub home_image: PathBuf,
    pub userns_pin: PathBuf,
}

/// An image sandbox's volume: the home's filesystem, holding its home and its writable layer.
pub(crate) fn volume_dir(bundle_dir: &Path) -> PathBuf {
    bundle_dir.join("volume")
}
/// What threadbox keeps for an image sandbox, bound read-only into its root.
pub(crate) fn managed_dir(bundle_dir: &Path) -> PathBuf {
    bundle_dir.join("managed")
}
/// The image's idmapped layer under the overlay, unmounted with the bundle.
pub(crate) fn lower_dir(bundle_dir: &Path) -> PathBuf {
    bundle_dir.join("lower")
}

/// Whether the bundle at `bundle_dir` is an image sandbox's: known by its volume directory, the
/// first thing of it made, so a sandbox whose managed files went missing is never taken for a
/// host-image one (whose files are written into its root).
pub(crate) fn is_image_sandbox(bundle_dir: &Path) -> bool {
    volume_dir(bundle_dir).is_dir()
}

/// Where files the host keeps for a sandbox go, as seen from the host: under `managed/` for an
/// image sandbox (never its root, which its root user controls), else in its root filesystem (a
/// tmpfs read-only inside, which nothing in the sandbox can rearrange). Join the path inside,
/// without its leading `/`.
pub(crate) fn managed_root(bundle_dir: &Path) -> PathBuf {
    if is_image_sandbox(bundle_dir) {
        managed_dir(bundle_dir)
    } else {
        bundle_dir.join("rootfs")
    }
}

/// Lay out an image sandbox's home and root: the volume (mounted when there is a quota), the
/// home bound out of it, the writable layer, the overlay, the sandbox's users and the managed
/// files. The sandbox's user namespace must be pinned already (the idmap is made with it).
pub(crate) fn lay_out(
    bundle: &BundlePaths,
    image: &Path,
    ids: IdRange,
    quota_volume: Option<&volume::VolumePool>,
    etc: &[(&'static str, String)],
) -> io::Result<()> {
    let mut dirs = fs::DirBuilder::new();
    let volume_dir = volume_dir(&bundle.dir);
    dirs.mode(0o700).create(&volume_dir)?;
    if let Some(pool) = quota_volume {
        let _span = tracing::debug_span!("mount.home").entered();
        pool.take(&bundle.home_image)?;
        volume::mount(&bundle.home_image, &volume_dir, (0, 0))?;
        fs::set_permissions(&volume_dir, fs::Permissions::from_mode(0o700))?;
    }
    let user = ids.user_on_host();
    let root = ids.on_host(threadbox_core::ports::SandboxUser::Root);
    let home_src = volume_dir.join("home");
    dirs.mode(0o750).create(&home_src)?;
    std::os::unix::fs::chown(&home_src, Some(user.0), Some(user.1))?;
    dirs.mode(0o750).create(&bundle.home)?;
    bind(&home_src, &bundle.home)?;

    let layers = volume_dir.join("layers");
    dirs.mode(0o700).create(&layers)?;
    let (upper, work) = (layers.join("upper"), layers.join("work"));
    // The upper directory's owner and mode are the root directory's inside.
    dirs.mode(0o755).create(&upper)?;
    std::os::unix::fs::chown(&upper, Some(root.0), Some(root.1))?;
    dirs.mode(0o700).create(&work)?;

    let lower = lower_dir(&bundle.dir);
    dirs.mode(0o700).create(&lower)?;
    {
        let _span = tracing::debug_span!("mount.image").entered();
        idmapped_bind(image, &lower, &bundle.userns_pin)?;
        let rootfs = bundle.dir.join("rootfs");
        dirs.mode(0o755).create(&rootfs)?;
        // The idmapped layer stays mounted under the overlay until the sandbox goes: unmounting
        // it here would make the create wait out an RCU grace period, and removal unmounts it
        // with the rest.
        mount_overlay(&lower, &upper, &work, &rootfs)?;
        write_identity(&rootfs, ids, root, etc)?;
    }
    write_managed(&bundle.dir, etc)
}

/// The mounts an image sandbox's spec adds: the managed files and directories, read-only.
pub(crate) fn managed_mounts(bundle_dir: &Path) -> Vec<Value> {
    let managed = managed_dir(bundle_dir);
    MANAGED_FILES
        .iter()
        .chain(MANAGED_DIRS)
        .map(|inside| {
            json!({"destination": inside, "type": "bind",
                   "source": managed.join(inside.trim_start_matches('/')),
                   "options": ["bind", "ro", "nosuid", "nodev", "noexec"]})
        })
        .collect()
}

/// `/etc/passwd`, `/etc/group` and `/etc/machine-id` in the new root: the image's users with
/// ours (`user`, uid 1000, home `/home/user`) in place of any the image has by that name or
/// id, so `whoami`, `~` and package scripts that add users all work.
fn write_identity(
    rootfs: &Path,
    ids: IdRange,
    root: (u32, u32),
    etc: &[(&'static str, String)],
) -> io::Result<()> {
    let root_dir = rustix::fs::open(
        rootfs,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let (uid, gid) = ids.user_inside();
    let ours = |name: &str| {
        etc.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c.as_str())
    };
    for (name, id) in [("passwd", uid), ("group", gid)] {
        let path = format!("etc/{name}");
        let image = read_in_root(&root_dir, &path)?.unwrap_or_default();
        let mut merged: String = image
            .lines()
            .filter(|line| {
                let mut fields = line.split(':');
                let entry = fields.next().unwrap_or_default();
                let entry_id = fields.nth(1).unwrap_or_default();
                entry != "user" && entry_id != id.to_string()
            })
            .map(|line| format!("{line}\n"))
            .collect();
        if !merged.lines().any(|l| l.starts_with("root:")) {
            merged.insert_str(
                0,
                if name == "passwd" {
                    "root:x:0:0:root:/root:/bin/sh\n"
                } else {
                    "root:x:0:\n"
                },
            );
        }
        let user_line = ours(name)
            .and_then(|c| c.lines().find(|l| l.starts_with("user:")))
            .unwrap_or_default();
        merged.push_str(user_line);
        merged.push('\n');
        write_in_root(&root_dir, &path, merged.as_bytes(), root)?;
    }
    if let Some(machine_id) = ours("machine-id") {
        write_in_root(&root_dir, "etc/machine-id", machine_id.as_bytes(), root)?;
    }
    Ok(())
}

/// The managed files: the resolver (restricted until a network says otherwise), hosts and
/// hostname, and the directory the trust store goes into.
fn write_managed(bundle_dir: &Path, etc: &[(&'static str, String)]) -> io::Result<()> {
    let managed = managed_dir(bundle_dir);
    let mut dirs = fs::DirBuilder::new();
    dirs.mode(0o711).create(&managed)?;
    // A tmpfs of its own, so the binds out of it show paths inside it, not the bundle's on
    // the host, in the sandbox's mount table.
    volume::mount_tmpfs(&managed, MANAGED_TMPFS_OPTIONS)?;
    dirs.recursive(true);
    dirs.create(managed.join("etc"))?;
    dirs.create(managed.join(IMAGE_TRUST_DIR.trim_start_matches('/')))?;
    for inside in MANAGED_FILES {
        let name = inside.trim_start_matches("/etc/");
        let contents = etc
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c.as_str())
            .unwrap_or_default();
        let path = managed.join(inside.trim_start_matches('/'));
        fs::write(&path, contents)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// `path` (relative to the root) read with every component resolved inside `root`; `None`
/// when it is not there.
fn read_in_root(root: &OwnedFd, path: &str) -> io::Result<Option<String>> {
    let fd = match rustix::fs::openat2(
        root,
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut file = fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut text = String::new();
    // An image's user table is small; a huge one is not read whole.
    Read::take(&mut file, 4 << 20).read_to_string(&mut text)?;
    Ok(Some(text))
}

/// Write `path` (relative to the root, its directory there already or made) as `owner`,
/// every component resolved inside `root`. A symlink at the last component is replaced, not
/// followed.
fn write_in_root(root: &OwnedFd, path: &str, contents: &[u8], owner: (u32, u32)) -> io::Result<()> {
    let resolve = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_XDEV;
    let (parent, name) = path.rsplit_once('/').unwrap_or((".", path));
    let dir = match rustix::fs::openat2(
        root,
        parent,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve,
    ) {
        Ok(dir) => dir,
        Err(rustix::io::Errno::NOENT) => {
            rustix::fs::mkdirat(root, parent, Mode::from_raw_mode(0o755))?;
            let dir = rustix::fs::openat2(
                root,
                parent,
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
                resolve,
            )?;
            rustix::fs::fchown(&dir, Some(uid(owner.0)), Some(gid(owner.1)))?;
            dir
        }
        Err(e) => return Err(e.into()),
    };
    match rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    rustix::fs::fchown(&fd, Some(uid(owner.0)), Some(gid(owner.1)))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o644))?;
    fs::File::from(fd).write_all(contents)
}

fn uid(id: u32) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw(id)
}
fn gid(id: u32) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw(id)
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}

/// Bind `source` onto `target` (the home out of the volume; flags come with it).
fn bind(source: &Path, target: &Path) -> io::Result<()> {
    let (source, target) = (c_path(source)?, c_path(target)?);
    // SAFETY: valid NUL-terminated paths; no data argument for a bind.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(
            e.kind(),
            format!("binding the home out of the volume: {e}"),
        ))
    }
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// Mount `source` on `target` read-only, nosuid and nodev, its ids seen through the user
/// namespace pinned at `userns`: an id `n` on disk is the namespace's `n`.
fn idmapped_bind(source: &Path, target: &Path, userns: &Path) -> io::Result<()> {
    let userns = fs::File::open(userns)?;
    let source_c = c_path(source)?;
    // SAFETY: open_tree with a valid path; the descriptor it returns is ours to own.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source_c.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(context(
            "cloning the image's root",
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: a descriptor open_tree just returned.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: a valid descriptor, an empty path with AT_EMPTY_PATH, and the attr struct by
    // pointer with its size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(context(
            "mapping the image's ids into the sandbox (an idmapped mount, Linux 5.12+ on a \
             filesystem that supports it)",
            io::Error::last_os_error(),
        ));
    }
    let target_c = c_path(target)?;
    // SAFETY: valid descriptors and paths.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target_c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(context(
            "attaching the image's root",
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The overlay: `lower` below, `upper` written, `work` its scratch; nosuid and nodev. The layers
/// are named through descriptors (`/proc/self/fd/N`), which overlayfs records as given: the
/// sandbox's mount table then shows those, never where its bundle is on the host.
fn mount_overlay(lower: &Path, upper: &Path, work: &Path, target: &Path) -> io::Result<()> {
    let open = |path: &Path| {
        rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
    };
    let (lower, upper, work) = (open(lower)?, open(upper)?, open(work)?);
    let options = CString::new(format!(
        "lowerdir=/proc/self/fd/{},upperdir=/proc/self/fd/{},workdir=/proc/self/fd/{}",
        lower.as_raw_fd(),
        upper.as_raw_fd(),
        work.as_raw_fd()
    ))
    .map_err(io::Error::other)?;
    let target_c = c_path(target)?;
    // SAFETY: valid NUL-terminated strings; the descriptors live until the call returns.
    let rc = unsafe {
        libc::mount(
            c"overlay".as_ptr(),
            target_c.as_ptr(),
            c"overlay".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(context(
            "mounting the sandbox's root (overlayfs over the image)",
            io::Error::last_os_error(),
        ))
    }
}

fn context(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}
