//! `threadbox threads exec`: run one command in a thread's sandbox, with its output passed
//! through untouched as it happens and its exit status as ours, so it composes like a local
//! command. `--json` waits for the end and prints the whole result as one document.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use threadbox_core::ports::{ExecResult, OutputChunk};

use super::output::{write_stdout, Output};
use crate::client::{Client, ExecBody, ExecUpdate};
use crate::command::{millis, CommandArgs};
use crate::duration;

/// Our status when the command was killed by its timeout, as `timeout(1)` does.
const TIMED_OUT: u8 = 124;
/// Our status when the command was killed (out of memory or another signal): 128 + SIGKILL, as
/// a shell reports a killed child.
const KILLED: u8 = 137;

#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    command: CommandArgs,

    /// Kill the command after this long, like 30s or 5m (the server's default otherwise; at
    /// most 10m).
    #[arg(long, value_parser = duration::parse)]
    timeout: Option<Duration>,

    /// Pass this program's standard input to the command (UTF-8 text).
    #[arg(long)]
    stdin: bool,

    /// Run it as the sandbox's root (uid 0 in the sandbox's own user namespace), not its user.
    #[arg(long)]
    root: bool,
}

impl ExecArgs {
    fn spec(self, stdin: Option<String>) -> ExecBody {
        ExecBody {
            stdin,
            timeout_ms: millis(self.timeout),
            // Ctrl-C on the CLI stops the command, as it would a local one.
            kill_on_disconnect: true,
            user: self
                .root
                .then_some(threadbox_core::ports::SandboxUser::Root),
            ..ExecBody::running(self.command.spec())
        }
    }
}

pub async fn run(client: &Client, args: ExecArgs, out: Output) -> anyhow::Result<ExitCode> {
    let stdin = if args.stdin {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading standard input (the API carries it as UTF-8 text)")?;
        Some(text)
    } else {
        None
    };
    let thread = args.command.thread.clone();
    // `--json` wants one document: the result whole. Otherwise the output streams as it comes.
    if out.json {
        let result = client.exec(&thread, &args.spec(stdin)).await?;
        out.document(&result)?;
        return Ok(ExitCode::from(status_of(&result)));
    }
    let mut stream = client.exec_streaming(&thread, &args.spec(stdin)).await?;
    let result = loop {
        match stream.next().await? {
            ExecUpdate::Output(OutputChunk::Stdout(bytes)) => write_stdout(&bytes)?,
            ExecUpdate::Output(OutputChunk::Stderr(bytes)) => {
                let mut stderr = std::io::stderr().lock();
                stderr.write_all(&bytes)?;
                stderr.flush()?;
            }
            ExecUpdate::Exit(result) => break result,
        }
    };
    let mut stderr = std::io::stderr().lock();
    for note in notes(&result) {
        writeln!(stderr, "threadbox: {note}")?;
    }
    Ok(ExitCode::from(status_of(&result)))
}

/// What the output alone would not tell: why the command stopped, and whether output is missing.
fn notes(result: &ExecResult) -> Vec<String> {
    let mut notes = Vec::new();
    if result.timed_out {
        notes.push(format!(
            "the command timed out after {} and was killed",
            duration::format(Duration::from_millis(result.duration_ms))
        ));
    } else if result.out_of_memory {
        notes.push("the command ran out of memory and was killed".to_owned());
    } else if result.exit_code.is_none() {
        notes.push("the command was killed by a signal".to_owned());
    }
    if result.truncated {
        notes.push("the output was cut at the sandbox's output cap".to_owned());
    }
    notes
}

/// The command's own status when it exited; otherwise what a shell would say about how it died.
fn status_of(result: &ExecResult) -> u8 {
    match result.exit_code {
        // Statuses are one byte on Linux; the mask keeps any other value in range.
        Some(code) => (code & 0xff) as u8,
        None if result.timed_out => TIMED_OUT,
        None => KILLED,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        exec: ExecArgs,
    }

    fn parse(args: &[&str]) -> Result<ExecArgs, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("exec").chain(args.iter().copied())).map(|w| w.exec)
    }

    fn result(exit_code: Option<i32>) -> ExecResult {
        ExecResult {
            exit_code,
            stdout: String::new(),
            stderr: String::new(),
            duration_ms: 30_000,
            timed_out: false,
            truncated: false,
            out_of_memory: false,
        }
    }

    #[test]
    fn argv_after_the_dashes_or_a_shell_line() {
        let args = parse(&["demo", "-e", "A=1", "--timeout", "90s", "--", "ls", "-la"]).unwrap();
        let json = serde_json::to_value(args.spec(None)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "argv": ["ls", "-la"], "env": {"A": "1"}, "timeout_ms": 90_000,
                "kill_on_disconnect": true
            })
        );
        let args = parse(&["demo", "-c", "echo $HOME | wc -c", "--cwd", "/tmp"]).unwrap();
        let json = serde_json::to_value(args.spec(Some("in".into()))).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "cmd": "echo $HOME | wc -c", "cwd": "/tmp", "stdin": "in",
                "kill_on_disconnect": true
            })
        );
    }

    #[test]
    fn a_command_is_required_and_only_one_kind() {
        assert!(parse(&["demo"]).is_err());
        assert!(parse(&["demo", "-c", "ls", "--", "ls"]).is_err());
        assert!(parse(&["demo", "ls"]).is_err(), "argv needs the dashes");
        assert!(parse(&["demo", "-e", "NOEQUALS", "-c", "ls"]).is_err());
        assert!(parse(&["bad id", "-c", "ls"]).is_err());
    }

    #[test]
    fn the_exit_status_is_the_commands_or_says_how_it_died() {
        assert_eq!(status_of(&result(Some(0))), 0);
        assert_eq!(status_of(&result(Some(7))), 7);
        assert_eq!(status_of(&result(Some(256 + 3))), 3);
        assert_eq!(status_of(&result(None)), KILLED);
        let timed_out = ExecResult {
            timed_out: true,
            truncated: true,
            ..result(None)
        };
        assert_eq!(status_of(&timed_out), TIMED_OUT);
        assert_eq!(
            notes(&timed_out),
            [
                "the command timed out after 30s and was killed",
                "the output was cut at the sandbox's output cap"
            ]
        );
        assert!(notes(&result(Some(1))).is_empty());
    }
}
