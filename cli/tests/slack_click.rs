//! `threadbox slack click`'s errors, without a sandbox: a thread id that is not a Slack one is
//! refused before anything is sent, and with no `threadbox dev` listening the command says so.
//! (Clicks that work are in `dashboard_browser.rs`, against a real `threadbox dev`.)

use std::process::Output;

async fn click(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(["slack", "click"])
        .args(args)
        .env_remove("THREADBOX_URL")
        .env_remove("THREADBOX_API_KEY")
        .env_remove("SLACK_SIGNING_SECRET")
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A local port with nothing listening on it (bound, then released).
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

#[tokio::test]
async fn a_thread_id_that_is_not_slacks_is_refused() {
    let url = closed_port_url();
    for bad in ["agent-1", "slack:t1:C1:1.000001", "a b"] {
        let output = click(&["--thread", bad, "--url", &url, "pause"]).await;
        assert!(!output.status.success(), "{bad}");
        let said = stderr(&output);
        assert!(said.contains("--thread"), "{bad}: {said}");
        assert!(
            !said.contains("is threadbox dev running"),
            "{bad}: checked first: {said}"
        );
    }
}

#[tokio::test]
async fn without_a_dev_server_it_says_so() {
    let url = closed_port_url();
    let output = click(&["--thread", "slack:T1:C1:1.000001", "--url", &url, "pause"]).await;
    assert!(!output.status.success());
    let said = stderr(&output);
    assert!(said.contains("cannot reach threadbox"), "{said}");
    assert!(said.contains("is `threadbox dev` running?"), "{said}");
    assert!(said.contains(&url), "{said}");

    let output = click(&[
        "--thread",
        "slack:T1:C1:1.000001",
        "--url",
        &url,
        "--submit",
    ])
    .await;
    assert!(!output.status.success());
    assert!(stderr(&output).contains("cannot reach threadbox"));
}

#[tokio::test]
async fn an_action_or_submit_is_needed_but_not_both() {
    let output = click(&["--thread", "slack:T1:C1:1.000001"]).await;
    assert!(!output.status.success());
    let output = click(&["--thread", "slack:T1:C1:1.000001", "pause", "--submit"]).await;
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("cannot be used with"),
        "{}",
        stderr(&output)
    );
}
