//! Images the runc tests make: a root filesystem of Debian's static busybox.

#![allow(dead_code)] // each test that includes this uses part of it

use std::path::{Path, PathBuf};

pub const BUSYBOX: &str = "/bin/busybox";

/// A root filesystem of busybox and its applets, with a root-owned `/usr/local/bin`.
pub fn busybox_root(dir: &Path) -> PathBuf {
    let root = dir.join("busybox-root");
    for sub in ["bin", "etc", "usr/local/bin", "opt", "var/lib"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::copy(BUSYBOX, root.join("bin/busybox")).unwrap();
    let applets = std::process::Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .unwrap();
    for applet in String::from_utf8_lossy(&applets.stdout).lines() {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
        }
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nubuntu:x:1000:1000::/home/ubuntu:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    std::fs::write(root.join("etc/motd"), "from the image\n").unwrap();
    root
}
