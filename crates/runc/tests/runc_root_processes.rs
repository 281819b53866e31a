//! Background processes started as the sandbox's root, through the real provider and runc: the
//! command runs as uid 0 with root's capabilities, and its record stays the user's, so the
//! user's own calls (input, a follow, a listing, a clean-up) work on it as on any other. Needs
//! root (a rootless sandbox's user is already its namespace's uid 0, and `Root` changes
//! nothing there); skips with a message elsewhere, and fails instead under
//! `THREADBOX_REQUIRE_SANDBOXES=1`.

#[path = "support/sandboxes.rs"]
mod sandboxes;

use std::collections::BTreeMap;
use std::time::Duration;

use threadbox_core::ports::{
    new_process_id, ExecCommand, ExecRequest, OutputStream, ProcessState, SandboxProvider,
    SandboxUser, StartProcess, DEFAULT_OUTPUT_CHUNKS,
};
use threadbox_runc::RuncProvider;

use sandboxes::{new_sandbox, require_or_skip, runc_or_skip, state_config, KillAll};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_started_as_root_runs_as_root_and_its_record_stays_the_users() {
    let Some(runc) = runc_or_skip("root processes") else {
        return;
    };
    if !rustix::process::geteuid().is_root() {
        require_or_skip::<()>("root processes", "a rootless sandbox has no root".into());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = state_config(dir.path(), runc);
    let _kill = KillAll(config.clone());
    let p = RuncProvider::open(config).await.expect("open");
    let id = new_sandbox(&p).await;

    let process = new_process_id();
    let started = p
        .start_process(
            &id,
            StartProcess {
                id: process.clone(),
                command: ExecCommand::Shell(
                    "id -u; echo oops >&2; read line; touch ~/by-root; chown 0:0 ~/by-root; \
                     echo \"got $line\""
                        .into(),
                ),
                cwd: None,
                env: BTreeMap::new(),
                pty: None,
                output_chunks: DEFAULT_OUTPUT_CHUNKS,
                user: SandboxUser::Root,
            },
        )
        .await
        .expect("start_process as root");
    assert_eq!(started.state, ProcessState::Running, "{started:?}");
    // Input and a follow, both scripts run as the user.
    p.write_process_input(&id, &process, b"abc\n")
        .await
        .expect("input to root's process");
    let (sink, mut output) = tokio::sync::mpsc::channel(8);
    let follow = p.follow_process_output(&id, &process, 0, Duration::from_secs(20), sink);
    let watch = async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        while let Some(chunk) = output.recv().await {
            match chunk.stream {
                OutputStream::Stdout => out.extend_from_slice(&chunk.data),
                OutputStream::Stderr => err.extend_from_slice(&chunk.data),
            }
        }
        (out, err)
    };
    let (reached, (out, err)) = tokio::join!(follow, watch);
    reached.expect("follow root's process");
    assert_eq!(String::from_utf8_lossy(&out), "0\ngot abc\n");
    assert_eq!(String::from_utf8_lossy(&err), "oops\n");
    let listed = p.list_processes(&id).await.expect("list_processes");
    assert_eq!(listed[0].exit_code, Some(0), "{listed:?}");

    // What the command made is root's; the record, written by root too, is the user's.
    let record = format!("~/.threadbox/processes/{process}");
    let owners = p
        .exec(
            &id,
            ExecRequest::shell(format!(
                "stat -c %u {record} {record}/out.000000000 {record}/status {record}/pgid ~/by-root"
            )),
        )
        .await
        .unwrap();
    assert_eq!(owners.stdout, "1000\n1000\n1000\n1000\n0\n", "{owners:?}");
    // A process of the user's own runs as the user, as before.
    let mine = p
        .start_process(
            &id,
            StartProcess {
                id: new_process_id(),
                command: ExecCommand::Shell("id -u".into()),
                cwd: None,
                env: BTreeMap::new(),
                pty: None,
                output_chunks: DEFAULT_OUTPUT_CHUNKS,
                user: SandboxUser::User,
            },
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let read = p.read_process_output(&id, &mine.id, 0, 100).await.unwrap();
    assert_eq!(read.data, b"1000\n");
    p.kill(&id).await.unwrap();
}
