//! The CLI's exit statuses, so scripts can tell "no such thread" from "try again later" without
//! parsing messages. README.md lists them; `threads exec` exits with the command's own status
//! instead when the command ran.

use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Anything not covered below: a server fault, an unexpected answer, a local I/O error.
    Failure = 1,
    /// The command line or the request was wrong (clap uses 2 for its usage errors too).
    Usage = 2,
    /// No such thread (or route: a wrong `--url`).
    NotFound = 3,
    /// The thread's state forbids it now: illegal transition, live hold, expired thread.
    Conflict = 4,
    /// The API could not be reached or is busy; the same command may work later.
    Unavailable = 5,
    /// Missing or wrong API key.
    Unauthorized = 6,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

/// The status for an error that reached `main`: client errors know theirs, the rest are generic.
pub fn of_error(error: &anyhow::Error) -> Exit {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<crate::client::ClientError>())
        .map_or(Exit::Failure, crate::client::ClientError::exit)
}

/// The error is only that stdout's reader went away (`threadbox threads list | head -1`): the
/// command's output was cut short on purpose, which is no failure to report.
pub fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
