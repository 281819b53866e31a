//! Sandboxes that start from a registered image, through the real provider and runc: the image's
//! root under a writable layer of each sandbox's own. The image here is Debian's static busybox
//! as a plain root filesystem directory (made in the test; `runc_images_debian.rs` does the same
//! with a Debian image and its package manager). Needs root (images need an overlay and an
//! idmapped mount); skips with a message elsewhere, and fails instead under
//! `THREADBOX_REQUIRE_SANDBOXES=1`.

#[path = "support/images.rs"]
mod images;
#[path = "support/sandboxes.rs"]
mod sandboxes;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use threadbox_core::domain::{ImageName, ImageSetup};
use threadbox_core::ports::{
    ExecCommand, ExecRequest, ExecResult, ProviderError, SandboxProvider, SandboxUser,
};
use threadbox_runc::{DiskQuota, ImageRegistration, RuncConfig, RuncProvider};
use threadbox_testing::provider_conformance::{create_request, fresh_owner};

use images::{busybox_root, BUSYBOX};
use sandboxes::{require_or_skip, runc_or_skip, state_config, KillAll};

struct World {
    provider: RuncProvider,
    image_root: PathBuf,
    _kill: KillAll,
    dir: tempfile::TempDir,
}

async fn world(setup: Option<ImageSetup>, quota: Option<DiskQuota>) -> Option<World> {
    let runc = runc_or_skip("image sandboxes")?;
    if !rustix::process::geteuid().is_root() {
        return require_or_skip("image sandboxes", "images need root".into());
    }
    if !Path::new(BUSYBOX).is_file() {
        return require_or_skip(
            "image sandboxes",
            "busybox-static is not installed (apt-get install busybox-static)".into(),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let image_root = busybox_root(dir.path());
    let mut config: RuncConfig = state_config(dir.path(), runc);
    config.limits.disk = quota;
    config.images = vec![ImageRegistration {
        name: ImageName::parse("busybox").unwrap(),
        source: image_root.display().to_string(),
        setup,
    }];
    let provider = RuncProvider::open(config.clone()).await.expect("open");
    Some(World {
        provider,
        image_root,
        _kill: KillAll(config),
        dir,
    })
}

fn busybox() -> ImageName {
    ImageName::parse("busybox").unwrap()
}

async fn create(p: &RuncProvider, image: ImageName) -> Result<String, ProviderError> {
    let mut request = create_request(fresh_owner(1));
    request.image = image;
    p.create(request).await.map(|c| c.sandbox_id)
}

fn shell(cmd: &str, user: SandboxUser) -> ExecRequest {
    ExecRequest {
        command: ExecCommand::Shell(cmd.into()),
        cwd: None,
        env: BTreeMap::new(),
        stdin: None,
        timeout: Duration::from_secs(30),
        output_cap: 64 * 1024,
        user,
    }
}

async fn run(p: &RuncProvider, id: &str, cmd: &str, user: SandboxUser) -> ExecResult {
    p.exec(id, shell(cmd, user)).await.expect("exec")
}

async fn ok(p: &RuncProvider, id: &str, cmd: &str, user: SandboxUser) -> String {
    let result = run(p, id, cmd, user).await;
    assert_eq!(
        result.exit_code,
        Some(0),
        "{cmd} as {user:?}: {}{}",
        result.stdout,
        result.stderr
    );
    result.stdout
}

fn mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let path = path.to_str().unwrap();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(path)))
}

#[tokio::test]
async fn an_image_sandbox_runs_the_images_files_as_its_own_users_with_a_writable_root() {
    let Some(w) = world(
        None,
        Some(DiskQuota {
            bytes: 64 << 20,
            inodes: 20_000,
        }),
    )
    .await
    else {
        return;
    };
    let p = &w.provider;
    let listed = p.images();
    assert_eq!(listed[0].name.as_str(), "host");
    assert_eq!(listed[1].name.as_str(), "busybox");
    assert!(listed[1].digest.as_deref().unwrap().starts_with("sha256:"));
    assert!(listed[1].size_bytes.unwrap() > 500_000, "{listed:?}");

    let id = create(p, busybox()).await.expect("create from the image");
    // The image's files, not the host's: the host has no /etc/motd of this text, and busybox
    // answers for `sh`.
    assert_eq!(
        ok(p, &id, "cat /etc/motd", SandboxUser::User).await,
        "from the image\n"
    );
    assert!(ok(p, &id, "readlink /bin/sh", SandboxUser::User)
        .await
        .contains("busybox"));
    // The sandbox's users: `user` replaced the image's uid 1000, root is the image's.
    assert_eq!(
        ok(p, &id, "id -u; whoami; echo ~", SandboxUser::User).await,
        "1000\nuser\n/home/user\n"
    );
    assert_eq!(
        ok(p, &id, "id -u; whoami", SandboxUser::Root).await,
        "0\nroot\n"
    );
    // The image's root-owned files are root's inside (the idmapped layer), so the user cannot
    // write /usr/local and root can.
    assert_eq!(
        ok(
            p,
            &id,
            "stat -c %u:%g /usr/local/bin /etc/motd",
            SandboxUser::User
        )
        .await,
        "0:0\n0:0\n"
    );
    let denied = run(p, &id, "echo x > /usr/local/bin/tool", SandboxUser::User).await;
    assert_ne!(
        denied.exit_code,
        Some(0),
        "the user wrote root's /usr/local"
    );
    ok(
        p,
        &id,
        "printf '#!/bin/sh\\necho installed\\n' > /usr/local/bin/tool && chmod 755 /usr/local/bin/tool \
         && chown 1000:1000 /opt && echo changed > /etc/motd",
        SandboxUser::Root,
    )
    .await;
    assert_eq!(ok(p, &id, "tool", SandboxUser::User).await, "installed\n");
    ok(p, &id, "echo mine > /opt/note", SandboxUser::User).await;

    // Kept across pause and resume.
    p.pause(&id).await.unwrap();
    p.connect(&id).await.unwrap();
    assert_eq!(
        ok(p, &id, "tool; cat /opt/note /etc/motd", SandboxUser::User).await,
        "installed\nmine\nchanged\n"
    );

    // Never in the shared image, never in another sandbox of it.
    assert!(!w.image_root.join("usr/local/bin/tool").exists());
    let store = w.dir.path().join("state/images");
    let stored: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("rootfs").is_dir())
        .collect();
    assert_eq!(stored.len(), 1, "one unpacked copy: {stored:?}");
    assert!(!stored[0].join("rootfs/usr/local/bin/tool").exists());
    assert_eq!(
        std::fs::read_to_string(stored[0].join("rootfs/etc/motd")).unwrap(),
        "from the image\n"
    );
    let other = create(p, busybox()).await.unwrap();
    let missing = run(
        p,
        &other,
        "test -e /usr/local/bin/tool || echo absent; cat /etc/motd",
        SandboxUser::User,
    )
    .await;
    assert_eq!(missing.stdout, "absent\nfrom the image\n");

    // Writes anywhere count against the one disk quota, and the quota holds.
    let before = p.info(&id).await.unwrap().disk.unwrap();
    ok(
        p,
        &id,
        "dd if=/dev/zero of=/opt/ten bs=1M count=10 2>/dev/null && sync",
        SandboxUser::Root,
    )
    .await;
    let after = p.info(&id).await.unwrap().disk.unwrap();
    assert!(
        after.used_bytes >= before.used_bytes + (9 << 20),
        "{before:?} -> {after:?}"
    );
    let full = run(
        p,
        &id,
        "dd if=/dev/zero of=/var/lib/big bs=1M count=100",
        SandboxUser::Root,
    )
    .await;
    assert_ne!(full.exit_code, Some(0));
    assert!(full.stderr.contains("No space left"), "{}", full.stderr);

    // Nothing of it outlives the sandbox: no mount, no bundle.
    let bundle = w.dir.path().join("state/sandboxes").join(&id);
    assert!(mounted(&bundle));
    p.kill(&id).await.unwrap();
    p.kill(&other).await.unwrap();
    assert!(!mounted(&bundle), "a mount of the bundle outlived it");
    assert!(!bundle.exists());
}

#[tokio::test]
async fn an_image_root_gains_nothing_from_setuid_or_device_files() {
    let Some(w) = world(
        None,
        Some(DiskQuota {
            bytes: 64 << 20,
            inodes: 20_000,
        }),
    )
    .await
    else {
        return;
    };
    let p = &w.provider;
    let id = create(p, busybox()).await.unwrap();
    let root_mount = ok(
        p,
        &id,
        "grep ' / / ' /proc/self/mountinfo",
        SandboxUser::User,
    )
    .await;
    assert!(
        root_mount.contains("nosuid")
            && root_mount.contains("nodev")
            && root_mount.contains("overlay"),
        "{root_mount}"
    );
    // Nor does it name where the sandbox lives on the host.
    let state = w.dir.path().to_str().unwrap();
    let mounts = ok(p, &id, "cat /proc/self/mountinfo", SandboxUser::User).await;
    assert!(!mounts.contains(state), "{mounts}");
    // The sandbox's root cannot make device nodes (no CAP_MKNOD, and the mount is nodev).
    let mknod = run(p, &id, "mknod /opt/mem c 1 1", SandboxUser::Root).await;
    assert_ne!(mknod.exit_code, Some(0), "root made a device node");
    // A setuid program root installs runs with its caller's ids: the mount is nosuid.
    if let Some(probe) = euid_probe(w.dir.path()) {
        let bytes = std::fs::read(&probe).unwrap();
        p.write_file(&id, "/tmp/euid", &bytes).await.unwrap();
        ok(
            p,
            &id,
            "cp /tmp/euid /usr/local/bin/euid && chown 0:0 /usr/local/bin/euid && chmod 4755 /usr/local/bin/euid",
            SandboxUser::Root,
        )
        .await;
        assert_eq!(
            ok(p, &id, "stat -c %a /usr/local/bin/euid", SandboxUser::User).await,
            "4755\n"
        );
        assert_eq!(
            ok(p, &id, "/usr/local/bin/euid", SandboxUser::User).await,
            "1000\n"
        );
    }
    p.kill(&id).await.unwrap();
}

/// A static program printing its effective uid (busybox drops setuid by itself, so it would
/// prove nothing); `None` with a message where no C compiler can build one.
fn euid_probe(dir: &Path) -> Option<PathBuf> {
    let source = dir.join("euid.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include <unistd.h>\nint main(void){printf(\"%d\\n\",(int)geteuid());return 0;}\n",
    )
    .unwrap();
    let out = dir.join("euid");
    let built = std::process::Command::new("cc")
        .args(["-static", "-O1", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        eprintln!("SKIPPED the setuid probe: cc -static could not build it");
        return None;
    }
    Some(out)
}

#[tokio::test]
async fn a_set_up_step_runs_before_the_first_command_and_its_failure_fails_the_create() {
    let setup = ImageSetup {
        files: BTreeMap::from([
            (
                "/home/user/.config/agent.toml".to_owned(),
                "model = \"x\"\n".to_owned(),
            ),
            ("/etc/agent/prompt.md".to_owned(), "be brief\n".to_owned()),
        ]),
        run: Some(
            "mkdir -p /opt/tools && echo ready > /opt/tools/state && id -u > /opt/tools/who".into(),
        ),
        user: SandboxUser::Root,
        timeout_secs: 30,
    };
    let Some(w) = world(Some(setup), None).await else {
        return;
    };
    let p = &w.provider;
    assert!(p.images()[1].setup);
    let id = create(p, busybox()).await.unwrap();
    assert_eq!(
        ok(p, &id, "cat ~/.config/agent.toml /etc/agent/prompt.md /opt/tools/state /opt/tools/who; stat -c %u ~/.config/agent.toml /etc/agent/prompt.md", SandboxUser::User).await,
        "model = \"x\"\nbe brief\nready\n0\n1000\n0\n"
    );
    p.kill(&id).await.unwrap();
    drop(w);

    let failing = ImageSetup {
        run: Some("echo fetching; echo 'no such package' >&2; exit 3".into()),
        ..ImageSetup::default()
    };
    let Some(w) = world(Some(failing), None).await else {
        return;
    };
    let error = create(&w.provider, busybox()).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("image busybox's set-up failed")
            && text.contains("exited 3")
            && text.contains("no such package"),
        "{text}"
    );
    let left = std::fs::read_dir(w.dir.path().join("state/sandboxes"))
        .unwrap()
        .count();
    assert_eq!(left, 0, "a sandbox whose set-up failed was left behind");

    let slow = ImageSetup {
        run: Some("sleep 30".into()),
        timeout_secs: 1,
        ..ImageSetup::default()
    };
    let Some(w) = world(Some(slow), None).await else {
        return;
    };
    let text = create(&w.provider, busybox())
        .await
        .unwrap_err()
        .to_string();
    assert!(text.contains("ran past its timeout of 1s"), "{text}");
}

#[tokio::test]
async fn unknown_images_and_bad_registrations_are_refused_naming_them() {
    let Some(w) = world(None, None).await else {
        return;
    };
    let error = create(&w.provider, ImageName::parse("nope").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(error, ProviderError::InvalidRequest(_)));
    assert!(
        error.to_string().contains("\"nope\"") && error.to_string().contains("host, busybox"),
        "{error}"
    );

    let runc = runc_or_skip("image sandboxes").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = state_config(dir.path(), runc.clone());
    config.images = vec![ImageRegistration {
        name: ImageName::parse("ghost").unwrap(),
        source: "/nonexistent/image.tar".into(),
        setup: None,
    }];
    let error = RuncProvider::open(config)
        .await
        .err()
        .expect("a missing source is refused");
    assert!(
        error.to_string().contains("image ghost")
            && error.to_string().contains("/nonexistent/image.tar"),
        "{error}"
    );

    let mut config = state_config(dir.path(), runc);
    config.images = vec![ImageRegistration {
        name: ImageName::host(),
        source: w.image_root.display().to_string(),
        setup: None,
    }];
    let error = RuncProvider::open(config)
        .await
        .err()
        .expect("host is taken");
    assert!(error.to_string().contains("\"host\""), "{error}");
}
