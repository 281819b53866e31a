//! Copying a running sandbox's home in two passes, so the sandbox is frozen only for what
//! changed rather than for the whole copy (checkpoints, and forks of a live home).
//!
//! **Pass 1** ([`LiveCopy::warm`]), the sandbox running: the whole tree is copied into the
//! destination as a frozen copy would be, and for each file and link copied it is noted what
//! was read (the source's device, inode, size, mtime and ctime, seen through the descriptor
//! read from) under the inode of the copy. What fails on the way (an entry gone, replaced,
//! locked) is left out: pass 2 sees to it. This also brings the home into the page cache.
//!
//! **Pass 2** ([`LiveCopy::finish`]), the sandbox frozen: the source is walked again and the
//! destination made equal to it: entries gone from the source are removed, new ones copied,
//! every directory's mode, owner and times set again from what it is now, and each file or link
//! copied again unless it is *unchanged* since pass 1 read it, that is:
//!
//! 1. the destination's entry of that name is the copy pass 1 made of that very source inode
//!    (same device and inode, same size, mtime and ctime as read), and
//! 2. its ctime is older than pass 1's start less a margin ([`FINE_MARGIN`], or [`MARGIN`]
//!    where the filesystem keeps whole seconds), and
//! 3. no process had it mapped shared and writable, or open for writing, when pass 1 started,
//!    nor has it mapped now (see `writers`), and the wall clock did not jump meanwhile.
//!
//! Why this is as consistent as copying it all frozen: the kernel sets a file's ctime to the
//! current time on every change to its data or its inode (write, truncate, fallocate, chmod,
//! chown, utimes, link, unlink, and rename on ext4, XFS and btrfs), and no unprivileged process
//! can set it to anything else. Timestamps come from a coarse clock (one tick behind at most)
//! and may be whole seconds (ext4 with small inodes: pass 1 sees no ctime with a fraction of a
//! second); the margin is more than both. So a file changed
//! at any time from pass 1's start on has a ctime past the limit and is copied again, frozen.
//! A file whose ctime is older was last changed before pass 1 began, so the bytes pass 1 read
//! (after it began) are the bytes it holds now; condition 1 makes sure they are the bytes of
//! this inode at this name (a rename of an old file, or of a folder holding it, keeps its
//! ctime but brings another inode, or none pass 1 copied, to the name). What moves no ctime
//! is covered by condition 3: stores through a mapping made writable earlier, and a `write`
//! begun before pass 1 (times move when a write starts) still under way while it read. Names
//! are read again, frozen, for every folder, so the set of entries is the frozen one. A clock
//! stepped back could make new ctimes look old, so a jump between the wall clock and the
//! monotonic one (more than [`CLOCK_SLACK`]) makes pass 2 trust nothing and copy every file.
//!
//! The two passes are used only where the home's filesystem is ext4, XFS or btrfs, whose
//! write faults on shared mappings move the times as said; elsewhere pass 1 is skipped and
//! pass 2 is a plain frozen copy (`copy_tree`). What escapes a frozen copy escapes this one
//! too (asynchronous I/O still in flight when the sandbox is frozen; writers outside it).
//!
//! Both passes treat the source as hostile, as `copy_tree` does, and pass 1 more so since the
//! sandbox runs meanwhile and may swap any folder for a link between two calls: every folder is
//! opened with `openat2` refusing links in every component and a crossing into another mount,
//! entries are looked at and opened relative to their folder's descriptor, files with
//! `O_NOFOLLOW`, and what a descriptor shows (not what a path showed) is what is copied and
//! noted. Pass 1 stops (leaving the rest to pass 2) at the byte cap and past [`MAX_NOTED`]
//! entries; pass 2 counts the bytes again and refuses a home over the cap. The destination is
//! threadbox's own throughout (a fresh directory, or an emptied home no process uses yet); its
//! folders stay mode 0700 until pass 2 gives them theirs.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{
    lchown, DirBuilderExt, DirEntryExt, MetadataExt, OpenOptionsExt, PermissionsExt,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{
    openat, openat2, readlinkat, statfs, statx, AtFlags, FsWord, Mode, OFlags, ResolveFlags, Statx,
    StatxFlags, Timespec, Timestamps,
};

use super::writers::{busy_files, Scan};
use super::{
    at, copy_data, copy_tree, grant_owner_access, remove_tree, CopyError, CopyStats, IdMove,
    OverCap,
};

/// How much older than pass 1's start a ctime must be for the file to count as unchanged, on
/// a filesystem that keeps whole seconds (ext4 with 128-byte inodes): more than the rounding
/// plus a clock tick.
const MARGIN: Duration = Duration::from_secs(2);
/// The same where timestamps have nanoseconds (a ctime seen with a fraction of a second says
/// so): the kernel stamps from a clock one tick (at most 10 ms) behind; ten times that.
const FINE_MARGIN: Duration = Duration::from_millis(100);
/// The most the wall clock may drift from the monotonic clock between the passes.
const CLOCK_SLACK: Duration = Duration::from_millis(500);
/// The most entries pass 1 looks at (its time and memory); past them pass 2 copies the rest.
const MAX_NOTED: usize = 1 << 20;

/// `statfs` magic numbers of the filesystems the two passes are used on.
const EXT4: FsWord = 0xEF53;
const XFS: FsWord = 0x5846_5342;
const BTRFS: FsWord = 0x9123_683E;

/// What pass 1 read of a source file or link, as its descriptor showed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Source {
    dev: (u32, u32),
    ino: u64,
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
}

impl Source {
    fn of(st: &Statx) -> Self {
        Self {
            dev: (st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            size: st.stx_size,
            mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
            ctime: (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
        }
    }
}

/// A copy pass 1 made: what it was made from, the access time given it, and whether it was
/// cloned.
#[derive(Clone, Copy, Debug)]
struct Copied {
    source: Source,
    atime: (i64, u32),
    cloned: bool,
}

/// Pass 1's record.
#[derive(Debug)]
struct Warm {
    /// By the destination's inode number.
    copied: HashMap<u64, Copied>,
    /// The wall clock and the monotonic clock when pass 1 began.
    began_at: SystemTime,
    began: Instant,
    /// Files mapped or open for writing when pass 1 began; `None` when that is unknown.
    busy: Option<HashSet<u64>>,
    /// A ctime with a fraction of a second was seen: the filesystem keeps nanoseconds.
    fine: bool,
}

/// A copy of a live home into `dst` (an existing, empty directory): [`Self::warm`] with the
/// sandbox running, then [`Self::finish`] with it frozen.
pub(crate) struct LiveCopy {
    src: PathBuf,
    dst: PathBuf,
    ids: IdMove,
    cap: u64,
    skip: Option<&'static str>,
    /// The margin, where not [`MARGIN`] or [`FINE_MARGIN`] as the filesystem's timestamps say.
    margin: Option<Duration>,
    /// The sandbox's processes, when they can be listed (its cgroup's, as root).
    processes: Option<Processes>,
    warm: Option<Warm>,
}

/// Lists the sandbox's processes (host pids).
pub(crate) type Processes = Box<dyn Fn() -> io::Result<Vec<i32>> + Send>;

/// What pass 2 did, besides the copy's [`CopyStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Finished {
    pub stats: CopyStats,
    /// Files and links pass 2 copied (again or for the first time).
    pub recopied: u64,
    /// Pass 1 ran (false: the whole copy was frozen).
    pub two_pass: bool,
}

impl LiveCopy {
    /// A copy of `src` into `dst`, ids moved by `ids`, refused over `cap` bytes; a top-level
    /// entry named `skip` and owned by host root is left out (and left alone in `dst`).
    pub fn new(
        src: PathBuf,
        dst: PathBuf,
        ids: IdMove,
        cap: u64,
        skip: Option<&'static str>,
    ) -> Self {
        Self {
            src,
            dst,
            ids,
            cap,
            skip,
            margin: None,
            processes: None,
            warm: None,
        }
    }

    /// Look for writers among the processes `list` gives (the sandbox's), rather than among
    /// every process this user may read.
    pub fn watching(mut self, list: Processes) -> Self {
        self.processes = Some(list);
        self
    }

    /// The files the sandbox's processes may write behind their ctimes' back (`writers`).
    fn busy(&self, scan: Scan) -> Option<HashSet<u64>> {
        match &self.processes {
            Some(list) => busy_files(scan, Some(&list().ok()?)),
            None => busy_files(scan, None),
        }
    }

    /// Pass 1, the sandbox running. Never fails: what it could not copy, pass 2 copies.
    pub fn warm(&mut self) {
        if !two_pass_filesystem(&self.src) {
            return;
        }
        let (began_at, began) = (SystemTime::now(), Instant::now());
        let (Ok(root), Ok(top)) = (open_root(&self.src), fs::metadata(&self.src)) else {
            return;
        };
        let mut warm = Warm {
            copied: HashMap::new(),
            began_at,
            began,
            // After the clocks are read: a mapping made or a descriptor opened later writes
            // after pass 1 began, which moves the ctime.
            busy: self.busy(Scan::MappingsAndWriters { dev: top.dev() }),
            fine: top.ctime_nsec() != 0,
        };
        self.warm_walk(&root, &mut warm);
        self.warm = Some(warm);
    }

    fn warm_walk(&self, root: &OwnedFd, warm: &mut Warm) {
        let (mut bytes, mut seen) = (0u64, 0usize);
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let Ok(dir) = open_beneath(root, &rel) else {
                continue;
            };
            let Ok(entries) = rustix::fs::Dir::read_from(&dir) else {
                continue;
            };
            let to_dir = self.dst.join(&rel);
            for entry in entries {
                let Ok(entry) = entry else {
                    break;
                };
                let name = entry.file_name();
                if is_dot(name) {
                    continue;
                }
                seen += 1;
                if seen > MAX_NOTED {
                    return;
                }
                let Ok(st) = stat_at(&dir, name) else {
                    continue;
                };
                warm.fine |= st.stx_ctime.tv_nsec != 0;
                if rel.as_os_str().is_empty() && self.skipped(name, &st) {
                    continue;
                }
                let name = OsStr::from_bytes(name.to_bytes());
                let to = to_dir.join(name);
                let copied = match kind(&st) {
                    Kind::Dir => {
                        if make_dir(&to).is_ok() {
                            stack.push(rel.join(name));
                        }
                        continue;
                    }
                    Kind::File => {
                        bytes = bytes.saturating_add(st.stx_blocks * 512);
                        if bytes > self.cap {
                            // Pass 2 decides, frozen.
                            return;
                        }
                        copy_file_at(&dir, name, &to, None, self.ids)
                    }
                    Kind::Link => copy_link_at(&dir, name, &to, self.ids),
                    Kind::Other => continue,
                };
                match copied {
                    Ok((dst_ino, copied)) => {
                        warm.copied.insert(dst_ino, copied);
                    }
                    // The destination is full (a fork's home has a quota, and what the sandbox
                    // wrote meanwhile may not last): pass 2 decides.
                    Err(e) if no_space(&e) => return,
                    Err(_) => {}
                }
            }
        }
    }

    /// Pass 2, the sandbox frozen: the destination made equal to the source.
    pub fn finish(self) -> Result<Finished, CopyError> {
        let Some(warm) = &self.warm else {
            let stats = copy_tree(&self.src, &self.dst, self.ids, self.cap, self.skip)?;
            return Ok(Finished {
                stats,
                recopied: stats.files,
                two_pass: false,
            });
        };
        let trusted = self.trusted(warm);
        // Not root (rootless), what the sandbox locked is opened for the copy and locked again
        // after, as `copy_tree` does; pass 1 left it out.
        let granted = match rustix::process::geteuid().is_root() {
            true => Vec::new(),
            false => grant_owner_access(&self.src)?,
        };
        let original: HashMap<PathBuf, u32> = granted.iter().cloned().collect();
        let done = self.reconcile(warm, trusted.as_ref(), &original);
        for (path, mode) in granted.iter().rev() {
            fs::set_permissions(path, fs::Permissions::from_mode(*mode))?;
        }
        match done {
            // Copies pass 1 made of what the sandbox has since removed may hold the space the
            // rest needs (a fork's home has a quota): start again from empty, frozen still.
            Err(CopyError::Io(e)) if no_space(&e) => {
                empty_dir(&self.dst, self.skip)?;
                let stats = copy_tree(&self.src, &self.dst, self.ids, self.cap, self.skip)?;
                Ok(Finished {
                    stats,
                    recopied: stats.files,
                    two_pass: false,
                })
            }
            done => done,
        }
    }

    /// The files pass 2 must copy again whatever their times say; `None` when no file's
    /// times can be trusted.
    fn trusted(&self, warm: &Warm) -> Option<Trust> {
        let wall = SystemTime::now().duration_since(warm.began_at).ok()?;
        let steady = warm.began.elapsed();
        if wall.abs_diff(steady) > CLOCK_SLACK {
            tracing::warn!(
                ?wall,
                ?steady,
                "the clock moved during a home copy; copying every file frozen"
            );
            return None;
        }
        let mut busy = warm.busy.clone()?;
        busy.extend(self.busy(Scan::Mappings)?);
        let margin = self.margin.unwrap_or(match warm.fine {
            true => FINE_MARGIN,
            false => MARGIN,
        });
        let limit = warm
            .began_at
            .checked_sub(margin)?
            .duration_since(UNIX_EPOCH)
            .ok()?;
        Some(Trust {
            busy,
            limit: (limit.as_secs() as i64, limit.subsec_nanos()),
        })
    }

    fn skipped(&self, name: &CStr, st: &Statx) -> bool {
        st.stx_uid == 0
            && self
                .skip
                .is_some_and(|skip| name.to_bytes() == skip.as_bytes())
    }

    fn reconcile(
        &self,
        warm: &Warm,
        trust: Option<&Trust>,
        original: &HashMap<PathBuf, u32>,
    ) -> Result<Finished, CopyError> {
        let mode_of = |rel: &Path, st: &Statx| {
            let own = u32::from(st.stx_mode) & 0o7777;
            match original.is_empty() {
                true => own,
                false => original.get(&self.src.join(rel)).copied().unwrap_or(own),
            }
        };
        let mut done = Finished {
            two_pass: true,
            ..Finished::default()
        };
        let root = open_root(&self.src)?;
        let top = stat_fd(&root)?;
        let mut pending = vec![(self.dst.clone(), top, mode_of(Path::new(""), &top))];
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let dir = open_beneath(&root, &rel).map_err(|e| at(&self.src.join(&rel), e))?;
            let to_dir = self.dst.join(&rel);
            let mut have = listing(&to_dir)?;
            let at_top = rel.as_os_str().is_empty();
            for entry in rustix::fs::Dir::read_from(&dir).map_err(io::Error::from)? {
                let entry = entry.map_err(io::Error::from)?;
                let c_name = entry.file_name();
                if is_dot(c_name) {
                    continue;
                }
                let st = stat_at(&dir, c_name).map_err(|e| at(&self.src.join(&rel), e))?;
                let name = OsStr::from_bytes(c_name.to_bytes());
                let existing = have.remove(name);
                if at_top && self.skipped(c_name, &st) {
                    continue;
                }
                let (to, rel_entry) = (to_dir.join(name), rel.join(name));
                let kind = kind(&st);
                if kind == Kind::Dir {
                    match existing {
                        Some((_, true)) => {}
                        Some((_, false)) => {
                            fs::remove_file(&to).map_err(|e| at(&to, e))?;
                            make_dir(&to)?;
                        }
                        None => make_dir(&to)?,
                    }
                    pending.push((to, st, mode_of(&rel_entry, &st)));
                    stack.push(rel_entry);
                    done.stats.files += 1;
                    continue;
                }
                if kind == Kind::File {
                    done.stats.bytes += st.stx_blocks * 512;
                    if done.stats.bytes > self.cap {
                        return Err(CopyError::OverCap(OverCap {
                            bytes: done.stats.bytes,
                            cap: self.cap,
                        }));
                    }
                }
                let kept = existing
                    .filter(|(_, is_dir)| !is_dir)
                    .and_then(|(ino, _)| warm.copied.get(&ino))
                    .filter(|copied| trust.is_some_and(|t| t.unchanged(copied, &st)));
                if let Some(copied) = kept {
                    if copied.atime != (st.stx_atime.tv_sec, st.stx_atime.tv_nsec) {
                        set_times(&to, &st)?;
                    }
                    done.stats.cloned += u64::from(copied.cloned);
                    done.stats.files += 1;
                    continue;
                }
                if let Some((_, is_dir)) = existing {
                    remove(&to, is_dir)?;
                }
                let copied = match kind {
                    Kind::File => {
                        copy_file_at(&dir, name, &to, Some(mode_of(&rel_entry, &st)), self.ids)
                    }
                    Kind::Link => copy_link_at(&dir, name, &to, self.ids),
                    // Sockets, fifos, devices: nothing a home needs back.
                    Kind::Other | Kind::Dir => continue,
                };
                let (_, copied) = copied.map_err(|e| at(&self.src.join(&rel_entry), e))?;
                if copied.source.ino != st.stx_ino {
                    return Err(
                        io::Error::other("the file changed while the sandbox was frozen").into(),
                    );
                }
                done.stats.cloned += u64::from(copied.cloned);
                done.stats.files += 1;
                done.recopied += 1;
            }
            for (name, (_, is_dir)) in have {
                let to = to_dir.join(&name);
                if at_top && self.skip.is_some_and(|s| name == s) && owned_by_root(&to) {
                    // The destination filesystem's own `lost+found`.
                    continue;
                }
                remove(&to, is_dir)?;
            }
        }
        // Deepest first, so setting a folder's times is not undone by finishing a child.
        for (dst, st, mode) in pending.iter().rev() {
            let (uid, gid) = self.ids.owner_ids(st.stx_uid, st.stx_gid);
            lchown(dst, Some(uid), Some(gid)).map_err(|e| at(dst, e))?;
            fs::set_permissions(dst, fs::Permissions::from_mode(*mode))?;
            set_times(dst, st)?;
        }
        Ok(done)
    }
}

/// What pass 2 may keep from pass 1.
struct Trust {
    busy: HashSet<u64>,
    /// ctimes from here on are too recent to trust.
    limit: (i64, u32),
}

impl Trust {
    fn unchanged(&self, copied: &Copied, now: &Statx) -> bool {
        let now = Source::of(now);
        copied.source == now && now.ctime < self.limit && !self.busy.contains(&now.ino)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
    Other,
}

fn kind(st: &Statx) -> Kind {
    match u32::from(st.stx_mode) & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Link,
        _ => Kind::Other,
    }
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

fn no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// ext4, XFS or btrfs: the filesystems whose shared-mapping write faults move the times.
fn two_pass_filesystem(path: &Path) -> bool {
    statfs(path).is_ok_and(|s| matches!(s.f_type, EXT4 | XFS | BTRFS))
}

/// The home itself (threadbox's own path, up to the home).
fn open_root(src: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        src,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The folder `rel` under `root`, refusing a link in any component, `..` out of it and a
/// crossing into another mount: what the sandbox swapped in meanwhile cannot lead elsewhere.
fn open_beneath(root: &OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    Ok(openat2(
        root,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS
            | ResolveFlags::BENEATH
            | ResolveFlags::NO_XDEV,
    )?)
}

fn stat_at<P: rustix::path::Arg>(dir: &OwnedFd, name: P) -> io::Result<Statx> {
    Ok(statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS,
    )?)
}

fn stat_fd<Fd: AsFd>(fd: Fd) -> io::Result<Statx> {
    Ok(statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH,
        StatxFlags::BASIC_STATS,
    )?)
}

/// Open a source file for reading, not moving its access time where the kernel lets us.
fn open_source(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    match openat(dir, name, flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => Ok(openat(dir, name, flags, Mode::empty())?),
        opened => Ok(opened?),
    }
}

/// Copy the file `name` of `dir` to `to` (which must not exist), with its owner moved by
/// `ids`, `mode` (or its own) and its times; the copy's inode and what was read.
fn copy_file_at(
    dir: &OwnedFd,
    name: &OsStr,
    to: &Path,
    mode: Option<u32>,
    ids: IdMove,
) -> io::Result<(u64, Copied)> {
    let source = File::from(open_source(dir, name)?);
    let st = stat_fd(&source)?;
    if kind(&st) != Kind::File {
        return Err(io::Error::other("not a regular file any more"));
    }
    let dest = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    let cloned = copy_data(&source, &dest, st.stx_size)?;
    let (uid, gid) = ids.owner_ids(st.stx_uid, st.stx_gid);
    std::os::unix::fs::fchown(&dest, Some(uid), Some(gid))?;
    let mode = mode.unwrap_or(u32::from(st.stx_mode) & 0o7777);
    dest.set_permissions(fs::Permissions::from_mode(mode))?;
    rustix::fs::futimens(&dest, &timestamps(&st))?;
    let copied = Copied {
        source: Source::of(&st),
        atime: (st.stx_atime.tv_sec, st.stx_atime.tv_nsec),
        cloned,
    };
    Ok((dest.metadata()?.ino(), copied))
}

/// Copy the link `name` of `dir` to `to` (which must not exist), as a link.
fn copy_link_at(dir: &OwnedFd, name: &OsStr, to: &Path, ids: IdMove) -> io::Result<(u64, Copied)> {
    // The link itself, held: what is looked at and read is one inode.
    let link = openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = stat_fd(&link)?;
    if kind(&st) != Kind::Link {
        return Err(io::Error::other("not a link any more"));
    }
    let target = readlinkat(&link, c"", Vec::new())?;
    std::os::unix::fs::symlink(OsStr::from_bytes(target.as_bytes()), to)?;
    let (uid, gid) = ids.owner_ids(st.stx_uid, st.stx_gid);
    lchown(to, Some(uid), Some(gid))?;
    set_times(to, &st)?;
    let copied = Copied {
        source: Source::of(&st),
        atime: (st.stx_atime.tv_sec, st.stx_atime.tv_nsec),
        cloned: false,
    };
    Ok((fs::symlink_metadata(to)?.ino(), copied))
}

/// A destination folder, ours alone (mode 0700) until pass 2 gives it its own.
fn make_dir(to: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(to)
        .map_err(|e| at(to, e))
}

/// A destination folder's entries: name, inode and whether it is a folder (from the listing,
/// no `stat` each). On the filesystems threadbox keeps its state on the listing's inode is the
/// file's; where it is not (overlayfs), no copy is found by it and pass 2 copies every file
/// again: slower, never wrong.
fn listing(dir: &Path) -> io::Result<HashMap<OsString, (u64, bool)>> {
    let mut names = HashMap::new();
    for entry in fs::read_dir(dir).map_err(|e| at(dir, e))? {
        let entry = entry?;
        let is_dir = entry.file_type()?.is_dir();
        names.insert(entry.file_name(), (entry.ino(), is_dir));
    }
    Ok(names)
}

fn remove(path: &Path, is_dir: bool) -> io::Result<()> {
    match is_dir {
        true => remove_tree(path),
        false => fs::remove_file(path),
    }
    .map_err(|e| at(path, e))
}

fn owned_by_root(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.uid() == 0)
}

/// Empty the destination, its own `skip` entry (its filesystem's `lost+found`) aside.
fn empty_dir(dir: &Path, skip: Option<&str>) -> io::Result<()> {
    for (name, (_, is_dir)) in listing(dir)? {
        let path = dir.join(&name);
        if skip.is_some_and(|s| name == s) && owned_by_root(&path) {
            continue;
        }
        remove(&path, is_dir)?;
    }
    Ok(())
}

fn timestamps(st: &Statx) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: st.stx_atime.tv_sec,
            tv_nsec: st.stx_atime.tv_nsec.into(),
        },
        last_modification: Timespec {
            tv_sec: st.stx_mtime.tv_sec,
            tv_nsec: st.stx_mtime.tv_nsec.into(),
        },
    }
}

/// Give the destination entry `path` (not following a link) the source's times.
fn set_times(path: &Path, st: &Statx) -> io::Result<()> {
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &timestamps(st),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| at(path, e.into()))
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
