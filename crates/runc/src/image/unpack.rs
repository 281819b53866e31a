//! Writing an image's entries under its root, whatever they come from (a layer tarball or a
//! directory), with one set of refusals: no absolute path, no `..`, nothing written through a
//! symlink, no link that climbs out of the image, no device node, no setuid or setgid bit.
//!
//! The writer is the only one writing under a root that is not yet published (the store
//! renames it into place when it is whole), so checking each parent with `lstat` before writing
//! is enough: nothing can swap a directory for a symlink in between.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::ImageError;

/// The bits an image's files keep: permissions and the sticky bit, never setuid or setgid (the
/// mount is `nosuid` too; dropping them here means a copy of the tree cannot regain them).
const KEPT_MODE_BITS: u32 = 0o1777;

/// The most an image may unpack to, and the most entries it may hold: far past any real image
/// (the largest toolchain images are tens of GB and a few hundred thousand files), short of a
/// compressed bomb filling the disk the sandboxes' homes live on.
pub const MAX_UNPACKED_BYTES: u64 = 64 << 30;
pub const MAX_ENTRIES: u64 = 4_000_000;
/// An unpack stops when the store's filesystem would be left with less than this free.
pub const MIN_FREE_BYTES: u64 = 1 << 30;
/// How often (in bytes written) the free space is looked at.
const FREE_CHECK_EVERY: u64 = 256 << 20;

/// What an unpack wrote and what it left out.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UnpackStats {
    pub files: u64,
    pub bytes: u64,
    /// Device nodes and FIFOs: an image's own devices are never created (the sandbox gets its
    /// `/dev` from the runtime).
    pub special_skipped: u64,
    /// Files whose setuid or setgid bit was dropped.
    pub setid_dropped: u64,
}

/// Who owns an entry, as the image says.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// Writes entries under `root`. Directory modes are applied at [`Writer::finish`], so that a
/// read-only directory early in a layer does not stop its own children being written when the
/// unpack runs without root.
pub struct Writer {
    root: PathBuf,
    chown: bool,
    pending_dir_modes: Vec<(PathBuf, u32)>,
    /// Paths written by the layer being applied: an opaque whiteout hides only what lower
    /// layers put in its directory.
    this_layer: HashSet<PathBuf>,
    /// Entries applied so far, every kind, against [`MAX_ENTRIES`].
    entries: u64,
    max_bytes: u64,
    max_entries: u64,
    pub stats: UnpackStats,
}

impl Writer {
    pub fn new(root: &Path) -> io::Result<Self> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(root)?;
        Ok(Writer {
            root: root.to_path_buf(),
            chown: rustix::process::geteuid().is_root(),
            pending_dir_modes: Vec::new(),
            this_layer: HashSet::new(),
            entries: 0,
            max_bytes: MAX_UNPACKED_BYTES,
            max_entries: MAX_ENTRIES,
            stats: UnpackStats::default(),
        })
    }

    /// Other bounds than [`MAX_UNPACKED_BYTES`] and [`MAX_ENTRIES`] (the tests' small ones).
    #[cfg(test)]
    pub fn with_limits(mut self, bytes: u64, entries: u64) -> Self {
        self.max_bytes = bytes;
        self.max_entries = entries;
        self
    }

    /// Starts a new layer: whiteouts from here on hide what the earlier layers wrote.
    pub fn next_layer(&mut self) {
        self.this_layer.clear();
    }

    pub fn directory(&mut self, entry: &Path, mode: u32, owner: Owner) -> Result<(), ImageError> {
        self.count_entry(entry)?;
        let Some(relative) = confined(entry)? else {
            // The root itself ("./"): its mode is the store's, not the image's.
            return Ok(());
        };
        let path = self.parent_ready(entry, &relative)?;
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                self.remove(entry, &path)?;
                self.mkdir(entry, &path)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.mkdir(entry, &path)?,
            Err(e) => return Err(io_refusal(entry, e)),
        }
        self.own(entry, &path, owner)?;
        self.pending_dir_modes.push((path, mode & KEPT_MODE_BITS));
        self.this_layer.insert(relative);
        Ok(())
    }

    pub fn file(
        &mut self,
        entry: &Path,
        mode: u32,
        owner: Owner,
        content: &mut dyn Read,
    ) -> Result<(), ImageError> {
        self.count_entry(entry)?;
        let relative =
            confined(entry)?.ok_or_else(|| refused(entry, "a file cannot be the root"))?;
        let path = self.replaceable(entry, &relative)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| io_refusal(entry, e))?;
        let room = self.max_bytes.saturating_sub(self.stats.bytes);
        let written =
            io::copy(&mut content.take(room + 1), &mut file).map_err(|e| io_refusal(entry, e))?;
        if written > room {
            return Err(too_large(
                entry,
                format!(
                    "the image unpacks to more than {} bytes, the most an image may hold",
                    self.max_bytes
                ),
            ));
        }
        // Owner and mode through the open file: the path is never followed again.
        if self.chown {
            rustix::fs::fchown(
                &file,
                Some(rustix::fs::Uid::from_raw(owner.uid)),
                Some(rustix::fs::Gid::from_raw(owner.gid)),
            )
            .map_err(|e| io_refusal(entry, e.into()))?;
        }
        if mode & 0o6000 != 0 {
            self.stats.setid_dropped += 1;
        }
        file.set_permissions(fs::Permissions::from_mode(mode & KEPT_MODE_BITS))
            .map_err(|e| io_refusal(entry, e))?;
        drop(file);
        if (self.stats.bytes + written) / FREE_CHECK_EVERY > self.stats.bytes / FREE_CHECK_EVERY {
            self.check_free_space(entry)?;
        }
        self.stats.files += 1;
        self.stats.bytes += written;
        self.this_layer.insert(relative);
        Ok(())
    }

    /// A symlink. An absolute target is resolved inside the sandbox's root, so it stays in the
    /// image wherever it points; a relative one must not climb above the image's root.
    pub fn symlink(&mut self, entry: &Path, target: &Path, owner: Owner) -> Result<(), ImageError> {
        self.count_entry(entry)?;
        let relative =
            confined(entry)?.ok_or_else(|| refused(entry, "a symlink cannot be the root"))?;
        if target.is_relative() && climbs_out(&relative, target) {
            return Err(refused(entry, "its symlink points out of the image"));
        }
        let path = self.replaceable(entry, &relative)?;
        std::os::unix::fs::symlink(target, &path).map_err(|e| io_refusal(entry, e))?;
        self.own(entry, &path, owner)?;
        self.this_layer.insert(relative);
        Ok(())
    }

    /// A hard link to a file already written in this image.
    pub fn hard_link(&mut self, entry: &Path, target: &Path) -> Result<(), ImageError> {
        self.count_entry(entry)?;
        let relative =
            confined(entry)?.ok_or_else(|| refused(entry, "a link cannot be the root"))?;
        let target_relative = confined(target)
            .map_err(|_| refused(entry, "its hard link points out of the image"))?
            .ok_or_else(|| refused(entry, "its hard link points at the root"))?;
        let target_path = self.parent_ready(target, &target_relative)?;
        match fs::symlink_metadata(&target_path) {
            Ok(meta) if meta.is_file() => {}
            _ => {
                return Err(refused(
                    entry,
                    "its hard link's target is not a file of the image",
                ))
            }
        }
        let path = self.replaceable(entry, &relative)?;
        fs::hard_link(&target_path, &path).map_err(|e| io_refusal(entry, e))?;
        self.this_layer.insert(relative);
        Ok(())
    }

    /// A device node or FIFO: counted, never made.
    pub fn special(&mut self, entry: &Path) -> Result<(), ImageError> {
        self.count_entry(entry)?;
        confined(entry)?;
        self.stats.special_skipped += 1;
        Ok(())
    }

    /// An OCI whiteout: `.wh.NAME` removes NAME, `.wh..wh..opq` empties its directory of what
    /// lower layers put there.
    pub fn whiteout(&mut self, entry: &Path) -> Result<(), ImageError> {
        let relative =
            confined(entry)?.ok_or_else(|| refused(entry, "a whiteout cannot be the root"))?;
        let name = relative
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| refused(entry, "a whiteout's name is not UTF-8"))?;
        let directory = relative.parent().unwrap_or(Path::new("")).to_path_buf();
        let dir_path = self.parent_ready(entry, &relative)?;
        let dir_path = dir_path.parent().unwrap_or(&self.root).to_path_buf();
        if name == ".wh..wh..opq" {
            let children = match fs::read_dir(&dir_path) {
                Ok(children) => children,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(io_refusal(entry, e)),
            };
            for child in children {
                let child = child.map_err(|e| io_refusal(entry, e))?;
                if !self.this_layer.contains(&directory.join(child.file_name())) {
                    self.remove(entry, &child.path())?;
                }
            }
        } else if let Some(hidden) = name.strip_prefix(".wh.") {
            if hidden.is_empty() || hidden == "." || hidden == ".." {
                return Err(refused(entry, "a whiteout names nothing"));
            }
            let path = dir_path.join(hidden);
            if fs::symlink_metadata(&path).is_ok() {
                self.remove(entry, &path)?;
            }
        }
        Ok(())
    }

    /// Applies the directory modes held back, deepest first, and returns what was written.
    pub fn finish(mut self) -> Result<UnpackStats, ImageError> {
        self.pending_dir_modes
            .sort_by_key(|(path, _)| std::cmp::Reverse(path.components().count()));
        for (path, mode) in &self.pending_dir_modes {
            fs::set_permissions(path, fs::Permissions::from_mode(*mode)).map_err(|e| {
                ImageError::Store {
                    path: path.clone(),
                    detail: e.to_string(),
                }
            })?;
        }
        Ok(self.stats)
    }

    /// The entry's path under the root, its parents made (as plain directories) and checked:
    /// none may be a symlink or a file.
    fn parent_ready(&mut self, entry: &Path, relative: &Path) -> Result<PathBuf, ImageError> {
        let mut path = self.root.clone();
        let parents: Vec<_> = relative
            .parent()
            .map(|p| p.components().collect())
            .unwrap_or_default();
        for component in parents {
            path.push(component);
            match fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(refused(entry, "it would be written through a symlink"))
                }
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => return Err(refused(entry, "one of its parents is not a directory")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => self.mkdir(entry, &path)?,
                Err(e) => return Err(io_refusal(entry, e)),
            }
        }
        Ok(self.root.join(relative))
    }

    /// The entry's path, with whatever stood there before removed.
    fn replaceable(&mut self, entry: &Path, relative: &Path) -> Result<PathBuf, ImageError> {
        let path = self.parent_ready(entry, relative)?;
        if fs::symlink_metadata(&path).is_ok() {
            self.remove(entry, &path)?;
        }
        Ok(path)
    }

    fn mkdir(&self, entry: &Path, path: &Path) -> Result<(), ImageError> {
        fs::DirBuilder::new()
            .mode(0o755)
            .create(path)
            .map_err(|e| io_refusal(entry, e))
    }

    fn remove(&self, entry: &Path, path: &Path) -> Result<(), ImageError> {
        let meta = fs::symlink_metadata(path).map_err(|e| io_refusal(entry, e))?;
        let removed = if meta.is_dir() {
            // A directory held back as read-only may not be writable without root: open it up
            // before emptying it.
            make_writable(path);
            fs::remove_dir_all(path)
        } else {
            fs::remove_file(path)
        };
        removed.map_err(|e| io_refusal(entry, e))
    }

    fn count_entry(&mut self, entry: &Path) -> Result<(), ImageError> {
        self.entries += 1;
        if self.entries > self.max_entries {
            return Err(too_large(
                entry,
                format!(
                    "the image holds more than {} entries, the most an image may hold",
                    self.max_entries
                ),
            ));
        }
        Ok(())
    }

    fn check_free_space(&self, entry: &Path) -> Result<(), ImageError> {
        let stat = rustix::fs::statvfs(&self.root).map_err(|e| io_refusal(entry, e.into()))?;
        if stat.f_bavail.saturating_mul(stat.f_frsize) < MIN_FREE_BYTES {
            return Err(refused(
                entry,
                "the image store's disk has less than 1 GiB free; the unpack stopped",
            ));
        }
        Ok(())
    }

    fn own(&self, entry: &Path, path: &Path, owner: Owner) -> Result<(), ImageError> {
        if !self.chown {
            return Ok(());
        }
        std::os::unix::fs::lchown(path, Some(owner.uid), Some(owner.gid))
            .map_err(|e| io_refusal(entry, e))
    }
}

/// Opens up a directory tree held back as read-only, so that it can be emptied without root.
pub(super) fn make_writable(dir: &Path) {
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    if let Ok(children) = fs::read_dir(dir) {
        for child in children.flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&child.path());
            }
        }
    }
}

/// The entry's path relative to the image's root, `None` for the root itself; refused when it
/// is absolute or has a `..`.
pub fn confined(entry: &Path) -> Result<Option<PathBuf>, ImageError> {
    let mut relative = PathBuf::new();
    for component in entry.components() {
        match component {
            Component::Normal(name) => relative.push(name),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(refused(entry, "its path is absolute"))
            }
            Component::ParentDir => return Err(refused(entry, "its path has a `..`")),
        }
    }
    Ok((!relative.as_os_str().is_empty()).then_some(relative))
}

/// Whether a relative symlink target, read from the link's directory, climbs above the root.
fn climbs_out(link: &Path, target: &Path) -> bool {
    let mut depth = link.components().count() as i64 - 1;
    for component in target.components() {
        match component {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

fn refused(entry: &Path, why: &'static str) -> ImageError {
    ImageError::Refused {
        entry: entry.display().to_string(),
        why,
    }
}

fn too_large(entry: &Path, detail: String) -> ImageError {
    ImageError::TooLarge {
        entry: entry.display().to_string(),
        detail,
    }
}

fn io_refusal(entry: &Path, error: io::Error) -> ImageError {
    ImageError::Store {
        path: entry.to_path_buf(),
        detail: error.to_string(),
    }
}

/// Applies one layer tarball (plain or gzip-compressed, told by its first bytes).
pub fn apply_tar(writer: &mut Writer, reader: impl Read + 'static) -> Result<(), ImageError> {
    let mut archive = tar::Archive::new(decompressed(reader).map_err(layer_error)?);
    writer.next_layer();
    for entry in archive.entries().map_err(layer_error)? {
        let mut entry = entry.map_err(layer_error)?;
        let path = entry.path().map_err(layer_error)?.into_owned();
        let header = entry.header();
        let owner = Owner {
            uid: header.uid().map_err(layer_error)? as u32,
            gid: header.gid().map_err(layer_error)? as u32,
        };
        let mode = header.mode().map_err(layer_error)?;
        let is_whiteout = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(".wh."));
        use tar::EntryType;
        match header.entry_type() {
            _ if is_whiteout => writer.whiteout(&path)?,
            EntryType::Directory => writer.directory(&path, mode, owner)?,
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                writer.file(&path, mode, owner, &mut entry)?
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(layer_error)?
                    .ok_or_else(|| refused(&path, "its symlink has no target"))?
                    .into_owned();
                writer.symlink(&path, &target, owner)?
            }
            EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(layer_error)?
                    .ok_or_else(|| refused(&path, "its hard link has no target"))?
                    .into_owned();
                writer.hard_link(&path, &target)?
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => writer.special(&path)?,
            // PAX and GNU long-name headers are read by `tar` itself; anything else carries no
            // file.
            _ => {}
        }
    }
    Ok(())
}

/// The reader, through gzip when it starts with gzip's magic bytes.
pub fn decompressed(reader: impl Read + 'static) -> io::Result<Box<dyn Read>> {
    let mut reader = io::BufReader::new(reader);
    let head = io::BufRead::fill_buf(&mut reader)?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(flate2::read::GzDecoder::new(reader)))
    } else {
        Ok(Box::new(reader))
    }
}

fn layer_error(error: io::Error) -> ImageError {
    ImageError::BadArchive(error.to_string())
}
