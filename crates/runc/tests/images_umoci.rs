//! The image store against images made by a real OCI tool: umoci wrapping Debian's static
//! busybox, with a second layer that deletes a file (umoci writes the whiteout) and a second tag
//! in the same layout. Skips with a message where umoci or busybox-static is missing, and fails
//! instead under `THREADBOX_REQUIRE_SANDBOXES=1` (`scripts/test.sh` installs both).

use std::path::Path;
use std::process::Command;

use threadbox_runc::image::{ImageError, ImageSource, ImageStore, SourceKind};

const BUSYBOX: &str = "/bin/busybox";

fn tools_present() -> bool {
    let umoci = Command::new("umoci")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let present = umoci && Path::new(BUSYBOX).is_file();
    if !present {
        assert!(
            std::env::var_os("THREADBOX_REQUIRE_SANDBOXES").is_none(),
            "umoci and busybox-static are required (apt-get install umoci busybox-static)"
        );
        eprintln!("skipping: umoci or busybox-static is not installed (apt-get install umoci busybox-static)");
    }
    present
}

fn umoci(args: &[&str]) {
    let mut command = Command::new("umoci");
    if !rustix::process::geteuid().is_root() {
        command.arg("--rootless");
    }
    let output = command.args(args).output().expect("umoci runs");
    assert!(
        output.status.success(),
        "umoci {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_busybox_image_made_by_umoci_unpacks_and_runs() {
    if !tools_present() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let layout = scratch.path().join("layout");
    let bundle = scratch.path().join("bundle");
    let image = format!("{}:tiny", layout.display());
    umoci(&["init", "--layout", layout.to_str().unwrap()]);
    umoci(&["new", "--image", &image]);
    umoci(&["unpack", "--image", &image, bundle.to_str().unwrap()]);
    let rootfs = bundle.join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::copy(BUSYBOX, rootfs.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh")).unwrap();
    std::fs::write(rootfs.join("etc/gone"), "deleted by the second layer").unwrap();
    umoci(&["repack", "--image", &image, bundle.to_str().unwrap()]);
    std::fs::remove_file(rootfs.join("etc/gone")).unwrap();
    std::fs::write(rootfs.join("etc/motd"), "from the second layer\n").unwrap();
    umoci(&["repack", "--image", &image, bundle.to_str().unwrap()]);
    umoci(&["tag", "--image", &image, "other"]);

    let store = ImageStore::open(scratch.path().join("store")).unwrap();
    let error = store
        .unpack(&ImageSource::parse(layout.to_str().unwrap()).unwrap())
        .unwrap_err();
    assert!(
        matches!(error, ImageError::Ambiguous { count: 2, .. })
            && error.to_string().contains("tiny"),
        "two tags and no name: {error}"
    );

    let source = ImageSource::parse(&image).unwrap();
    assert_eq!(source.kind, SourceKind::OciLayout);
    let stored = store.unpack(&source).unwrap();
    let root = &stored.rootfs;
    assert!(!root.join("etc/gone").exists(), "umoci's whiteout applied");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/motd")).unwrap(),
        "from the second layer\n"
    );
    let output = Command::new(root.join("bin/sh"))
        .args(["-c", "echo unpacked"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "unpacked\n",
        "the unpacked busybox runs"
    );

    // The same image under its other tag: one copy in the store.
    let other = store
        .unpack(&ImageSource::parse(&format!("{}:other", layout.display())).unwrap())
        .unwrap();
    assert_eq!(other, stored);
    assert!(
        stored.digest.starts_with("sha256:") && stored.bytes > 500_000,
        "{stored:?}"
    );
}
