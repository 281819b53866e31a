//! Removing a tree a sandbox made, whatever shape it has. The sandbox is hostile here: its home
//! may be a chain of 30,000 nested directories, hold millions of files, names that are not UTF-8,
//! or directories it made unreadable. A recursive walk (`std::fs::remove_dir_all` recurses once
//! per level) overflows the thread's stack on such a chain, which aborts the whole process, and
//! the janitor retries the removal after every restart: one user's code would be a permanent
//! outage.
//!
//! So the walk is iterative: one open directory at a time (the current one; the way back up is
//! `..`), and per level only the names still to remove, so memory grows with the entries along
//! the current path and never with the stack. Names are raw bytes, never decoded. Symlinks are
//! removed, never followed. Modes the sandbox set do not stop it: root ignores them, and rootless
//! the provider owns the sandbox's files, so it gives each directory back `rwx` to itself before
//! reading it (`open_dir`).
//!
//! Only for a dead sandbox's files (its container is gone, so nothing changes the tree). Never
//! use it on a live sandbox: a process in it could rename the directory being walked, and the
//! way back up (`..`) would then lead somewhere else, eventually above the home on the host. The
//! file API's recursive DELETE keeps an open descriptor for every level instead (`files`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{openat, statat, unlinkat, AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Remove `name` in the directory `parent`, and everything under it if it is a directory. Gone
/// already is fine.
pub(crate) fn remove_tree_at(parent: impl AsFd, name: &CString) -> io::Result<()> {
    let parent = parent.as_fd();
    match statat(parent, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) != FileType::Directory => {
            return ignore_gone(unlinkat(parent, name.as_c_str(), AtFlags::empty()));
        }
        Ok(_) => {}
    }
    // Each level: the names in it still to remove, and its own name in the level above.
    let mut levels: Vec<(Vec<CString>, CString)> = Vec::new();
    let mut current = open_dir(parent, name)?;
    levels.push((names_in(&current)?, name.clone()));
    loop {
        let (pending, _) = levels.last_mut().expect("at least the top level");
        if let Some(child) = pending.pop() {
            match statat(&current, child.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Err(Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
                Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => {
                    let below = open_dir(&current, &child)?;
                    let names = names_in(&below)?;
                    current = below;
                    levels.push((names, child));
                }
                Ok(_) => ignore_gone(unlinkat(&current, child.as_c_str(), AtFlags::empty()))?,
            }
            continue;
        }
        // This level is empty: go up and remove it there.
        let (_, own_name) = levels.pop().expect("the level just emptied");
        if levels.is_empty() {
            drop(current);
            return ignore_gone(unlinkat(parent, own_name.as_c_str(), AtFlags::REMOVEDIR));
        }
        current = openat(
            &current,
            c"..",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        ignore_gone(unlinkat(&current, own_name.as_c_str(), AtFlags::REMOVEDIR))?;
    }
}

/// Open a directory to empty it. A directory the sandbox left unreadable or unwritable is given
/// `rwx` for its owner first: root needs nothing of the kind, but rootless the provider is only
/// the owner, and the owner may always change a mode. The change goes through a descriptor of the
/// directory itself (never a path that could be swapped for a link).
fn open_dir(parent: impl AsFd, name: &CString) -> io::Result<OwnedFd> {
    let parent = parent.as_fd();
    let open = || {
        openat(
            parent,
            name.as_c_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let dir = match open() {
        Err(Errno::ACCESS) => {
            // O_PATH needs no permission on the directory itself; the magic link in /proc
            // names exactly the directory it opened.
            let path = openat(
                parent,
                name.as_c_str(),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&path));
            rustix::fs::chmod(link.as_str(), Mode::from_raw_mode(0o700))?;
            open()?
        }
        other => other?,
    };
    // Unlinking its entries needs write permission on it, which the sandbox may have taken.
    let _ = rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o700));
    Ok(dir)
}

/// The entries of a directory, as raw names, `.` and `..` left out.
fn names_in(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    let mut names = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

fn ignore_gone(result: rustix::io::Result<()>) -> io::Result<()> {
    match result {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn remove(dir: &std::path::Path) -> io::Result<()> {
        let parent = std::fs::File::open(dir.parent().unwrap()).unwrap();
        let name = CString::new(dir.file_name().unwrap().as_bytes()).unwrap();
        remove_tree_at(&parent, &name)
    }

    /// A chain `depth` directories deep under `root`, made with relative steps (a full path
    /// would pass PATH_MAX long before 30,000 levels).
    fn chain(root: &std::path::Path, depth: usize) {
        let mut dir = std::fs::File::open(root).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&dir, c"d", Mode::from_raw_mode(0o755)).unwrap();
            let next = openat(
                &dir,
                c"d",
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .unwrap();
            dir = std::fs::File::from(next);
        }
        rustix::fs::openat(
            &dir,
            c"leaf",
            OFlags::WRONLY | OFlags::CREATE,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
    }

    #[test]
    fn a_chain_thirty_thousand_deep_is_removed_on_a_small_stack() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("home");
        std::fs::create_dir(&root).unwrap();
        chain(&root, 30_000);
        // 256 KiB of stack: a recursive walk would need far more for 30,000 frames.
        let removed = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || remove(&root).map(|()| root.exists()))
            .unwrap()
            .join()
            .expect("no stack overflow");
        assert!(!removed.unwrap(), "the tree is gone");
    }

    #[test]
    fn odd_names_locked_modes_and_links_are_handled() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), b"kept").unwrap();
        let root = tmp.path().join("home");
        std::fs::create_dir(&root).unwrap();
        let odd = root.join(std::ffi::OsStr::from_bytes(b"not-\xff-utf8"));
        std::fs::create_dir(&odd).unwrap();
        std::fs::write(odd.join("f"), b"x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link-out")).unwrap();
        let locked = root.join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join("inside"), b"x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();

        // A directory left unwritable too: its entries cannot be unlinked without a change.
        let sealed = root.join("sealed");
        std::fs::create_dir(&sealed).unwrap();
        std::fs::write(sealed.join("inside"), b"x").unwrap();
        std::fs::set_permissions(&sealed, std::fs::Permissions::from_mode(0o500)).unwrap();

        // As root the modes do not matter; as their owner (rootless) the walk gives itself
        // access back.
        remove(&root).unwrap();
        assert!(!root.exists());
        assert_eq!(std::fs::read(outside.join("keep.txt")).unwrap(), b"kept");
        remove(&root).unwrap();
        remove(&tmp.path().join("never-was")).unwrap();
    }
}
