//! Images: the root filesystems an operator registers by name, each unpacked once per digest
//! into a directory every sandbox of that image shares read-only.
//!
//! A source is an OCI image layout (a directory, or an archive of one as `skopeo copy
//! oci-archive:`, `buildah push oci-archive:` or `docker save` make), or a plain root filesystem
//! (a directory or a tarball). Whatever it is, it goes through one unpacker ([`unpack`]) that
//! refuses entries naming absolute paths or `..`, entries written through a symlink and links
//! that climb out of the image, drops device nodes and setuid/setgid bits, and writes nothing
//! outside the image store.
//!
//! The pieces: `source` tells what a source is, `layout` reads an OCI image layout (index,
//! manifest, blobs checked against their digests), `unpack` applies a layer, `store` keeps the
//! unpacked images by digest.

mod layout;
mod source;
mod store;
mod unpack;

pub use source::{ImageSource, SourceKind};
pub use store::{ImageStore, StoredImage};

use std::path::PathBuf;

/// Why an image could not be registered or unpacked; each names what it refused.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image source {0}: no such file or directory")]
    Missing(PathBuf),
    #[error("image source {path}: {detail}")]
    Unreadable { path: PathBuf, detail: String },
    #[error("OCI image layout {path}: {detail}")]
    BadLayout { path: PathBuf, detail: String },
    #[error("OCI image layout {path} holds {count} images ({names}); name one as {path}:NAME")]
    Ambiguous {
        path: PathBuf,
        count: usize,
        names: String,
    },
    #[error("blob {digest} of {path} is corrupt: its content hashes to {actual}")]
    Corrupt {
        path: PathBuf,
        digest: String,
        actual: String,
    },
    #[error("the archive is not a readable tar (or gzip-compressed tar): {0}")]
    BadArchive(String),
    #[error("image entry {entry:?} refused: {why}")]
    Refused { entry: String, why: &'static str },
    #[error("image entry {entry:?} refused: {detail}")]
    TooLarge { entry: String, detail: String },
    #[error("image store {path}: {detail}")]
    Store { path: PathBuf, detail: String },
}

impl ImageError {
    fn unreadable(path: impl Into<PathBuf>, error: impl std::fmt::Display) -> Self {
        ImageError::Unreadable {
            path: path.into(),
            detail: error.to_string(),
        }
    }

    fn layout(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        ImageError::BadLayout {
            path: path.into(),
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests;
