//! Where the provider's state lives, so that its sandboxes can reach their bundles.
//!
//! Each sandbox's root is an unprivileged host uid of its own (see `idmap`), and runc mounts the
//! sandbox's root filesystem from its bundle as that uid, inside the sandbox's user namespace: so
//! every directory above the bundle must let others pass through (`o+x`). A state directory
//! below a private one does not: `/root` is 0700 on most servers and cloud images, and a clone
//! there keeps `threadbox dev`'s data in `/root/<clone>/.threadbox`.
//!
//! Then the state moves to a directory of the provider's own on the host
//! (`RuncConfig::host_state_dir`, `/var/lib/threadbox/state/<id>`), and the configured path
//! becomes a symlink to it. The private directory stays private, the data directory still says
//! where its sandboxes are (and a restart follows the link to find them), and nothing of one
//! sandbox is open to another: the moved directory is the same tree, with the same modes, that
//! would have been made in place (bundles 0711, homes owned by each sandbox's own ids).
//!
//! Passing through is checked for real, as an id that is neither root nor the owner (see
//! [`PROBE_ID`]), so ACLs and whatever else the kernel checks count. Where no layout can work
//! (the host directory itself below a private one), [`place`] refuses, naming the directory that
//! blocks, why, and what to do, instead of letting every create fail later.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use threadbox_core::ports::ProviderError;

use super::idmap::PROBE_ID;

/// The file in a moved state directory naming the path that links to it, for an operator who
/// finds it under the host directory and wonders whose it is.
const ORIGIN_FILE: &str = "origin";

/// Where the state lives, and whether it was moved to get there.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// The configured directory is reachable: the state lives there.
    InPlace(PathBuf),
    /// The configured path is a symlink to this directory under the host directory (made now,
    /// or by an earlier start).
    Moved(PathBuf),
}

impl Placement {
    pub fn dir(&self) -> &Path {
        match self {
            Self::InPlace(dir) | Self::Moved(dir) => dir,
        }
    }
}

/// Decide where the state of a provider configured with `state_dir` lives (see the module docs).
/// Only for sandboxes with user namespaces of their own: rootless sandboxes' root is the caller,
/// and sandboxes without a user namespace are set up by root itself.
pub(crate) fn place(state_dir: &Path, host_state_dir: &Path) -> Result<Placement, ProviderError> {
    if let Ok(target) = fs::read_link(state_dir) {
        return follow(state_dir, &target);
    }
    let existing = nearest_existing(state_dir);
    let Some(blocker) = first_blocker(&existing).map_err(|e| internal(&existing, e))? else {
        return Ok(Placement::InPlace(state_dir.to_owned()));
    };
    if state_dir.is_dir() {
        clear_unreachable(state_dir, &blocker)?;
    }
    let target = make_host_dir(host_state_dir, state_dir)?;
    std::os::unix::fs::symlink(&target, state_dir).map_err(|e| {
        let _ = fs::remove_dir_all(&target);
        internal(state_dir, e)
    })?;
    tracing::info!(
        state_dir = %state_dir.display(),
        moved_to = %target.display(),
        private = %blocker.describe(),
        "the sandboxes live in a host directory of threadbox's own: each sandbox's root must \
         pass through every directory above its bundle, and a private one is in the way"
    );
    Ok(Placement::Moved(target))
}

/// `state_dir` is a link an earlier start made: use its target, made again if someone removed
/// it (its sandboxes are gone with it, and the provider's sweep says so).
fn follow(state_dir: &Path, target: &Path) -> Result<Placement, ProviderError> {
    if !target.is_absolute() {
        return Err(ProviderError::Unsupported(format!(
            "{} links to {}, a relative path: threadbox only follows the absolute links it \
             makes; remove the link (its sandboxes are not there) and start again",
            state_dir.display(),
            target.display()
        )));
    }
    match fs::DirBuilder::new().mode(0o711).create(target) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => other.map_err(|e| internal(target, e))?,
    }
    if let Some(blocker) = first_blocker(target).map_err(|e| internal(target, e))? {
        return Err(unreachable(target, &blocker));
    }
    Ok(Placement::Moved(target.to_owned()))
}

/// A state directory an earlier start made in place, before it could be reached: no sandbox
/// can have started there, so nothing in it is worth keeping (runc's state, spare home
/// volumes). One that holds a bundle is not ours to remove.
fn clear_unreachable(state_dir: &Path, blocker: &Blocker) -> Result<(), ProviderError> {
    let has_bundles = fs::read_dir(state_dir.join("sandboxes"))
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    if has_bundles {
        return Err(ProviderError::Unsupported(format!(
            "{} holds sandboxes, but {}: their roots cannot reach them. Let others pass \
             through it (chmod o+x {}), or move the sandboxes away and start again",
            state_dir.display(),
            blocker.describe(),
            blocker.dir.display()
        )));
    }
    fs::remove_dir_all(state_dir).map_err(|e| {
        ProviderError::Unsupported(format!(
            "cannot clear {}, a state directory its sandboxes cannot reach ({}): {e}; remove \
             it and start again",
            state_dir.display(),
            blocker.describe()
        ))
    })
}

/// A new directory under `host_state_dir` for the state configured at `state_dir`, checked to
/// be reachable.
fn make_host_dir(host_state_dir: &Path, state_dir: &Path) -> Result<PathBuf, ProviderError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(host_state_dir)
        .map_err(|e| internal(host_state_dir, e))?;
    // The host directory and its parent are threadbox's own (`/var/lib/threadbox`, which also
    // holds the 0700 id table): they only need to be passable. Others' directories stay as
    // they are; if one of them blocks, the check below says which.
    let me = rustix::process::geteuid().as_raw();
    for dir in [Some(host_state_dir), host_state_dir.parent()]
        .into_iter()
        .flatten()
    {
        let meta = fs::metadata(dir).map_err(|e| internal(dir, e))?;
        if meta.uid() == me && meta.mode() & 0o001 == 0 {
            fs::set_permissions(
                dir,
                fs::Permissions::from_mode((meta.mode() & 0o7777) | 0o711),
            )
            .map_err(|e| internal(dir, e))?;
        }
    }
    if let Some(blocker) = first_blocker(host_state_dir).map_err(|e| internal(host_state_dir, e))? {
        return Err(unreachable(host_state_dir, &blocker));
    }
    let target = host_state_dir.join(uuid::Uuid::new_v4().simple().to_string());
    fs::DirBuilder::new()
        .mode(0o711)
        .create(&target)
        .map_err(|e| internal(&target, e))?;
    let origin = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(target.join(ORIGIN_FILE))
        .and_then(|mut file| {
            use std::io::Write;
            writeln!(file, "{}", state_dir.display())
        });
    if let Err(e) = origin {
        let _ = fs::remove_dir_all(&target);
        return Err(internal(&target, e));
    }
    Ok(target)
}

/// A directory others may not pass through, and what it is like.
#[derive(Debug)]
struct Blocker {
    dir: PathBuf,
    mode: u32,
    owner: u32,
}

impl Blocker {
    fn describe(&self) -> String {
        format!(
            "{} (mode {:04o}, owner uid {}) does not let others pass through",
            self.dir.display(),
            self.mode,
            self.owner
        )
    }
}

fn unreachable(dir: &Path, blocker: &Blocker) -> ProviderError {
    ProviderError::Unsupported(format!(
        "sandboxes cannot run from {}: {}, and each sandbox's root (a host uid of its own) must \
         pass through every directory above its bundle. Let others pass through it (chmod o+x \
         {}), or run threadbox from a directory whose parents all do",
        dir.display(),
        blocker.describe(),
        blocker.dir.display()
    ))
}

fn internal(path: &Path, e: io::Error) -> ProviderError {
    ProviderError::Internal(format!("cannot prepare {}: {e}", path.display()))
}

/// `path` or its nearest ancestor that exists (at worst `/`).
fn nearest_existing(path: &Path) -> PathBuf {
    path.ancestors()
        .find(|dir| dir.exists())
        .unwrap_or(Path::new("/"))
        .to_owned()
}

/// The first directory on the way down to `dir` (included) that others may not pass through,
/// or `None` when a sandbox's root reaches it.
fn first_blocker(dir: &Path) -> io::Result<Option<Blocker>> {
    let dir = dir.canonicalize()?;
    if passable(&dir)? {
        return Ok(None);
    }
    let mut ancestors: Vec<&Path> = dir.ancestors().collect();
    ancestors.reverse();
    for ancestor in ancestors {
        if !passable(ancestor)? {
            let meta = fs::metadata(ancestor)?;
            return Ok(Some(Blocker {
                dir: ancestor.to_owned(),
                mode: meta.mode() & 0o7777,
                owner: meta.uid(),
            }));
        }
    }
    // Each step passes but the whole does not (a race with a chmod): name the directory itself.
    let meta = fs::metadata(&dir)?;
    Ok(Some(Blocker {
        dir,
        mode: meta.mode() & 0o7777,
        owner: meta.uid(),
    }))
}

/// Whether [`PROBE_ID`] can pass through `dir` and everything above it: a lookup of `dir/.` as
/// that id, on a thread of its own (file-system ids are per thread, and changing them from root
/// drops root's power to bypass permissions for that thread alone).
fn passable(dir: &Path) -> io::Result<bool> {
    let probe = dir.join(".");
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: plain system calls on this short-lived thread's own credentials; the
                // thread ends without running anything else. Group first: once the uid is not
                // root's the thread may no longer change its group.
                unsafe {
                    libc::setfsgid(PROBE_ID);
                    libc::setfsuid(PROBE_ID);
                }
                match fs::metadata(&probe) {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(false),
                    Err(e) => Err(e),
                }
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the reachability check panicked")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_root() -> bool {
        rustix::process::geteuid().is_root()
    }

    fn chmod(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A private home (0700) with a data directory below it, and a host directory of its own.
    struct Layout {
        _tmp: tempfile::TempDir,
        home: PathBuf,
        host: PathBuf,
    }

    fn layout() -> Layout {
        let tmp = tempfile::tempdir().unwrap();
        chmod(tmp.path(), 0o755);
        let home = tmp.path().join("home");
        fs::create_dir(&home).unwrap();
        chmod(&home, 0o700);
        let host = tmp.path().join("var-lib-threadbox").join("state");
        Layout {
            _tmp: tmp,
            home,
            host,
        }
    }

    #[test]
    fn a_reachable_directory_keeps_its_state_in_place() {
        if !is_root() {
            return eprintln!("SKIPPED: changing file-system ids needs root");
        }
        let l = layout();
        chmod(&l.home, 0o711);
        let state = l.home.join("clone/.threadbox/sandboxes");
        assert_eq!(
            place(&state, &l.host).unwrap(),
            Placement::InPlace(state.clone())
        );
        assert!(!l.host.exists(), "nothing made on the host");
    }

    #[test]
    fn below_a_private_home_the_state_moves_to_the_host_directory_behind_a_link() {
        if !is_root() {
            return eprintln!("SKIPPED: changing file-system ids needs root");
        }
        let l = layout();
        let data = l.home.join("clone/.threadbox");
        fs::create_dir_all(&data).unwrap();
        let state = data.join("sandboxes");

        let Placement::Moved(target) = place(&state, &l.host).unwrap() else {
            panic!("a state directory below a 0700 home must move");
        };
        assert_eq!(target.parent(), Some(l.host.as_path()));
        assert_eq!(fs::read_link(&state).unwrap(), target);
        assert_eq!(fs::metadata(&target).unwrap().mode() & 0o7777, 0o711);
        assert!(passable(&target).unwrap(), "a sandbox's root reaches it");
        assert_eq!(
            fs::read_to_string(target.join(ORIGIN_FILE)).unwrap().trim(),
            state.display().to_string()
        );
        assert_eq!(
            fs::metadata(&l.home).unwrap().mode() & 0o7777,
            0o700,
            "the private home stays private"
        );

        // A restart follows the link to the same place.
        assert_eq!(
            place(&state, &l.host).unwrap(),
            Placement::Moved(target.clone())
        );
    }

    #[test]
    fn an_unreachable_state_directory_an_earlier_start_made_is_replaced_unless_it_holds_sandboxes()
    {
        if !is_root() {
            return eprintln!("SKIPPED: changing file-system ids needs root");
        }
        let l = layout();
        let state = l.home.join("data/sandboxes");
        fs::create_dir_all(state.join("sandboxes")).unwrap();
        fs::create_dir_all(state.join("runc")).unwrap();
        assert!(matches!(
            place(&state, &l.host).unwrap(),
            Placement::Moved(_)
        ));

        let other = l.home.join("other/sandboxes");
        fs::create_dir_all(other.join("sandboxes/rc-0123456789ab")).unwrap();
        let refused = place(&other, &l.host).unwrap_err().to_string();
        assert!(
            refused.contains(&*other.display().to_string())
                && refused.contains(&*l.home.display().to_string())
                && refused.contains("chmod o+x"),
            "names the directory, the blocker and the fix: {refused}"
        );
        assert!(
            other.join("sandboxes/rc-0123456789ab").is_dir(),
            "left alone"
        );
    }

    #[test]
    fn a_host_directory_no_sandbox_can_reach_is_refused_naming_what_blocks_it() {
        if !is_root() {
            return eprintln!("SKIPPED: changing file-system ids needs root");
        }
        let l = layout();
        let locked = l.home.join("locked");
        fs::create_dir_all(&locked).unwrap();
        let host = locked.join("threadbox/state");
        let refused = place(&l.home.join("data/sandboxes"), &host)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains(&format!("{} (mode 0700", l.home.display()))
                && refused.contains("chmod o+x"),
            "{refused}"
        );
        assert!(
            fs::symlink_metadata(l.home.join("data/sandboxes")).is_err(),
            "no link to a directory that cannot work"
        );
    }
}
