//! Host id ranges: each sandbox gets a user namespace whose ids map onto a range of host ids
//! that no other sandbox and no host account uses, so per-uid kernel limits (inotify instances,
//! `RLIMIT_NPROC`, keyrings...) and file ownership on the host are per sandbox.
//!
//! A range is [`RANGE_SIZE`] ids starting at `FIRST_BASE + slot * RANGE_SIZE`. Which slots are
//! taken is recorded on disk, one file per slot under `<state>/idranges/<slot>` holding the
//! sandbox id, made with an exclusive create: two creates (in one process or in two processes
//! sharing the state directory) can never get the same slot, and a restart finds every
//! allocation again. A slot is freed only once its sandbox's bundle is gone.

use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use threadbox_core::ports::SandboxUser;

/// The unprivileged user every process inside a sandbox runs as, inside its namespace.
pub(crate) const SANDBOX_UID: u32 = 1000;
pub(crate) const SANDBOX_GID: u32 = 1000;

/// Ids in one sandbox's namespace: 0 (its root) to 65535, which covers uid 1000 and `nobody`.
pub(crate) const RANGE_SIZE: u32 = 65_536;
/// Far above any host account (useradd stops at 60000, systemd's dynamic users at 65519 and
/// its container ranges start at 524288).
const FIRST_BASE: u32 = 1_000_000_000;
/// How many ranges fit below `u32::MAX` (`(u32::MAX - FIRST_BASE) / RANGE_SIZE`, rounded down,
/// less one so that `u32::MAX`, the kernel's "no id", is never in a range).
pub(crate) const SLOTS: u32 = (u32::MAX - FIRST_BASE) / RANGE_SIZE - 1;
/// An id above every range and below the invalid id: no sandbox and no host account has it, so
/// what it may do on the host is what "others" may do (see `placement`).
pub(crate) const PROBE_ID: u32 = FIRST_BASE + SLOTS * RANGE_SIZE;

/// Where a sandbox's ids land on the host. Everything that chowns for a sandbox asks this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IdRange {
    /// The host id of the sandbox's id 0. Zero means no user namespace: the sandbox's ids are
    /// the host's (sandboxes created before ranges existed, still alive over an upgrade).
    base: u32,
    /// Rootless: the uid and gid running threadbox, the only ids an unprivileged process may
    /// map without `newuidmap`. runc wants the sandbox's root mapped (it chowns its exec fifo
    /// to it), so the sandbox's user is its namespace's uid 0, with no capabilities, and that
    /// is the caller on the host: files it writes are the caller's, and the caller's are its.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    caller: Option<(u32, u32)>,
}

impl IdRange {
    /// Ids inside are host ids: for sandboxes made without a user namespace.
    pub const IDENTITY: Self = Self {
        base: 0,
        caller: None,
    };

    fn of_slot(slot: u32) -> Self {
        Self {
            base: FIRST_BASE + slot * RANGE_SIZE,
            caller: None,
        }
    }

    /// A rootless sandbox's ids: its user, uid 0 inside, is `uid`/`gid` on the host.
    pub fn rootless(uid: u32, gid: u32) -> Self {
        Self {
            base: 0,
            caller: Some((uid, gid)),
        }
    }

    /// The sandbox user's uid and gid inside its namespace: 1000, or 0 rootless (see `caller`).
    pub fn user_inside(self) -> (u32, u32) {
        match self.caller {
            Some(_) => (0, 0),
            None => (SANDBOX_UID, SANDBOX_GID),
        }
    }

    /// Who runs as `user` inside: the sandbox user, or the namespace's root (rootless they are
    /// one: uid 0, the caller).
    pub fn inside(self, user: SandboxUser) -> (u32, u32) {
        match user {
            SandboxUser::User => self.user_inside(),
            SandboxUser::Root => (0, 0),
        }
    }

    /// Where `user`'s ids land on the host.
    pub fn on_host(self, user: SandboxUser) -> (u32, u32) {
        let (uid, gid) = self.inside(user);
        (self.host_uid(uid), self.host_gid(gid))
    }

    /// The sandbox user's uid and gid on the host.
    pub fn user_on_host(self) -> (u32, u32) {
        let (uid, gid) = self.user_inside();
        (self.host_uid(uid), self.host_gid(gid))
    }

    /// A rootless sandbox: its user namespace is runc's to make, mapping only the caller.
    pub fn is_rootless(self) -> bool {
        self.caller.is_some()
    }

    pub(crate) fn slot(self) -> Option<u32> {
        if self.caller.is_some() {
            return None;
        }
        self.base
            .checked_sub(FIRST_BASE)
            .filter(|offset| offset % RANGE_SIZE == 0)
            .map(|offset| offset / RANGE_SIZE)
    }

    pub fn is_identity(self) -> bool {
        self.base == 0 && self.caller.is_none()
    }

    /// The host uid of uid `inside` in the sandbox. Rootless, only the sandbox's user is
    /// mapped, and everything threadbox writes for it is the caller's.
    pub fn host_uid(self, inside: u32) -> u32 {
        debug_assert!(inside < RANGE_SIZE);
        match self.caller {
            // Only the sandbox's root is mapped; it is the one id threadbox writes as.
            Some((uid, _)) => uid,
            None => self.base + inside,
        }
    }

    /// The host gid of gid `inside` in the sandbox (the same mapping as for uids).
    pub fn host_gid(self, inside: u32) -> u32 {
        match self.caller {
            Some((_, gid)) => gid,
            None => self.host_uid(inside),
        }
    }

    /// The OCI `uidMappings` entry.
    pub fn oci_uid_mapping(self) -> serde_json::Value {
        match self.caller {
            Some((uid, _)) => serde_json::json!([{"containerID": 0, "hostID": uid, "size": 1}]),
            None => {
                serde_json::json!([{"containerID": 0, "hostID": self.base, "size": RANGE_SIZE}])
            }
        }
    }

    /// The OCI `gidMappings` entry.
    pub fn oci_gid_mapping(self) -> serde_json::Value {
        match self.caller {
            Some((_, gid)) => serde_json::json!([{"containerID": 0, "hostID": gid, "size": 1}]),
            None => self.oci_uid_mapping(),
        }
    }
}

/// The on-disk table of allocated ranges: one file per slot, holding the absolute path of the
/// bundle of the sandbox it belongs to. The table is the host's, not one provider's
/// (`RuncConfig::id_ranges_dir`, `/var/lib/threadbox/idranges` by default): two providers over
/// different state directories (two `threadbox dev` data directories) must never hand out the
/// same host ids. An owner is a bundle path, so any provider can tell a leftover (its bundle is
/// gone) from a range another provider's sandbox still uses.
#[derive(Clone, Debug)]
pub(crate) struct IdRanges {
    dir: PathBuf,
}

impl IdRanges {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Take a free range for the sandbox whose bundle is `owner`. The search starts at a random
    /// slot so concurrent creates rarely contend for the same file; the exclusive create decides
    /// when they do.
    pub fn allocate(&self, owner: &Path) -> io::Result<IdRange> {
        let start = (uuid::Uuid::new_v4().as_u128() % u128::from(SLOTS)) as u32;
        for step in 0..SLOTS {
            let slot = (start + step) % SLOTS;
            if self.claim(slot, owner)? {
                return Ok(IdRange::of_slot(slot));
            }
        }
        Err(io::Error::other(format!(
            "all {SLOTS} host id ranges are in use"
        )))
    }

    /// Record `slot` as `owner`'s; false when it is taken.
    fn claim(&self, slot: u32, owner: &Path) -> io::Result<bool> {
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(self.dir.join(slot.to_string()))
        {
            Ok(mut file) => {
                // A crash before the owner is written leaves an empty file: the sweep frees it
                // once it is older than any create can take.
                file.write_all(owner.as_os_str().as_bytes())?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Give `owner`'s range back. Only after its sandbox is gone: the ids may still own files
    /// until then. Freed already, or held by another owner now, is left alone.
    pub fn release(&self, range: IdRange, owner: &Path) -> io::Result<()> {
        let Some(slot) = range.slot() else {
            return Ok(());
        };
        let path = self.dir.join(slot.to_string());
        match fs::read(&path) {
            Ok(held) if held == owner.as_os_str().as_bytes() => match fs::remove_file(&path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every allocation older than `grace` whose owner's bundle is gone (or that never got an
    /// owner), with that owner: what a crash between allocating and recording, or between
    /// removing and releasing, leaves, by this provider or any other.
    pub fn stale(&self, grace: Duration) -> Vec<(IdRange, PathBuf)> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let slot: u32 = entry.file_name().to_str()?.parse().ok()?;
                let age = entry.metadata().ok()?.modified().ok()?.elapsed().ok()?;
                if age < grace {
                    return None;
                }
                let owner =
                    PathBuf::from(std::ffi::OsString::from_vec(fs::read(entry.path()).ok()?));
                let gone = !owner.is_absolute() || !owner.is_dir();
                gone.then(|| (IdRange::of_slot(slot), owner))
            })
            .collect()
    }

    /// Move the allocations of a state directory from before the table was the host's
    /// (`<state>/idranges/<slot>`, naming a sandbox id) into it, so no other provider can hand
    /// out a range a sandbox of ours still uses. Those whose bundle is gone are dropped.
    pub fn adopt_legacy(&self, legacy_dir: &Path, sandboxes_dir: &Path) -> io::Result<()> {
        let Ok(entries) = fs::read_dir(legacy_dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let Some(slot) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let id = fs::read_to_string(entry.path()).unwrap_or_default();
            let owner = sandboxes_dir.join(id.trim());
            if !id.trim().is_empty() && owner.is_dir() && !self.claim(slot, &owner)? {
                let held = fs::read(self.dir.join(slot.to_string())).unwrap_or_default();
                if held != owner.as_os_str().as_bytes() {
                    tracing::warn!(
                        slot,
                        owner = %owner.display(),
                        "a sandbox from before the host-wide id table shares its host ids with \
                         another provider's sandbox; reset its thread to give it ids of its own"
                    );
                }
            }
            fs::remove_file(entry.path())?;
        }
        let _ = fs::remove_dir(legacy_dir);
        Ok(())
    }
}

/// Make the sandbox's user namespace and pin it at `pin` (an nsfs bind mount), for the spec to
/// join by path.
///
/// runc would make the namespace itself, but then its owner is host root, and the kernel
/// charges per-uid counts (inotify instances, for one) to every owner up the namespace chain:
/// every sandbox would share root's count in the host namespace. A namespace made by a process
/// running as the range's own root is owned by that host uid instead, so each sandbox's counts
/// stop at a host uid nobody else has.
pub(crate) fn create_user_namespace(range: IdRange, pin: &std::path::Path) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let host_root = range.host_uid(0);
    let mut cmd = std::process::Command::new("/bin/sleep");
    cmd.arg("infinity")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let ok = libc::setgroups(0, std::ptr::null()) == 0
                && libc::setresgid(host_root, host_root, host_root) == 0
                && libc::setresuid(host_root, host_root, host_root) == 0
                && libc::unshare(libc::CLONE_NEWUSER) == 0;
            if ok {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
    // `spawn` returns once the child has exec'd, so the namespace exists by then.
    let mut holder = cmd.spawn()?;
    let result = (|| {
        let proc_dir = PathBuf::from(format!("/proc/{}", holder.id()));
        let mapping = format!("0 {host_root} {RANGE_SIZE}\n");
        fs::write(proc_dir.join("uid_map"), &mapping)?;
        fs::write(proc_dir.join("gid_map"), &mapping)?;
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(pin)?;
        bind_mount(&proc_dir.join("ns/user"), pin)
    })();
    let _ = holder.kill();
    let _ = holder.wait();
    result
}

fn bind_mount(source: &std::path::Path, target: &std::path::Path) -> io::Result<()> {
    let source = std::ffi::CString::new(source.as_os_str().as_bytes())?;
    let target = std::ffi::CString::new(target.as_os_str().as_bytes())?;
    // SAFETY: valid NUL-terminated paths; no data argument for a bind mount.
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
        Err(io::Error::last_os_error())
    }
}

/// Undo [`create_user_namespace`]'s pin: unmount (detached, so nothing can hold it busy) and
/// unlink. Neither there is fine.
pub(crate) fn remove_user_namespace_pin(pin: &std::path::Path) -> io::Result<()> {
    let path = std::ffi::CString::new(pin.as_os_str().as_bytes())?;
    // SAFETY: a valid NUL-terminated path. EINVAL: not a mount point; ENOENT: no file.
    if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } != 0 {
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) {
            return Err(e);
        }
    }
    match fs::remove_file(pin) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// This thread's file-system ids set to the sandbox user's host ids for as long as it lives.
///
/// A namespaced sandbox's `/tmp` is a tmpfs that belongs to the sandbox's user namespace, in
/// which host root has no id: the kernel refuses to create a file there as root (EOVERFLOW).
/// Working as the sandbox's own user makes the file API act exactly as a process inside would
/// (the same permissions, files born with the right owner). `setfsuid` is per thread, and
/// setting it back to 0 gives the thread its capabilities back.
pub(crate) struct FsIdsAs {
    /// The ids the thread had before, given back on drop; `None` when nothing was changed.
    previous: Option<(u32, u32)>,
}

impl FsIdsAs {
    pub fn sandbox_user(ids: IdRange) -> Self {
        if ids.is_identity() {
            return Self { previous: None };
        }
        // SAFETY: plain system calls on this thread's credentials. Group first: once the uid
        // is not root's the thread may no longer change its group. Each returns the id it
        // replaces, so a nested use (an upload dropped inside a file operation) gives back
        // what it found rather than root's.
        let previous = unsafe {
            let gid = libc::setfsgid(ids.host_gid(SANDBOX_GID)) as u32;
            let uid = libc::setfsuid(ids.host_uid(SANDBOX_UID)) as u32;
            (uid, gid)
        };
        Self {
            previous: Some(previous),
        }
    }
}

impl Drop for FsIdsAs {
    fn drop(&mut self) {
        if let Some((uid, gid)) = self.previous {
            // SAFETY: as above; back to root's ids first (uid first, to regain the right to
            // setfsgid), then to what the thread had.
            unsafe {
                libc::setfsuid(0);
                libc::setfsgid(gid);
                libc::setfsuid(uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn ranges_sit_above_host_accounts_and_below_the_invalid_id() {
        let first = IdRange::of_slot(0);
        assert_eq!(first.host_uid(0), 1_000_000_000);
        assert_eq!(first.host_uid(1000), 1_000_001_000);
        let last = IdRange::of_slot(SLOTS - 1);
        assert!(u64::from(last.host_uid(RANGE_SIZE - 1)) < u64::from(u32::MAX));
        assert_eq!(last.slot(), Some(SLOTS - 1));
        assert_eq!(IdRange::IDENTITY.host_uid(1000), 1000);
        assert_eq!(IdRange::IDENTITY.slot(), None);
    }

    #[test]
    fn concurrent_allocations_never_share_a_range_and_freed_ones_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let ranges = Arc::new(IdRanges::new(dir.path().to_owned()));
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let ranges = ranges.clone();
                std::thread::spawn(move || {
                    (0..50)
                        .map(|i| {
                            let owner = PathBuf::from(format!("/state/sandboxes/rc-{t}-{i}"));
                            (ranges.allocate(&owner).unwrap(), owner)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let all: Vec<(IdRange, PathBuf)> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let distinct: HashSet<u32> = all.iter().map(|(r, _)| r.base).collect();
        assert_eq!(distinct.len(), 400);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 400);

        // Only the owner frees a range.
        ranges.release(all[0].0, &all[1].1).unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 400);
        for (range, owner) in &all {
            ranges.release(*range, owner).unwrap();
        }
        ranges.release(all[0].0, &all[0].1).unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// Stale is decided by the owner's bundle, so any provider sharing the table can sweep
    /// another's leftovers without touching what it still uses.
    #[test]
    fn stale_allocations_are_those_whose_bundle_is_gone() {
        let table = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let ranges = IdRanges::new(table.path().to_owned());
        let kept_bundle = state.path().join("rc-kept");
        fs::create_dir(&kept_bundle).unwrap();
        let kept = ranges.allocate(&kept_bundle).unwrap();
        let gone = ranges.allocate(&state.path().join("rc-gone")).unwrap();
        assert!(ranges.stale(Duration::from_secs(3600)).is_empty());
        let stale = ranges.stale(Duration::ZERO);
        assert_eq!(stale, vec![(gone, state.path().join("rc-gone"))]);
        assert_ne!(kept, gone);
    }

    #[test]
    fn a_state_directorys_own_table_moves_into_the_hosts() {
        let table = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let (legacy, sandboxes) = (
            state.path().join("idranges"),
            state.path().join("sandboxes"),
        );
        fs::create_dir_all(sandboxes.join("rc-live")).unwrap();
        fs::create_dir(&legacy).unwrap();
        fs::write(legacy.join("7"), "rc-live").unwrap();
        fs::write(legacy.join("8"), "rc-dead").unwrap();
        let ranges = IdRanges::new(table.path().to_owned());
        ranges.adopt_legacy(&legacy, &sandboxes).unwrap();
        assert!(!legacy.exists());
        assert_eq!(
            fs::read(table.path().join("7")).unwrap(),
            sandboxes.join("rc-live").as_os_str().as_bytes()
        );
        assert!(!table.path().join("8").exists());
        // Slot 7 is now taken for everyone.
        assert!(!ranges.claim(7, Path::new("/elsewhere/rc-x")).unwrap());
    }
}
