//! The one error type use cases return; adapters at the edge map it to HTTP codes or replies.

use crate::domain::{BudgetExceeded, RejectKind, Rejected, Status, ThreadId};
use crate::ports::{ProviderError, QueueError, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum UseCaseError {
    #[error("no session for thread {0}")]
    UnknownThread(ThreadId),
    #[error(transparent)]
    Rejected(#[from] Rejected),
    #[error("thread {thread_id} is {status} and did not settle in time; retry shortly")]
    Busy {
        thread_id: ThreadId,
        status: Status,
        /// When another look is worth it.
        retry_after: std::time::Duration,
    },
    #[error("thread {0} is running a command or has a live hold, so it cannot be paused now")]
    Held(ThreadId),
    /// A read that must not change anything found no sandbox it could use as things are.
    #[error(
        "thread {thread_id} is {status} and its sandbox cannot be read as it is; POST \
         /v1/threads/{thread_id}/resolve (or /resume) wakes or recreates it"
    )]
    NoSandbox { thread_id: ThreadId, status: Status },
    #[error("thread {thread_id} has no process {process_id}")]
    UnknownProcess {
        thread_id: ThreadId,
        process_id: String,
    },
    /// The call lost a race with a pause, reset or destroy of its thread: the sandbox it was
    /// using was frozen, replaced or killed under it (`Threadbox::interrupted` decides). Not a
    /// provider failure: the caller may try again once the thread is as it wants it.
    #[error(
        "thread {thread_id} was {what} while this call ran, so it did not finish; the thread \
         is now {status}{}",
        if *status == Status::Active { "; try again" } else { "" }
    )]
    Interrupted {
        thread_id: ThreadId,
        /// What happened to the sandbox: "paused", "reset", "destroyed".
        what: &'static str,
        status: Status,
    },
    /// A resolve asked for a network profile other than the thread's own: the body of a resolve
    /// only chooses the profile of a thread it creates.
    #[error(
        "thread {thread_id} already has the network profile {current}; a resolve chooses the \
         profile only when it creates the thread: PUT /v1/threads/{thread_id}/network changes it"
    )]
    NetworkConflict {
        thread_id: ThreadId,
        current: String,
    },
    /// A resolve named an image other than the thread's own.
    #[error(
        "thread {thread_id} already has the image {current}; a resolve chooses the image only \
         when it creates the thread: PUT /v1/threads/{thread_id}/image changes it (for its next \
         sandbox)"
    )]
    ImageConflict {
        thread_id: ThreadId,
        current: crate::domain::ImageName,
    },
    /// No image is registered under the name asked for (`domain::unknown_image` says which
    /// are).
    #[error("{0}")]
    UnknownImage(String),
    /// A budget refused the work (`usecases::budget`): a scope's hourly cap on new sandboxes,
    /// or a day's compute (the thread is paused, never destroyed).
    #[error(transparent)]
    Budget(BudgetExceeded),
    /// A fork's new thread exists already.
    #[error("thread {0} exists already; a fork makes a new thread")]
    ThreadExists(ThreadId),
    /// The thread has no such checkpoint (another thread's is none of its).
    #[error("thread {thread_id} has no checkpoint {checkpoint}")]
    UnknownCheckpoint {
        thread_id: ThreadId,
        checkpoint: crate::domain::CheckpointId,
    },
    /// A checkpoint would not fit the thread's checkpoint quota: the message has the numbers.
    #[error("{0}")]
    CheckpointQuota(String),
    /// The request is wrong as sent (a label too long, a fork into itself).
    #[error("{0}")]
    BadRequest(String),
    #[error("sandbox provider: {0}")]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl UseCaseError {
    /// A stable, machine-readable code for API bodies and Lambda error types.
    pub fn code(&self) -> &'static str {
        match self {
            UseCaseError::UnknownThread(_) => "unknown_thread",
            UseCaseError::Rejected(r) => match r.kind {
                RejectKind::Busy => "busy",
                RejectKind::Expired => "thread_expired",
                RejectKind::Illegal => "illegal_transition",
            },
            UseCaseError::Busy { .. } => "busy",
            UseCaseError::Held(_) => "held",
            UseCaseError::NoSandbox { .. } => "no_sandbox",
            UseCaseError::UnknownProcess { .. } => "unknown_process",
            UseCaseError::NetworkConflict { .. } => "network_conflict",
            UseCaseError::ImageConflict { .. } => "image_conflict",
            UseCaseError::UnknownImage(_) => "unknown_image",
            UseCaseError::Interrupted { .. } => "interrupted",
            UseCaseError::Budget(b) => b.code(),
            UseCaseError::ThreadExists(_) => "thread_exists",
            UseCaseError::UnknownCheckpoint { .. } => "unknown_checkpoint",
            UseCaseError::CheckpointQuota(_) => "checkpoint_quota",
            UseCaseError::BadRequest(_) => "invalid_request",
            UseCaseError::Provider(ProviderError::InvalidRequest(_)) => "invalid_request",
            UseCaseError::Provider(ProviderError::NotFound(_)) => "file_not_found",
            UseCaseError::Provider(ProviderError::NoSpace(_)) => "no_space",
            UseCaseError::Provider(ProviderError::Unsupported(_)) => "unsupported",
            UseCaseError::Provider(ProviderError::LimitReached { limit, .. }) => limit.code(),
            UseCaseError::Provider(_) => "provider_error",
            UseCaseError::Store(_) => "store_unavailable",
            UseCaseError::Queue(_) => "queue_unavailable",
        }
    }

    /// The message for callers (API answers, Slack replies). A provider's internal failure
    /// (runc's own errors, host I/O) can name host paths and state, which are the operator's
    /// business, not the caller's: those go to the server log in full, and the caller gets a
    /// message without them. Everything else is already worded for the caller.
    pub fn public_message(&self) -> String {
        match self {
            UseCaseError::Provider(ProviderError::Internal(detail)) => {
                tracing::error!(%detail, "sandbox provider failure (details kept out of the answer)");
                "the sandbox provider failed; the server log has the details".to_owned()
            }
            other => other.to_string(),
        }
    }

    /// Another worker's transition of the thread has not settled: the same call will succeed
    /// once it has.
    pub fn is_busy(&self) -> bool {
        match self {
            UseCaseError::Busy { .. } => true,
            UseCaseError::Rejected(r) => r.kind == RejectKind::Busy,
            _ => false,
        }
    }

    /// Whether the same call may succeed if retried later.
    pub fn is_retryable(&self) -> bool {
        match self {
            // Once the window resets (`BudgetExceeded::retry_after`).
            UseCaseError::Busy { .. }
            | UseCaseError::Held(_)
            | UseCaseError::Budget(_)
            | UseCaseError::Interrupted { .. } => true,
            UseCaseError::Rejected(r) => r.kind == RejectKind::Busy,
            UseCaseError::Provider(p) => p.is_retryable(),
            UseCaseError::Store(s) => !matches!(s, StoreError::Corrupt(_)),
            UseCaseError::Queue(_) => true,
            UseCaseError::UnknownThread(_)
            | UseCaseError::NoSandbox { .. }
            | UseCaseError::NetworkConflict { .. }
            | UseCaseError::ImageConflict { .. }
            | UseCaseError::UnknownImage(_)
            | UseCaseError::UnknownProcess { .. }
            | UseCaseError::ThreadExists(_)
            | UseCaseError::UnknownCheckpoint { .. }
            | UseCaseError::CheckpointQuota(_)
            | UseCaseError::BadRequest(_) => false,
        }
    }
}
