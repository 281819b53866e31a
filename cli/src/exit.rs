//! The CLI's exit statuses, so scripts can tell "no such thread" from "try again later" without
//! parsing messages. docs/dev.md#the-operator-cli lists them; `threads exec` exits with the
//! command's own status instead when the command ran.

use std::process::ExitCode;

use crate::client::{is_busy, ClientError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Anything not covered below: a server fault, an unexpected answer, a local I/O error.
    Failure = 1,
    /// The command line or the request was wrong (clap uses 2 for its usage errors too).
    Usage = 2,
    /// No such thread (or route: a wrong `--url`).
    NotFound = 3,
    /// The thread's state forbids it now: illegal transition, live hold, expired thread, a call
    /// interrupted by a pause, reset or destroy, a full sandbox disk.
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

/// The status for an error that reached `main`: an API client's error by what it means, the
/// rest generic.
pub fn of_error(error: &anyhow::Error) -> Exit {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<ClientError>())
        .map_or(Exit::Failure, of_client_error)
}

/// What a failed API call tells the caller to do.
pub fn of_client_error(error: &ClientError) -> Exit {
    match error {
        // A thread still in another worker's transition: 409, but try again, as with 503.
        ClientError::Api { code, .. } if code == "busy" => Exit::Unavailable,
        ClientError::Api { status, .. } => for_status(*status),
        ClientError::Unreachable { .. } => Exit::Unavailable,
        ClientError::Protocol { .. } => Exit::Failure,
        ClientError::Config(_) => Exit::Usage,
    }
}

/// What each HTTP status tells the caller to do.
pub fn for_status(status: u16) -> Exit {
    match status {
        400 | 405 | 411 | 413 | 414 | 415 | 422 => Exit::Usage,
        401 | 403 => Exit::Unauthorized,
        404 | 410 => Exit::NotFound,
        // 507: the sandbox's disk is full, its state rather than the request or the server.
        409 | 507 => Exit::Conflict,
        status if is_busy(status) => Exit::Unavailable,
        _ => Exit::Failure,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_what_the_caller_should_do() {
        let cases = [
            (400, Exit::Usage),
            (413, Exit::Usage),
            (415, Exit::Usage),
            (401, Exit::Unauthorized),
            (403, Exit::Unauthorized),
            (404, Exit::NotFound),
            (409, Exit::Conflict),
            (507, Exit::Conflict),
            (429, Exit::Unavailable),
            (503, Exit::Unavailable),
            (504, Exit::Unavailable),
            (500, Exit::Failure),
            (502, Exit::Failure),
            (418, Exit::Failure),
        ];
        for (status, exit) in cases {
            assert_eq!(for_status(status), exit, "{status}");
        }
        // The numbers are the documented interface.
        let codes: Vec<u8> = [
            Exit::Failure,
            Exit::Usage,
            Exit::NotFound,
            Exit::Conflict,
            Exit::Unavailable,
            Exit::Unauthorized,
        ]
        .iter()
        .map(|e| e.code())
        .collect();
        assert_eq!(codes, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn client_errors_map_to_what_they_mean() {
        let body = br#"{"error":{"code":"unknown_thread","message":"no thread demo"}}"#;
        let error = ClientError::from_response(404, None, body);
        assert_eq!(of_client_error(&error), Exit::NotFound);
        for url in ["127.0.0.1:8787", "ftp://x"] {
            let error = crate::client::Client::new(url, None).unwrap_err();
            assert_eq!(of_client_error(&error), Exit::Usage, "{url}: {error}");
        }
    }
}
