//! The file API, done on the host with the sandbox's paths confined to its two writable areas.
//!
//! `/home/user` is the bundle's `home/` directory; `/tmp` is the container's tmpfs, reached
//! through `/proc/<init pid>/root/tmp`. Both work while the sandbox is paused.
//!
//! The sandbox controls everything inside those areas, including symlinks, and we act as root,
//! so paths are never handed to the kernel whole. [`SandboxFs::resolve`] walks them one
//! component at a time from a directory descriptor, with `O_NOFOLLOW` at every step, and
//! follows symlinks itself with the sandbox's view of the filesystem: a link is followed only
//! while it stays inside `/home/user` or `/tmp`, and one that leads anywhere else is refused.
//! Because each step opens relative to the previous descriptor, swapping a directory for a
//! symlink mid-walk makes the walk fail rather than escape. Files we create are chowned to the
//! sandbox user, so commands inside can change them.

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rustix::fs::{
    chownat, fchown, fstat, mkdirat, openat, readlinkat, statat, unlinkat, AtFlags, Dir, FileType,
    Gid, Mode, OFlags, Stat, Uid,
};
use rustix::io::Errno;

use super::bundle::HOME;
use super::idmap::{FsIdsAs, IdRange};
use threadbox_core::domain::Millis;
use threadbox_core::ports::{FileEntry, FileKind, ProviderError};

/// Linux's own limit on symlinks followed in one lookup.
const MAX_SYMLINK_HOPS: usize = 40;
/// Deepest directory tree `remove` and the searches descend into.
pub(super) const MAX_DEPTH: usize = 256;

/// One of the two places the file API reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Area {
    Home,
    Tmp,
}

impl Area {
    fn prefix(self) -> &'static str {
        match self {
            Area::Home => HOME,
            Area::Tmp => "/tmp",
        }
    }

    /// Split an absolute sandbox path that starts in an area into the area and the rest.
    fn split(components: &[&str]) -> Option<(Area, usize)> {
        match components {
            ["home", "user", ..] => Some((Area::Home, 2)),
            ["tmp", ..] => Some((Area::Tmp, 1)),
            _ => None,
        }
    }
}

/// A sandbox's files as the host reaches them.
pub(crate) struct SandboxFs {
    home: PathBuf,
    /// `None` when the container has no live init to reach its `/tmp` through.
    tmp: Option<PathBuf>,
    file_cap: u64,
    /// Whose host ids the files we create get.
    ids: IdRange,
}

/// Where a path led.
pub(super) struct Resolved {
    /// The directory holding the entry; the entry itself when `name` is `None` (an area root).
    pub dir: OwnedFd,
    pub name: Option<String>,
    /// The entry's path as the sandbox sees it, after following symlinks.
    pub path: String,
    /// The entry's own status (not a symlink's target); `None` if it does not exist.
    pub stat: Option<Stat>,
}

impl SandboxFs {
    pub fn new(home: PathBuf, tmp: Option<PathBuf>, file_cap: u64) -> Self {
        Self {
            home,
            tmp,
            file_cap,
            ids: IdRange::IDENTITY,
        }
    }

    /// Files made through this get the sandbox's mapped host ids.
    pub fn with_ids(mut self, ids: IdRange) -> Self {
        self.ids = ids;
        self
    }

    pub fn file_cap(&self) -> u64 {
        self.file_cap
    }

    pub fn read(&self, path: &str) -> Result<Vec<u8>, ProviderError> {
        let (file, size) = self.open(path)?;
        if size > self.file_cap {
            return Err(too_large(path, size, self.file_cap));
        }
        // Read at most one byte past the cap: the sandbox may be growing the file as we read.
        let mut contents = Vec::with_capacity(size as usize);
        file.take(self.file_cap + 1)
            .read_to_end(&mut contents)
            .map_err(|e| io_error(path, e))?;
        if contents.len() as u64 > self.file_cap {
            return Err(too_large(path, contents.len() as u64, self.file_cap));
        }
        Ok(contents)
    }

    /// The regular file at `path`, open for reading (no size cap: the caller streams it), with
    /// its size.
    pub fn open(&self, path: &str) -> Result<(File, u64), ProviderError> {
        let r = self.resolve(path, true, false)?;
        let (name, _) = existing_file(&r, path)?;
        // O_NONBLOCK: a FIFO planted where a file was must not hang us.
        let fd = openat(
            &r.dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| errno(path, e))?;
        ensure_regular(&fd, path)?;
        let size = u64::try_from(fstat(&fd).map_err(|e| errno(path, e))?.st_size).unwrap_or(0);
        Ok((File::from(fd), size))
    }

    pub fn write(&self, path: &str, contents: &[u8]) -> Result<(), ProviderError> {
        if contents.len() as u64 > self.file_cap {
            return Err(too_large(path, contents.len() as u64, self.file_cap));
        }
        let r = self.resolve(path, true, true)?;
        let Some(name) = r.name.as_deref() else {
            return Err(invalid(format!("{path} is a directory")));
        };
        if let Some(stat) = &r.stat {
            if file_type(stat) != FileType::RegularFile {
                return Err(invalid(format!("{path} exists and is not a regular file")));
            }
        }
        let fd = openat(
            &r.dir,
            name,
            OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::TRUNC
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC
                | OFlags::NOCTTY
                | OFlags::NONBLOCK,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| errno(path, e))?;
        ensure_regular(&fd, path)?;
        fchown(
            &fd,
            Some(sandbox_uid(self.ids)),
            Some(sandbox_gid(self.ids)),
        )
        .map_err(|e| errno(path, e))?;
        File::from(fd)
            .write_all(contents)
            .map_err(|e| io_error(path, e))
    }

    /// Start a streamed upload to `path`: a new file beside it, owned by the sandbox user, that
    /// [`Upload::finish`] renames over `path` once every byte is written (or removes), so a
    /// failed or oversized upload never leaves `path` half written.
    pub fn begin_upload(&self, path: &str) -> Result<(File, Upload), ProviderError> {
        let r = self.resolve(path, true, true)?;
        let Some(name) = r.name.clone() else {
            return Err(invalid(format!("{path} is a directory")));
        };
        if let Some(stat) = &r.stat {
            if file_type(stat) != FileType::RegularFile {
                return Err(invalid(format!("{path} exists and is not a regular file")));
            }
        }
        let temp = temp_name(&name);
        let fd = openat(
            &r.dir,
            temp.as_str(),
            OFlags::WRONLY
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC
                | OFlags::NOCTTY,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| errno(path, e))?;
        // Made now, so a failure from here on removes the file it just created.
        let upload = Upload {
            dir: r.dir,
            temp: Some(temp),
            name,
            path: path.to_owned(),
            ids: self.ids,
        };
        fchown(
            &fd,
            Some(sandbox_uid(self.ids)),
            Some(sandbox_gid(self.ids)),
        )
        .map_err(|e| errno(path, e))?;
        Ok((File::from(fd), upload))
    }

    /// Every entry, names that are not UTF-8 included (see `FileEntry::name_base64`).
    pub fn list(&self, path: &str) -> Result<Vec<FileEntry>, ProviderError> {
        let r = self.resolve(path, true, false)?;
        let dir = open_dir(&r, path)?;
        let mut entries = Vec::new();
        for (raw, stat) in read_dir_raw(&dir, path)? {
            let name = String::from_utf8_lossy(raw.as_bytes());
            let mut entry = file_entry(&join(&r.path, &name), &stat);
            if std::str::from_utf8(raw.as_bytes()).is_err() {
                entry.name_base64 = Some(BASE64.encode(raw.as_bytes()));
            }
            entries.push(entry);
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// The entry itself: a symlink is reported as one, not followed.
    pub fn stat(&self, path: &str) -> Result<FileEntry, ProviderError> {
        let r = self.resolve(path, false, false)?;
        let stat = r.stat.ok_or_else(|| not_found(path))?;
        Ok(file_entry(&r.path, &stat))
    }

    /// Like `mkdir -p`: parents are made too, and an existing directory is fine.
    pub fn make_dir(&self, path: &str) -> Result<(), ProviderError> {
        let r = self.resolve(path, true, true)?;
        match (&r.name, &r.stat) {
            (_, Some(stat)) if file_type(stat) == FileType::Directory => Ok(()),
            (_, Some(_)) => Err(invalid(format!("{path} exists and is not a directory"))),
            (Some(name), None) => make_one_dir(&r.dir, name, path, self.ids),
            (None, None) => Ok(()),
        }
    }

    pub fn remove(&self, path: &str, recursive: bool) -> Result<(), ProviderError> {
        let r = self.resolve(path, false, false)?;
        let Some(name) = r.name.as_deref() else {
            return Err(invalid(format!(
                "{} cannot be removed, only what is in it",
                r.path
            )));
        };
        let stat = r.stat.ok_or_else(|| not_found(path))?;
        if file_type(&stat) != FileType::Directory {
            return unlinkat(&r.dir, name, AtFlags::empty()).map_err(|e| errno(path, e));
        }
        if recursive {
            let name =
                CString::new(name).map_err(|_| invalid(format!("{path}: a NUL in the name")))?;
            remove_tree(&r.dir, &name, path, 0)
        } else {
            unlinkat(&r.dir, name, AtFlags::REMOVEDIR).map_err(|e| match e {
                Errno::NOTEMPTY | Errno::EXIST => invalid(format!(
                    "{path} is a directory that is not empty; remove it recursively"
                )),
                e => errno(path, e),
            })
        }
    }

    /// Walk `request` through the sandbox's filesystem view (see the module docs).
    ///
    /// `follow_final`: follow a symlink in the last component (read, write, list) or report the
    /// link itself (stat, remove). `create_parents`: make missing directories on the way,
    /// owned by the sandbox user (write, mkdir).
    pub(super) fn resolve(
        &self,
        request: &str,
        follow_final: bool,
        create_parents: bool,
    ) -> Result<Resolved, ProviderError> {
        let (mut area, rest) = parse_request(request)?;
        let mut queue: VecDeque<String> = rest.into();
        let mut stack: Vec<OwnedFd> = vec![self.open_area(area)?];
        let mut names: Vec<String> = Vec::new();
        let mut hops = 0;

        while let Some(component) = queue.pop_front() {
            match component.as_str() {
                "" | "." => continue,
                ".." => {
                    // Only symlink targets get here: requests with `..` were refused.
                    if names.pop().is_none() {
                        return Err(escapes(request));
                    }
                    stack.pop();
                    continue;
                }
                _ => {}
            }
            let is_last = queue.iter().all(|c| c.is_empty() || c == ".");
            let here = stack.last().expect("the area root is never popped");
            let path_so_far = display(area, &names, Some(&component));
            let stat = match statat(here, component.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                Err(Errno::NOENT) if is_last => {
                    let dir = stack.pop().expect("non-empty");
                    return Ok(Resolved {
                        dir,
                        name: Some(component),
                        path: path_so_far,
                        stat: None,
                    });
                }
                Err(Errno::NOENT) if create_parents => {
                    make_one_dir(here, &component, &path_so_far, self.ids)?;
                    statat(here, component.as_str(), AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(|e| errno(&path_so_far, e))?
                }
                Err(Errno::NOENT) => return Err(not_found(&path_so_far)),
                Err(e) => return Err(errno(&path_so_far, e)),
            };
            let kind = file_type(&stat);

            if kind == FileType::Symlink && (!is_last || follow_final) {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(invalid(format!(
                        "{request}: too many levels of symbolic links"
                    )));
                }
                let target = readlinkat(here, component.as_str(), Vec::new())
                    .map_err(|e| errno(&path_so_far, e))?;
                let target = target.to_str().map_err(|_| {
                    invalid(format!("{path_so_far} is a symlink to a non-UTF-8 path"))
                })?;
                let target_parts: Vec<&str> = target.split('/').collect();
                if target.starts_with('/') {
                    let parts: Vec<&str> = target_parts
                        .iter()
                        .copied()
                        .filter(|p| !p.is_empty() && *p != ".")
                        .collect();
                    let Some((new_area, skip)) = Area::split(&parts) else {
                        return Err(symlink_escapes(request, &path_so_far, target));
                    };
                    area = new_area;
                    stack = vec![self.open_area(area)?];
                    names.clear();
                    prepend(&mut queue, &parts[skip..]);
                } else {
                    prepend(&mut queue, &target_parts);
                }
                continue;
            }

            if is_last {
                let dir = stack.pop().expect("non-empty");
                return Ok(Resolved {
                    dir,
                    name: Some(component),
                    path: path_so_far,
                    stat: Some(stat),
                });
            }
            if kind != FileType::Directory {
                return Err(invalid(format!("{path_so_far} is not a directory")));
            }
            let next = openat(
                here,
                component.as_str(),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| errno(&path_so_far, e))?;
            stack.push(next);
            names.push(component);
        }

        // The path ended on a directory we hold open (an area root, or reached through `..`).
        let dir = stack.pop().expect("non-empty");
        let stat = fstat(&dir).map_err(|e| errno(request, e))?;
        Ok(Resolved {
            dir,
            name: None,
            path: display(area, &names, None),
            stat: Some(stat),
        })
    }

    fn open_area(&self, area: Area) -> Result<OwnedFd, ProviderError> {
        let root = match area {
            Area::Home => &self.home,
            Area::Tmp => self.tmp.as_ref().ok_or_else(|| {
                ProviderError::Conflict(
                    "the sandbox's /tmp is unreachable: its init process is not running".into(),
                )
            })?,
        };
        openat(
            rustix::fs::CWD,
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ProviderError::Internal(format!("cannot open {}: {e}", root.display())))
    }
}

/// A requested path: absolute, or relative to `/home/user`; no `..`; inside an area.
fn parse_request(path: &str) -> Result<(Area, Vec<String>), ProviderError> {
    if path.is_empty() {
        return Err(invalid("empty path".into()));
    }
    if path.contains('\0') {
        return Err(invalid(format!("path {path:?} contains a NUL byte")));
    }
    let absolute = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{HOME}/{path}")
    };
    let parts: Vec<&str> = absolute
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(invalid(format!(
            "path {path:?} contains '..'; give a path without it"
        )));
    }
    let (area, skip) = Area::split(&parts).ok_or_else(|| {
        invalid(format!(
            "path {path:?} is outside the sandbox's files: only {HOME} and /tmp are reachable"
        ))
    })?;
    Ok((
        area,
        parts[skip..].iter().map(|s| (*s).to_owned()).collect(),
    ))
}

fn prepend(queue: &mut VecDeque<String>, parts: &[&str]) {
    for part in parts.iter().rev() {
        queue.push_front((*part).to_owned());
    }
}

fn display(area: Area, names: &[String], last: Option<&str>) -> String {
    let mut path = area.prefix().to_owned();
    for name in names.iter().map(String::as_str).chain(last) {
        path.push('/');
        path.push_str(name);
    }
    path
}

pub(super) fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

fn existing_file<'a>(r: &'a Resolved, path: &str) -> Result<(&'a str, &'a Stat), ProviderError> {
    let stat = r.stat.as_ref().ok_or_else(|| not_found(path))?;
    match (r.name.as_deref(), file_type(stat)) {
        (Some(name), FileType::RegularFile) => Ok((name, stat)),
        (_, FileType::Directory) => Err(invalid(format!("{path} is a directory"))),
        _ => Err(invalid(format!("{path} is not a regular file"))),
    }
}

/// Re-check after opening: the entry may have been swapped since we looked at it.
fn ensure_regular(fd: &OwnedFd, path: &str) -> Result<(), ProviderError> {
    let stat = fstat(fd).map_err(|e| errno(path, e))?;
    if file_type(&stat) == FileType::RegularFile {
        Ok(())
    } else {
        Err(invalid(format!("{path} is not a regular file")))
    }
}

/// Open a resolved directory for reading its entries.
pub(super) fn open_dir(r: &Resolved, path: &str) -> Result<OwnedFd, ProviderError> {
    let stat = r.stat.as_ref().ok_or_else(|| not_found(path))?;
    if file_type(stat) != FileType::Directory {
        return Err(invalid(format!("{path} is not a directory")));
    }
    openat(
        &r.dir,
        r.name.as_deref().unwrap_or("."),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno(path, e))
}

/// A streamed upload's file, written beside its destination until it is complete.
///
/// [`Upload::finish`] runs on whatever thread the caller finishes on, later than
/// [`SandboxFs::begin_upload`], so it takes the sandbox user's ids again itself: as root, the
/// kernel refuses to rename into a tmpfs of the sandbox's user namespace (EOVERFLOW: root has
/// no id there), which is what broke every upload under `/tmp`. The temp file goes whatever
/// happens: a failed rename removes it, and so does dropping an unfinished upload (a caller
/// that went away mid-body).
pub(super) struct Upload {
    dir: OwnedFd,
    /// `None` once finished: nothing left to remove.
    temp: Option<String>,
    name: String,
    path: String,
    ids: IdRange,
}

impl Upload {
    /// Put the written file in place (`complete`), or remove it.
    pub fn finish(mut self, complete: bool) -> Result<(), ProviderError> {
        let Some(temp) = self.temp.take() else {
            return Ok(());
        };
        let _as_sandbox_user = FsIdsAs::sandbox_user(self.ids);
        let placed = if complete {
            rustix::fs::renameat(&self.dir, temp.as_str(), &self.dir, self.name.as_str())
                .map_err(|e| errno(&self.path, e))
        } else {
            Ok(())
        };
        if placed.is_err() || !complete {
            self.remove(&temp)?;
        }
        placed
    }

    fn remove(&self, temp: &str) -> Result<(), ProviderError> {
        match unlinkat(&self.dir, temp, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => {
                tracing::warn!(path = %self.path, temp, error = %e, "an upload's temp file could not be removed");
                Err(errno(&self.path, e))
            }
        }
    }
}

impl Drop for Upload {
    /// Never finished (the request was dropped mid-body): remove the temp file. One unlink, not
    /// worth a hop to a blocking thread; the ids are this thread's for that call only.
    fn drop(&mut self) {
        if let Some(temp) = self.temp.take() {
            let _as_sandbox_user = FsIdsAs::sandbox_user(self.ids);
            let _ = self.remove(&temp);
        }
    }
}

/// The longest part of the destination's name a temp file's name repeats: with the rest of
/// it, well under the 255 bytes a name may have, so any name that may be uploaded to may have a
/// temp file beside it.
const TEMP_NAME_KEEPS: usize = 100;

/// `.NAME.threadbox-upload-<uuid>`, NAME cut to [`TEMP_NAME_KEEPS`] bytes (at a character).
fn temp_name(name: &str) -> String {
    let mut end = name.len().min(TEMP_NAME_KEEPS);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        ".{}.threadbox-upload-{}",
        &name[..end],
        uuid::Uuid::new_v4().simple()
    )
}

/// Entries of an open directory with their own (not followed) status, `.` and `..` left out,
/// names as the bytes they are.
fn read_dir_raw(dir: &OwnedFd, path: &str) -> Result<Vec<(CString, Stat)>, ProviderError> {
    let mut out = Vec::new();
    for entry in Dir::read_from(dir).map_err(|e| errno(path, e))? {
        let entry = entry.map_err(|e| errno(path, e))?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => out.push((name.to_owned(), stat)),
            // Deleted between listing and looking: it is not there any more.
            Err(Errno::NOENT) => continue,
            Err(e) => {
                let shown = String::from_utf8_lossy(name.to_bytes()).into_owned();
                return Err(errno(&join(path, &shown), e));
            }
        }
    }
    Ok(out)
}

/// [`read_dir_raw`] for walks that name what they find in text (search): names that are not
/// UTF-8 are left out, as no answer could name them.
pub(super) fn read_dir(dir: &OwnedFd, path: &str) -> Result<Vec<(String, Stat)>, ProviderError> {
    Ok(read_dir_raw(dir, path)?
        .into_iter()
        .filter_map(|(name, stat)| Some((name.into_string().ok()?, stat)))
        .collect())
}

fn make_one_dir(
    parent: &OwnedFd,
    name: &str,
    path: &str,
    ids: IdRange,
) -> Result<(), ProviderError> {
    match mkdirat(parent, name, Mode::from_raw_mode(0o755)) {
        Ok(()) => chownat(
            parent,
            name,
            Some(sandbox_uid(ids)),
            Some(sandbox_gid(ids)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| errno(path, e)),
        // Someone made it meanwhile; the caller looks at what is there now.
        Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(errno(path, e)),
    }
}

/// Remove a directory and everything in it, whatever the names in it, never following symlinks.
fn remove_tree(
    parent: &OwnedFd,
    name: &CStr,
    path: &str,
    depth: usize,
) -> Result<(), ProviderError> {
    if depth > MAX_DEPTH {
        return Err(invalid(format!("{path} is nested too deeply to remove")));
    }
    let dir = openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| errno(path, e))?;
    for (child, stat) in read_dir_raw(&dir, path)? {
        let child_path = join(path, &String::from_utf8_lossy(child.as_bytes()));
        if file_type(&stat) == FileType::Directory {
            remove_tree(&dir, &child, &child_path, depth + 1)?;
        } else {
            match unlinkat(&dir, child.as_c_str(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => return Err(errno(&child_path, e)),
            }
        }
    }
    unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(|e| errno(path, e))
}

pub(super) fn file_type(stat: &Stat) -> FileType {
    FileType::from_raw_mode(stat.st_mode)
}

pub(super) fn file_entry(path: &str, stat: &Stat) -> FileEntry {
    let kind = match file_type(stat) {
        FileType::RegularFile => FileKind::File,
        FileType::Directory => FileKind::Dir,
        FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Other,
    };
    // `from` because the fields' types differ between architectures (no-ops on x86_64).
    #[allow(clippy::useless_conversion)]
    let mtime_ms = i64::from(stat.st_mtime)
        .saturating_mul(1000)
        .saturating_add((u64::from(stat.st_mtime_nsec) / 1_000_000) as i64);
    FileEntry {
        name: path.rsplit('/').next().unwrap_or_default().to_owned(),
        path: path.to_owned(),
        kind,
        size: u64::try_from(stat.st_size).unwrap_or(0),
        modified: Some(Millis(mtime_ms)),
        name_base64: None,
    }
}

fn sandbox_uid(ids: IdRange) -> Uid {
    Uid::from_raw(ids.user_on_host().0)
}
fn sandbox_gid(ids: IdRange) -> Gid {
    Gid::from_raw(ids.user_on_host().1)
}

pub(super) fn invalid(message: String) -> ProviderError {
    ProviderError::InvalidRequest(message)
}

fn not_found(path: &str) -> ProviderError {
    ProviderError::NotFound(format!("{path}: no such file or directory"))
}

fn too_large(path: &str, size: u64, cap: u64) -> ProviderError {
    invalid(format!(
        "{path} is {size} bytes; the file API's limit is {cap} bytes"
    ))
}

fn escapes(request: &str) -> ProviderError {
    invalid(format!(
        "path {request:?} leads outside the sandbox's files (only {HOME} and /tmp are reachable)"
    ))
}

fn symlink_escapes(request: &str, link: &str, target: &str) -> ProviderError {
    invalid(format!(
        "path {request:?} is refused: {link} is a symlink to {target}, outside the sandbox's \
         files (only {HOME} and /tmp are reachable)"
    ))
}

/// What a failed system call means for the caller. We run as root, so permission errors come
/// from the sandbox's own doing (a read-only area, an immutable file) and are the caller's.
pub(super) fn errno(path: &str, e: Errno) -> ProviderError {
    match e {
        Errno::NOENT => not_found(path),
        Errno::NOTDIR => invalid(format!(
            "{path}: a component of the path is not a directory"
        )),
        Errno::ISDIR => invalid(format!("{path} is a directory")),
        Errno::LOOP => invalid(format!("{path} is a symlink, which is not followed here")),
        Errno::NOSPC | Errno::DQUOT => {
            ProviderError::NoSpace(format!("{path}: no space left in the sandbox"))
        }
        Errno::NAMETOOLONG => invalid(format!("{path}: name too long")),
        Errno::ACCESS | Errno::PERM | Errno::ROFS => {
            invalid(format!("{path}: not permitted ({e})"))
        }
        e => ProviderError::Internal(format!("{path}: {e}")),
    }
}

pub(super) fn io_error(path: &str, e: std::io::Error) -> ProviderError {
    match e.raw_os_error() {
        Some(code) => errno(path, Errno::from_raw_os_error(code)),
        None => ProviderError::Internal(format!("{path}: {e}")),
    }
}

/// A sandbox filesystem over two temp dirs, as root would see them (for the tests here and
/// in `process_records`).
#[cfg(test)]
pub(super) fn fs_over(dir: &std::path::Path) -> SandboxFs {
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    SandboxFs::new(dir.join("home"), Some(dir.join("tmp")), 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_parsed_into_areas() {
        assert_eq!(
            parse_request("/home/user/a/b").unwrap(),
            (Area::Home, vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(
            parse_request("notes.txt").unwrap(),
            (Area::Home, vec!["notes.txt".to_owned()])
        );
        assert_eq!(parse_request("/tmp").unwrap(), (Area::Tmp, vec![]));
        for bad in [
            "/etc/passwd",
            "/home/user/../x",
            "../x",
            "/home",
            "/",
            "",
            "/tmpx",
        ] {
            assert!(
                matches!(parse_request(bad), Err(ProviderError::InvalidRequest(_))),
                "{bad:?} accepted"
            );
        }
    }

    // The tests below need no root: they work in temp dirs as the current user (chown to
    // uid 1000 is the one step that needs root, so writes are skipped without it).

    #[test]
    fn symlinks_are_followed_inside_and_refused_outside() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_over(dir.path());
        let home = dir.path().join("home");
        std::fs::write(home.join("real.txt"), b"inside").unwrap();
        std::fs::write(dir.path().join("tmp/t.txt"), b"in tmp").unwrap();
        std::os::unix::fs::symlink("real.txt", home.join("rel")).unwrap();
        std::os::unix::fs::symlink("/home/user/real.txt", home.join("abs")).unwrap();
        std::os::unix::fs::symlink("/tmp/t.txt", home.join("to_tmp")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", home.join("shadow")).unwrap();
        std::os::unix::fs::symlink("../../etc/passwd", home.join("up")).unwrap();
        std::os::unix::fs::symlink("loop", home.join("loop")).unwrap();
        // A symlink to the host's real secret file, by host path, must not work either.
        let outside = dir.path().join("secret");
        std::fs::write(&outside, b"secret").unwrap();
        std::os::unix::fs::symlink(&outside, home.join("host_path")).unwrap();

        assert_eq!(fs.read("/home/user/rel").unwrap(), b"inside");
        assert_eq!(fs.read("/home/user/abs").unwrap(), b"inside");
        assert_eq!(fs.read("/home/user/to_tmp").unwrap(), b"in tmp");
        for bad in ["shadow", "up", "loop"] {
            let err = fs.read(&format!("/home/user/{bad}")).unwrap_err();
            assert!(
                matches!(&err, ProviderError::InvalidRequest(m) if m.contains(bad)),
                "{bad}: {err:?}"
            );
        }
        // Absolute targets mean the sandbox's paths: this one names a /tmp path that exists
        // only on the host, so it is looked up in the sandbox's /tmp and not found.
        assert!(matches!(
            fs.read("/home/user/host_path"),
            Err(ProviderError::NotFound(_))
        ));
        // The link itself can be looked at and removed.
        assert_eq!(
            fs.stat("/home/user/shadow").unwrap().kind,
            FileKind::Symlink
        );
        fs.remove("/home/user/shadow", false).unwrap();
        assert!(fs.stat("/home/user/shadow").is_err());
    }

    #[test]
    fn area_roots_cannot_be_removed() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_over(dir.path());
        assert!(fs.remove("/home/user", true).is_err());
        assert!(fs.remove("/tmp/", true).is_err());
        assert!(dir.path().join("home").is_dir());
    }

    #[test]
    fn temp_names_fit_beside_any_name() {
        for name in ["a.txt", &"x".repeat(255), &"é".repeat(127)] {
            let temp = temp_name(name);
            assert!(temp.len() <= 255, "{} bytes", temp.len());
            assert!(temp.starts_with('.') && temp.contains(".threadbox-upload-"));
        }
        assert!(temp_name("a.txt").starts_with(".a.txt.threadbox-upload-"));
    }

    #[test]
    fn reads_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_over(dir.path());
        std::fs::write(dir.path().join("home/big"), vec![b'x'; 2048]).unwrap();
        let err = fs.read("/home/user/big").unwrap_err();
        assert!(matches!(err, ProviderError::InvalidRequest(m) if m.contains("limit")));
    }
}
