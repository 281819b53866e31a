//! The fake's envd: the sandbox proxy's routing and 502, envd's token check, the
//! `process.Process` Connect service (running commands for real, see the module doc of the
//! parent) and `/files`.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use threadbox_e2b::wire::{self, StartRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::api::{error, fault_response, json_response, record};
use super::state::{kill_group, FakeState, Process, StdinPipe, World};
use super::Route;

const ENVD_PORT: &str = "49983";
const HOME: &str = "/home/user";
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Runs inside a fresh user and mount namespace: the sandbox's directories are bound over
/// `/home` and `/tmp`, then the process starts in its working directory. Arguments: the home
/// parent, the tmp directory, the cwd, then the program and its arguments.
const NAMESPACE_SETUP: &str =
    r#"mount --bind "$1" /home && mount --bind "$2" /tmp && cd "$3" && shift 3 && exec "$@""#;

pub(super) fn router(world: Arc<World>) -> Router {
    Router::new()
        .route("/health", get(|| async { StatusCode::NO_CONTENT }))
        .route("/process.Process/Start", post(start))
        .route("/process.Process/SendInput", post(send_input))
        .route("/process.Process/CloseStdin", post(close_stdin))
        .route("/process.Process/SendSignal", post(send_signal))
        .route("/files", get(download).post(upload))
        .layer(middleware::from_fn_with_state(world.clone(), gate))
        .layer(middleware::from_fn_with_state(world.clone(), record))
        .with_state(world)
}

/// The sandbox a request reached, put in its extensions by [`gate`].
#[derive(Clone)]
struct Reached {
    id: String,
    /// The host directories behind the sandbox's `/home/user` and `/tmp`.
    home: PathBuf,
    tmp: PathBuf,
    env_vars: BTreeMap<String, String>,
}

fn proxy_not_found(id: &str) -> Response {
    json_response(
        502,
        json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502}),
    )
}

/// The proxy (route by header or `49983-<id>.` host; no running sandbox → 502) and envd's
/// access-token check (401), in that order, as in E2B.
async fn gate(State(world): State<Arc<World>>, mut req: Request, next: Next) -> Response {
    let (fault, delay) = {
        let mut inner = world.lock();
        (inner.take_fault(Route::Envd), inner.envd_delay)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(fault) = fault {
        return fault_response(fault);
    }
    let headers = req.headers();
    let by_header = headers
        .get("e2b-sandbox-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let by_host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .and_then(|h| h.strip_prefix(&format!("{ENVD_PORT}-")))
        .and_then(|rest| rest.split('.').next())
        .map(str::to_owned);
    let Some(id) = by_header.or(by_host) else {
        return proxy_not_found("");
    };
    if headers
        .get("e2b-sandbox-port")
        .is_some_and(|p| p.as_bytes() != ENVD_PORT.as_bytes())
    {
        return json_response(
            502,
            json!({"sandboxId": id, "message": "The sandbox is running but port is not open", "code": 502}),
        );
    }
    let reached = {
        let inner = world.lock();
        match inner.sandboxes.get(&id) {
            Some(s) if s.state == FakeState::Running => {
                let token_ok = headers
                    .get("x-access-token")
                    .is_some_and(|t| t.as_bytes() == s.token.as_bytes());
                if !token_ok && req.uri().path() != "/health" {
                    return error(
                        401,
                        "unauthorized access, please provide a valid access token or method signing if supported",
                    );
                }
                Reached {
                    id: id.clone(),
                    home: s.home(),
                    tmp: s.tmp(),
                    env_vars: s.env_vars.clone(),
                }
            }
            _ => return proxy_not_found(&id),
        }
    };
    req.extensions_mut().insert(reached);
    next.run(req).await
}

fn event(kind: &str, body: Value) -> Bytes {
    Bytes::from(wire::event_frame(kind, body))
}

fn end_stream(error: Option<(&str, String)>) -> Bytes {
    Bytes::from(wire::end_stream_frame(
        error
            .as_ref()
            .map(|(code, message)| (*code, message.as_str())),
    ))
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response {
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, std::convert::Infallible>(bytes), rx))
    }));
    (
        StatusCode::OK,
        [("content-type", "application/connect+json")],
        body,
    )
        .into_response()
}

/// A stream that is only its end-of-stream error, as connect-go answers a handler that fails
/// before sending anything (still HTTP 200).
fn failed_stream(code: &str, message: String) -> Response {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(end_stream(Some((code, message))));
    stream_response(rx)
}

/// `process.Process/Start`.
async fn start(
    State(world): State<Arc<World>>,
    Extension(sandbox): Extension<Reached>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/connect+json") {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported content type",
        )
            .into_response();
    }
    let request = match parse_request_frame(&body) {
        Ok(r) => r,
        Err(message) => return failed_stream("invalid_argument", message),
    };
    let deadline = headers
        .get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() <= 10)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    let keepalive = headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs);

    // envd runs the process as the Basic username's Linux user; a template has `user` and
    // `root`, and the SDKs send one of them.
    let user = match basic_user(&headers).as_deref() {
        None | Some("user") => "user",
        Some("root") => "root",
        Some(other) => {
            return failed_stream(
                "unauthenticated",
                format!("user '{other}' does not exist in the sandbox"),
            )
        }
    };
    let p = &request.process;
    let cwd = match p.cwd.as_deref() {
        None | Some("") => HOME.to_owned(),
        Some(c) if c.starts_with('/') => c.to_owned(),
        Some(c) => format!("{HOME}/{c}"),
    };
    // envd fails the call (invalid_argument, before any `start`) when it cannot chdir or find
    // the program; check the same things before handing the process to the namespace wrapper.
    if !on_host(&cwd, &sandbox).is_dir() {
        return failed_stream(
            "invalid_argument",
            format!(
                "error starting process '{}': chdir {cwd}: no such file or directory",
                p.cmd
            ),
        );
    }
    if !executable_exists(&p.cmd, &sandbox) {
        return failed_stream(
            "invalid_argument",
            format!(
                "error starting process '{}': exec: \"{}\": executable file not found",
                p.cmd, p.cmd
            ),
        );
    }
    let mut command = tokio::process::Command::new("unshare");
    command
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "--",
            "/bin/sh",
            "-c",
            NAMESPACE_SETUP,
            "fake-envd",
        ])
        .arg(sandbox.home.parent().unwrap_or(&sandbox.home))
        .arg(&sandbox.tmp)
        .arg(&cwd)
        .arg(&p.cmd)
        .args(&p.args)
        .env_clear()
        .env("PATH", DEFAULT_PATH)
        .env("HOME", HOME)
        .env("USER", user)
        .env("LANG", "C.UTF-8")
        .envs(&sandbox.env_vars)
        .envs(&p.envs)
        .stdin(if request.stdin.unwrap_or(true) {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a timeout or a signal reaches everything it started; closing the
        // stream does not kill it (as in envd).
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return failed_stream(
                "invalid_argument",
                format!("error starting process '{}': {e}", p.cmd),
            )
        }
    };
    let Some(pid) = child.id() else {
        return failed_stream("internal", "the process vanished at start".into());
    };
    let stdin = child
        .stdin
        .take()
        .map(|s| Arc::new(tokio::sync::Mutex::new(Some(s))));
    world.lock().processes.insert(
        pid,
        Process {
            sandbox_id: sandbox.id.clone(),
            pgid: pid,
            stdin,
        },
    );
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(run(world, child, pid, deadline, keepalive, tx));
    stream_response(rx)
}

fn parse_request_frame(body: &[u8]) -> Result<StartRequest, String> {
    serde_json::from_slice(wire::request_frame(body)?)
        .map_err(|e| format!("invalid StartRequest: {e}"))
}

/// Stream one process: `start`, its output as it comes, `end`, then the end-of-stream frame.
async fn run(
    world: Arc<World>,
    mut child: tokio::process::Child,
    pid: u32,
    deadline: Option<Duration>,
    keepalive: Option<Duration>,
    tx: mpsc::Sender<Bytes>,
) {
    let _ = tx.send(event("start", json!({"pid": pid}))).await;
    let readers = [
        child
            .stdout
            .take()
            .map(|s| pump(Box::new(s), "stdout", tx.clone())),
        child
            .stderr
            .take()
            .map(|s| pump(Box::new(s), "stderr", tx.clone())),
    ];
    let deadline_at = deadline.map(|d| tokio::time::Instant::now() + d);
    let mut timed_out = false;
    let mut ping = keepalive.map(tokio::time::interval);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = async { tokio::time::sleep_until(deadline_at.expect("guarded")).await }, if deadline_at.is_some() && !timed_out => {
                kill_group(pid, "KILL");
                timed_out = true;
            }
            _ = async { ping.as_mut().expect("guarded").tick().await }, if ping.is_some() => {
                let _ = tx.send(event("keepalive", json!({}))).await;
            }
        }
    };
    for reader in readers.into_iter().flatten() {
        let _ = reader.await;
    }
    world.lock_raw().processes.remove(&pid);
    let end = match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            match (status.code(), status.signal()) {
                (Some(code), _) => {
                    let text = format!("exit status {code}");
                    let mut end = json!({"exited": true, "status": text});
                    if code != 0 {
                        end["exitCode"] = json!(code);
                        end["error"] = json!(text);
                    }
                    end
                }
                (None, signal) => {
                    let text = format!("signal: {}", signal_name(signal.unwrap_or(0)));
                    json!({"exitCode": -1, "status": text, "error": text})
                }
            }
        }
        Err(e) => {
            let _ = tx
                .send(end_stream(Some((
                    "internal",
                    format!("waiting for the process: {e}"),
                ))))
                .await;
            return;
        }
    };
    let _ = tx.send(event("end", end)).await;
    let _ = tx
        .send(end_stream(timed_out.then(|| {
            ("deadline_exceeded", "the operation timed out".to_owned())
        })))
        .await;
}

fn signal_name(signal: i32) -> String {
    match signal {
        9 => "killed".into(),
        15 => "terminated".into(),
        2 => "interrupt".into(),
        6 => "aborted".into(),
        other => format!("signal {other}"),
    }
}

/// The username of a `Basic` authorization header, if there is one.
fn basic_user(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    Some(text.split(':').next().unwrap_or_default().to_owned())
}

/// Copy one pipe into `data` events, base64 as protojson writes bytes.
fn pump(
    mut pipe: Box<dyn tokio::io::AsyncRead + Unpin + Send>,
    stream: &'static str,
    tx: mpsc::Sender<Bytes>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        let b64 = base64::engine::general_purpose::STANDARD;
        loop {
            let n = match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // A client that went away does not stop the process (as in envd): keep draining.
            let _ = tx
                .send(event("data", json!({stream: b64.encode(&buf[..n])})))
                .await;
        }
    })
}

fn connect_error(status: u16, code: &str, message: String) -> Response {
    json_response(status, json!({"code": code, "message": message}))
}

/// The unary calls take `application/json` and a bare JSON body.
fn unary_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, Response> {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/json") {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported content type",
        )
            .into_response());
    }
    serde_json::from_slice(body)
        .map_err(|e| connect_error(400, "invalid_argument", format!("invalid request: {e}")))
}

/// The process named by `{"process": {"pid": N}}`, if it belongs to this sandbox.
fn process_of(
    world: &World,
    sandbox: &Reached,
    body: &Value,
) -> Result<(u32, u32, Option<StdinPipe>), Response> {
    let pid = body
        .pointer("/process/pid")
        .and_then(Value::as_u64)
        .ok_or_else(|| connect_error(400, "invalid_argument", "process.pid is required".into()))?
        as u32;
    let inner = world.lock_raw();
    match inner.processes.get(&pid) {
        Some(p) if p.sandbox_id == sandbox.id => Ok((pid, p.pgid, p.stdin.clone())),
        _ => Err(connect_error(
            404,
            "not_found",
            format!("process with pid {pid} not found"),
        )),
    }
}

async fn send_input(
    State(world): State<Arc<World>>,
    Extension(sandbox): Extension<Reached>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = match unary_body(&headers, &body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let (pid, _, stdin) = match process_of(&world, &sandbox, &body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let data = body
        .pointer("/input/stdin")
        .and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default();
    let Some(stdin) = stdin else {
        return connect_error(
            400,
            "failed_precondition",
            format!("process {pid} has no stdin"),
        );
    };
    let mut guard = stdin.lock().await;
    match guard.as_mut() {
        Some(pipe) => match pipe.write_all(&data).await {
            Ok(()) => json_response(200, json!({})),
            Err(e) => connect_error(500, "internal", format!("writing stdin: {e}")),
        },
        None => connect_error(
            400,
            "failed_precondition",
            format!("stdin of {pid} is closed"),
        ),
    }
}

async fn close_stdin(
    State(world): State<Arc<World>>,
    Extension(sandbox): Extension<Reached>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = match unary_body(&headers, &body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let (_, _, stdin) = match process_of(&world, &sandbox, &body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Some(stdin) = stdin {
        stdin.lock().await.take();
    }
    json_response(200, json!({}))
}

async fn send_signal(
    State(world): State<Arc<World>>,
    Extension(sandbox): Extension<Reached>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = match unary_body(&headers, &body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let (_, pgid, _) = match process_of(&world, &sandbox, &body) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let signal = match body.get("signal") {
        Some(Value::String(s)) if s == "SIGNAL_SIGKILL" => "KILL",
        Some(Value::String(s)) if s == "SIGNAL_SIGTERM" => "TERM",
        Some(v) if v.as_u64() == Some(9) => "KILL",
        Some(v) if v.as_u64() == Some(15) => "TERM",
        _ => return connect_error(400, "invalid_argument", "unsupported signal".into()),
    };
    kill_group(pgid, signal);
    json_response(200, json!({}))
}

/// Where an absolute sandbox path lives on the host: `/home/user` and `/tmp` are the
/// sandbox's own directories; everything else is the host's (as the namespace shows it).
fn on_host(path: &str, sandbox: &Reached) -> PathBuf {
    for (prefix, dir) in [(HOME, &sandbox.home), ("/tmp", &sandbox.tmp)] {
        if path == prefix {
            return dir.clone();
        }
        if let Some(rest) = path.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) {
            return dir.join(rest);
        }
    }
    PathBuf::from(path)
}

/// What `exec.LookPath` would find: a path, or a name on the sandbox's `PATH`.
fn executable_exists(cmd: &str, sandbox: &Reached) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        let absolute = if cmd.starts_with('/') {
            cmd.to_owned()
        } else {
            format!("{HOME}/{cmd}")
        };
        return runnable(&on_host(&absolute, sandbox));
    }
    DEFAULT_PATH
        .split(':')
        .any(|dir| runnable(&on_host(&format!("{dir}/{cmd}"), sandbox)))
}

/// A `/files` path: absolute under `/home/user` or `/tmp`, or relative to the home; never one
/// that climbs out of them. Returns the host path and the path as the sandbox names it.
fn files_path(path: &str, sandbox: &Reached) -> Result<(PathBuf, String), Response> {
    let absolute = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{HOME}/{path}")
    };
    let (prefix, dir, rest) = [(HOME, &sandbox.home), ("/tmp", &sandbox.tmp)]
        .into_iter()
        .find_map(|(prefix, dir)| {
            if absolute == prefix {
                Some((prefix, dir, ""))
            } else {
                absolute
                    .strip_prefix(prefix)
                    .and_then(|r| r.strip_prefix('/'))
                    .map(|r| (prefix, dir, r))
            }
        })
        .ok_or_else(|| {
            error(
                400,
                format!("the fake envd serves {HOME} and /tmp only, not '{path}'"),
            )
        })?;
    let mut clean = PathBuf::new();
    for component in Path::new(rest).components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir if clean.pop() => {}
            _ => return Err(error(400, format!("path '{path}' leaves {prefix}"))),
        }
    }
    let shown = format!("{prefix}/{}", clean.to_string_lossy())
        .trim_end_matches('/')
        .to_owned();
    Ok((dir.join(clean), shown))
}

#[derive(Deserialize)]
struct FileQuery {
    #[serde(default)]
    path: Option<String>,
}

/// `GET /files?path=..`.
async fn download(Extension(sandbox): Extension<Reached>, Query(q): Query<FileQuery>) -> Response {
    let Some(path) = q.path.filter(|p| !p.is_empty()) else {
        return error(400, "path query parameter is required");
    };
    let (host, _) = match files_path(&path, &sandbox) {
        Ok(p) => p,
        Err(r) => return r,
    };
    match tokio::fs::metadata(&host).await {
        Err(_) => return error(404, format!("path '{path}' does not exist")),
        Ok(m) if m.is_dir() => return error(400, format!("path '{path}' is a directory")),
        Ok(_) => {}
    }
    match tokio::fs::read(&host).await {
        Ok(bytes) => {
            let name = host
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (
                StatusCode::OK,
                [
                    ("content-type", "application/octet-stream".to_owned()),
                    ("content-disposition", format!("inline; filename={name}")),
                ],
                bytes,
            )
                .into_response()
        }
        Err(e) => error(500, format!("error reading file: {e}")),
    }
}

/// `POST /files?path=..` with a raw body.
async fn upload(
    Extension(sandbox): Extension<Reached>,
    Query(q): Query<FileQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/octet-stream") {
        return error(
            400,
            "the fake envd accepts raw uploads (application/octet-stream) only",
        );
    }
    let Some(path) = q.path.filter(|p| !p.is_empty()) else {
        return error(400, "path query parameter is required for raw body upload");
    };
    let (host, shown) = match files_path(&path, &sandbox) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if host.is_dir() {
        return error(400, format!("path '{path}' is a directory"));
    }
    if let Some(parent) = host.parent() {
        if let Err(e) = tokio::fs::create_dir_all(parent).await {
            return error(500, format!("error creating directories: {e}"));
        }
    }
    match tokio::fs::write(&host, &body).await {
        Ok(()) => {
            let name = host
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            json_response(200, json!([{"path": shown, "name": name, "type": "file"}]))
        }
        // envd answers a full disk with 507 (the contract, §3.4).
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
            error(507, format!("not enough disk space available: {e}"))
        }
        Err(e) => error(500, format!("error writing file: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> Reached {
        Reached {
            id: "i1".into(),
            home: PathBuf::from("/x/i1/home/user"),
            tmp: PathBuf::from("/x/i1/tmp"),
            env_vars: BTreeMap::new(),
        }
    }

    #[test]
    fn home_and_tmp_are_the_sandbox_s_own() {
        let s = sandbox();
        assert_eq!(on_host("/home/user/a", &s), Path::new("/x/i1/home/user/a"));
        assert_eq!(on_host("/tmp", &s), Path::new("/x/i1/tmp"));
        assert_eq!(on_host("/tmpfoo", &s), Path::new("/tmpfoo"));
        assert_eq!(on_host("/usr/bin", &s), Path::new("/usr/bin"));
    }

    #[test]
    fn file_paths_stay_in_home_or_tmp() {
        let s = sandbox();
        let ok = |p: &str| files_path(p, &s).ok();
        assert_eq!(
            ok("/home/user/a/b"),
            Some((
                PathBuf::from("/x/i1/home/user/a/b"),
                "/home/user/a/b".into()
            ))
        );
        assert_eq!(
            ok("a/./b/../c"),
            Some((
                PathBuf::from("/x/i1/home/user/a/c"),
                "/home/user/a/c".into()
            ))
        );
        assert_eq!(
            ok("/tmp/s/t.txt"),
            Some((PathBuf::from("/x/i1/tmp/s/t.txt"), "/tmp/s/t.txt".into()))
        );
        assert!(ok("../x").is_none());
        assert!(ok("/etc/passwd").is_none());
    }
}
