//! Reading an OCI image layout (image-spec's `oci-layout`, `index.json` and `blobs/`): which
//! manifest the operator meant, and its layers, each blob checked against its digest.
//!
//! The three documents are small JSON read with serde here; the `oci-spec` crate would bring
//! builders and getters for every type of the spec to read five fields.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::ImageError;

const REF_NAME: &str = "org.opencontainers.image.ref.name";
const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    platform: Option<Platform>,
}

#[derive(Debug, Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Debug, Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    layers: Vec<Descriptor>,
}

/// The image the operator named in a layout: its manifest's digest (the image's digest) and its
/// layers' blobs, lowest first.
#[derive(Debug)]
pub struct LayoutImage {
    pub digest: String,
    pub layers: Vec<PathBuf>,
}

/// Reads the layout at `dir`, choosing the manifest named `reference` (its
/// `org.opencontainers.image.ref.name`), or the only one when none is named.
pub fn read(dir: &Path, reference: Option<&str>) -> Result<LayoutImage, ImageError> {
    let marker = dir.join("oci-layout");
    if !marker.is_file() {
        return Err(ImageError::layout(
            dir,
            "no oci-layout file: not an OCI image layout",
        ));
    }
    let index: Index = json_file(dir, &dir.join("index.json"))?;
    let chosen = choose(dir, &index.manifests, reference)?;
    let manifest_descriptor = platform_manifest(dir, chosen)?;
    let manifest: Manifest = json_blob(dir, &manifest_descriptor.digest)?;
    let mut layers = Vec::with_capacity(manifest.layers.len());
    for layer in &manifest.layers {
        if layer.media_type.contains("zstd") {
            return Err(ImageError::layout(
                dir,
                format!("layer {} is zstd-compressed ({}): only plain and gzip-compressed layers are supported", layer.digest, layer.media_type),
            ));
        }
        layers.push(verified_blob(dir, &layer.digest)?);
    }
    Ok(LayoutImage {
        digest: manifest_descriptor.digest.clone(),
        layers,
    })
}

fn choose<'a>(
    dir: &Path,
    manifests: &'a [Descriptor],
    reference: Option<&str>,
) -> Result<&'a Descriptor, ImageError> {
    let names = || {
        let names: Vec<_> = manifests
            .iter()
            .filter_map(|m| m.annotations.get(REF_NAME).map(String::as_str))
            .collect();
        if names.is_empty() {
            "none of them named".to_owned()
        } else {
            names.join(", ")
        }
    };
    match reference {
        Some(reference) => manifests
            .iter()
            .find(|m| m.annotations.get(REF_NAME).map(String::as_str) == Some(reference))
            .ok_or_else(|| {
                ImageError::layout(
                    dir,
                    format!("no image named {reference:?} (it has: {})", names()),
                )
            }),
        None => match manifests {
            [] => Err(ImageError::layout(dir, "index.json lists no image")),
            [only] => Ok(only),
            several => Err(ImageError::Ambiguous {
                path: dir.to_path_buf(),
                count: several.len(),
                names: names(),
            }),
        },
    }
}

/// A multi-platform index is resolved to this host's platform; a manifest is itself.
fn platform_manifest(dir: &Path, chosen: &Descriptor) -> Result<Descriptor, ImageError> {
    if !INDEX_TYPES.contains(&chosen.media_type.as_str()) {
        return Ok(Descriptor {
            media_type: chosen.media_type.clone(),
            digest: chosen.digest.clone(),
            annotations: BTreeMap::new(),
            platform: None,
        });
    }
    let nested: Index = json_blob(dir, &chosen.digest)?;
    let arch = host_architecture();
    nested
        .manifests
        .into_iter()
        .find(|m| {
            m.platform
                .as_ref()
                .is_none_or(|p| p.os == "linux" && p.architecture == arch)
        })
        .ok_or_else(|| {
            ImageError::layout(dir, format!("no linux/{arch} image in {}", chosen.digest))
        })
}

fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn json_file<T: serde::de::DeserializeOwned>(dir: &Path, path: &Path) -> Result<T, ImageError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ImageError::layout(dir, format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ImageError::layout(dir, format!("{}: {e}", path.display())))
}

fn json_blob<T: serde::de::DeserializeOwned>(dir: &Path, digest: &str) -> Result<T, ImageError> {
    let path = verified_blob(dir, digest)?;
    json_file(dir, &path)
}

/// The blob's path, once its content is known to hash to its digest. The digest is checked
/// for its form first: it becomes a path, and `sha256:../../x` must not.
pub fn verified_blob(dir: &Path, digest: &str) -> Result<PathBuf, ImageError> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|hex| {
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .ok_or_else(|| {
            ImageError::layout(dir, format!("digest {digest:?} is not a sha256 digest"))
        })?;
    let path = dir.join("blobs").join("sha256").join(hex);
    let actual = sha256_of(
        &mut File::open(&path)
            .map_err(|e| ImageError::layout(dir, format!("blob {digest}: {e}")))?,
    )
    .map_err(|e| ImageError::layout(dir, format!("blob {digest}: {e}")))?;
    if actual != digest {
        return Err(ImageError::Corrupt {
            path: dir.to_path_buf(),
            digest: digest.to_owned(),
            actual,
        });
    }
    Ok(path)
}

/// `sha256:HEX` of everything the reader gives.
pub fn sha256_of(reader: &mut dyn Read) -> io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 1 << 16];
    loop {
        let read = reader.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(format!("sha256:{}", hex(&hasher.finalize())))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
