//! Images end to end: the real `threadbox dev` on runc with an image made here by `umoci` (Debian's
//! static busybox, an OCI image layout) registered with a set-up step and made the default, driven
//! over HTTP and the CLI. The listing, a warm pool member of the image (set up before it is
//! taken), a thread on the image and one on the host's `/usr`, root's writes to the image's root,
//! the 400 for an unknown name, the 409 for another name later, and a change that reaches the
//! thread's next sandbox. The Debian image and `apt` are `crates/runc/tests/runc_images_debian.rs`.
//!
//! Needs root, runc, umoci and busybox-static; skipped without them, or failed when
//! `THREADBOX_REQUIRE_SANDBOXES` is set.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{cli_command, dev_missing, prerequisites_met, text, DevServer};

const BUSYBOX: &str = "/bin/busybox";

fn umoci(args: &[&str]) {
    let output = Command::new("umoci")
        .args(args)
        .output()
        .expect("umoci runs");
    assert!(
        output.status.success(),
        "umoci {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// An OCI image layout at `dir/layout`, tag `tiny`: busybox, its applets, a `/etc/motd` and a
/// root-owned `/usr/local/bin`.
fn busybox_layout(dir: &Path) -> String {
    let layout = dir.join("layout");
    let bundle = dir.join("bundle");
    let image = format!("{}:tiny", layout.display());
    umoci(&["init", "--layout", layout.to_str().unwrap()]);
    umoci(&["new", "--image", &image]);
    umoci(&["unpack", "--image", &image, bundle.to_str().unwrap()]);
    let rootfs = bundle.join("rootfs");
    for sub in ["bin", "etc", "usr/local/bin", "opt"] {
        std::fs::create_dir_all(rootfs.join(sub)).unwrap();
    }
    std::fs::copy(BUSYBOX, rootfs.join("bin/busybox")).unwrap();
    let applets = Command::new(BUSYBOX).arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&applets.stdout).lines() {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
        }
    }
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(rootfs.join("etc/motd"), "from the image\n").unwrap();
    umoci(&["repack", "--image", &image, bundle.to_str().unwrap()]);
    image
}

fn missing() -> Vec<String> {
    let mut missing = dev_missing();
    let umoci = Command::new("umoci")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !umoci {
        missing.push("umoci (apt-get install umoci)".into());
    }
    if !Path::new(BUSYBOX).is_file() {
        missing.push("busybox-static (apt-get install busybox-static)".into());
    }
    missing
}

async fn exec(dev: &DevServer, thread: &str, body: Value) -> Value {
    let out = dev
        .post(&format!("/v1/threads/{thread}/exec"), Some(body.clone()))
        .await;
    assert_eq!(out["exit_code"], 0, "{body}: {out}");
    out
}

async fn stdout(dev: &DevServer, thread: &str, cmd: &str) -> String {
    exec(dev, thread, json!({ "cmd": cmd })).await["stdout"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// POST a body and return the status and the JSON answer, whatever the status.
async fn post_raw(dev: &DevServer, path: &str, body: Value) -> (u16, Value) {
    let response = dev
        .http
        .post(format!("{}{path}", dev.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_start_from_the_image_they_chose_and_change_it_for_their_next_sandbox() {
    let test = "threads_start_from_the_image_they_chose_and_change_it_for_their_next_sandbox";
    if !prerequisites_met(test, &missing()) {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let image = busybox_layout(scratch.path());
    let setup = scratch.path().join("setup.json");
    std::fs::write(
        &setup,
        json!({
            "files": {"/home/user/.agent/settings.json": "{\"model\": \"x\"}\n"},
            "run": "echo ready > /opt/set-up && id -u >> /opt/set-up",
        })
        .to_string(),
    )
    .unwrap();
    let dev = DevServer::start(&[
        "--image",
        &format!("tiny={image}"),
        "--image-setup",
        &format!("tiny={}", setup.display()),
        "--default-image",
        "tiny",
        "--warm-pool",
        "1",
    ])
    .await;

    let listed = dev.get("/v1/images").await;
    let images = listed["images"].as_array().unwrap();
    assert_eq!(images[0]["name"], "host", "{listed}");
    assert_eq!(images[1]["name"], "tiny", "{listed}");
    assert!(
        images[1]["digest"].as_str().unwrap().starts_with("sha256:"),
        "{listed}"
    );
    assert_eq!(images[1]["setup"], true, "{listed}");
    assert!(
        images[1]["size_bytes"].as_u64().unwrap() > 500_000,
        "{listed}"
    );
    let cli = cli_command(&dev.url, &["images"]).output().await.unwrap();
    assert!(cli.status.success(), "{}", text(&cli.stderr));
    assert!(
        text(&cli.stdout).contains("tiny") && text(&cli.stdout).contains("sha256:"),
        "{}",
        text(&cli.stdout)
    );

    // The default image's pool member, set up before it was taken.
    let deadline = Instant::now() + Duration::from_secs(60);
    while dev.containers().is_empty() {
        assert!(
            Instant::now() < deadline,
            "no pool member; stderr:\n{}",
            dev.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pooled = dev.post("/v1/threads/on-tiny/resolve", None).await;
    assert_eq!(pooled["pooled"], true, "{pooled}");
    assert_eq!(
        stdout(
            &dev,
            "on-tiny",
            "cat /etc/motd /opt/set-up ~/.agent/settings.json; whoami"
        )
        .await,
        "from the image\nready\n0\n{\"model\": \"x\"}\nuser\n"
    );
    assert_eq!(
        dev.get("/v1/threads/on-tiny").await["session"]["image"],
        "tiny"
    );

    // The sandbox's root writes the image's root; the user runs what it put there.
    exec(
        &dev,
        "on-tiny",
        json!({"cmd": "printf '#!/bin/sh\\necho tool\\n' > /usr/local/bin/tool && chmod 755 /usr/local/bin/tool", "user": "root"}),
    )
    .await;
    assert_eq!(stdout(&dev, "on-tiny", "tool").await, "tool\n");
    let (status, _) = post_raw(
        &dev,
        "/v1/threads/on-tiny/exec",
        json!({"cmd": "true", "user": "admin"}),
    )
    .await;
    assert_eq!(status, 400, "an unknown user is refused");

    // A thread on the host's /usr, chosen at its first resolve.
    let host = dev
        .post(
            "/v1/threads/on-host/resolve",
            Some(json!({"image": "host"})),
        )
        .await;
    assert_eq!(host["created"], true, "{host}");
    assert_eq!(
        stdout(&dev, "on-host", "test -e /etc/motd || echo none").await,
        "none\n"
    );

    // Another image later is 409; an unknown one 400 naming those there are, making nothing.
    let (status, body) = post_raw(
        &dev,
        "/v1/threads/on-tiny/resolve",
        json!({"image": "host"}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("/image"), "{body}");
    let before = dev.containers().len();
    let (status, body) = post_raw(
        &dev,
        "/v1/threads/on-ruby/resolve",
        json!({"image": "ruby"}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("host, tiny"), "{body}");
    assert_eq!(
        dev.containers().len(),
        before,
        "nothing made for an unknown image"
    );

    // A change reaches the thread's next sandbox, not the one it has.
    let put = dev
        .http
        .put(format!("{}/v1/threads/on-tiny/image", dev.url))
        .json(&json!({"image": "host"}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 200);
    let put: Value = put.json().await.unwrap();
    assert_eq!(put["applied"], "next_sandbox", "{put}");
    assert_eq!(
        stdout(&dev, "on-tiny", "cat /etc/motd").await,
        "from the image\n"
    );
    dev.post("/v1/threads/on-tiny/reset", None).await;
    assert_eq!(
        stdout(&dev, "on-tiny", "test -e /etc/motd || echo none").await,
        "none\n"
    );
    assert_eq!(
        dev.get("/v1/threads/on-tiny").await["session"]["image"],
        "host"
    );
}

/// A `dpkg-deb`-built package of one script, `/usr/bin/tb-hello`.
fn hello_package(dir: &Path) -> Vec<u8> {
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
    let built = Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&root)
        .arg(&deb)
        .output()
        .expect("dpkg-deb runs");
    assert!(built.status.success(), "{built:?}");
    std::fs::read(deb).unwrap()
}

/// The Debian image `scripts/test.sh` builds with mmdebstrap, through `threadbox dev`: a package
/// uploaded through the file API and installed with `apt-get` as the sandbox's root, a background
/// process of the image's own Perl, and a checkpoint of the home put back with the installed
/// package left as it is (checkpoints hold the home).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apt_installs_into_a_debian_thread_through_threadbox_dev() {
    let test = "apt_installs_into_a_debian_thread_through_threadbox_dev";
    let mut missing = dev_missing();
    let image = std::env::var_os("THREADBOX_TEST_DEBIAN_IMAGE").map(std::path::PathBuf::from);
    if !image.as_ref().is_some_and(|p| p.is_file()) {
        missing.push(
            "the Debian test image (THREADBOX_TEST_DEBIAN_IMAGE; scripts/test.sh builds it with \
             mmdebstrap)"
                .into(),
        );
    }
    if !prerequisites_met(test, &missing) {
        return;
    }
    let image = image.unwrap();
    let dev = DevServer::start(&["--image", &format!("debian={}", image.display())]).await;
    let made = dev
        .post("/v1/threads/deb/resolve", Some(json!({"image": "debian"})))
        .await;
    assert_eq!(made["created"], true, "{made}");
    assert!(stdout(&dev, "deb", "cat /etc/debian_version")
        .await
        .starts_with("12."));

    let scratch = tempfile::tempdir().unwrap();
    let put = dev
        .http
        .put(format!("{}/v1/threads/deb/files/tmp/tb-hello.deb", dev.url))
        .body(hello_package(scratch.path()))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.text().await.unwrap());
    exec(
        &dev,
        "deb",
        json!({"cmd": "apt-get install -y -q /tmp/tb-hello.deb", "user": "root", "timeout_ms": 120000}),
    )
    .await;
    assert_eq!(
        stdout(&dev, "deb", "tb-hello").await,
        "hello from a package\n"
    );

    let started = dev
        .post(
            "/v1/threads/deb/processes",
            Some(json!({"cmd": "perl -e '$| = 1; print \"perl in the image\\n\"; sleep 30'"})),
        )
        .await;
    let pid = started["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = dev
            .get(&format!("/v1/threads/deb/processes/{pid}/output"))
            .await;
        if out["text"]
            .as_str()
            .unwrap_or_default()
            .contains("perl in the image")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{out}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    exec(&dev, "deb", json!({"cmd": "echo before > ~/note"})).await;
    let checkpoint = dev.post("/v1/threads/deb/checkpoints", None).await;
    exec(&dev, "deb", json!({"cmd": "echo after > ~/note"})).await;
    dev.post(
        "/v1/threads/deb/restore",
        Some(json!({"checkpoint": checkpoint["id"]})),
    )
    .await;
    assert_eq!(
        stdout(&dev, "deb", "cat ~/note; tb-hello").await,
        "before\nhello from a package\n"
    );
}
