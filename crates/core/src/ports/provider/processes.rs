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
//! err.NNN...  which of chunk k's bytes came from stderr, a bitmap (only where some did)
//! code        the exit status as the shell saw it (128+n for signal n)
//! status      `code` moved here once all output is written: the process has ended
//! ```
//!
//! The output ring is fixed-size chunks, the one `keep` places back deleted as each new one
//! starts: offsets stay stable for ever, a reader names where it is with one number, and the
//! disk the log takes stays bounded (and counts against the sandbox's own quota). stdout and
//! stderr are written in the order they come, as a terminal shows them, and a small Perl
//! writer (`scripts::RELAY`) tags which bytes came from stderr (`streams`); without Perl, or on
//! a terminal, GNU `split` writes the ring and everything is stdout. The command runs in its own
//! session (`setsid`), so a signal to its group never reaches the supervisor, which then records
//! how it ended. With a PTY, util-linux `script` gives the command a terminal; resizing it is
//! `stty` on that terminal from another command, and the kernel tells the command (SIGWINCH).
//!
//! Every script is a constant; the caller's values arrive as positional arguments, as in
//! `exec_files`. What the scripts need is bash, coreutils, util-linux (`setsid`, `script`,
//! `setpriv`) and perl-base, present in every Debian- or Ubuntu-based sandbox, E2B's templates
//! included. A process started as root (`StartProcess::user`) keeps its record the user's: the
//! ring's writer runs as the user and what root writes there is given to them.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{
    ExecCommand, ExecRequest, OutputChunk, ProviderError, SandboxProvider, SandboxUser, SLOW_READER,
};
use crate::domain::Millis;

mod scripts;
mod streams;

use scripts::*;
pub use streams::{stderr_ranges, tag_bytes, tagged_pieces, OutputStream};

/// Bytes in one chunk of a process's output ring.
pub const OUTPUT_CHUNK_BYTES: u64 = 256 * 1024;
/// The ring's default size (chunks kept), and the most a caller may ask for.
pub const DEFAULT_OUTPUT_CHUNKS: u32 = 4;
pub const MAX_OUTPUT_CHUNKS: u32 = 64;
/// The most output one read returns.
pub const MAX_OUTPUT_READ: u64 = 1024 * 1024;
/// Processes kept per sandbox, running or ended; starting one more removes the oldest ended
/// ones, and past this many running ones a start is refused. Each takes at most five of the
/// sandbox's process ids while it runs (its supervisor, `setsid`, the command and the ring's
/// writer; `split`, its filter and a subshell where Perl is missing): 32 take 160 of runc's
/// default 256, leaving the rest to the commands themselves.
pub const MAX_PROCESSES: usize = 32;
/// The largest write to a process's input.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;
/// The most records one listing returns. The sandbox writes the records and may make any
/// number of folders that look like them; threadbox keeps [`MAX_PROCESSES`], so past this many
/// the rest are not looked at.
pub const MAX_LISTED_PROCESSES: usize = 256;
/// The largest output offset a caller may name: offsets are signed 64-bit numbers in the
/// sandbox's shell (and in every record), so a larger one is a bad request, never wrapped.
pub const MAX_OUTPUT_OFFSET: u64 = i64::MAX as u64;
/// The largest chunk size a record may claim (threadbox writes [`OUTPUT_CHUNK_BYTES`]).
const MAX_RECORD_CHUNK: u64 = 64 * 1024 * 1024;

/// The sandbox user's home, where the records are (`$HOME` of the scripts run as the user).
const RECORDS_HOME: &str = "/home/user";
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a follower looks for new output inside the sandbox.
const FOLLOW_POLL: &str = "0.05";

/// A process id: threadbox's name for it, safe as a path component.
pub fn valid_process_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// An output offset from a caller, checked on the host before anything runs (see
/// [`MAX_OUTPUT_OFFSET`]).
pub fn check_output_offset(after: u64) -> Result<u64, ProviderError> {
    if after > MAX_OUTPUT_OFFSET {
        return Err(ProviderError::InvalidRequest(format!(
            "`after` is a byte offset from 0 to {MAX_OUTPUT_OFFSET}; got {after}"
        )));
    }
    Ok(after)
}

/// A process's record as the host read it from the sandbox: every field is what the sandbox's
/// files said, so each is checked here, in one place, whoever read them (the scripts' line on
/// E2B, the host's own reads on runc). `None` for a record that is not well formed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawRecord<'a> {
    pub id: &'a str,
    /// `running`, `exited` or `lost`.
    pub state: &'a str,
    pub code: &'a str,
    pub started: &'a str,
    pub ended: &'a str,
    pub pty: bool,
    pub output_bytes: &'a str,
    pub output_start: &'a str,
    pub command: &'a str,
}

impl RawRecord<'_> {
    pub fn check(&self) -> Option<ProcessInfo> {
        if !valid_process_id(self.id) {
            return None;
        }
        let millis = |s: &str| -> Option<Option<Millis>> {
            match s.trim() {
                "" => Some(None),
                s => s
                    .parse::<i64>()
                    .ok()
                    .filter(|m| *m >= 0)
                    .map(|m| Some(Millis(m))),
            }
        };
        let state = match self.state {
            "running" => ProcessState::Running,
            "exited" => ProcessState::Exited,
            "lost" => ProcessState::Lost,
            _ => return None,
        };
        // A shell's status is 0 to 255; an ended process may lack one (its status file
        // unreadable), nothing else may have one.
        let exit_code = match (state, self.code.trim()) {
            (_, "") => None,
            (ProcessState::Exited, code) => {
                Some(code.parse::<i32>().ok().filter(|c| (0..=255).contains(c))?)
            }
            _ => return None,
        };
        let output_bytes: u64 = self.output_bytes.parse().ok()?;
        let output_start: u64 = self.output_start.parse().ok()?;
        if output_start > output_bytes || output_bytes > MAX_OUTPUT_OFFSET {
            return None;
        }
        let command: String = self
            .command
            .chars()
            .take(300)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        Some(ProcessInfo {
            id: self.id.to_owned(),
            command,
            pty: self.pty,
            state,
            exit_code,
            started_at: millis(self.started)?,
            ended_at: millis(self.ended)?,
            output_bytes,
            output_start,
        })
    }
}

/// Where a process's output is, from what its record holds: the chunk size and the chunk files
/// there are (their numbers, and the newest one's size). `None` when that does not add up.
pub fn output_extent(chunk: u64, chunks: &[u64], last_size: u64) -> Option<(u64, u64)> {
    if chunk == 0 || !chunk.is_multiple_of(8) || chunk > MAX_RECORD_CHUNK {
        return None;
    }
    let (Some(first), Some(last)) = (chunks.iter().min(), chunks.iter().max()) else {
        return Some((0, 0));
    };
    let bytes = last.checked_mul(chunk)?.checked_add(last_size)?;
    let start = first.checked_mul(chunk)?;
    (bytes <= MAX_OUTPUT_OFFSET).then_some((bytes, start))
}

/// A chunk file's number from its name (`out.` and nine digits).
pub fn chunk_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("out.")?;
    (digits.len() == 9 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// A chunk file's name from its number.
pub fn chunk_name(n: u64) -> String {
    format!("out.{n:09}")
}

/// A chunk's tag file's name from its number (see [`streams`]).
pub fn tag_name(n: u64) -> String {
    format!("err.{n:09}")
}

/// The record of a process that is there but not well formed (the sandbox changed its files).
pub fn damaged_record(id: &str, what: &str) -> ProviderError {
    ProviderError::Conflict(format!(
        "the record of process {id} in the sandbox is damaged ({what}); it cannot be read"
    ))
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
    /// Who runs it: the sandbox's user, or its root (as `ExecRequest::user`).
    pub user: SandboxUser,
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
/// after output that left the ring starts later than the one before ended) and the stream it
/// came from (see [`streams`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessChunk {
    pub offset: u64,
    pub data: Vec<u8>,
    pub stream: OutputStream,
}

/// Where a follow sends its output.
pub type ProcessSink = mpsc::Sender<ProcessChunk>;

/// A piece of a process's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOutput {
    /// Where `data` starts: `after`, or later when what was asked for has left the ring.
    pub offset: u64,
    pub data: Vec<u8>,
    /// The parts of `data` (absolute offsets, in order) that came from stderr; the rest is
    /// stdout.
    pub stderr: Vec<std::ops::Range<u64>>,
    pub info: ProcessInfo,
}

impl ProcessOutput {
    /// Where the next read should start.
    pub fn next(&self) -> u64 {
        self.offset + self.data.len() as u64
    }

    /// `data` and where it starts, tagged by its tags (bitmap bytes from `offset / 8`).
    pub fn tagged(offset: u64, data: Vec<u8>, tags: &[u8], info: ProcessInfo) -> Self {
        let stderr = stderr_ranges(offset, data.len() as u64, tags)
            .into_iter()
            .filter(|(_, stream)| *stream == OutputStream::Stderr)
            .map(|(range, _)| range)
            .collect();
        Self {
            offset,
            data,
            stderr,
            info,
        }
    }

    /// `data` in pieces by stream, in order.
    pub fn pieces(&self) -> Vec<ProcessChunk> {
        let mut pieces = Vec::new();
        let mut at = self.offset;
        let piece = |from: u64, to: u64, stream| ProcessChunk {
            offset: from,
            data: self.data[(from - self.offset) as usize..(to - self.offset) as usize].to_vec(),
            stream,
        };
        for range in &self.stderr {
            if range.start > at {
                pieces.push(piece(at, range.start, OutputStream::Stdout));
            }
            pieces.push(piece(range.start, range.end, OutputStream::Stderr));
            at = range.end;
        }
        if at < self.next() {
            pieces.push(piece(at, self.next(), OutputStream::Stdout));
        }
        pieces
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
    /// Every signal, in the order the API documents them.
    pub const ALL: [ProcessSignal; 6] = [
        ProcessSignal::Term,
        ProcessSignal::Kill,
        ProcessSignal::Int,
        ProcessSignal::Hup,
        ProcessSignal::Stop,
        ProcessSignal::Cont,
    ];

    /// The name the API and the sandbox's `kill` take (`TERM`, `KILL`, ...).
    pub fn name(self) -> &'static str {
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

fn script(body: &str, args: &[&str], env: &[(&str, &str)]) -> ExecRequest {
    // Every script reads records with `val` and `num`.
    let mut argv = vec![
        "/bin/bash".to_owned(),
        "-c".to_owned(),
        format!("{VAL}{body}"),
    ];
    argv.push("threadbox".to_owned());
    argv.extend(args.iter().map(|a| a.to_string()));
    ExecRequest {
        user: Default::default(),
        command: ExecCommand::Argv(argv),
        cwd: None,
        // Byte-wise patterns and counts, whatever the sandbox's locale.
        env: env
            .iter()
            .chain(&[("LC_ALL", "C")])
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
    Ok(script(
        &format!("{PROCESS_DIR}{DESCRIBE}{TAGS}{body}"),
        &all,
        &[],
    ))
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
    // The shell's words when the sandbox's process limit stops it forking.
    if super::is_fork_failure(&message) {
        return super::process_limit_reached(None);
    }
    match code {
        Some(3) => ProviderError::InvalidRequest(message),
        Some(4) => ProviderError::Conflict(message),
        Some(5) => ProviderError::Conflict(message),
        Some(6) => ProviderError::Conflict(message),
        _ => ProviderError::Internal(format!(
            "the process script failed ({}): {message}",
            code.map_or("killed".to_owned(), |c| format!("status {c}"))
        )),
    }
}

/// One description line, checked field by field (see [`RawRecord::check`]); `None` when it is
/// not well formed. Exactly nine fields: the script turns tabs in the command into spaces, so
/// a line with more is one a name or file in the sandbox forged.
fn parse_line(line: &str) -> Option<ProcessInfo> {
    let fields: Vec<&str> = line.split('\t').collect();
    let [id, state, code, started, ended, pty, bytes, start, command] = fields[..] else {
        return None;
    };
    RawRecord {
        id,
        state,
        code,
        started,
        ended,
        pty: match pty {
            "0" => false,
            "1" => true,
            _ => return None,
        },
        output_bytes: bytes,
        output_start: start,
        command,
    }
    .check()
}

fn parse_info(line: &str) -> Result<ProcessInfo, ProviderError> {
    parse_line(line).ok_or_else(|| {
        let shown: String = line.chars().take(200).collect();
        ProviderError::Conflict(format!(
            "a process record in the sandbox is damaged; it reads {shown:?}"
        ))
    })
}

/// The well-formed records of a listing, one per id, at most [`MAX_LISTED_PROCESSES`], oldest
/// first. What is not well formed is left out (and logged): one damaged record must not hide
/// the others.
pub fn well_formed(sandbox_id: &str, records: Vec<Option<ProcessInfo>>) -> Vec<ProcessInfo> {
    let mut seen = std::collections::HashSet::new();
    let mut all = Vec::new();
    let mut damaged = 0usize;
    for record in records {
        match record {
            Some(info) if seen.insert(info.id.clone()) => all.push(info),
            _ => damaged += 1,
        }
        if all.len() == MAX_LISTED_PROCESSES {
            break;
        }
    }
    if damaged > 0 {
        tracing::warn!(
            sandbox_id,
            damaged,
            "left out process records that are not well formed"
        );
    }
    all.sort_by_key(|p| (p.started_at, p.id.clone()));
    all
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
    let mut exec = script(
        &format!("{DESCRIBE}{START}"),
        &args,
        &[
            ("RUNNER", RUNNER),
            ("FILTER", RING_FILTER),
            ("RELAY", RELAY),
            ("SUPERVISOR", SUPERVISOR),
        ],
    );
    if request.user == SandboxUser::Root {
        // The records stay in the user's home, whoever started the process.
        exec.env.insert("RECORDS_HOME".into(), RECORDS_HOME.into());
    }
    exec.user = request.user;
    exec.check_sizes().map_err(ProviderError::InvalidRequest)?;
    let out = run(provider, sandbox_id, exec).await?;
    let text = String::from_utf8_lossy(&out);
    let line = text.lines().last().unwrap_or_default();
    // A start whose own description does not read failed: it is not a conflict to try again
    // (the caller retries a conflict, and the id is taken either way, so a retry could only
    // fail or, on a provider that does not keep records, run the command twice).
    parse_line(line).ok_or_else(|| {
        let shown: String = line.chars().take(200).collect();
        ProviderError::Internal(format!(
            "the process start said nothing readable: {shown:?}"
        ))
    })
}

pub async fn list<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
) -> Result<Vec<ProcessInfo>, ProviderError> {
    let most = MAX_LISTED_PROCESSES.to_string();
    let mut request = script(&format!("{DESCRIBE}{LIST}"), &[&most], &[]);
    // A line is at most ~420 bytes; a listing past this is cut, its last line left out.
    request.output_cap = MAX_LISTED_PROCESSES * 512;
    let out = run(provider, sandbox_id, request).await?;
    let records = String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !l.is_empty())
        .map(parse_line)
        .collect();
    Ok(well_formed(sandbox_id, records))
}

pub async fn read_output<P: SandboxProvider + ?Sized>(
    provider: &P,
    sandbox_id: &str,
    id: &str,
    after: u64,
    max: u64,
) -> Result<ProcessOutput, ProviderError> {
    let after = check_output_offset(after)?;
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
    if info.id != id {
        return Err(damaged_record(id, "it names another process"));
    }
    let rest = &out[line_end + 1..];
    let Some(offset_end) = rest.iter().position(|&b| b == b'\n') else {
        // Nothing past `after` yet.
        return Ok(ProcessOutput {
            offset: after.max(info.output_start).min(info.output_bytes),
            data: Vec::new(),
            stderr: Vec::new(),
            info,
        });
    };
    // `POS LEN`, LEN's tags, then at most LEN bytes.
    let (offset, len) = String::from_utf8_lossy(&rest[..offset_end])
        .trim()
        .split_once(' ')
        .and_then(|(o, l)| Some((o.parse::<u64>().ok()?, l.parse::<u64>().ok()?)))
        .filter(|(o, l)| *l <= max && o.checked_add(*l).is_some_and(|e| e <= info.output_bytes))
        .ok_or_else(|| damaged_record(id, "its output does not add up"))?;
    let rest = &rest[offset_end + 1..];
    let tags = (tag_bytes(offset, len) as usize).min(rest.len());
    let (tags, data) = rest.split_at(tags);
    let data = data[..data.len().min(len as usize)].to_vec();
    Ok(ProcessOutput::tagged(offset, data, tags, info))
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
    let after = check_output_offset(after)?;
    let mut request = process_script(FOLLOW, id, &[&after.to_string()])?;
    request.env.insert("POLL".into(), FOLLOW_POLL.into());
    request.timeout = timeout;
    request.output_cap = usize::MAX;
    let (tx, mut rx) = mpsc::channel(16);
    let relay = async {
        let mut position = after;
        let mut frames = streams::Frames::default();
        let mut stderr = Vec::new();
        let mut open = true;
        let mut broken = None;
        while let Some(chunk) = rx.recv().await {
            match chunk {
                OutputChunk::Stdout(bytes) if broken.is_none() => {
                    match frames.push(&bytes, FRAME_BYTES) {
                        Ok((pieces, reached)) => {
                            position = reached.unwrap_or(position);
                            for piece in pieces {
                                if open {
                                    let sent =
                                        tokio::time::timeout(SLOW_READER, output.send(piece)).await;
                                    open = matches!(sent, Ok(Ok(())));
                                }
                            }
                        }
                        Err(e) => broken = Some(e),
                    }
                }
                OutputChunk::Stdout(_) => {}
                OutputChunk::Stderr(bytes) => {
                    if stderr.len() < 64 * 1024 {
                        stderr.extend_from_slice(&bytes);
                    }
                }
            }
        }
        if frames.cut() && broken.is_none() {
            broken = Some("it ended in the middle of a frame".into());
        }
        (position, stderr, broken)
    };
    let (result, (position, stderr, broken)) =
        tokio::join!(provider.exec_streaming(sandbox_id, request, tx), relay);
    let result = result?;
    match result.exit_code {
        Some(0) | None => match broken {
            // A follow cut short (its timeout) may end in the middle of a frame.
            Some(_) if result.exit_code.is_none() => Ok(position),
            Some(what) => Err(damaged_record(id, &format!("its output stream: {what}"))),
            None => Ok(position),
        },
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

pub async fn signal<P: SandboxProvider + ?Sized>(
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
    fn description_lines_are_checked_field_by_field() {
        let good = "abc\texited\t143\t1000\t2000\t0\t10\t0\tsleep 9";
        assert!(parse_line(good).is_some());
        for bad in [
            // A folder named with tabs, its line forging a record of its own.
            "x\trunning\t\t1\t\t0\t0\t0\tforged\texited\t0\t1\t2\t0\t0\t0\tcmd",
            "a/b\texited\t0\t1000\t2000\t0\t10\t0\tcmd",
            "abc\tdone\t0\t1000\t2000\t0\t10\t0\tcmd",
            "abc\texited\t256\t1000\t2000\t0\t10\t0\tcmd",
            "abc\texited\tabc\t1000\t2000\t0\t10\t0\tcmd",
            "abc\trunning\t0\t1000\t\t0\t10\t0\tcmd",
            "abc\texited\t0\t-5\t2000\t0\t10\t0\tcmd",
            "abc\texited\t0\t1000\t2000\t2\t10\t0\tcmd",
            "abc\texited\t0\t1000\t2000\t0\t10\t20\tcmd",
            "abc\texited\t0\t1000\t2000\t0\t-1\t0\tcmd",
            "abc\texited\t0\t1000\t2000\t0\t18446744073709551615\t0\tcmd",
        ] {
            assert!(parse_line(bad).is_none(), "{bad:?}");
        }
        // One record per id, the damaged left out.
        let line = |id: &str| parse_line(&format!("{id}\texited\t0\t1\t2\t0\t0\t0\tc"));
        let all = well_formed("sb", vec![line("a"), None, line("a"), line("b")]);
        let ids: Vec<&str> = all.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
    }

    #[test]
    fn offsets_and_extents_stay_in_range() {
        assert!(check_output_offset(MAX_OUTPUT_OFFSET).is_ok());
        assert!(matches!(
            check_output_offset(1 << 63),
            Err(ProviderError::InvalidRequest(_))
        ));
        assert_eq!(output_extent(8, &[1, 2], 2), Some((18, 8)));
        assert_eq!(output_extent(8, &[], 0), Some((0, 0)));
        // Chunks are whole bytes of their tag bitmaps.
        assert_eq!(output_extent(4, &[1, 2], 2), None);
        assert_eq!(output_extent(0, &[1], 0), None);
        assert_eq!(output_extent(MAX_RECORD_CHUNK, &[u64::MAX / 2], 0), None);
        assert_eq!(chunk_number("out.000000012"), Some(12));
        for bad in ["out.12", "out.00000001x", "out.0000000001", "chunk"] {
            assert_eq!(chunk_number(bad), None, "{bad}");
        }
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
