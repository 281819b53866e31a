//! The sandbox provider conformance suite: what every `SandboxProvider` must do, whatever runs
//! the sandboxes (runc locally, E2B in production, a contract fake in tests).
//!
//! Each function takes a provider, makes its own sandboxes (tagged with a fresh thread id, so
//! functions can share a provider), kills them when it passes, and panics with a message on
//! the first broken promise. A backend registers them all, one test each, with
//! `provider_conformance_tests!` (in `testing::suites`), the one list of them.

use std::collections::BTreeMap;
use std::time::Duration;

use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{
    CreateSandbox, ExecCommand, ExecRequest, FileKind, NetworkProfile, ProviderError, SandboxOwner,
    SandboxProvider, SandboxState, META_GENERATION, META_THREAD_ID,
};

/// An owner no other call uses.
pub fn fresh_owner(generation: u64) -> SandboxOwner {
    let thread = format!("conformance-{}", uuid::Uuid::new_v4().simple());
    SandboxOwner {
        thread_id: ThreadId::parse(&thread).expect("valid thread id"),
        generation,
    }
}

/// A restricted sandbox with one environment variable set at creation.
pub fn create_request(owner: SandboxOwner) -> CreateSandbox {
    CreateSandbox {
        image: threadbox_core::domain::ImageName::host(),
        owner,
        network: NetworkProfile::Restricted,
        timeout: Duration::from_secs(600),
        env: BTreeMap::from([("TB_CONFORMANCE".to_owned(), "yes".to_owned())]),
    }
}

async fn create(p: &dyn SandboxProvider, owner: SandboxOwner) -> String {
    p.create(create_request(owner))
        .await
        .expect("create")
        .sandbox_id
}

fn shell(cmd: &str) -> ExecRequest {
    ExecRequest::shell(cmd)
}

pub async fn create_reports_running_with_owner_metadata(p: &dyn SandboxProvider) {
    let owner = fresh_owner(7);
    let id = create(p, owner.clone()).await;
    assert!(!id.is_empty());
    let info = p.info(&id).await.expect("info");
    assert_eq!(info.sandbox_id, id);
    assert_eq!(info.state, SandboxState::Running);
    assert_eq!(info.owner(), Some(owner.clone()));
    assert_eq!(
        info.metadata.get(META_THREAD_ID),
        Some(&owner.thread_id.to_string())
    );
    assert_eq!(info.metadata.get(META_GENERATION), Some(&"7".to_owned()));
    assert!(info.deadline.is_some(), "a sandbox has a deadline");
    p.kill(&id).await.expect("kill");
}

pub async fn list_filters_by_metadata(p: &dyn SandboxProvider) {
    let (a, b) = (fresh_owner(1), fresh_owner(2));
    let id_a = create(p, a.clone()).await;
    let id_b = create(p, b.clone()).await;

    let ids = |list: Vec<threadbox_core::ports::SandboxInfo>| -> Vec<String> {
        list.into_iter().map(|i| i.sandbox_id).collect()
    };
    let only_a = ids(p.list(&a.to_metadata()).await.expect("list a"));
    assert_eq!(only_a, vec![id_a.clone()]);
    let by_thread = BTreeMap::from([(META_THREAD_ID.to_owned(), b.thread_id.to_string())]);
    assert_eq!(
        ids(p.list(&by_thread).await.expect("list b")),
        vec![id_b.clone()]
    );
    let wrong_generation = BTreeMap::from([
        (META_THREAD_ID.to_owned(), b.thread_id.to_string()),
        (META_GENERATION.to_owned(), "99".to_owned()),
    ]);
    assert!(p.list(&wrong_generation).await.expect("list").is_empty());
    let everything = p.list(&BTreeMap::new()).await.expect("list all");
    for id in [&id_a, &id_b] {
        let info = everything
            .iter()
            .find(|i| &i.sandbox_id == id)
            .unwrap_or_else(|| panic!("{id} missing from the full list"));
        assert_eq!(info.state, SandboxState::Running);
    }

    p.pause(&id_a).await.expect("pause");
    let listed = p.list(&a.to_metadata()).await.expect("list paused");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, SandboxState::Paused);
    assert_eq!(listed[0].owner(), Some(a));

    p.kill(&id_a).await.expect("kill");
    p.kill(&id_b).await.expect("kill");
}

pub async fn pause_and_connect(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;
    p.write_file(&id, "/home/user/kept.txt", b"before pause")
        .await
        .expect("write");

    p.pause(&id).await.expect("pause");
    assert_eq!(p.info(&id).await.expect("info").state, SandboxState::Paused);
    p.pause(&id)
        .await
        .expect("pausing a paused sandbox succeeds");
    assert_eq!(p.info(&id).await.expect("info").state, SandboxState::Paused);

    let connected = p.connect(&id).await.expect("connect");
    assert!(connected.resumed, "connect on a paused sandbox resumes it");
    assert_eq!(
        p.info(&id).await.expect("info").state,
        SandboxState::Running
    );
    let again = p.connect(&id).await.expect("connect again");
    assert!(
        !again.resumed,
        "connect on a running sandbox resumes nothing"
    );

    assert_eq!(
        p.read_file(&id, "/home/user/kept.txt").await.expect("read"),
        b"before pause",
        "files outlive a pause"
    );
    p.kill(&id).await.expect("kill");
}

pub async fn set_timeout_moves_the_deadline(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;
    p.set_timeout(&id, Duration::from_secs(3600))
        .await
        .expect("set_timeout");
    let first = p.info(&id).await.expect("info").deadline.expect("deadline");
    p.set_timeout(&id, Duration::from_secs(7200))
        .await
        .expect("set_timeout");
    let second = p.info(&id).await.expect("info").deadline.expect("deadline");
    assert!(
        second.0 >= first.0 + 3_000_000,
        "deadline moved from {first:?} to {second:?}"
    );
    p.kill(&id).await.expect("kill");
}

/// `exec_streaming` hands over the output `exec` would keep, stdout and stderr apart, and keeps
/// none of it in its result.
pub async fn exec_streaming_hands_over_the_output(p: &dyn SandboxProvider) {
    use threadbox_core::ports::OutputChunk;
    let id = create(p, fresh_owner(1)).await;
    let (sink, mut output) = tokio::sync::mpsc::channel(16);
    let collect = async {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(chunk) = output.recv().await {
            match chunk {
                OutputChunk::Stdout(bytes) => stdout.extend(bytes),
                OutputChunk::Stderr(bytes) => stderr.extend(bytes),
            }
        }
        (stdout, stderr)
    };
    let (result, (stdout, stderr)) = tokio::join!(
        p.exec_streaming(&id, shell("echo hello; echo oops >&2"), sink),
        collect
    );
    let result = result.expect("exec_streaming");
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(stdout, b"hello\n");
    assert_eq!(stderr, b"oops\n");
    assert_eq!((result.stdout.as_str(), result.stderr.as_str()), ("", ""));
    p.kill(&id).await.expect("kill");
}

/// Output is handed over as the command writes it: the first line arrives while the command
/// still runs, stdout and stderr apart.
pub async fn exec_streaming_delivers_output_before_the_end(p: &dyn SandboxProvider) {
    use threadbox_core::ports::OutputChunk;
    let id = create(p, fresh_owner(1)).await;
    let (sink, mut output) = tokio::sync::mpsc::channel(8);
    let running = p.exec_streaming(&id, shell("echo first; sleep 2; echo second >&2"), sink);
    let watch = async {
        let first = tokio::time::timeout(Duration::from_millis(1500), output.recv())
            .await
            .expect("the first line arrives while the command still runs");
        assert_eq!(first, Some(OutputChunk::Stdout(b"first\n".to_vec())));
        assert_eq!(
            output.recv().await,
            Some(OutputChunk::Stderr(b"second\n".to_vec()))
        );
        assert_eq!(
            output.recv().await,
            None,
            "the stream ends with the command"
        );
    };
    let (result, ()) = tokio::join!(running, watch);
    let result = result.expect("exec_streaming");
    assert_eq!(result.exit_code, Some(0));
    assert_eq!((result.stdout.as_str(), result.stderr.as_str()), ("", ""));
    p.kill(&id).await.expect("kill");
}

pub async fn exec_shell_and_argv(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;

    let out = p
        .exec(&id, shell("echo hello; echo oops >&2"))
        .await
        .expect("exec");
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, "hello\n");
    assert_eq!(out.stderr, "oops\n");
    assert!(!out.timed_out && !out.truncated && !out.out_of_memory);

    let out = p.exec(&id, shell("exit 3")).await.expect("exec");
    assert_eq!(out.exit_code, Some(3));

    // Argv is not re-parsed by a shell: the space and the `$` stay literal.
    let mut argv = shell("");
    argv.command = ExecCommand::Argv(vec![
        "printf".into(),
        "%s|".into(),
        "a b".into(),
        "$HOME".into(),
    ]);
    let out = p.exec(&id, argv).await.expect("exec argv");
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, "a b|$HOME|");

    let mut missing = shell("");
    missing.command = ExecCommand::Argv(vec!["/no/such/program".into()]);
    let out = p
        .exec(&id, missing)
        .await
        .expect("exec of a missing program");
    assert_ne!(out.exit_code, Some(0));

    // The environment given at creation reaches every command.
    let out = p
        .exec(&id, shell("echo $TB_CONFORMANCE"))
        .await
        .expect("exec");
    assert_eq!(out.stdout, "yes\n");
    p.kill(&id).await.expect("kill");
}

pub async fn exec_stdin_env_and_cwd(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;

    let mut req = shell("tr a-z A-Z");
    req.stdin = Some(b"shout\n".to_vec());
    let out = p.exec(&id, req).await.expect("exec with stdin");
    assert_eq!(out.stdout, "SHOUT\n");

    let mut req = shell("echo \"$GREETING $TB_CONFORMANCE\"");
    req.env.insert("GREETING".into(), "hi there".into());
    let out = p.exec(&id, req).await.expect("exec with env");
    assert_eq!(out.stdout, "hi there yes\n");

    let mut req = shell("pwd");
    req.cwd = Some("/tmp".into());
    assert_eq!(p.exec(&id, req).await.expect("exec").stdout, "/tmp\n");
    let out = p.exec(&id, shell("pwd")).await.expect("exec");
    assert_eq!(out.stdout, "/home/user\n", "commands start in the home");
    p.kill(&id).await.expect("kill");
}

pub async fn exec_timeout_and_output_cap(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;

    let mut req = shell("echo started; sleep 30");
    req.timeout = Duration::from_secs(1);
    let out = p.exec(&id, req).await.expect("exec");
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert_eq!(out.stdout, "started\n", "output before the timeout is kept");
    assert!(
        out.duration_ms >= 900 && out.duration_ms < 15_000,
        "{out:?}"
    );

    let mut req = shell("head -c 100000 /dev/zero | tr '\\0' a; echo done >&2");
    req.output_cap = 1000;
    let out = p.exec(&id, req).await.expect("exec");
    assert_eq!(out.exit_code, Some(0));
    assert!(out.truncated);
    assert_eq!(out.stdout, "a".repeat(1000));
    assert_eq!(out.stderr, "done\n");

    // The sandbox is fine afterwards.
    let out = p.exec(&id, shell("echo ok")).await.expect("exec");
    assert_eq!(out.stdout, "ok\n");
    p.kill(&id).await.expect("kill");
}

pub async fn files_round_trip(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;

    p.write_file(&id, "/home/user/dir/sub/a.txt", b"alpha\n")
        .await
        .expect("write creates parents");
    assert_eq!(
        p.read_file(&id, "/home/user/dir/sub/a.txt")
            .await
            .expect("read"),
        b"alpha\n"
    );
    p.write_file(&id, "/home/user/dir/sub/a.txt", b"beta")
        .await
        .expect("overwrite");
    assert_eq!(
        p.read_file(&id, "/home/user/dir/sub/a.txt")
            .await
            .expect("read"),
        b"beta"
    );

    let stat = p.stat(&id, "/home/user/dir/sub/a.txt").await.expect("stat");
    assert_eq!(stat.kind, FileKind::File);
    assert_eq!(stat.size, 4);
    assert_eq!(stat.name, "a.txt");
    assert_eq!(stat.path, "/home/user/dir/sub/a.txt");
    assert_eq!(
        p.stat(&id, "/home/user/dir").await.expect("stat dir").kind,
        FileKind::Dir
    );

    p.make_dir(&id, "/home/user/dir/made").await.expect("mkdir");
    p.make_dir(&id, "/home/user/dir/made")
        .await
        .expect("mkdir of an existing directory succeeds");
    let mut listed = p.list_dir(&id, "/home/user/dir").await.expect("list");
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<(&str, FileKind)> = listed.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(names, vec![("made", FileKind::Dir), ("sub", FileKind::Dir)]);
    assert_eq!(listed[1].path, "/home/user/dir/sub");

    assert!(p.read_file(&id, "/home/user/missing.txt").await.is_err());
    assert!(
        p.remove(&id, "/home/user/dir", false).await.is_err(),
        "non-empty dir"
    );
    p.remove(&id, "/home/user/dir/sub/a.txt", false)
        .await
        .expect("remove file");
    assert!(p.stat(&id, "/home/user/dir/sub/a.txt").await.is_err());
    p.remove(&id, "/home/user/dir", true)
        .await
        .expect("remove tree");
    assert!(p.stat(&id, "/home/user/dir").await.is_err());
    p.kill(&id).await.expect("kill");
}

/// Files written through the API belong to the sandbox's user: commands can change them, and
/// files commands write are readable through the API.
pub async fn files_and_commands_share_the_sandbox(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;
    p.write_file(&id, "/home/user/dir/sub/a.txt", b"beta")
        .await
        .expect("write");
    // Files written through the API belong to the sandbox's user: commands can change them,
    // and files commands write are readable through the API.
    let out = p
        .exec(
            &id,
            shell("echo more >> /home/user/dir/sub/a.txt && echo x > /tmp/from-cmd"),
        )
        .await
        .expect("exec");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        p.read_file(&id, "/home/user/dir/sub/a.txt")
            .await
            .expect("read"),
        b"betamore\n"
    );
    assert_eq!(
        p.read_file(&id, "/tmp/from-cmd").await.expect("read /tmp"),
        b"x\n"
    );
    p.write_file(&id, "/tmp/scratch/t.txt", b"t")
        .await
        .expect("write in /tmp");
    let out = p
        .exec(&id, shell("cat /tmp/scratch/t.txt"))
        .await
        .expect("exec");
    assert_eq!(out.stdout, "t");

    p.kill(&id).await.expect("kill");
}

pub async fn files_search(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;
    for (path, body) in [
        ("/home/user/proj/main.py", "import os\n# needle here\n"),
        (
            "/home/user/proj/lib/util.py",
            "def f():\n    return 1  # needle\n",
        ),
        ("/home/user/proj/README.md", "no match\n"),
    ] {
        p.write_file(&id, path, body.as_bytes())
            .await
            .expect("write");
    }

    let mut all_py = p.glob(&id, "/home/user/proj/**/*.py").await.expect("glob");
    all_py.sort();
    assert_eq!(
        all_py,
        vec!["/home/user/proj/lib/util.py", "/home/user/proj/main.py"]
    );
    assert_eq!(
        p.glob(&id, "/home/user/proj/*.py").await.expect("glob"),
        vec!["/home/user/proj/main.py"]
    );
    assert_eq!(
        p.glob(&id, "/home/user/proj/READM?.md")
            .await
            .expect("glob"),
        vec!["/home/user/proj/README.md"]
    );

    let mut found = p
        .grep(&id, "needle", "/home/user/proj")
        .await
        .expect("grep");
    found.sort_by(|a, b| a.path.cmp(&b.path));
    let got: Vec<(&str, u64, &str)> = found
        .iter()
        .map(|m| (m.path.as_str(), m.line_number, m.line.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("/home/user/proj/lib/util.py", 2, "    return 1  # needle"),
            ("/home/user/proj/main.py", 2, "# needle here"),
        ]
    );
    let in_one = p
        .grep(&id, "^import", "/home/user/proj/main.py")
        .await
        .expect("grep a file");
    assert_eq!(in_one.len(), 1);
    assert_eq!(in_one[0].line_number, 1);
    assert!(matches!(
        p.grep(&id, "(unclosed", "/home/user/proj").await,
        Err(ProviderError::InvalidRequest(_))
    ));
    p.kill(&id).await.expect("kill");
}

pub async fn file_paths_with_dotdot_are_refused(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;
    for path in ["/home/user/../../etc/passwd", "/tmp/../etc/passwd"] {
        match p.read_file(&id, path).await {
            Err(ProviderError::InvalidRequest(message)) => {
                assert!(
                    message.contains(path),
                    "the error names the path: {message}"
                )
            }
            other => panic!("{path}: {other:?}"),
        }
        assert!(matches!(
            p.write_file(&id, path, b"x").await,
            Err(ProviderError::InvalidRequest(_))
        ));
    }
    p.kill(&id).await.expect("kill");
}

/// A path that is not there is `NotFound`, naming it, whichever operation looks for it: not a
/// bad request (the request is fine; the file is missing) and not a provider failure.
pub async fn a_missing_path_is_not_found(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;
    for path in ["/home/user/missing.txt", "/tmp/missing/deeper.txt"] {
        fn not_found<T: std::fmt::Debug>(op: &str, path: &str, result: Result<T, ProviderError>) {
            match result {
                // The path, or the part of it that is missing.
                Err(ProviderError::NotFound(message)) => assert!(
                    message.contains("missing"),
                    "{op} {path}: the error names the path: {message}"
                ),
                other => panic!("{op} {path}: {other:?}"),
            }
        }
        not_found("read_file", path, p.read_file(&id, path).await);
        not_found("open_file", path, p.open_file(&id, path).await);
        not_found("stat", path, p.stat(&id, path).await);
        not_found("list_dir", path, p.list_dir(&id, path).await);
    }
    p.kill(&id).await.expect("kill");
}

fn upload(parts: Vec<Result<Vec<u8>, ProviderError>>) -> threadbox_core::ports::FileChunks {
    Box::pin(futures::stream::iter(parts))
}

/// The names in `dir`, sorted.
async fn names_in(p: &dyn SandboxProvider, id: &str, dir: &str) -> Vec<String> {
    let mut names: Vec<String> = p
        .list_dir(id, dir)
        .await
        .unwrap_or_else(|e| panic!("list {dir}: {e}"))
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    names
}

/// Streamed uploads land wherever the sandbox can write: its `/tmp` (a tmpfs of the sandbox's
/// own on runc) as much as its home. One that fails (its stream breaks, it passes the limit,
/// or its caller goes away mid-body) leaves the file as it was and nothing beside it.
pub async fn uploads_reach_home_and_tmp_and_failures_leave_nothing(p: &dyn SandboxProvider) {
    use futures::StreamExt;
    let id = create(p, fresh_owner(1)).await;
    // The longest name a file may have (255 bytes) takes an upload too.
    let longest = format!("{}.bin", "n".repeat(251));
    for (dir, name) in [
        ("/home/user/up", "a.bin"),
        ("/tmp", "b.bin"),
        ("/tmp/deep/er", "c.bin"),
        ("/tmp/long", longest.as_str()),
    ] {
        let path = format!("{dir}/{name}");
        let written = p
            .write_file_from(
                &id,
                &path,
                upload(vec![Ok(b"hello ".to_vec()), Ok(b"world".to_vec())]),
                1024,
            )
            .await
            .unwrap_or_else(|e| panic!("upload to {path}: {e}"));
        assert_eq!(written, 11);
        assert_eq!(p.read_file(&id, &path).await.expect("read"), b"hello world");
        p.write_file_from(&id, &path, upload(vec![Ok(b"again".to_vec())]), 1024)
            .await
            .unwrap_or_else(|e| panic!("replace {path}: {e}"));
        assert_eq!(p.read_file(&id, &path).await.expect("read"), b"again");

        let broken = p
            .write_file_from(
                &id,
                &path,
                upload(vec![
                    Ok(b"partial".to_vec()),
                    Err(ProviderError::InvalidRequest("the body broke off".into())),
                ]),
                1024,
            )
            .await;
        assert!(broken.is_err(), "{path}: {broken:?}");
        let over = p
            .write_file_from(
                &id,
                &path,
                upload(vec![Ok(vec![b'x'; 700]), Ok(vec![b'x'; 700])]),
                1024,
            )
            .await;
        assert!(
            matches!(over, Err(ProviderError::InvalidRequest(_))),
            "{path}: {over:?}"
        );
        // A caller that goes away mid-body: the upload is dropped, never finished.
        let endless = futures::stream::iter(vec![Ok(b"half".to_vec())])
            .chain(futures::stream::pending())
            .boxed();
        let dropped = tokio::time::timeout(
            Duration::from_secs(2),
            p.write_file_from(&id, &path, endless, 1024),
        )
        .await;
        assert!(dropped.is_err(), "{path}: an endless upload ended");

        assert_eq!(p.read_file(&id, &path).await.expect("read"), b"again");
        // What a dropped upload leaves is removed as it is dropped, which may finish on a
        // thread of its own: give it a while.
        let mut names = names_in(p, &id, dir).await;
        for _ in 0..100 {
            if names == [name] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            names = names_in(p, &id, dir).await;
        }
        assert_eq!(names, [name], "{dir} holds only the uploaded file");
    }
    p.kill(&id).await.expect("kill");
}

pub async fn kill_makes_everything_gone(p: &dyn SandboxProvider) {
    let owner = fresh_owner(1);
    let id = create(p, owner.clone()).await;
    p.kill(&id).await.expect("kill");
    p.kill(&id).await.expect("killing a gone sandbox succeeds");

    fn assert_gone<T: std::fmt::Debug>(op: &str, result: Result<T, ProviderError>) {
        match result {
            Err(ProviderError::Gone(_)) => {}
            other => panic!("{op} on a gone sandbox: {other:?}"),
        }
    }
    assert_gone("info", p.info(&id).await);
    assert_gone("connect", p.connect(&id).await);
    assert_gone("pause", p.pause(&id).await);
    assert_gone(
        "set_timeout",
        p.set_timeout(&id, Duration::from_secs(60)).await,
    );
    assert_gone("exec", p.exec(&id, shell("true")).await);
    assert_gone("read_file", p.read_file(&id, "/home/user/x").await);
    assert_gone("write_file", p.write_file(&id, "/home/user/x", b"x").await);
    assert_gone("list_dir", p.list_dir(&id, "/home/user").await);
    assert_gone("stat", p.stat(&id, "/home/user").await);
    assert_gone("make_dir", p.make_dir(&id, "/home/user/d").await);
    assert_gone("remove", p.remove(&id, "/home/user/x", false).await);
    assert_gone("glob", p.glob(&id, "/home/user/*").await);
    assert_gone("grep", p.grep(&id, "x", "/home/user").await);
    assert!(
        p.list(&owner.to_metadata()).await.expect("list").is_empty(),
        "a killed sandbox is not listed"
    );
}

// Background processes (the port's defaults over exec, or a provider's own).

fn start_request(
    command: &str,
    pty: Option<threadbox_core::ports::PtySize>,
) -> threadbox_core::ports::StartProcess {
    threadbox_core::ports::StartProcess {
        id: threadbox_core::ports::new_process_id(),
        command: ExecCommand::Shell(command.to_owned()),
        cwd: None,
        env: BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]),
        pty,
        output_chunks: threadbox_core::ports::DEFAULT_OUTPUT_CHUNKS,
        user: Default::default(),
    }
}

/// Wait (up to 20 s) until the process is no longer running; its last description.
async fn until_ended(
    p: &dyn SandboxProvider,
    id: &str,
    process: &str,
) -> threadbox_core::ports::ProcessInfo {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let all = p.list_processes(id).await.expect("list_processes");
        let info = all
            .into_iter()
            .find(|i| i.id == process)
            .expect("the process is listed");
        if info.state != threadbox_core::ports::ProcessState::Running {
            return info;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "process {process} still running: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn processes_outlive_the_call_take_input_and_end_with_their_status(
    p: &dyn SandboxProvider,
) {
    use threadbox_core::ports::ProcessState;
    let id = create(p, fresh_owner(1)).await;
    let request = start_request(
        "echo \"$GREETING\"; read line; echo \"got $line\"; exit 3",
        None,
    );
    let process = request.id.clone();
    let started = p.start_process(&id, request).await.expect("start_process");
    assert_eq!(started.state, ProcessState::Running, "{started:?}");
    assert!(!started.pty);
    // Alive after the call that started it returned, waiting for its input.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let listed = p.list_processes(&id).await.expect("list_processes");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].state, ProcessState::Running, "{listed:?}");
    p.write_process_input(&id, &process, b"abc\n")
        .await
        .expect("write_process_input");
    let ended = until_ended(p, &id, &process).await;
    assert_eq!(ended.state, ProcessState::Exited);
    assert_eq!(ended.exit_code, Some(3));
    let output = p
        .read_process_output(&id, &process, 0, 1024)
        .await
        .expect("read_process_output");
    assert_eq!(output.data, b"hello\ngot abc\n");
    assert_eq!((output.offset, output.next()), (0, 14));
    // Read on from where a reader is: nothing more, at the end.
    let rest = p.read_process_output(&id, &process, 6, 1024).await.unwrap();
    assert_eq!(
        (rest.offset, rest.data.as_slice()),
        (6, b"got abc\n".as_slice())
    );
    // An unknown process is refused by name; ending input to an ended one is a conflict.
    let unknown = p
        .read_process_output(&id, "nosuch", 0, 10)
        .await
        .unwrap_err();
    assert!(
        matches!(&unknown, ProviderError::InvalidRequest(m) if m.starts_with("no such process")),
        "{unknown:?}"
    );
    assert!(matches!(
        p.write_process_input(&id, &process, b"late").await,
        Err(ProviderError::Conflict(_))
    ));
    p.kill(&id).await.expect("kill");
}

pub async fn processes_are_followed_and_signalled(p: &dyn SandboxProvider) {
    use threadbox_core::ports::ProcessSignal;
    let id = create(p, fresh_owner(1)).await;
    let request = start_request(
        "for i in 1 2 3; do echo $i; sleep 0.3; done; exec sleep 600",
        None,
    );
    let process = request.id.clone();
    p.start_process(&id, request).await.expect("start_process");
    // Followed as it comes: the lines arrive while the process runs on.
    let (sink, mut output) = tokio::sync::mpsc::channel(8);
    let follow = p.follow_process_output(&id, &process, 0, Duration::from_secs(3), sink);
    let watch = async {
        let mut seen = Vec::new();
        while let Some(chunk) = output.recv().await {
            assert_eq!(chunk.offset, seen.len() as u64, "offsets follow the output");
            seen.extend_from_slice(&chunk.data);
        }
        seen
    };
    let (reached, seen) = tokio::join!(follow, watch);
    assert_eq!(seen, b"1\n2\n3\n");
    assert_eq!(reached.expect("follow_process_output"), 6);
    // SIGTERM reaches the whole group (the `sleep` the shell became), recorded as 128 + 15.
    p.signal_process(&id, &process, ProcessSignal::Term)
        .await
        .expect("signal_process");
    let ended = until_ended(p, &id, &process).await;
    assert_eq!(ended.exit_code, Some(143), "{ended:?}");
    // A follow from where the last one stopped ends at once: the process has ended.
    let (sink, _output) = tokio::sync::mpsc::channel(8);
    let at = tokio::time::timeout(
        Duration::from_secs(10),
        p.follow_process_output(&id, &process, 6, Duration::from_secs(30), sink),
    )
    .await
    .expect("a follow of an ended process returns")
    .unwrap();
    assert_eq!(at, 6);
    p.kill(&id).await.expect("kill");
}

pub async fn process_output_is_a_bounded_ring_and_ptys_are_terminals(p: &dyn SandboxProvider) {
    use threadbox_core::ports::{PtySize, OUTPUT_CHUNK_BYTES};
    let id = create(p, fresh_owner(1)).await;
    // One chunk kept: 600 KiB of output leaves the last chunk's worth and says where it starts.
    let mut request = start_request(
        "head -c 614400 /dev/zero | tr '\\0' x; echo; echo tail",
        None,
    );
    request.output_chunks = 1;
    let process = request.id.clone();
    p.start_process(&id, request).await.expect("start_process");
    let ended = until_ended(p, &id, &process).await;
    assert_eq!(ended.output_bytes, 614_400 + 6);
    assert_eq!(ended.output_start, 2 * OUTPUT_CHUNK_BYTES, "{ended:?}");
    let read = p
        .read_process_output(&id, &process, 0, 1024 * 1024)
        .await
        .unwrap();
    assert_eq!(
        read.offset, ended.output_start,
        "a read from a dropped offset starts at the ring"
    );
    assert!(read.data.ends_with(b"x\ntail\n"));

    // On a terminal of the size asked for; a resize reaches it.
    let request = start_request(
        "tty; stty size; read _; stty size",
        Some(PtySize { cols: 50, rows: 20 }),
    );
    let process = request.id.clone();
    let started = p
        .start_process(&id, request)
        .await
        .expect("start a pty process");
    assert!(started.pty);
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.resize_process(&id, &process, PtySize { cols: 70, rows: 30 })
        .await
        .expect("resize_process");
    p.write_process_input(&id, &process, b"\n").await.unwrap();
    until_ended(p, &id, &process).await;
    let read = p.read_process_output(&id, &process, 0, 4096).await.unwrap();
    let text = String::from_utf8_lossy(&read.data);
    assert!(text.contains("/dev/pts/"), "{text:?}");
    assert!(text.contains("20 50\r\n"), "{text:?}");
    assert!(text.contains("30 70\r\n"), "{text:?}");
    p.kill(&id).await.expect("kill");
}

/// stdout and stderr arrive merged in the order written (offsets as ever), each byte tagged with
/// the stream it came from, in a read and in a follow, across a chunk boundary of the ring.
pub async fn process_output_keeps_stdout_and_stderr_apart(p: &dyn SandboxProvider) {
    use threadbox_core::ports::OutputStream::{Stderr, Stdout};
    let id = create(p, fresh_owner(1)).await;
    let request = start_request(
        "printf out1; sleep 0.2; printf err1 >&2; sleep 0.2; printf out2; sleep 0.2; \
         head -c 300000 /dev/zero | tr '\\0' e >&2; sleep 0.2; echo end",
        None,
    );
    let process = request.id.clone();
    p.start_process(&id, request).await.expect("start_process");
    let expected = [
        (0..4, Stdout),
        (4..8, Stderr),
        (8..12, Stdout),
        (12..300_012, Stderr),
        (300_012..300_016, Stdout),
    ];
    // Followed while it runs: the pieces, joined by stream, are those runs.
    let (sink, mut output) = tokio::sync::mpsc::channel(8);
    let follow = p.follow_process_output(&id, &process, 0, Duration::from_secs(20), sink);
    let watch = async {
        let mut runs: Vec<(std::ops::Range<u64>, _)> = Vec::new();
        let mut data = Vec::new();
        while let Some(chunk) = output.recv().await {
            assert_eq!(chunk.offset, data.len() as u64, "offsets follow the output");
            data.extend_from_slice(&chunk.data);
            let end = data.len() as u64;
            match runs.last_mut() {
                Some((range, stream)) if *stream == chunk.stream => range.end = end,
                _ => runs.push((chunk.offset..end, chunk.stream)),
            }
        }
        (runs, data)
    };
    let (reached, (runs, data)) = tokio::join!(follow, watch);
    assert_eq!(reached.expect("follow_process_output"), 300_016);
    assert_eq!(runs, expected);
    assert!(data.starts_with(b"out1err1out2eee") && data.ends_with(b"eeeend\n"));
    until_ended(p, &id, &process).await;
    // Read whole, and from inside a run.
    let read = p
        .read_process_output(&id, &process, 0, 1024 * 1024)
        .await
        .expect("read_process_output");
    assert_eq!(read.data, data);
    assert_eq!(read.stderr, [4..8, 12..300_012]);
    let pieces: Vec<_> = read
        .pieces()
        .into_iter()
        .map(|c| (c.offset..c.offset + c.data.len() as u64, c.stream))
        .collect();
    assert_eq!(pieces, expected);
    let read = p.read_process_output(&id, &process, 5, 10).await.unwrap();
    assert_eq!(
        (read.offset, read.data.as_slice()),
        (5, b"rr1out2eee".as_slice())
    );
    assert_eq!(read.stderr, [5..8, 12..15]);
    let read = p
        .read_process_output(&id, &process, 300_000, 100)
        .await
        .unwrap();
    assert_eq!(read.stderr, vec![300_000..300_012]);
    assert!(read.data.ends_with(b"eend\n"));
    p.kill(&id).await.expect("kill");
}

/// What a sandbox writes into its own process records is hostile input: a FIFO planted as a
/// record's `chunk`, a folder named so that a tab-separated listing would read it as a whole
/// record, a record with a field threadbox never writes. Listing (and a search naming the FIFO)
/// answers at once (well within
/// the scripts' 30 s timeout, which a blocking open would have run into) with the well-formed
/// records only; reading the damaged one is a clear conflict; an offset past what the sandbox's
/// arithmetic holds is a bad request, checked before anything runs.
pub async fn tampered_process_records_are_refused_not_trusted(p: &dyn SandboxProvider) {
    let id = create(p, fresh_owner(1)).await;
    // A minute is far more than the test takes, and bounds what a provider whose kill leaves
    // processes behind (the E2B fake runs them on the host) keeps running after it.
    let fifo = start_request("exec sleep 60", None);
    let good = start_request("echo hi; exec sleep 60", None);
    let (fifo_id, good_id) = (fifo.id.clone(), good.id.clone());
    p.start_process(&id, fifo).await.expect("start_process");
    p.start_process(&id, good).await.expect("start_process");
    let tamper = format!(
        "set -e; d=$HOME/.threadbox/processes; rm $d/{fifo_id}/chunk; mkfifo $d/{fifo_id}/chunk; \
         f=\"$d/$(printf 'x\\trunning\\t\\t1\\t\\t0\\t0\\t0\\tforged')\"; mkdir \"$f\"; \
         printf 262144 > \"$f/chunk\"; mkdir $d/zzzz; printf 262144 > $d/zzzz/chunk; \
         echo abc > $d/zzzz/status; ls $d | wc -l"
    );
    let out = p.exec(&id, ExecRequest::shell(tamper)).await.expect("exec");
    assert_eq!(out.stdout.trim(), "4", "{out:?}");

    let listed = tokio::time::timeout(Duration::from_secs(15), p.list_processes(&id))
        .await
        .expect("a listing answers without waiting on the planted FIFO")
        .expect("list_processes");
    let ids: Vec<&str> = listed.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(
        ids,
        [good_id.as_str()],
        "only the well-formed record: {listed:?}"
    );

    let read = tokio::time::timeout(
        Duration::from_secs(15),
        p.read_process_output(&id, &fifo_id, 0, 10),
    )
    .await
    .expect("a read answers without waiting on the planted FIFO");
    assert!(
        matches!(&read, Err(ProviderError::Conflict(m)) if m.contains("damaged")),
        "{read:?}"
    );
    // A search that names the planted FIFO does not read it either: nothing found, or refused
    // as no file to search.
    let chunk = format!("/home/user/.threadbox/processes/{fifo_id}/chunk");
    let found = tokio::time::timeout(Duration::from_secs(15), p.grep(&id, "x", &chunk))
        .await
        .expect("a search answers without waiting on the planted FIFO");
    assert!(
        matches!(&found, Ok(m) if m.is_empty())
            || matches!(&found, Err(ProviderError::InvalidRequest(_))),
        "{found:?}"
    );
    let read = p.read_process_output(&id, &good_id, 1 << 63, 10).await;
    assert!(
        matches!(&read, Err(ProviderError::InvalidRequest(m)) if m.contains("after")),
        "{read:?}"
    );
    let read = p
        .read_process_output(&id, &good_id, 0, 10)
        .await
        .expect("read_process_output");
    assert_eq!(read.data, b"hi\n");
    p.kill(&id).await.expect("kill");
}
