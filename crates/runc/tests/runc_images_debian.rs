//! A Debian image made here with `mmdebstrap` (minbase, from the Debian mirror the machine
//! reaches; `scripts/test.sh` builds it once and keeps it in `target/test-images/`, naming it in
//! `THREADBOX_TEST_DEBIAN_IMAGE`), run through the real provider: Debian's own tools in the
//! sandbox, a package installed with `apt-get` as the sandbox's root and run by its user, and a
//! setuid copy of a Debian binary that gains nothing. The package is built on the host with
//! `dpkg-deb`, so nothing leaves the machine. Skips with a message where the image was not made,
//! and fails instead under `THREADBOX_REQUIRE_SANDBOXES=1`.

#[path = "support/sandboxes.rs"]
mod sandboxes;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use threadbox_core::domain::ImageName;
use threadbox_core::ports::{ExecCommand, ExecRequest, ExecResult, SandboxProvider, SandboxUser};
use threadbox_runc::{ImageRegistration, RuncProvider};
use threadbox_testing::provider_conformance::{create_request, fresh_owner};

use sandboxes::{require_or_skip, runc_or_skip, state_config, KillAll};

const IMAGE_VAR: &str = "THREADBOX_TEST_DEBIAN_IMAGE";

fn debian_image() -> Option<PathBuf> {
    match std::env::var_os(IMAGE_VAR).map(PathBuf::from) {
        Some(path) if path.is_file() => Some(path),
        Some(path) => require_or_skip(
            "the Debian image test",
            format!("{IMAGE_VAR} names {}, which is not there", path.display()),
        ),
        None => require_or_skip(
            "the Debian image test",
            format!(
                "{IMAGE_VAR} is not set: scripts/test.sh builds the image with mmdebstrap \
                 (apt-get install mmdebstrap) and sets it"
            ),
        ),
    }
}

/// A Debian package of one script, `/usr/bin/tb-hello`, built with `dpkg-deb`.
fn hello_package(dir: &Path) -> PathBuf {
    let root = dir.join("pkg");
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        "Package: tb-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: threadbox tests <t@example.invalid>\nDescription: says hello\n",
    )
    .unwrap();
    let script = root.join("usr/bin/tb-hello");
    std::fs::write(&script, "#!/bin/sh\necho hello from a package\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let deb = dir.join("tb-hello.deb");
    let status = std::process::Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&root)
        .arg(&deb)
        .output()
        .expect("dpkg-deb runs");
    assert!(status.status.success(), "{status:?}");
    deb
}

fn shell(cmd: &str, user: SandboxUser) -> ExecRequest {
    ExecRequest {
        command: ExecCommand::Shell(cmd.into()),
        cwd: None,
        env: BTreeMap::new(),
        stdin: None,
        timeout: Duration::from_secs(120),
        output_cap: 64 * 1024,
        user,
    }
}

async fn ok(p: &RuncProvider, id: &str, cmd: &str, user: SandboxUser) -> String {
    let result: ExecResult = p.exec(id, shell(cmd, user)).await.expect("exec");
    assert_eq!(
        result.exit_code,
        Some(0),
        "{cmd} as {user:?}: {}{}",
        result.stdout,
        result.stderr
    );
    result.stdout
}

#[tokio::test]
async fn apt_installs_into_a_debian_sandbox_as_its_root_and_nowhere_else() {
    let Some(runc) = runc_or_skip("the Debian image test") else {
        return;
    };
    let Some(image) = debian_image() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = state_config(dir.path(), runc);
    config.images = vec![ImageRegistration {
        name: ImageName::parse("debian").unwrap(),
        source: image.display().to_string(),
        setup: None,
    }];
    let _kill = KillAll(config.clone());
    let p = RuncProvider::open(config)
        .await
        .expect("open with the Debian image");
    let new_sandbox = || async {
        let mut request = create_request(fresh_owner(1));
        request.image = ImageName::parse("debian").unwrap();
        p.create(request).await.expect("create").sandbox_id
    };
    let id = new_sandbox().await;
    assert!(ok(&p, &id, "cat /etc/debian_version", SandboxUser::User)
        .await
        .starts_with("12."));
    assert_eq!(
        ok(
            &p,
            &id,
            "id -un; getent passwd user | cut -d: -f6",
            SandboxUser::User
        )
        .await,
        "user\n/home/user\n"
    );

    let deb = std::fs::read(hello_package(dir.path())).unwrap();
    p.write_file(&id, "/tmp/tb-hello.deb", &deb).await.unwrap();
    let refused = p
        .exec(&id, shell("dpkg -i /tmp/tb-hello.deb", SandboxUser::User))
        .await
        .unwrap();
    assert_ne!(refused.exit_code, Some(0), "the user installed a package");
    ok(
        &p,
        &id,
        "apt-get install -y -q /tmp/tb-hello.deb && useradd -m builder && echo builder made",
        SandboxUser::Root,
    )
    .await;
    assert_eq!(
        ok(
            &p,
            &id,
            "tb-hello; dpkg-query -W -f '${Status}' tb-hello",
            SandboxUser::User
        )
        .await,
        "hello from a package\ninstall ok installed"
    );
    p.pause(&id).await.unwrap();
    p.connect(&id).await.unwrap();
    assert_eq!(
        ok(&p, &id, "tb-hello; id -u builder", SandboxUser::User).await,
        "hello from a package\n1001\n"
    );

    // A setuid copy of Debian's perl, made by the sandbox's root, runs as its caller.
    ok(
        &p,
        &id,
        "cp /usr/bin/perl /usr/local/bin/sperl && chmod 4755 /usr/local/bin/sperl",
        SandboxUser::Root,
    )
    .await;
    assert_eq!(
        ok(
            &p,
            &id,
            "/usr/local/bin/sperl -e 'print $>'",
            SandboxUser::User
        )
        .await,
        "1000"
    );

    let other = new_sandbox().await;
    assert_eq!(
        ok(&p, &id.clone(), "true", SandboxUser::User).await,
        "",
        "the first sandbox still answers"
    );
    let absent = p
        .exec(
            &other,
            shell("command -v tb-hello || echo absent", SandboxUser::User),
        )
        .await
        .unwrap();
    assert_eq!(absent.stdout, "absent\n");
    p.kill(&id).await.unwrap();
    p.kill(&other).await.unwrap();
}
