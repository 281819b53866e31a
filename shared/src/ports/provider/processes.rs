//! Background processes, kept by the sandbox itself: the provider port's defaults for starting,
//! listing, reading, following, writing to, resizing and signalling commands that outlive the
//! request that started them (a dev server, a long test run, an agent on a terminal).
//!
//! Nothing of a process lives in threadbox: a Lambda that started it is gone a second later, and
//! the process must survive that, a pause and a resume. So each one is a small supervisor in the
//! sandbox, started through `exec` and left behind, with its state in files under
//! `$HOME/.threadbox/processes/<id>/`:
//!
//! ```text
//! argv        the command, NUL-separated (read by the runner, never spliced into shell text)
//! command     the command as text, for listings
//! stdin       a FIFO the command reads (opened read-write, so writers come and go without EOF)
//! pgid        the command's process group, written by the command itself before it starts
//! tty         the terminal's device, with a PTY
//! out.NNN...  the output as a ring of fixed-size chunks: chunk k holds bytes [k*C, (k+1)*C)
//! code        the exit status as the shell saw it (128+n for signal n)
//! status      `code` moved here once all output is written: the process has ended
//! ```
//!
//! The output ring is GNU `split` writing fixed-size chunks, each through a filter that deletes
//! the chunk `keep` places back: offsets stay stable for ever, a reader names where it is with
//! one number, and the disk the log takes stays bounded (and counts against the sandbox's own
//! quota). stdout and stderr are merged, as a terminal shows them. The command runs in its own
//! session (`setsid`), so a signal to its group never reaches the supervisor, which then records
//! how it ended. With a PTY, util-linux `script` gives the command a terminal; resizing it is
//! `stty` on that terminal from another command, and the kernel tells the command (SIGWINCH).
//!
//! Every script is a constant; the caller's values arrive as positional arguments, as in
//! `exec_files`. What the scripts need is bash, coreutils and util-linux (`setsid`, `script`),
//! present in every Debian- or Ubuntu-based sandbox, E2B's templates included.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{ExecCommand, ExecRequest, OutputChunk, ProviderError, SandboxProvider, SLOW_READER};
use crate::domain::Millis;

/// Bytes in one chunk of a process's output ring.
pub const OUTPUT_CHUNK_BYTES: u64 = 256 * 1024;
/// The ring's default size (chunks kept), and the most a caller may ask for.
pub const DEFAULT_OUTPUT_CHUNKS: u32 = 4;
pub const MAX_OUTPUT_CHUNKS: u32 = 64;
/// The most output one read returns.
pub const MAX_OUTPUT_READ: u64 = 1024 * 1024;
/// Processes kept per sandbox, running or ended; starting one more removes the oldest ended
/// ones, and past this many running ones a start is refused. Each takes five of the sandbox's
/// process ids while it runs (its supervisor, the command, the ring's `split` and its writer,
/// and the subshell between them): 32 take 160 of runc's default 256, leaving the rest to the
/// commands themselves.
pub const MAX_PROCESSES: usize = 32;
/// The largest write to a process's input.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;

const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a follower looks for new output inside the sandbox.
const FOLLOW_POLL: &str = "0.05";

/// A process id: threadbox's name for it, safe as a path component.
pub fn valid_process_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A new process id: short, random, lower-case.
pub fn new_process_id() -> String {
    let mut id = uuid::Uuid::new_v4().simple().to_string();
    id.truncate(12);
    id
}

/// A terminal's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    pub cols: u16,
    pub rows: u16,
}

impl PtySize {
    pub fn check(self) -> Result<Self, ProviderError> {
        if (1..=1000).contains(&self.cols) && (1..=1000).contains(&self.rows) {
            Ok(self)
        } else {
            Err(ProviderError::InvalidRequest(format!(
                "a terminal is 1 to 1000 columns and rows; got {}x{}",
                self.cols, self.rows
            )))
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartProcess {
    pub id: String,
    pub command: ExecCommand,
    pub cwd: Option<String>,
    pub env: std::collections::BTreeMap<String, String>,
    /// With a size: run on a terminal of that size.
    pub pty: Option<PtySize>,
    /// Chunks of [`OUTPUT_CHUNK_BYTES`] the output ring keeps.
    pub output_chunks: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    Running,
    Exited,
    /// Neither running nor ended properly: its supervisor was killed (by the command's own
    /// doing, the OOM killer, or a sandbox that was recreated).
    Lost,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub id: String,
    pub command: String,
    pub pty: bool,
    pub state: ProcessState,
    /// The exit status as a shell reports it: 128+n when signal n ended it.
    pub exit_code: Option<i32>,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    /// How many bytes of output it has written so far: where a reader that is up to date is.
    pub output_bytes: u64,
    /// The oldest offset still kept; output before it has left the ring.
    pub output_start: u64,
}

/// Output of a followed process, as it comes, each piece with the offset it starts at (a piece
/// after output that left the ring starts later than the one before ended).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessChunk {
    pub offset: u64,
    pub data: Vec<u8>,
}

/// Where a follow sends its output.
pub type ProcessSink = mpsc::Sender<ProcessChunk>;

/// A piece of a process's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOutput {
    /// Where `data` starts: `after`, or later when what was asked for has left the ring.
    pub offset: u64,
    pub data: Vec<u8>,
    pub info: ProcessInfo,
}

impl ProcessOutput {
    /// Where the next read should start.
    pub fn next(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

/// Which signal to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ProcessSignal {
    Term,
    Kill,
    Int,
    Hup,
    Stop,
    Cont,
}

impl ProcessSignal {
    fn name(self) -> &'static str {
        match self {
            ProcessSignal::Term => "TERM",
            ProcessSignal::Kill => "KILL",
            ProcessSignal::Int => "INT",
            ProcessSignal::Hup => "HUP",
            ProcessSignal::Stop => "STOP",
            ProcessSignal::Cont => "CONT",
        }
    }
}

/// The processes' folder and one process's, from its id (`$1`); exit 3 when it does not exist.
const PROCESS_DIR: &str = r#"
base="${HOME:-/home/user}/.threadbox/processes"
D="$base/$1"
if [ ! -d "$D" ]; then printf 'no such process: %s\n' "$1" >&2; exit 3; fi
"#;

/// One line describing the process in `$D` (its id is `${D##*/}`): tab-separated id, state,
/// exit code, started, ended, pty, output bytes, output start, then the command (tabs and line
/// breaks in it replaced by spaces).
const DESCRIBE: &str = r#"
describe() {
  local d=$1 id=${1##*/} state=running code= started= ended= last first size pty=0 cmd=
  [ -e "$d/tty" ] || [ -e "$d/pty" ] && pty=1
  read -r started < "$d/started_at" 2>/dev/null
  if [ -e "$d/status" ]; then state=exited; read -r code < "$d/status"; read -r ended < "$d/ended_at" 2>/dev/null
  else
    read -r sup < "$d/supervisor" 2>/dev/null
    if [ -z "$sup" ] || ! kill -0 "$sup" 2>/dev/null; then state=lost; fi
  fi
  last=-1; first=-1
  for f in "$d"/out.*; do
    [ -e "$f" ] || continue
    n=${f##*.}; n=$((10#$n))
    [ $last -lt $n ] && last=$n
    { [ $first -lt 0 ] || [ $first -gt $n ]; } && first=$n
  done
  read -r C < "$d/chunk"
  if [ $last -ge 0 ]; then
    size=$(stat -c %s "$d/out.$(printf %09d $last)" 2>/dev/null || echo 0)
    bytes=$((last * C + size)); start=$((first * C))
  else bytes=0; start=0; fi
  cmd=$(head -c 300 "$d/command" 2>/dev/null | tr '\t\n\r' '   ')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$state" "$code" "$started" "$ended" "$pty" "$bytes" "$start" "$cmd"
}
"#;

/// Runs the command: records its process group, sets up the terminal, then becomes the command.
/// `$D`, `$PTY` (`COLSxROWS` or empty) and `$WORKDIR` come from the environment.
const RUNNER: &str = r#"read -r _ _ _ _ g _ < /proc/$$/stat; echo "$g" > "$D/pgid"
if [ -n "$PTY" ]; then tty > "$D/tty"; stty cols "${PTY%x*}" rows "${PTY#*x}" 2>/dev/null; fi
cd -- "$WORKDIR" || exit 126
while IFS= read -r -d '' kv; do export "$kv"; done < "$D/env"
mapfile -d '' -t argv < "$D/argv"
exec "${argv[@]}"
"#;

/// `split`'s filter for each new chunk: delete the chunk `$KEEP` places back, then write this one.
const RING_FILTER: &str = r#"n=${FILE##*.}; old=$((10#$n - KEEP)); if [ $old -ge 0 ]; then rm -f -- "$D/out.$(printf %09d $old)"; fi; exec cat > "$FILE""#;

/// The supervisor: runs the command (through `script` with a PTY) in a session of its own, its
/// output through the ring, then records how it ended. `$1` is the process folder.
const SUPERVISOR: &str = r#"export D=$1
{
  if [ -n "$PTY" ]; then
    setsid -w script -qfec "bash $(printf %q "$D/runner")" /dev/null <> "$D/stdin" 2>&1
  else
    setsid -w bash "$D/runner" <> "$D/stdin" 2>&1
  fi
  echo $? > "$D/code"
} | SHELL=/bin/bash split -b "$(cat "$D/chunk")" -d -a 9 --filter="$(cat "$D/filter")" - "$D/out."
date +%s%3N > "$D/ended_at"
mv -f "$D/code" "$D/status" 2>/dev/null || echo 255 > "$D/status"
"#;

/// `$1` id, `$2` command text, `$3` chunk bytes, `$4` chunks kept, `$5` PTY size or empty, `$6`
/// working directory or empty, `$7` most processes, `$8` how many `NAME=value` arguments follow
/// for the command's environment; the rest is the argv.
const START: &str = r#"set -e
base="${HOME:-/home/user}/.threadbox/processes"
mkdir -p "$base"
D="$base/$1"
running=0
for d in "$base"/*/; do
  [ -d "$d" ] || continue
  [ -e "$d/status" ] && continue
  read -r s < "$d/supervisor" 2>/dev/null && kill -0 "$s" 2>/dev/null && running=$((running + 1))
done
if [ "$running" -ge "$7" ]; then printf 'this sandbox already runs %s background processes; stop one first\n' "$running" >&2; exit 4; fi
# Forget the oldest ended processes past the limit.
ls -1tr "$base" | while read -r old; do
  [ "$(ls -1 "$base" | wc -l)" -ge "$7" ] || break
  if [ -e "$base/$old/status" ]; then rm -rf -- "${base:?}/$old"; fi
done || true
if [ -e "$D" ]; then printf 'process %s exists already\n' "$1" >&2; exit 4; fi
mkdir "$D"
printf '%s' "$2" > "$D/command"
printf '%s' "$3" > "$D/chunk"
printf '%s' "$RUNNER" > "$D/runner"
printf '%s' "$FILTER" > "$D/filter"
[ -z "$5" ] || printf '%s' "$5" > "$D/pty"
mkfifo -m 600 "$D/stdin"
date +%s%3N > "$D/started_at"
WORKDIR=${6:-${HOME:-/home/user}}; export WORKDIR; PTY=$5; export PTY; KEEP=$4; export KEEP
max=$7; nenv=$8; shift 8
: > "$D/env"
[ "$nenv" -eq 0 ] || printf '%s\0' "${@:1:$nenv}" > "$D/env"
shift "$nenv"
printf '%s\0' "$@" > "$D/argv"
setsid bash -c "$SUPERVISOR" supervise "$D" < /dev/null > /dev/null 2>&1 &
echo $! > "$D/supervisor"
set +e
# Wait (briefly) until the command has said it runs, so a signal right after reaches it.
for _ in $(seq 200); do if [ -e "$D/pgid" ] || [ -e "$D/status" ]; then break; fi; sleep 0.01; done
describe "$D"
"#;

const LIST: &str = r#"base="${HOME:-/home/user}/.threadbox/processes"
[ -d "$base" ] || exit 0
for d in "$base"/*; do [ -d "$d" ] && describe "$d"; done
exit 0
"#;

/// `$2` offset, `$3` most bytes: the description line, then the bytes from the offset (or from
/// the ring's start when the offset has left it).
const READ: &str = r#"read -r C < "$D/chunk"
line=$(describe "$D")
printf '%s\n' "$line"
bytes=$(printf '%s' "$line" | cut -f7); start=$(printf '%s' "$line" | cut -f8)
pos=$2; [ "$pos" -lt "$start" ] && pos=$start
[ "$pos" -ge "$bytes" ] && exit 0
want=$3; [ $((bytes - pos)) -lt "$want" ] && want=$((bytes - pos))
printf '%s\n' "$pos"
k=$((pos / C)); off=$((pos % C)); last=$(((bytes - 1) / C))
{
  tail -c +$((off + 1)) "$D/out.$(printf %09d $k)" 2>/dev/null
  j=$((k + 1)); while [ $j -le $last ]; do cat "$D/out.$(printf %09d $j)" 2>/dev/null; j=$((j + 1)); done
} | head -c "$want"
"#;

/// `$2` offset: output from there as it comes, until the process has ended and all of it is
/// sent. A jump over output that left the ring is reported on stderr as `skip N`.
const FOLLOW: &str = r#"read -r C < "$D/chunk"
pos=$2
while :; do
  k=$((pos / C)); off=$((pos % C)); f="$D/out.$(printf %09d $k)"
  ended=0; [ -e "$D/status" ] && ended=1
  if [ -e "$f" ]; then
    size=$(stat -c %s "$f")
    if [ "$size" -gt "$off" ]; then
      tail -c +$((off + 1)) "$f" | head -c $((size - off))
      pos=$((pos + size - off)); continue
    fi
    if [ "$size" -ge "$C" ]; then pos=$(((k + 1) * C)); continue; fi
  else
    first=-1
    for g in "$D"/out.*; do [ -e "$g" ] || continue; n=${g##*.}; n=$((10#$n)); { [ $first -lt 0 ] || [ $n -lt $first ]; } && first=$n; done
    if [ $first -gt $k ]; then echo "skip $((first * C - pos))" >&2; pos=$((first * C)); continue; fi
  fi
  if [ $ended = 1 ]; then exit 0; fi
  if [ ! -e "$D/status" ] && { read -r sup < "$D/supervisor"; ! kill -0 "$sup" 2>/dev/null; }; then exit 0; fi
  sleep "$POLL"
done
"#;

/// `$2` signal name: to the command's whole process group.
const SIGNAL: &str = r#"if [ -e "$D/status" ]; then exit 0; fi
read -r g < "$D/pgid" 2>/dev/null || { echo "the process has not started yet" >&2; exit 5; }
kill -s "$2" -- "-$g" 2>/dev/null || kill -s "$2" -- "$g" 2>/dev/null || true
"#;

/// Input on stdin goes to the process's input.
const INPUT: &str = r#"if [ -e "$D/status" ]; then echo "the process has ended" >&2; exit 5; fi
exec cat > "$D/stdin"
"#;

/// `$2` columns, `$3` rows.
const RESIZE: &str = r#"if [ ! -e "$D/tty" ]; then echo "the process has no terminal" >&2; exit 5; fi
[ -e "$D/status" ] && exit 0
stty -F "$(cat "$D/tty")" cols "$2" rows "$3"
"#;

fn script(body: &str, args: &[&str], env: &[(&str, &str)]) -> ExecRequest {
    let mut argv = vec!["/bin/bash".to_owned(), "-c".to_owned(), body.to_owned()];
    argv.push("threadbox".to_owned());
    argv.extend(args.iter().map(|a| a.to_string()));
    ExecRequest {
        command: ExecCommand::Argv(argv),
        cwd: None,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        stdin: None,
        timeout: SCRIPT_TIMEOUT,
        output_cap: 4 * 1024 * 1024,
    }
}

/// A script about one existing process (`$1` its id).
fn process_script(body: &str, id: &str, args: &[&str]) -> Result<ExecRequest, ProviderError> {
    if !valid_process_id(id) {
        return Err(ProviderError::InvalidRequest(format!(
            "{id:?} is not a process id"
        )));
    }
    let mut all = vec![id];
    all.extend_from_slice(args);
    Ok(script(&format!("{PROCESS_DIR}{DESCRIBE}{body}"), &all, &[]))
}

/// Run a script, its stdout whole; a non-zero exit is the error its stderr names.
async fn run<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    request: ExecRequest,
) -> Result<Vec<u8>, ProviderError> {
    let (tx, mut rx) = mpsc::channel(64);
    let collect = async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        while let Some(chunk) = rx.recv().await {
            match chunk {
                OutputChunk::Stdout(b) => out.extend_from_slice(&b),
                OutputChunk::Stderr(b) => err.extend_from_slice(&b),
            }
        }
        (out, err)
    };
    let (result, (out, err)) =
        tokio::join!(provider.exec_streaming(sandbox_id, request, tx), collect);
    let result = result?;
    match result.exit_code {
        Some(0) => Ok(out),
        code => Err(script_error(code, &err)),
    }
}

fn script_error(code: Option<i32>, stderr: &[u8]) -> ProviderError {
    let message = String::from_utf8_lossy(stderr).trim().to_owned();
    // bash's words when the sandbox's process limit stops it forking.
    if message.contains("fork: ") || message.contains("Resource temporarily unavailable") {
        return ProviderError::Conflict(
            "the sandbox has no process ids left (its limit is reached): stop some of its \
             processes and try again"
                .into(),
        );
    }
    match code {
        Some(3) => ProviderError::InvalidRequest(message),
        Some(4) => ProviderError::Conflict(message),
        Some(5) => ProviderError::Conflict(message),
        _ => ProviderError::Internal(format!(
            "the process script failed ({}): {message}",
            code.map_or("killed".to_owned(), |c| format!("status {c}"))
        )),
    }
}

fn parse_info(line: &str) -> Result<ProcessInfo, ProviderError> {
    let bad = || ProviderError::Internal(format!("unreadable process line {line:?}"));
    let fields: Vec<&str> = line.splitn(9, '\t').collect();
    let [id, state, code, started, ended, pty, bytes, start, command] = fields[..] else {
        return Err(bad());
    };
    let millis = |s: &str| s.trim().parse::<i64>().ok().map(Millis);
    Ok(ProcessInfo {
        id: id.to_owned(),
        command: command.to_owned(),
        pty: pty == "1",
        state: match state {
            "running" => ProcessState::Running,
            "exited" => ProcessState::Exited,
            "lost" => ProcessState::Lost,
            _ => return Err(bad()),
        },
        exit_code: code.trim().parse().ok(),
        started_at: millis(started),
        ended_at: millis(ended),
        output_bytes: bytes.parse().map_err(|_| bad())?,
        output_start: start.parse().map_err(|_| bad())?,
    })
}

fn command_text(command: &ExecCommand) -> String {
    match command {
        ExecCommand::Shell(cmd) => cmd.clone(),
        ExecCommand::Argv(argv) => argv.join(" "),
    }
}

pub(crate) async fn start<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    request: StartProcess,
) -> Result<ProcessInfo, ProviderError> {
    if !valid_process_id(&request.id) {
        return Err(ProviderError::InvalidRequest(format!(
            "{:?} is not a process id",
            request.id
        )));
    }
    let chunks = request.output_chunks.clamp(1, MAX_OUTPUT_CHUNKS);
    let pty = request
        .pty
        .map(|size| size.check().map(|s| format!("{}x{}", s.cols, s.rows)))
        .transpose()?
        .unwrap_or_default();
    let argv: Vec<String> = match &request.command {
        ExecCommand::Shell(cmd) => vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
        ExecCommand::Argv(argv) => argv.clone(),
    };
    let text = command_text(&request.command);
    let (chunk, keep, max) = (
        OUTPUT_CHUNK_BYTES.to_string(),
        chunks.to_string(),
        MAX_PROCESSES.to_string(),
    );
    let env: Vec<String> = request
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let env_count = env.len().to_string();
    let mut args = vec![
        request.id.as_str(),
        text.as_str(),
        chunk.as_str(),
        keep.as_str(),
        pty.as_str(),
        request.cwd.as_deref().unwrap_or(""),
        max.as_str(),
        env_count.as_str(),
    ];
    args.extend(env.iter().map(String::as_str));
    args.extend(argv.iter().map(String::as_str));
    let exec = script(
        &format!("{DESCRIBE}{START}"),
        &args,
        &[
            ("RUNNER", RUNNER),
            ("FILTER", RING_FILTER),
            ("SUPERVISOR", SUPERVISOR),
        ],
    );
    exec.check_sizes().map_err(ProviderError::InvalidRequest)?;
    let out = run(provider, sandbox_id, exec).await?;
    let text = String::from_utf8_lossy(&out);
    parse_info(text.lines().last().unwrap_or_default())
}

pub(crate) async fn list<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
) -> Result<Vec<ProcessInfo>, ProviderError> {
    let out = run(
        provider,
        sandbox_id,
        script(&format!("{DESCRIBE}{LIST}"), &[], &[]),
    )
    .await?;
    let mut all: Vec<ProcessInfo> = String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !l.is_empty())
        .map(parse_info)
        .collect::<Result<_, _>>()?;
    all.sort_by_key(|p| (p.started_at, p.id.clone()));
    Ok(all)
}

pub(crate) async fn read_output<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    id: &str,
    after: u64,
    max: u64,
) -> Result<ProcessOutput, ProviderError> {
    let max = max.clamp(1, MAX_OUTPUT_READ);
    let out = run(
        provider,
        sandbox_id,
        process_script(READ, id, &[&after.to_string(), &max.to_string()])?,
    )
    .await?;
    let line_end = out
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| ProviderError::Internal("the process read said nothing".into()))?;
    let info = parse_info(&String::from_utf8_lossy(&out[..line_end]))?;
    let rest = &out[line_end + 1..];
    let Some(offset_end) = rest.iter().position(|&b| b == b'\n') else {
        // Nothing past `after` yet.
        return Ok(ProcessOutput {
            offset: after.max(info.output_start).min(info.output_bytes),
            data: Vec::new(),
            info,
        });
    };
    let offset = String::from_utf8_lossy(&rest[..offset_end])
        .trim()
        .parse()
        .map_err(|_| ProviderError::Internal("the process read gave no offset".into()))?;
    Ok(ProcessOutput {
        offset,
        data: rest[offset_end + 1..].to_vec(),
        info,
    })
}

/// Follow from `after`: the output as it comes, each piece with its offset, and the offset
/// reached. A reader that is gone or stops reading for [`SLOW_READER`] is given up on; the
/// caller stops the follow by dropping it.
pub(crate) async fn follow_output<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    id: &str,
    after: u64,
    timeout: Duration,
    output: ProcessSink,
) -> Result<u64, ProviderError> {
    let mut request = process_script(FOLLOW, id, &[&after.to_string()])?;
    request.env.insert("POLL".into(), FOLLOW_POLL.into());
    request.timeout = timeout;
    request.output_cap = usize::MAX;
    let (tx, mut rx) = mpsc::channel(16);
    let relay = async {
        let mut position = after;
        let mut stderr = Vec::new();
        let mut open = true;
        while let Some(chunk) = rx.recv().await {
            match chunk {
                OutputChunk::Stdout(data) => {
                    let piece = ProcessChunk {
                        offset: position,
                        data,
                    };
                    position += piece.data.len() as u64;
                    if open {
                        let sent = tokio::time::timeout(SLOW_READER, output.send(piece)).await;
                        open = matches!(sent, Ok(Ok(())));
                    }
                }
                // The script reports a jump over output that left the ring as `skip N`.
                OutputChunk::Stderr(bytes) => {
                    stderr.extend_from_slice(&bytes);
                    while let Some(end) = stderr.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = stderr.drain(..=end).collect();
                        let line = String::from_utf8_lossy(&line);
                        if let Some(n) = line.trim().strip_prefix("skip ") {
                            position += n.parse::<u64>().unwrap_or(0);
                        }
                    }
                }
            }
        }
        (position, stderr)
    };
    let (result, (position, stderr)) =
        tokio::join!(provider.exec_streaming(sandbox_id, request, tx), relay);
    let result = result?;
    match result.exit_code {
        Some(0) | None => Ok(position),
        code => Err(script_error(code, &stderr)),
    }
}

pub(crate) async fn write_input<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    id: &str,
    data: &[u8],
) -> Result<(), ProviderError> {
    if data.len() > MAX_INPUT_BYTES {
        return Err(ProviderError::InvalidRequest(format!(
            "input may be at most {MAX_INPUT_BYTES} bytes at a time"
        )));
    }
    let mut request = process_script(INPUT, id, &[])?;
    request.stdin = Some(data.to_vec());
    run(provider, sandbox_id, request).await.map(drop)
}

pub(crate) async fn signal<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    id: &str,
    signal: ProcessSignal,
) -> Result<(), ProviderError> {
    run(
        provider,
        sandbox_id,
        process_script(SIGNAL, id, &[signal.name()])?,
    )
    .await
    .map(drop)
}

pub(crate) async fn resize<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    id: &str,
    size: PtySize,
) -> Result<(), ProviderError> {
    let size = size.check()?;
    run(
        provider,
        sandbox_id,
        process_script(
            RESIZE,
            id,
            &[&size.cols.to_string(), &size.rows.to_string()],
        )?,
    )
    .await
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_path_safe() {
        assert!(valid_process_id(&new_process_id()));
        for bad in ["", "../x", "a/b", "a b", &"x".repeat(33)] {
            assert!(!valid_process_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_description_line_parses() {
        let info = parse_info("abc\texited\t0\t1000\t2000\t1\t300000\t262144\tpython3 -i").unwrap();
        assert_eq!(info.state, ProcessState::Exited);
        assert_eq!(info.exit_code, Some(0));
        assert!(info.pty);
        assert_eq!(info.output_start, 262_144);
        assert_eq!(info.command, "python3 -i");
        let running = parse_info("abc\trunning\t\t1000\t\t0\t0\t0\tsleep 9").unwrap();
        assert_eq!(running.exit_code, None);
        assert_eq!(running.ended_at, None);
        assert!(parse_info("garbage").is_err());
    }

    #[test]
    fn terminal_sizes_are_bounded() {
        assert!(PtySize { cols: 80, rows: 24 }.check().is_ok());
        assert!(PtySize { cols: 0, rows: 24 }.check().is_err());
        assert!(PtySize {
            cols: 80,
            rows: 5000
        }
        .check()
        .is_err());
    }
}
