//! What an image source is: an OCI image layout (a directory or an archive of one), or a plain
//! root filesystem (a directory or a tarball), told by its contents rather than its name.

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::unpack::decompressed;
use super::ImageError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    OciLayout,
    OciArchive,
    RootfsDirectory,
    RootfsTarball,
}

impl SourceKind {
    pub fn describe(self) -> &'static str {
        match self {
            SourceKind::OciLayout => "OCI image layout",
            SourceKind::OciArchive => "OCI image archive",
            SourceKind::RootfsDirectory => "root filesystem directory",
            SourceKind::RootfsTarball => "root filesystem tarball",
        }
    }
}

/// An operator's `SOURCE`: a path, and for an OCI layout holding several images, the one named
/// after a colon (`layout:NAME`, as umoci and skopeo write it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSource {
    pub path: PathBuf,
    pub reference: Option<String>,
    pub kind: SourceKind,
}

impl ImageSource {
    pub fn parse(text: &str) -> Result<Self, ImageError> {
        let whole = PathBuf::from(text);
        let (path, reference) = if whole.exists() {
            (whole, None)
        } else {
            match text.rsplit_once(':') {
                Some((path, name))
                    if !name.is_empty() && !name.contains('/') && Path::new(path).exists() =>
                {
                    (PathBuf::from(path), Some(name.to_owned()))
                }
                _ => return Err(ImageError::Missing(whole)),
            }
        };
        let kind = kind_of(&path)?;
        if reference.is_some()
            && matches!(
                kind,
                SourceKind::RootfsDirectory | SourceKind::RootfsTarball
            )
        {
            return Err(ImageError::unreadable(
                &path,
                "a root filesystem holds one image: only an OCI layout takes a :NAME",
            ));
        }
        Ok(ImageSource {
            path,
            reference,
            kind,
        })
    }

    /// The source as the operator wrote it.
    pub fn display(&self) -> String {
        match &self.reference {
            Some(name) => format!("{}:{name}", self.path.display()),
            None => self.path.display().to_string(),
        }
    }
}

fn kind_of(path: &Path) -> Result<SourceKind, ImageError> {
    let meta = std::fs::metadata(path).map_err(|e| ImageError::unreadable(path, e))?;
    if meta.is_dir() {
        return Ok(if path.join("oci-layout").is_file() {
            SourceKind::OciLayout
        } else {
            SourceKind::RootfsDirectory
        });
    }
    if !meta.is_file() {
        return Err(ImageError::unreadable(
            path,
            "neither a directory nor a file",
        ));
    }
    let file = File::open(path).map_err(|e| ImageError::unreadable(path, e))?;
    let mut archive =
        tar::Archive::new(decompressed(file).map_err(|e| ImageError::unreadable(path, e))?);
    let entries = archive
        .entries()
        .map_err(|e| ImageError::unreadable(path, format!("not a tar archive: {e}")))?;
    let mut any = false;
    for entry in entries {
        let entry =
            entry.map_err(|e| ImageError::unreadable(path, format!("not a tar archive: {e}")))?;
        any = true;
        let name = entry
            .path()
            .map_err(|e| ImageError::unreadable(path, e))?
            .into_owned();
        if name.components().filter(|c| c.as_os_str() != ".").count() == 1
            && name.file_name().is_some_and(|n| n == "oci-layout")
        {
            return Ok(SourceKind::OciArchive);
        }
    }
    if !any {
        return Err(ImageError::unreadable(path, "an empty archive"));
    }
    Ok(SourceKind::RootfsTarball)
}
