//! Images through the real `threadbox dev`, on E2B (the contract fake): the operator maps names
//! to templates (`THREADBOX_E2B_TEMPLATES`), `threadbox images` lists them, a thread chooses one
//! at its first resolve (or gets its Slack scope's), `threads show` says which, a change applies
//! to the next sandbox, and a bad name is refused naming the registered ones, at start too.
//!
//! The dashboard's thread view shows the image, and its change as it happens, in headless
//! Chromium. On runc, a bad image flag stops the start before anything is unpacked (needs root
//! and runc, as every `threadbox dev` test on runc; no image is made).
//!
//! Needs no runc: only `unshare` (util-linux) and user namespaces or root, for the fake (and
//! Debian's `chromium` and `chromium-driver` for the dashboard's test).

mod support;

use std::process::Command;

use serde_json::{json, Value};
use support::dashboard::{self, WAIT};
use support::e2b::e2b_missing;
use support::{cli_command, dev_missing, prerequisites_met, text, threads, DevServer};
use threadbox_testing::e2b_fake::{E2bFake, FakeOptions};

async fn fake() -> E2bFake {
    E2bFake::start_with(FakeOptions {
        templates: vec!["base".into(), "tpl-py312".into()],
        ..FakeOptions::default()
    })
    .await
}

async fn start(fake: &E2bFake, args: &[&str]) -> DevServer {
    let vars: Vec<(String, String)> = fake.env_vars().into_iter().collect();
    let mut env: Vec<(&str, Option<&str>)> = vars
        .iter()
        .map(|(k, v)| (k.as_str(), Some(v.as_str())))
        .collect();
    env.push(("THREADBOX_PROVIDER", Some("e2b")));
    env.push(("THREADBOX_E2B_TEMPLATES", Some("python=tpl-py312")));
    let dev = DevServer::start_with_env(args, &env).await;
    assert!(
        dev.stdout_lines()
            .iter()
            .any(|l| l.contains("provider   e2b (")),
        "not on E2B"
    );
    dev
}

fn template_of(fake: &E2bFake, dev_record: &Value) -> String {
    let id = dev_record["session"]["sandbox_id"].as_str().unwrap();
    fake.sandbox(id).unwrap().template_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_choose_images_and_the_cli_shows_them() {
    if !prerequisites_met(
        "threads_choose_images_and_the_cli_shows_them",
        &e2b_missing(),
    ) {
        return;
    }
    let fake = fake().await;
    let dev = start(&fake, &["--slack-image", "T1=python"]).await;
    assert!(
        dev.stdout_lines()
            .iter()
            .any(|l| l.contains("images     new threads: default host; Slack T1: python")),
        "{:#?}",
        dev.stdout_lines()
    );

    // `threadbox images`: a table, and the API's JSON.
    let listed = cli_command(&dev.url, &["images"]).output().await.unwrap();
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let table = text(&listed.stdout);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("e2b template tpl-py312"), "{table}");
    let json = cli_command(&dev.url, &["images", "--json"])
        .output()
        .await
        .unwrap();
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    let names: Vec<&str> = json["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["host", "python"]);

    // Chosen at the first resolve; shown by `threads show`; made from the template.
    let made = threads(&dev, &["resolve", "img-a", "--image", "python"]).await;
    assert!(made.status.success(), "{}", text(&made.stderr));
    let record = dev.get("/v1/threads/img-a").await;
    assert_eq!(record["session"]["image"], "python");
    assert_eq!(template_of(&fake, &record), "tpl-py312");
    let shown = threads(&dev, &["show", "img-a"]).await;
    assert!(
        text(&shown.stdout).contains("\nimage        python\n"),
        "{}",
        text(&shown.stdout)
    );
    // A Slack workspace's default; a plain thread's is host.
    threads(&dev, &["resolve", "slack:T1:C1:1712345678.000100"]).await;
    let slack = dev.get("/v1/threads/slack:T1:C1:1712345678.000100").await;
    assert_eq!(template_of(&fake, &slack), "tpl-py312");
    threads(&dev, &["resolve", "img-b"]).await;
    let plain = dev.get("/v1/threads/img-b").await;
    assert_eq!(plain["session"]["image"], "host");
    assert_eq!(template_of(&fake, &plain), "base");

    // Another image later: a conflict (exit 4) naming the way to change it.
    let other = threads(&dev, &["resolve", "img-a", "--image", "host"]).await;
    assert_eq!(other.status.code(), Some(4), "{}", text(&other.stderr));
    assert!(
        text(&other.stderr).contains("PUT /v1/threads/img-a/image"),
        "{}",
        text(&other.stderr)
    );
    // An unknown name: a bad request (exit 2) naming the registered ones, nothing made.
    let before = fake.sandboxes().len();
    let unknown = threads(&dev, &["resolve", "img-c", "--image", "ruby"]).await;
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown.stderr));
    assert!(
        text(&unknown.stderr).contains("this deployment has: host, python"),
        "{}",
        text(&unknown.stderr)
    );
    assert_eq!(fake.sandboxes().len(), before);

    // A change applies to the next sandbox.
    let changed = threads(&dev, &["image", "img-a", "host"]).await;
    assert!(changed.status.success(), "{}", text(&changed.stderr));
    assert!(
        text(&changed.stdout).starts_with("img-a: image host (next sandbox): recorded"),
        "{}",
        text(&changed.stdout)
    );
    let kept = dev.get("/v1/threads/img-a").await;
    assert_eq!(
        template_of(&fake, &kept),
        "tpl-py312",
        "the sandbox is kept"
    );
    let reset = threads(&dev, &["reset", "img-a"]).await;
    assert!(reset.status.success(), "{}", text(&reset.stderr));
    let fresh = dev.get("/v1/threads/img-a").await;
    assert_eq!(template_of(&fake, &fresh), "base");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_naming_an_image_nobody_registered_is_refused() {
    if !prerequisites_met(
        "a_start_naming_an_image_nobody_registered_is_refused",
        &e2b_missing(),
    ) {
        return;
    }
    let fake = fake().await;
    for (args, says) in [
        (
            vec!["--default-image", "ruby"],
            "--default-image: no image is registered as \"ruby\"; this deployment has: host, python",
        ),
        (
            vec!["--slack-image", "T1=ruby"],
            "--slack-image: no image is registered as \"ruby\"",
        ),
        (
            vec!["--image", "py=/srv/py.tar"],
            "--image registers runc images; on E2B name templates with THREADBOX_E2B_TEMPLATES",
        ),
        (vec!["--default-image", "Ruby"], "is not an image name"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_threadbox"))
            .args(["dev", "--port", "0", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(&args)
            .envs(fake.env_vars())
            .env("THREADBOX_PROVIDER", "e2b")
            .env("THREADBOX_E2B_TEMPLATES", "python=tpl-py312")
            .env_remove("THREADBOX_API_KEYS")
            .env("RUST_LOG", "warn")
            .output()
            .expect("run threadbox dev");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(fake.sandboxes().is_empty());
}

/// On runc (the default provider) the defaults are checked against the flags' registrations
/// before any image is unpacked, and a bad set-up file stops the start naming it and its field.
#[test]
fn a_runc_start_with_a_bad_image_flag_is_refused_before_anything_is_unpacked() {
    let test = "a_runc_start_with_a_bad_image_flag_is_refused_before_anything_is_unpacked";
    if !prerequisites_met(test, &dev_missing()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let setup = dir.path().join("setup.json");
    std::fs::write(&setup, r#"{"run": "true", "timeout_secs": -1}"#).unwrap();
    let missing_image = dir.path().join("no-such-image.tar");
    let missing = missing_image.to_str().unwrap();
    let setup_arg = format!("py={}", setup.display());
    let image_arg = format!("py={missing}");
    for (args, says) in [
        (
            vec!["--image", &image_arg, "--default-image", "node"],
            "--default-image: no image is registered as \"node\"; this deployment has: host, py",
        ),
        (
            vec!["--image", &image_arg, "--image-setup", &setup_arg],
            "setup.json: field `timeout_secs`: invalid value",
        ),
        (
            vec!["--image", "host=/srv/x"],
            "`host` is the host's own image",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_threadbox"))
            .args(["dev", "--port", "0", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(&args)
            .env_remove("THREADBOX_API_KEYS")
            .env_remove("THREADBOX_PROVIDER")
            .env_remove("THREADBOX_IMAGES")
            .env("RUST_LOG", "warn")
            .output()
            .expect("run threadbox dev");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(
        !dir.path().join("data/sandboxes/images").exists()
            || std::fs::read_dir(dir.path().join("data/sandboxes/images"))
                .unwrap()
                .next()
                .is_none(),
        "nothing was unpacked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_threads_image_and_its_change_live() {
    const ROW: &str = "tr[data-thread=\"img-dash\"]";
    let Some(dashboard) = dashboard::start(
        "the_dashboard_shows_a_threads_image_and_its_change_live",
        e2b_missing(),
        || async {
            let fake = fake().await;
            (start(&fake, &[]).await, fake)
        },
    )
    .await
    else {
        return;
    };
    let (browser, dev) = (&dashboard.browser, &dashboard.dev);
    let context = || dashboard.context();
    dashboard.open_live().await;

    dev.post(
        "/v1/threads/img-dash/resolve",
        Some(json!({ "image": "python" })),
    )
    .await;
    browser
        .wait_for_text(&format!("{ROW} .badge"), "active", WAIT, context)
        .await;
    browser
        .click_on(&format!("{ROW} button[data-action=\"select\"]"))
        .await;
    browser
        .wait_for_text("#detail-image", "python", WAIT, context)
        .await;

    // The change is a `user` event: the open view follows it without a reload.
    let changed = dev
        .http
        .put(format!("{}/v1/threads/img-dash/image", dev.url))
        .json(&json!({ "image": "host" }))
        .send()
        .await
        .unwrap();
    assert!(changed.status().is_success(), "{changed:?}");
    browser
        .wait_for_text("#detail-image", "host", WAIT, context)
        .await;
}
