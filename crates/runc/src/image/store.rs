//! The image store: each image unpacked once, under its digest, into a root every sandbox of
//! that image shares read-only. An unpack is written under `tmp/` and renamed into place whole,
//! so a crash leaves either nothing (the next open clears `tmp/`) or a complete image, and two
//! registrations of one digest at once leave one copy.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::layout::{self, hex, sha256_of};
use super::source::{ImageSource, SourceKind};
use super::unpack::{apply_tar, make_writable, Owner, Writer};
use super::ImageError;

/// An unpacked image: where its root is and what went into it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredImage {
    /// `sha256:…`: the manifest's digest for an OCI image, else the digest of the tarball or of
    /// the directory's listing and contents.
    pub digest: String,
    /// Bytes of file content in the root.
    pub bytes: u64,
    pub files: u64,
    /// The source as the operator named it, and what it was.
    pub source: String,
    pub kind: SourceKind,
    /// Device nodes and FIFOs the image had, not made.
    pub special_skipped: u64,
    /// Files whose setuid or setgid bit was dropped.
    pub setid_dropped: u64,
    #[serde(skip)]
    pub rootfs: PathBuf,
}

pub struct ImageStore {
    dir: PathBuf,
}

const METADATA: &str = "image.json";

impl ImageStore {
    /// Opens (making it if needed) the store at `dir`, clearing what an interrupted unpack left.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, ImageError> {
        let dir = dir.into();
        let tmp = dir.join("tmp");
        if tmp.exists() {
            remove_tree(&tmp).map_err(|e| store_error(&tmp, e))?;
        }
        fs::create_dir_all(&tmp).map_err(|e| store_error(&tmp, e))?;
        // Root's alone: an unpack runs as root and gives entries the owners the image names,
        // which may be real host users; none of them may reach in, mid-unpack or after (only
        // the host's root mounts the layer for a sandbox).
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| store_error(&dir, e))?;
        Ok(ImageStore { dir })
    }

    /// The image from `source`, unpacked now unless its digest is already in the store.
    pub fn unpack(&self, source: &ImageSource) -> Result<StoredImage, ImageError> {
        let work = self.dir.join("tmp").join(uuid::Uuid::new_v4().to_string());
        fs::create_dir(&work).map_err(|e| store_error(&work, e))?;
        let result = self.unpack_in(source, &work);
        if work.exists() {
            let _ = remove_tree(&work);
        }
        result
    }

    fn unpack_in(&self, source: &ImageSource, work: &Path) -> Result<StoredImage, ImageError> {
        let rootfs = work.join("rootfs");
        let (digest, stats) = match source.kind {
            SourceKind::OciLayout | SourceKind::OciArchive => {
                let layout_dir = if source.kind == SourceKind::OciArchive {
                    // The archive's layout is unpacked with the same refusals as any image.
                    let layout_dir = work.join("layout");
                    let mut writer =
                        Writer::new(&layout_dir).map_err(|e| store_error(&layout_dir, e))?;
                    apply_tar(&mut writer, open(&source.path)?)?;
                    writer.finish()?;
                    layout_dir
                } else {
                    source.path.clone()
                };
                let image = layout::read(&layout_dir, source.reference.as_deref())?;
                if let Some(stored) = self.get(&image.digest)? {
                    return Ok(stored);
                }
                let mut writer = Writer::new(&rootfs).map_err(|e| store_error(&rootfs, e))?;
                for (number, layer) in image.layers.iter().enumerate() {
                    tracing::info!(
                        image = %source.display(),
                        "unpacking layer {} of {}",
                        number + 1,
                        image.layers.len()
                    );
                    apply_tar(&mut writer, open(layer)?)?;
                }
                (image.digest, writer.finish()?)
            }
            SourceKind::RootfsTarball => {
                let digest = sha256_of(&mut open(&source.path)?)
                    .map_err(|e| ImageError::unreadable(&source.path, e))?;
                if let Some(stored) = self.get(&digest)? {
                    return Ok(stored);
                }
                let mut writer = Writer::new(&rootfs).map_err(|e| store_error(&rootfs, e))?;
                apply_tar(&mut writer, open(&source.path)?)?;
                (digest, writer.finish()?)
            }
            SourceKind::RootfsDirectory => {
                let digest = directory_digest(&source.path)?;
                if let Some(stored) = self.get(&digest)? {
                    return Ok(stored);
                }
                let mut writer = Writer::new(&rootfs).map_err(|e| store_error(&rootfs, e))?;
                copy_directory(&source.path, &mut writer)?;
                (digest, writer.finish()?)
            }
        };
        let stored = StoredImage {
            digest: digest.clone(),
            bytes: stats.bytes,
            files: stats.files,
            source: source.display(),
            kind: source.kind,
            special_skipped: stats.special_skipped,
            setid_dropped: stats.setid_dropped,
            rootfs: PathBuf::new(),
        };
        let metadata = work.join(METADATA);
        fs::write(
            &metadata,
            serde_json::to_vec_pretty(&stored).expect("plain struct"),
        )
        .map_err(|e| store_error(&metadata, e))?;
        if work.join("layout").exists() {
            remove_tree(&work.join("layout")).map_err(|e| store_error(work, e))?;
        }
        let home = self.entry_dir(&digest);
        match fs::rename(work, &home) {
            Ok(()) => {}
            // Another registration of the same digest got there first: theirs stands.
            Err(e) if home.join(METADATA).exists() => {
                tracing::debug!(%digest, "image already stored ({e})");
            }
            Err(e) => return Err(store_error(&home, e)),
        }
        self.get(&digest)?
            .ok_or_else(|| store_error(&home, io::Error::other("vanished after unpack")))
    }

    /// The stored image with this digest, if there is one.
    pub fn get(&self, digest: &str) -> Result<Option<StoredImage>, ImageError> {
        let home = self.entry_dir(digest);
        let metadata = home.join(METADATA);
        let bytes = match fs::read(&metadata) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(store_error(&metadata, e)),
        };
        let mut stored: StoredImage = serde_json::from_slice(&bytes)
            .map_err(|e| store_error(&metadata, io::Error::other(e)))?;
        stored.rootfs = home.join("rootfs");
        Ok(Some(stored))
    }

    fn entry_dir(&self, digest: &str) -> PathBuf {
        self.dir.join(digest.replace(':', "-"))
    }
}

fn open(path: &Path) -> Result<File, ImageError> {
    File::open(path).map_err(|e| ImageError::unreadable(path, e))
}

fn store_error(path: &Path, error: io::Error) -> ImageError {
    ImageError::Store {
        path: path.to_path_buf(),
        detail: error.to_string(),
    }
}

/// Removes a tree that may hold read-only directories (an unpack without root).
fn remove_tree(path: &Path) -> io::Result<()> {
    make_writable(path);
    fs::remove_dir_all(path)
}

/// Visits a directory's entries, sorted, without following symlinks: (path relative to the
/// root, its metadata).
fn walk(
    root: &Path,
    relative: &Path,
    visit: &mut dyn FnMut(&Path, &fs::Metadata) -> Result<(), ImageError>,
) -> Result<(), ImageError> {
    let dir = root.join(relative);
    let mut children: Vec<_> = fs::read_dir(&dir)
        .map_err(|e| ImageError::unreadable(&dir, e))?
        .map(|c| c.map(|c| c.file_name()))
        .collect::<Result<_, _>>()
        .map_err(|e| ImageError::unreadable(&dir, e))?;
    children.sort();
    for name in children {
        let child = relative.join(&name);
        let meta = fs::symlink_metadata(root.join(&child))
            .map_err(|e| ImageError::unreadable(root.join(&child), e))?;
        visit(&child, &meta)?;
        if meta.is_dir() {
            walk(root, &child, visit)?;
        }
    }
    Ok(())
}

/// A digest of a directory tree: every entry's path, type, mode, owner, link target and
/// content, in sorted order.
fn directory_digest(root: &Path) -> Result<String, ImageError> {
    use std::os::unix::fs::MetadataExt;
    let mut hasher = Sha256::new();
    walk(root, Path::new(""), &mut |relative, meta| {
        hasher.update(relative.as_os_str().as_encoded_bytes());
        hasher.update([0]);
        hasher.update(format!("{:o} {} {} ", meta.mode(), meta.uid(), meta.gid()).as_bytes());
        let path = root.join(relative);
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).map_err(|e| ImageError::unreadable(&path, e))?;
            hasher.update(target.as_os_str().as_encoded_bytes());
        } else if meta.is_file() {
            let content = sha256_of(&mut open_no_follow(&path)?)
                .map_err(|e| ImageError::unreadable(&path, e))?;
            hasher.update(content.as_bytes());
        }
        hasher.update([0]);
        Ok(())
    })?;
    Ok(format!("sha256:{}", hex(&hasher.finalize())))
}

fn copy_directory(root: &Path, writer: &mut Writer) -> Result<(), ImageError> {
    use std::os::unix::fs::MetadataExt;
    walk(root, Path::new(""), &mut |relative, meta| {
        let owner = Owner {
            uid: meta.uid(),
            gid: meta.gid(),
        };
        let path = root.join(relative);
        let kind = meta.file_type();
        if kind.is_dir() {
            writer.directory(relative, meta.mode(), owner)
        } else if kind.is_symlink() {
            let target = fs::read_link(&path).map_err(|e| ImageError::unreadable(&path, e))?;
            writer.symlink(relative, &target, owner)
        } else if kind.is_file() {
            writer.file(relative, meta.mode(), owner, &mut open_no_follow(&path)?)
        } else {
            writer.special(relative)
        }
    })
}

fn open_no_follow(path: &Path) -> Result<File, ImageError> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| ImageError::unreadable(path, e))
}
