//! The image store against images made here: layers and layouts written with `tar`, hostile
//! entries written header by header (the `tar` crate refuses to write them, which is the point).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::layout::hex;
use super::{ImageError, ImageSource, ImageStore};

/// One tar entry, written as it is (no path checks: the tests need hostile ones).
enum Entry<'a> {
    Dir(&'a str, u32),
    File(&'a str, u32, &'a [u8]),
    Symlink(&'a str, &'a str),
    HardLink(&'a str, &'a str),
    Char(&'a str),
}

fn tar_of(entries: &[Entry]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        let (name, kind, mode, data, link): (&str, tar::EntryType, u32, &[u8], Option<&str>) =
            match *entry {
                Entry::Dir(name, mode) => (name, tar::EntryType::Directory, mode, b"", None),
                Entry::File(name, mode, data) => (name, tar::EntryType::Regular, mode, data, None),
                Entry::Symlink(name, target) => {
                    (name, tar::EntryType::Symlink, 0o777, b"", Some(target))
                }
                Entry::HardLink(name, target) => {
                    (name, tar::EntryType::Link, 0o644, b"", Some(target))
                }
                Entry::Char(name) => (name, tar::EntryType::Char, 0o666, b"", None),
            };
        let raw = header.as_old_mut();
        raw.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(link) = link {
            raw.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(data.len() as u64);
        header.set_cksum();
        builder.append(&header, data).unwrap();
    }
    builder.into_inner().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

/// An OCI layout at `dir` with one image per `(name, layers)`, each layer gzip-compressed.
fn layout(dir: &Path, images: &[(&str, Vec<Vec<u8>>)]) -> Vec<String> {
    let blobs = dir.join("blobs/sha256");
    fs::create_dir_all(&blobs).unwrap();
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let put = |bytes: &[u8]| {
        let digest = digest(bytes);
        fs::write(blobs.join(&digest[7..]), bytes).unwrap();
        digest
    };
    let mut manifests = Vec::new();
    let mut digests = Vec::new();
    for (name, layers) in images {
        let config = put(
            br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#,
        );
        let layers: Vec<_> = layers
            .iter()
            .map(|layer| {
                let gz = gzip(layer);
                serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                   "digest": put(&gz), "size": gz.len()})
            })
            .collect();
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 1},
            "layers": layers,
        }))
        .unwrap();
        let manifest_digest = put(&manifest);
        manifests.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": name},
        }));
        digests.push(manifest_digest);
    }
    fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": manifests}))
            .unwrap(),
    )
    .unwrap();
    digests
}

struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        Scratch { _dir: dir, root }
    }

    fn store(&self) -> ImageStore {
        ImageStore::open(self.root.join("store")).unwrap()
    }

    fn write(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.root.join(name);
        fs::write(&path, bytes).unwrap();
        path.display().to_string()
    }

    /// Every path under the scratch directory outside the store: what an unpack must not touch.
    fn outside_store(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.root).unwrap().flatten() {
            if entry.file_name() != "store" {
                found.push(entry.path());
            }
        }
        found.sort();
        found
    }
}

fn base_layer() -> Vec<u8> {
    tar_of(&[
        Entry::Dir("./", 0o755),
        Entry::Dir("./bin/", 0o755),
        Entry::File("./bin/busybox", 0o755, b"#!busybox"),
        Entry::Symlink("./bin/sh", "busybox"),
        Entry::Symlink("./bin/abs", "/bin/busybox"),
        Entry::HardLink("./bin/ls", "./bin/busybox"),
        Entry::File("./bin/su", 0o4755, b"setuid"),
        Entry::Dir("./etc/", 0o755),
        Entry::File("./etc/motd", 0o644, b"hello\n"),
        Entry::Dir("./readonly/", 0o555),
        Entry::File("./readonly/inside", 0o444, b"x"),
        Entry::Char("./dev/null"),
        Entry::Dir("./opaque/", 0o755),
        Entry::File("./opaque/old", 0o644, b"lower"),
    ])
}

#[test]
fn a_rootfs_tarball_unpacks_without_devices_or_setuid_bits() {
    let scratch = Scratch::new();
    let source = scratch.write("rootfs.tar.gz", &gzip(&base_layer()));
    let source = ImageSource::parse(&source).unwrap();
    assert_eq!(source.kind, super::source::SourceKind::RootfsTarball);
    let image = scratch.store().unpack(&source).unwrap();
    let root = &image.rootfs;
    assert_eq!(fs::read(root.join("etc/motd")).unwrap(), b"hello\n");
    assert_eq!(
        fs::read_link(root.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    assert_eq!(
        fs::metadata(root.join("bin/ls")).unwrap().ino(),
        fs::metadata(root.join("bin/busybox")).unwrap().ino(),
        "the hard link is a link"
    );
    let su = fs::metadata(root.join("bin/su"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(su & 0o7777, 0o755, "setuid dropped: {su:o}");
    assert!(!root.join("dev/null").exists(), "no device node made");
    let readonly = fs::metadata(root.join("readonly"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        readonly & 0o777,
        0o555,
        "directory modes applied at the end"
    );
    assert_eq!(image.special_skipped, 1);
    assert_eq!(image.setid_dropped, 1);
    assert_eq!(image.files, 5, "hard links are not files of their own");
    assert_eq!(image.digest, digest(&fs::read(&source.path).unwrap()));
}

#[test]
fn hostile_entries_are_refused_by_name_and_nothing_lands_outside_the_store() {
    let scratch = Scratch::new();
    let victim = scratch.root.join("victim");
    fs::create_dir(&victim).unwrap();
    let victim_text = victim.display().to_string();
    let cases: Vec<(&str, Vec<Entry>, &str)> = vec![
        (
            "absolute",
            vec![Entry::File("/etc/evil", 0o644, b"x")],
            "absolute",
        ),
        (
            "dotdot",
            vec![Entry::File("./a/../../evil", 0o644, b"x")],
            "`..`",
        ),
        (
            "through-symlink",
            vec![
                Entry::Symlink("./escape", &victim_text),
                Entry::File("./escape/evil", 0o644, b"x"),
            ],
            "through a symlink",
        ),
        (
            "climbing-symlink",
            vec![
                Entry::Dir("./a/", 0o755),
                Entry::Symlink("./a/up", "../../.."),
            ],
            "points out of the image",
        ),
        (
            "outside-hardlink",
            vec![Entry::HardLink("./passwd", "../../../etc/passwd")],
            "hard link points out",
        ),
    ];
    let store = scratch.store();
    for (name, entries, expected) in cases {
        let before = scratch.outside_store();
        let path = scratch.write(&format!("{name}.tar"), &tar_of(&entries));
        let error = store
            .unpack(&ImageSource::parse(&path).unwrap())
            .unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, ImageError::Refused { .. }) && text.contains(expected),
            "{name}: {text}"
        );
        let mut after = scratch.outside_store();
        after.retain(|p| !p.ends_with(format!("{name}.tar")));
        assert_eq!(after, before, "{name}: nothing new outside the store");
        assert_eq!(
            fs::read_dir(&victim).unwrap().count(),
            0,
            "{name}: victim untouched"
        );
        assert_eq!(
            fs::read_dir(scratch.root.join("store")).unwrap().count(),
            1,
            "{name}: only tmp/ in the store, no half image"
        );
    }
}

#[test]
fn an_oci_layout_applies_its_layers_with_whiteouts() {
    let scratch = Scratch::new();
    let upper = tar_of(&[
        Entry::File("./etc/.wh.motd", 0o644, b""),
        Entry::Dir("./opaque/", 0o755),
        Entry::File("./opaque/.wh..wh..opq", 0o644, b""),
        Entry::File("./opaque/new", 0o644, b"upper"),
        Entry::File("./etc/added", 0o644, b"added"),
    ]);
    let dir = scratch.root.join("layout");
    let digests = layout(&dir, &[("latest", vec![base_layer(), upper])]);
    let image = scratch
        .store()
        .unpack(&ImageSource::parse(dir.to_str().unwrap()).unwrap())
        .unwrap();
    assert_eq!(image.digest, digests[0]);
    let root = &image.rootfs;
    assert!(!root.join("etc/motd").exists(), "whited out");
    assert_eq!(fs::read(root.join("etc/added")).unwrap(), b"added");
    assert!(
        !root.join("opaque/old").exists(),
        "opaque directory hides the lower layer"
    );
    assert_eq!(fs::read(root.join("opaque/new")).unwrap(), b"upper");
    assert_eq!(fs::read(root.join("bin/busybox")).unwrap(), b"#!busybox");
}

#[test]
fn a_layout_with_several_images_needs_a_name_and_a_corrupt_blob_is_named() {
    let scratch = Scratch::new();
    let dir = scratch.root.join("layout");
    let digests = layout(
        &dir,
        &[
            ("one", vec![base_layer()]),
            ("two", vec![tar_of(&[Entry::File("./two", 0o644, b"2")])]),
        ],
    );
    let store = scratch.store();
    let text = dir.display().to_string();
    let error = store
        .unpack(&ImageSource::parse(&text).unwrap())
        .unwrap_err();
    assert!(
        matches!(error, ImageError::Ambiguous { count: 2, .. })
            && error.to_string().contains("one, two"),
        "{error}"
    );
    let two = store
        .unpack(&ImageSource::parse(&format!("{text}:two")).unwrap())
        .unwrap();
    assert_eq!(two.digest, digests[1]);
    assert!(two.rootfs.join("two").exists());
    let error = store
        .unpack(&ImageSource::parse(&format!("{text}:three")).unwrap())
        .unwrap_err();
    assert!(
        error.to_string().contains("no image named \"three\""),
        "{error}"
    );

    // Flip a byte of image one's layer blob: its digest no longer matches.
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("blobs/sha256").join(&digests[0][7..])).unwrap())
            .unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let blob = dir.join("blobs/sha256").join(&layer[7..]);
    let mut bytes = fs::read(&blob).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    fs::write(&blob, bytes).unwrap();
    let error = store
        .unpack(&ImageSource::parse(&format!("{text}:one")).unwrap())
        .unwrap_err();
    assert!(
        matches!(error, ImageError::Corrupt { .. }) && error.to_string().contains(layer),
        "{error}"
    );
}

#[test]
fn a_digest_that_is_a_path_is_refused() {
    let scratch = Scratch::new();
    let dir = scratch.root.join("layout");
    layout(&dir, &[("x", vec![base_layer()])]);
    fs::write(
        dir.join("index.json"),
        br#"{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:../../../../etc/passwd","size":1}]}"#,
    )
    .unwrap();
    let error = scratch
        .store()
        .unpack(&ImageSource::parse(dir.to_str().unwrap()).unwrap())
        .unwrap_err();
    assert!(
        error.to_string().contains("is not a sha256 digest"),
        "{error}"
    );
}

#[test]
fn an_oci_archive_is_the_same_image_as_its_layout() {
    let scratch = Scratch::new();
    let dir = scratch.root.join("layout");
    let digests = layout(&dir, &[("latest", vec![base_layer()])]);
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_dir_all(".", &dir).unwrap();
    let archive = scratch.write("image.oci.tar", &builder.into_inner().unwrap());
    let source = ImageSource::parse(&archive).unwrap();
    assert_eq!(source.kind, super::source::SourceKind::OciArchive);
    let image = scratch.store().unpack(&source).unwrap();
    assert_eq!(image.digest, digests[0]);
    assert_eq!(fs::read(image.rootfs.join("etc/motd")).unwrap(), b"hello\n");
}

#[test]
fn a_directory_is_copied_once_per_content_and_a_climbing_symlink_is_refused() {
    let scratch = Scratch::new();
    let dir = scratch.root.join("rootfs");
    fs::create_dir_all(dir.join("usr/bin")).unwrap();
    fs::write(dir.join("usr/bin/tool"), b"tool").unwrap();
    std::os::unix::fs::symlink("usr/bin", dir.join("bin")).unwrap();
    let store = scratch.store();
    let source = ImageSource::parse(dir.to_str().unwrap()).unwrap();
    let first = store.unpack(&source).unwrap();
    assert_eq!(fs::read(first.rootfs.join("bin/tool")).unwrap(), b"tool");
    let again = store.unpack(&source).unwrap();
    assert_eq!(again, first, "same content, same stored image");
    fs::write(dir.join("usr/bin/tool"), b"changed").unwrap();
    let changed = store.unpack(&source).unwrap();
    assert_ne!(changed.digest, first.digest);
    assert_eq!(
        fs::read(first.rootfs.join("bin/tool")).unwrap(),
        b"tool",
        "the first stays"
    );

    std::os::unix::fs::symlink("../../../../etc", dir.join("usr/escape")).unwrap();
    let error = store.unpack(&source).unwrap_err();
    assert!(error.to_string().contains("usr/escape"), "{error}");
}

#[test]
fn concurrent_registrations_of_one_image_leave_one_copy_and_a_crash_leaves_nothing() {
    let scratch = Scratch::new();
    let source = scratch.write("rootfs.tar", &base_layer());
    let source = ImageSource::parse(&source).unwrap();
    let store = std::sync::Arc::new(scratch.store());
    let images: Vec<_> = (0..4)
        .map(|_| {
            let (store, source) = (store.clone(), source.clone());
            std::thread::spawn(move || store.unpack(&source).unwrap())
        })
        .map(|t| t.join().unwrap())
        .collect();
    assert!(images.windows(2).all(|w| w[0] == w[1]));
    let entries: Vec<_> = fs::read_dir(scratch.root.join("store"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(entries.len(), 2, "one image and tmp/: {entries:?}");

    // An unpack cut short leaves its work under tmp/, which the next open clears.
    let leftover = scratch.root.join("store/tmp/interrupted/rootfs/readonly");
    fs::create_dir_all(&leftover).unwrap();
    fs::set_permissions(&leftover, fs::Permissions::from_mode(0o555)).unwrap();
    scratch.store();
    assert_eq!(
        fs::read_dir(scratch.root.join("store/tmp"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn a_missing_source_and_a_file_that_is_no_archive_are_named() {
    let scratch = Scratch::new();
    let missing = scratch.root.join("nope").display().to_string();
    let error = ImageSource::parse(&missing).unwrap_err();
    assert!(
        error.to_string().contains("no such file") && error.to_string().contains("nope"),
        "{error}"
    );
    let junk = scratch.write(
        "junk.tar",
        b"this is not a tar archive at all, just some text",
    );
    let error = ImageSource::parse(&junk).unwrap_err();
    assert!(error.to_string().contains("junk.tar"), "{error}");
}

#[test]
fn an_image_past_the_size_or_entry_bounds_is_refused_naming_the_entry() {
    use super::unpack::{apply_tar, Writer};
    let scratch = Scratch::new();
    let big = vec![7u8; 300];
    let layer = tar_of(&[
        Entry::Dir("etc/", 0o755),
        Entry::File("etc/big", 0o644, &big),
    ]);
    let mut writer = Writer::new(&scratch.root.join("a"))
        .unwrap()
        .with_limits(200, 100);
    let error = apply_tar(&mut writer, std::io::Cursor::new(layer)).unwrap_err();
    assert!(
        matches!(&error, ImageError::TooLarge { entry, .. } if entry == "etc/big")
            && error.to_string().contains("more than 200 bytes"),
        "{error}"
    );

    let many: Vec<Entry> = (0..5).map(|_| Entry::Dir("d/", 0o755)).collect();
    let mut writer = Writer::new(&scratch.root.join("b"))
        .unwrap()
        .with_limits(1 << 20, 3);
    let error = apply_tar(&mut writer, std::io::Cursor::new(tar_of(&many))).unwrap_err();
    assert!(error.to_string().contains("more than 3 entries"), "{error}");
}

#[test]
fn the_store_is_roots_alone() {
    let scratch = Scratch::new();
    let _store = scratch.store();
    let mode = fs::metadata(scratch.root.join("store"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}
