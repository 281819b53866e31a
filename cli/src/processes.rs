//! `threadbox processes`: a thread's background processes over the HTTP API, so they work the
//! same against `threadbox dev` and a deployed stack. A process outlives the command that
//! started it (and pauses of its sandbox); these commands start one, list them, read or follow
//! one's output, write to its input and signal it.
//!
//! Text for people by default, `--json` for scripts; failures print `error: <message> (<code>)`
//! on stderr and exit with the statuses in `exit.rs` (an unknown process is 3, like an unknown
//! thread). `logs` writes the output raw, as the process wrote it; `--follow` keeps writing it as
//! it comes until the process ends (Ctrl-C stops following, not the process).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use bytesize::ByteSize;
use serde_json::json;
use threadbox_core::ports::{ProcessInfo, ProcessSignal, ProcessState, PtySize};

use threadbox_api::wire::{self, OutputPage, Payload};

use crate::client::{ApiArgs, Client, FollowUpdate, ProcessBody};
use crate::command::{millis, CommandArgs};
use crate::duration;
use crate::threads::output::{write_stdout, Output};
use crate::threads::render::utc;
use crate::threads::table::{Cell, Table, Tint};
use crate::threads::thread_id;

/// Our status when Ctrl-C stopped a follow, as a shell reports a command ended by SIGINT.
const INTERRUPTED: u8 = 130;
/// The longest command line a listing shows.
const COMMAND_WIDTH: usize = 60;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 ok, 1 failure, 2 usage or bad request, 3 no such thread or \
                  process, 4 conflict with the thread's state, 5 API unreachable or busy, 6 bad \
                  or missing API key; 130 when Ctrl-C stops `logs --follow`."
)]
pub struct ProcessesArgs {
    #[command(flatten)]
    api: ApiArgs,

    /// Print JSON instead of text (`logs --follow` prints one object per line).
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: ProcessesCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ProcessesCommand {
    /// Start a command in the background: `start <thread> -- python3 -m http.server`, or
    /// `-c 'shell line'`. Prints its id.
    Start(StartArgs),
    /// The thread's processes, running and ended.
    List {
        #[arg(value_parser = thread_id)]
        thread: String,
    },
    /// A process's output (stdout and stderr merged), raw; `--follow` keeps writing it as it
    /// comes until the process ends.
    Logs {
        #[arg(value_parser = thread_id)]
        thread: String,
        /// The process's id, as `start` printed it.
        process: String,
        /// Start at this byte offset of the output (0, the start, by default; only the last
        /// part of a long output is kept).
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Keep writing the output as it comes, until the process ends (Ctrl-C stops following,
        /// not the process).
        #[arg(short, long)]
        follow: bool,
    },
    /// Write TEXT to a process's standard input.
    Input {
        #[arg(value_parser = thread_id)]
        thread: String,
        /// The process's id, as `start` printed it.
        process: String,
        /// The text to write, as it is.
        text: String,
        /// End the text with a newline, as Enter would.
        #[arg(short = 'n', long)]
        newline: bool,
    },
    /// Send a signal to a process and its children (TERM by default).
    Kill {
        #[arg(value_parser = thread_id)]
        thread: String,
        /// The process's id, as `start` printed it.
        process: String,
        /// TERM, KILL, INT, HUP, STOP or CONT (a SIG prefix and any case are fine).
        #[arg(short, long, default_value = "TERM", value_parser = signal)]
        signal: ProcessSignal,
    },
}

#[derive(clap::Args, Debug)]
struct StartArgs {
    #[command(flatten)]
    command: CommandArgs,

    /// Run on a terminal of this size, COLSxROWS (like 120x40).
    #[arg(long, value_parser = pty_size)]
    pty: Option<PtySize>,

    /// How long the process keeps the thread awake with no output, input or reads, like 30m
    /// (the server's default, 10m, otherwise; at most 24h).
    #[arg(long, value_parser = duration::parse)]
    idle_timeout: Option<Duration>,

    /// Run it as the sandbox's root (uid 0 in the sandbox's own user namespace), not its user.
    #[arg(long)]
    root: bool,
}

impl StartArgs {
    fn spec(self) -> ProcessBody {
        ProcessBody {
            pty: self.pty,
            idle_timeout_ms: millis(self.idle_timeout),
            user: self
                .root
                .then_some(threadbox_core::ports::SandboxUser::Root),
            ..ProcessBody::running(self.command.spec())
        }
    }
}

fn pty_size(raw: &str) -> Result<PtySize, String> {
    let bad = || format!("{raw:?} is not COLSxROWS, like 120x40");
    let (cols, rows) = raw.trim().split_once(['x', 'X']).ok_or_else(bad)?;
    let size = PtySize {
        cols: cols.parse().map_err(|_| bad())?,
        rows: rows.parse().map_err(|_| bad())?,
    };
    size.check().map_err(|e| e.to_string())
}

fn signal(raw: &str) -> Result<ProcessSignal, String> {
    let upper = raw.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    serde_json::from_value(json!(name))
        .map_err(|_| format!("{raw:?} is not one of TERM, KILL, INT, HUP, STOP, CONT"))
}

pub async fn run(args: ProcessesArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let out = Output::new(args.json);
    match args.command {
        ProcessesCommand::Start(start) => {
            let thread = start.command.thread.clone();
            let info = client.start_process(&thread, &start.spec()).await?;
            if out.json {
                out.document(&info)?;
            } else {
                // The id alone on stdout, for `pid=$(threadbox processes start ...)`.
                out.text(&format!("{}\n", info.id))?;
                eprintln!(
                    "threadbox: started {} ({}); its output: threadbox processes logs {thread} {} \
                     --follow",
                    info.id, info.command, info.id
                );
            }
        }
        ProcessesCommand::List { thread } => {
            let processes = client.list_processes(&thread).await?;
            if out.json {
                out.document(&json!({ "processes": processes }))?;
            } else {
                out.text(&processes_table(&processes, out.color))?;
            }
        }
        ProcessesCommand::Logs {
            thread,
            process,
            after,
            follow,
        } => {
            let logs = Logs {
                client: &client,
                thread: &thread,
                process: &process,
                after,
                out,
            };
            return if follow {
                logs.follow().await
            } else {
                logs.so_far().await
            };
        }
        ProcessesCommand::Input {
            thread,
            process,
            text,
            newline,
        } => {
            let mut data = text.into_bytes();
            if newline {
                data.push(b'\n');
            }
            client.write_process_input(&thread, &process, &data).await?;
        }
        ProcessesCommand::Kill {
            thread,
            process,
            signal,
        } => {
            client.signal_process(&thread, &process, signal).await?;
            let name = signal.name();
            if out.json {
                out.document(&json!({"process_id": process, "signal": name}))?;
            } else {
                out.text(&format!("{process}: sent {name}\n"))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `threadbox processes logs` prints: one process's output from an offset.
struct Logs<'a> {
    client: &'a Client,
    thread: &'a str,
    process: &'a str,
    after: u64,
    out: Output,
}

impl Logs<'_> {
    /// The output from `after` up to what the process has written so far, page by page.
    async fn so_far(self) -> anyhow::Result<ExitCode> {
        let mut position = self.after;
        let mut whole = Vec::new();
        let mut first = None;
        loop {
            let page = self
                .client
                .process_output(self.thread, self.process, position, None)
                .await?;
            if page.offset > position {
                eprintln!(
                "threadbox: output {position}..{} is no longer kept (only the last part of a long \
                 output is)",
                page.offset
            );
            }
            first.get_or_insert(page.offset);
            let next = page.next();
            let done = page.data.is_empty() || next >= page.info.output_bytes;
            if self.out.json {
                whole.extend_from_slice(&page.data);
            } else {
                write_stdout(&page.data)?;
            }
            position = next;
            if done {
                if self.out.json {
                    // The API's page, all of it in one.
                    let whole = OutputPage {
                        offset: first.unwrap_or(self.after),
                        next: position,
                        data: Payload::of(&whole),
                        process: page.info,
                        stderr: Vec::new(),
                    };
                    self.out.document(&wire::to_json(&whole))?;
                }
                return Ok(ExitCode::SUCCESS);
            }
        }
    }

    /// The output as it comes, until the process ends; a follow the server ends while the
    /// process still runs (its longest follow) is taken up again where it stopped.
    async fn follow(self) -> anyhow::Result<ExitCode> {
        let Logs {
            client,
            thread,
            process,
            after,
            out,
        } = self;
        let following = async {
            let mut position = after;
            loop {
                let mut stream = client
                    .follow_process_output(thread, process, position)
                    .await?;
                let (next, info) = loop {
                    match stream.next().await? {
                        FollowUpdate::Output(bytes) if out.json => {
                            out.line(&Payload::of(&bytes))?
                        }
                        FollowUpdate::Output(bytes) => write_stdout(&bytes)?,
                        FollowUpdate::End { next, process } => break (next, process),
                    }
                };
                position = next;
                // The server could not say how the process stands: ask.
                let info = match info {
                    Some(info) => Some(info),
                    None => client
                        .list_processes(thread)
                        .await?
                        .into_iter()
                        .find(|p| p.id == process),
                };
                match info {
                    Some(info) if info.state == ProcessState::Running => continue,
                    info => return anyhow::Ok((position, info)),
                }
            }
        };
        let (next, info) = tokio::select! {
            ended = following => ended?,
            _ = tokio::signal::ctrl_c() => {
                eprintln!(
                    "\nthreadbox: stopped following; process {process} still runs (stop it with \
                     `threadbox processes kill {thread} {process}`)"
                );
                return Ok(ExitCode::from(INTERRUPTED));
            }
        };
        if out.json {
            out.line(&json!({ "next": next, "process": info }))?;
        } else {
            let mut stderr = std::io::stderr().lock();
            writeln!(stderr, "threadbox: {}", ended_note(process, info.as_ref()))?;
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// How a process ended, for people.
fn ended_note(process: &str, info: Option<&ProcessInfo>) -> String {
    let Some(info) = info else {
        return format!("process {process} is gone");
    };
    match (info.state, info.exit_code) {
        (ProcessState::Running, _) => format!("process {process} still runs"),
        (ProcessState::Lost, _) => format!("process {process} was lost (its supervisor died)"),
        (ProcessState::Exited, Some(code)) if code > 128 && code < 160 => format!(
            "process {process} was ended by signal {} (status {code})",
            code - 128
        ),
        (ProcessState::Exited, Some(code)) => {
            format!("process {process} exited with status {code}")
        }
        (ProcessState::Exited, None) => format!("process {process} ended"),
    }
}

fn state_tint(info: &ProcessInfo) -> Tint {
    match (info.state, info.exit_code) {
        (ProcessState::Running, _) => Tint::Green,
        (ProcessState::Exited, Some(0)) => Tint::Grey,
        (ProcessState::Exited, _) => Tint::Yellow,
        (ProcessState::Lost, _) => Tint::Red,
    }
}

fn state_name(state: ProcessState) -> &'static str {
    match state {
        ProcessState::Running => "running",
        ProcessState::Exited => "exited",
        ProcessState::Lost => "lost",
    }
}

/// ID, STATE, EXIT, STARTED, OUTPUT and COMMAND, one process a line, oldest first.
fn processes_table(processes: &[ProcessInfo], color: bool) -> String {
    if processes.is_empty() {
        return "no processes\n".to_owned();
    }
    let mut table = Table::new(&["ID", "STATE", "EXIT", "STARTED", "OUTPUT", "COMMAND"]);
    for info in processes {
        let mut command: String = info.command.chars().take(COMMAND_WIDTH).collect();
        if info.command.chars().count() > COMMAND_WIDTH {
            command.push('…');
        }
        if info.pty {
            command = format!("[pty] {command}");
        }
        table.row(vec![
            Cell::from(info.id.clone()),
            Cell::tinted(state_name(info.state), state_tint(info)),
            Cell::from(info.exit_code.map_or("-".to_owned(), |c| c.to_string())),
            Cell::from(info.started_at.map_or("-".to_owned(), utc)),
            Cell::from(ByteSize::b(info.output_bytes).display().iec().to_string()),
            Cell::from(command),
        ]);
    }
    table.render(color)
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use threadbox_core::domain::Millis;

    use super::*;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ProcessesArgs,
    }

    fn parse(args: &[&str]) -> Result<ProcessesCommand, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("processes").chain(args.iter().copied()))
            .map(|w| w.args.command)
    }

    fn start_spec(args: &[&str]) -> serde_json::Value {
        match parse(args).unwrap() {
            ProcessesCommand::Start(start) => serde_json::to_value(start.spec()).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn start_takes_exec_flags_a_terminal_and_an_idle_timeout() {
        assert_eq!(
            start_spec(&[
                "start",
                "demo",
                "--pty",
                "120x40",
                "--idle-timeout",
                "30m",
                "-e",
                "A=1",
                "--",
                "python3",
                "-i"
            ]),
            json!({
                "argv": ["python3", "-i"], "env": {"A": "1"}, "pty": {"cols": 120, "rows": 40},
                "idle_timeout_ms": 1_800_000
            })
        );
        assert_eq!(
            start_spec(&["start", "demo", "-c", "sleep 9 &", "--cwd", "/tmp"]),
            json!({"cmd": "sleep 9 &", "cwd": "/tmp"})
        );
        assert!(parse(&["start", "demo"]).is_err());
        assert!(parse(&["start", "demo", "-c", "ls", "--", "ls"]).is_err());
        assert!(parse(&["start", "demo", "--pty", "80", "-c", "ls"]).is_err());
        assert!(parse(&["start", "demo", "--pty", "0x24", "-c", "ls"]).is_err());
        assert!(parse(&["start", "bad id", "-c", "ls"]).is_err());
    }

    #[test]
    fn signals_by_name_in_any_case() {
        for (raw, want) in [
            ("TERM", ProcessSignal::Term),
            ("kill", ProcessSignal::Kill),
            ("SIGINT", ProcessSignal::Int),
            ("sighup", ProcessSignal::Hup),
        ] {
            assert_eq!(signal(raw).unwrap(), want, "{raw}");
        }
        assert!(signal("USR1").is_err());
        assert!(signal("9").is_err());
        match parse(&["kill", "demo", "abc"]).unwrap() {
            ProcessesCommand::Kill { signal, .. } => assert_eq!(signal, ProcessSignal::Term),
            other => panic!("{other:?}"),
        }
    }

    fn info(state: ProcessState, exit_code: Option<i32>) -> ProcessInfo {
        ProcessInfo {
            id: "abc123".into(),
            command: "python3 -m http.server".into(),
            pty: false,
            state,
            exit_code,
            started_at: Some(Millis(1_700_000_000_000)),
            ended_at: None,
            output_bytes: 2048,
            output_start: 0,
        }
    }

    #[test]
    fn listings_and_endings_read_well() {
        let table = processes_table(&[info(ProcessState::Exited, Some(143))], false);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("ID "), "{table}");
        assert!(lines[1].starts_with("abc123  exited  143 "), "{table}");
        assert!(lines[1].contains("2.0 KiB"), "{table}");
        assert!(lines[1].ends_with("python3 -m http.server"), "{table}");
        assert_eq!(processes_table(&[], false), "no processes\n");
        assert_eq!(
            ended_note("abc123", Some(&info(ProcessState::Exited, Some(143)))),
            "process abc123 was ended by signal 15 (status 143)"
        );
        assert_eq!(
            ended_note("abc123", Some(&info(ProcessState::Exited, Some(3)))),
            "process abc123 exited with status 3"
        );
    }
}
