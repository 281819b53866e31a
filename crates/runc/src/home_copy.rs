//! Copying a home tree, as checkpoints, restores and forks do: every file, directory and link
//! with its mode, owner (moved from one sandbox's host ids to another's) and times; a file is
//! cloned (`FICLONE`) where source and destination share a filesystem that has copy on write
//! (XFS, btrfs), else copied sparse (only its data extents, with `copy_file_range`).
//!
//! The source is a sandbox's home, so it is hostile: nothing in it is followed (links are
//! copied as links, files opened with `O_NOFOLLOW`), sockets, fifos and devices are skipped,
//! and the walk is iterative (no depth limit can overflow the stack). The copy stops, and says
//! so, once the source holds more than the cap. The destination is always threadbox's own
//! (a fresh directory, or a home whose processes are stopped).
//!
//! A home whose sandbox runs on is copied by [`live::LiveCopy`] instead: most of it with the
//! sandbox running, the rest frozen.

pub(crate) mod live;
mod writers;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{lchown, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{copy_file_range, ioctl_ficlone, seek, SeekFrom, Timespec, Timestamps};

use super::idmap::{IdRange, RANGE_SIZE};

/// What a copy held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CopyStats {
    /// Bytes the source's copied files occupy (allocated blocks, so holes count nothing).
    pub bytes: u64,
    /// Files, directories and links copied.
    pub files: u64,
    /// Files cloned rather than copied.
    pub cloned: u64,
}

/// The source holds more than the cap allows; how much it held when the copy stopped.
#[derive(Debug)]
pub(crate) struct OverCap {
    pub bytes: u64,
    pub cap: u64,
}

#[derive(Debug)]
pub(crate) enum CopyError {
    Io(io::Error),
    OverCap(OverCap),
}

impl From<io::Error> for CopyError {
    fn from(e: io::Error) -> Self {
        CopyError::Io(e)
    }
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyError::Io(e) => write!(f, "{e}"),
            CopyError::OverCap(o) => write!(
                f,
                "the home holds more than {} bytes (over {} bytes when counting stopped)",
                o.cap, o.bytes
            ),
        }
    }
}

/// How host ids move from the source's sandbox to the destination's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdMove {
    pub from: IdRange,
    pub to: IdRange,
}

impl IdMove {
    pub fn same(ids: IdRange) -> Self {
        Self { from: ids, to: ids }
    }

    /// The destination's host id of a source host id: the same id inside the sandbox, or
    /// `nobody` (65534 inside) for one outside the source's range. Rootless, every id is the
    /// caller's, the only one there is.
    fn map(&self, host: u32, gid: bool) -> u32 {
        let base = |r: IdRange| if gid { r.host_gid(0) } else { r.host_uid(0) };
        if self.to.is_rootless() {
            return base(self.to);
        }
        let inside = if self.from.is_rootless() {
            // A rootless source's files are all its user's, uid 0 inside.
            Some(0)
        } else {
            host.checked_sub(base(self.from))
                .filter(|i| *i < RANGE_SIZE)
        };
        base(self.to) + inside.unwrap_or(65_534)
    }

    fn owner(&self, meta: &fs::Metadata) -> (u32, u32) {
        self.owner_ids(meta.uid(), meta.gid())
    }

    /// The destination's owner of a source entry owned by host ids `uid` and `gid`.
    pub fn owner_ids(&self, uid: u32, gid: u32) -> (u32, u32) {
        (self.map(uid, false), self.map(gid, true))
    }
}

/// A directory waiting for its mode, owner and times, set once its entries are in (a
/// read-only directory must be filled first, and filling it moves its times).
struct Pending {
    dst: PathBuf,
    meta: fs::Metadata,
    mode: u32,
}

/// Copy the tree under `src` into the existing, empty directory `dst` (whose own mode, owner
/// and times become `src`'s), moving ids by `ids`, stopping once the files hold more than
/// `cap` bytes. A top-level entry named `skip` and owned by host root is left out (an ext4
/// home's `lost+found`, which no sandbox can make).
pub(crate) fn copy_tree(
    src: &Path,
    dst: &Path,
    ids: IdMove,
    cap: u64,
    skip: Option<&str>,
) -> Result<CopyStats, CopyError> {
    // Not root (rootless), the provider reads the sandbox's files as their owner, so what the
    // sandbox locked (a `chmod 000` folder) is opened up for the copy and locked again after:
    // the sandbox is frozen meanwhile and never sees it.
    let granted = match rustix::process::geteuid().is_root() {
        true => Vec::new(),
        false => grant_owner_access(src)?,
    };
    let original: HashMap<PathBuf, u32> = granted.iter().cloned().collect();
    let copied = copy_walk(src, dst, ids, cap, skip, &original);
    for (path, mode) in granted.iter().rev() {
        fs::set_permissions(path, fs::Permissions::from_mode(*mode))?;
    }
    copied
}

/// Give the owner read (and for directories search) on everything under `root` that lacks it;
/// what was changed and its mode before, parents before their entries.
fn grant_owner_access(root: &Path) -> io::Result<Vec<(PathBuf, u32)>> {
    let mut granted = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let mode = fs::symlink_metadata(&dir)?.mode() & 0o7777;
        if mode & 0o500 != 0o500 {
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode | 0o500))?;
            granted.push((dir.clone(), mode));
        }
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = fs::symlink_metadata(entry.path())?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() && meta.mode() & 0o400 == 0 {
                let mode = meta.mode() & 0o7777;
                fs::set_permissions(entry.path(), fs::Permissions::from_mode(mode | 0o400))?;
                granted.push((entry.path(), mode));
            }
        }
    }
    Ok(granted)
}

fn copy_walk(
    src: &Path,
    dst: &Path,
    ids: IdMove,
    cap: u64,
    skip: Option<&str>,
    original: &HashMap<PathBuf, u32>,
) -> Result<CopyStats, CopyError> {
    // The mode the sandbox gave a path (before `grant_owner_access` opened it up).
    let mode_of = |path: &Path, meta: &fs::Metadata| {
        original.get(path).copied().unwrap_or(meta.mode() & 0o7777)
    };
    let mut stats = CopyStats::default();
    let top = fs::symlink_metadata(src)?;
    let mut pending = vec![Pending {
        dst: dst.to_owned(),
        mode: mode_of(src, &top),
        meta: top,
    }];
    let mut stack = vec![(src.to_owned(), dst.to_owned())];
    while let Some((from_dir, to_dir)) = stack.pop() {
        for entry in fs::read_dir(&from_dir).map_err(|e| at(&from_dir, e))? {
            let entry = entry.map_err(|e| at(&from_dir, e))?;
            let (from, to) = (entry.path(), to_dir.join(entry.file_name()));
            let meta = fs::symlink_metadata(&from).map_err(|e| at(&from, e))?;
            let top = from_dir == src;
            if top && meta.uid() == 0 && skip.is_some_and(|name| entry.file_name() == name) {
                continue;
            }
            let kind = meta.file_type();
            if kind.is_dir() {
                fs::create_dir(&to).map_err(|e| at(&to, e))?;
                // Ours alone until it is filled; its real mode comes at the end.
                fs::set_permissions(&to, fs::Permissions::from_mode(0o700))?;
                pending.push(Pending {
                    dst: to.clone(),
                    mode: mode_of(&from, &meta),
                    meta,
                });
                stack.push((from, to));
            } else if kind.is_file() {
                stats.bytes += meta.blocks() * 512;
                if stats.bytes > cap {
                    return Err(CopyError::OverCap(OverCap {
                        bytes: stats.bytes,
                        cap,
                    }));
                }
                let mode = mode_of(&from, &meta);
                if copy_file(&from, &to, &meta, mode, ids).map_err(|e| at(&from, e))? {
                    stats.cloned += 1;
                }
            } else if kind.is_symlink() {
                let target = fs::read_link(&from).map_err(|e| at(&from, e))?;
                std::os::unix::fs::symlink(&target, &to).map_err(|e| at(&to, e))?;
                let (uid, gid) = ids.owner(&meta);
                lchown(&to, Some(uid), Some(gid)).map_err(|e| at(&to, e))?;
                set_times(&to, &meta, false)?;
            } else {
                // Sockets, fifos, devices: nothing a home needs back, and nothing to copy.
                continue;
            }
            stats.files += 1;
        }
    }
    // Deepest first, so setting a directory's times is not undone by finishing a child.
    for dir in pending.iter().rev() {
        let (uid, gid) = ids.owner(&dir.meta);
        lchown(&dir.dst, Some(uid), Some(gid)).map_err(|e| at(&dir.dst, e))?;
        fs::set_permissions(&dir.dst, fs::Permissions::from_mode(dir.mode))?;
        set_times(&dir.dst, &dir.meta, true)?;
    }
    Ok(stats)
}

/// Copy one regular file; true when it was cloned.
fn copy_file(
    from: &Path,
    to: &Path,
    meta: &fs::Metadata,
    mode: u32,
    ids: IdMove,
) -> io::Result<bool> {
    let source = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(from)?;
    // Checked through the descriptor: what was opened is the file the walk saw.
    let opened = source.metadata()?;
    if !opened.is_file() || opened.ino() != meta.ino() {
        return Err(io::Error::other("the file changed while it was copied"));
    }
    let dest = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    let cloned = copy_data(&source, &dest, opened.len())?;
    let (uid, gid) = ids.owner(meta);
    std::os::unix::fs::fchown(&dest, Some(uid), Some(gid))?;
    dest.set_permissions(fs::Permissions::from_mode(mode))?;
    rustix::fs::futimens(&dest, &timestamps(meta))?;
    Ok(cloned)
}

/// Put `source`'s first `len` bytes into the empty `dest`: a clone where the filesystem can,
/// else a sparse copy. True when cloned.
fn copy_data(source: &File, dest: &File, len: u64) -> io::Result<bool> {
    if ioctl_ficlone(dest, source).is_ok() {
        return Ok(true);
    }
    sparse_copy(source, dest, len)?;
    Ok(false)
}

/// Copy `len` bytes' worth of data extents from `source` to `dest`, leaving holes as holes.
fn sparse_copy(source: &File, dest: &File, len: u64) -> io::Result<()> {
    dest.set_len(len)?;
    let mut offset = 0u64;
    while offset < len {
        let data = match seek(source, SeekFrom::Data(offset)) {
            Ok(at) => at,
            // No data past `offset`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => break,
            // A filesystem without SEEK_DATA: the whole file is data.
            Err(rustix::io::Errno::INVAL) if offset == 0 => 0,
            Err(e) => return Err(e.into()),
        };
        let hole = seek(source, SeekFrom::Hole(data)).unwrap_or(len).min(len);
        copy_range(source, dest, data, hole)?;
        offset = hole;
    }
    Ok(())
}

/// Copy bytes `from..to` of `source` to the same place in `dest`: in the kernel
/// (`copy_file_range`), or through a buffer where it cannot between these filesystems (EXDEV
/// before Linux 5.19, a filesystem without it).
fn copy_range(source: &File, dest: &File, from: u64, to: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let (mut at_in, mut at_out) = (from, from);
    while at_in < to {
        let want = usize::try_from(to - at_in)
            .unwrap_or(usize::MAX)
            .min(1 << 30);
        match copy_file_range(
            source.as_fd(),
            Some(&mut at_in),
            dest.as_fd(),
            Some(&mut at_out),
            want,
        ) {
            // The file shrank under us (only a writer outside the frozen sandbox could).
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(
                rustix::io::Errno::XDEV
                | rustix::io::Errno::NOSYS
                | rustix::io::Errno::OPNOTSUPP
                | rustix::io::Errno::INVAL,
            ) => break,
            Err(e) => return Err(e.into()),
        }
    }
    let mut buffer = vec![0u8; 1 << 20];
    while at_in < to {
        let want = usize::try_from(to - at_in)
            .unwrap_or(usize::MAX)
            .min(buffer.len());
        let n = source.read_at(&mut buffer[..want], at_in)?;
        if n == 0 {
            return Ok(());
        }
        dest.write_all_at(&buffer[..n], at_in)?;
        at_in += n as u64;
    }
    Ok(())
}

fn timestamps(meta: &fs::Metadata) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: meta.atime(),
            tv_nsec: meta.atime_nsec() as _,
        },
        last_modification: Timespec {
            tv_sec: meta.mtime(),
            tv_nsec: meta.mtime_nsec() as _,
        },
    }
}

fn set_times(path: &Path, meta: &fs::Metadata, follow: bool) -> io::Result<()> {
    let flags = if follow {
        rustix::fs::AtFlags::empty()
    } else {
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW
    };
    rustix::fs::utimensat(rustix::fs::CWD, path, &timestamps(meta), flags)
        .map_err(|e| at(path, e.into()))
}

/// Give every directory under `dir` (itself included) its owner's write and search bits, so a
/// tree whose directories the sandbox made read-only can be removed. Links are not followed.
pub(crate) fn make_removable(dir: &Path) -> io::Result<()> {
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let mode = fs::symlink_metadata(&d)?.mode();
        fs::set_permissions(&d, fs::Permissions::from_mode((mode & 0o7777) | 0o700))?;
        for entry in fs::read_dir(&d)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Remove a tree threadbox made (a checkpoint, a half-made copy), whatever its modes.
pub(crate) fn remove_tree(dir: &Path) -> io::Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(_) => {
            make_removable(dir)?;
            fs::remove_dir_all(dir)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, Write};

    use super::*;

    fn caller() -> IdRange {
        IdRange::rootless(
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        )
    }

    #[test]
    fn a_tree_is_copied_with_links_modes_times_and_holes() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
        fs::create_dir_all(src.join("a/b")).unwrap();
        fs::write(src.join("a/b/f.txt"), b"hello").unwrap();
        let mut sparse = File::create(src.join("sparse")).unwrap();
        sparse.seek(io::SeekFrom::Start(50 << 20)).unwrap();
        sparse.write_all(b"end").unwrap();
        drop(sparse);
        std::os::unix::fs::symlink("/etc/passwd", src.join("link")).unwrap();
        fs::set_permissions(src.join("a/b/f.txt"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::set_permissions(src.join("a"), fs::Permissions::from_mode(0o500)).unwrap();
        fs::create_dir(&dst).unwrap();

        let stats = copy_tree(&src, &dst, IdMove::same(caller()), 1 << 30, None).unwrap();
        assert_eq!(stats.files, 5, "a, b, f.txt, sparse, link");
        assert!(
            stats.bytes < 1 << 20,
            "holes count nothing: {}",
            stats.bytes
        );
        assert_eq!(fs::read(dst.join("a/b/f.txt")).unwrap(), b"hello");
        assert_eq!(
            fs::metadata(dst.join("a/b/f.txt")).unwrap().mode() & 0o777,
            0o640
        );
        assert_eq!(fs::metadata(dst.join("a")).unwrap().mode() & 0o777, 0o500);
        assert_eq!(
            fs::read_link(dst.join("link")).unwrap(),
            Path::new("/etc/passwd")
        );
        let copied = fs::metadata(dst.join("sparse")).unwrap();
        assert_eq!(copied.len(), (50 << 20) + 3);
        assert!(copied.blocks() * 512 < 1 << 20, "the hole stays a hole");
        assert_eq!(
            copied.mtime(),
            fs::metadata(src.join("sparse")).unwrap().mtime()
        );

        remove_tree(&dst).unwrap();
        assert!(!dst.exists());
        make_removable(&src).unwrap();
    }

    #[test]
    fn a_copy_over_the_cap_stops_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("big"), vec![7u8; 2 << 20]).unwrap();
        fs::create_dir(&dst).unwrap();
        match copy_tree(&src, &dst, IdMove::same(caller()), 1 << 20, None) {
            Err(CopyError::OverCap(o)) => assert!(o.bytes > o.cap, "{o:?}"),
            other => panic!("{other:?}"),
        }
        remove_tree(&dst).unwrap();
        remove_tree(&dst).unwrap();
    }
}
