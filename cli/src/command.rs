//! The command a sandbox runs, as `threads exec` and `processes start` both take it: the thread,
//! a shell line (`-c`) or a program after `--`, its working directory and environment.

use std::time::Duration;

use threadbox_api::wire::CommandSpec;

use crate::threads::thread_id;

#[derive(clap::Args, Debug)]
pub struct CommandArgs {
    /// The thread to run in; its sandbox is created on first use and resumed when paused.
    #[arg(value_parser = thread_id)]
    pub thread: String,

    /// A shell command line, run with `/bin/sh -c` (instead of a program after `--`).
    #[arg(short = 'c', long = "cmd", conflicts_with = "argv")]
    cmd: Option<String>,

    /// Working directory inside the sandbox (an absolute path).
    #[arg(long)]
    cwd: Option<String>,

    /// An environment variable for the command, KEY=VALUE; repeat for more.
    #[arg(short = 'e', long = "env", value_parser = env_pair)]
    env: Vec<(String, String)>,

    /// The program and its arguments, after `--`: run without a shell.
    #[arg(last = true, required_unless_present = "cmd")]
    argv: Vec<String>,
}

impl CommandArgs {
    /// The command as the API's bodies take it.
    pub fn spec(self) -> CommandSpec {
        let (cmd, argv) = match self.cmd {
            Some(cmd) => (Some(cmd), None),
            None => (None, Some(self.argv)),
        };
        CommandSpec {
            cmd,
            argv,
            cwd: self.cwd,
            env: self.env.into_iter().collect(),
        }
    }
}

fn env_pair(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{raw:?} is not KEY=VALUE")),
    }
}

/// A duration as the API's milliseconds. Sub-millisecond parts round up: "1ms" must not become
/// 0, which the API refuses.
pub fn millis(duration: Option<Duration>) -> Option<u64> {
    duration.map(|t| u64::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
}
