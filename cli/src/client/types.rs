//! The API's request and response bodies as the client sees them. Sessions, events, sandbox
//! handles and exec results are the shared crate's own types, and the exec and process bodies
//! the API's own (`threadbox_api::wire`), so client and server cannot drift;
//! the envelopes around them mirror `crates/api/src/http/threads.rs`. Unknown fields are ignored, so
//! a newer server's additions do not break an older CLI.

use serde::{Deserialize, Serialize};
use threadbox_core::domain::{
    ImageInfo, ImageName, LifecycleEvent, NetworkProfile, Session, Usage,
};
use threadbox_core::usecases::{SandboxHandle, SandboxStatus};

/// A session with how long it has been idle (by the server's clock), and what its sandbox used
/// when the listing asked for it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadView {
    #[serde(flatten)]
    pub session: Session,
    pub idle_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One page of `GET /v1/threads`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadPage {
    pub threads: Vec<ThreadView>,
    /// The cursor for the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `GET /v1/threads/{id}`: the session, its most recent events (oldest first), and its sandbox
/// as the provider sees it now, when it has one.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadDetail {
    pub session: ThreadView,
    pub events: Vec<LifecycleEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxStatus>,
    /// Absent from a server older than usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What the thread's checkpoints hold; absent where none are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<CheckpointUse>,
}

/// `GET /v1/threads/{id}`'s `checkpoints`: how many the thread keeps and the bytes they hold,
/// against its limits, and their cost a month where a storage price is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointUse {
    pub count: usize,
    pub bytes: u64,
    pub keep: u32,
    pub max_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_month: Option<f64>,
}

/// One page of `GET /v1/threads/{id}/events`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventPage {
    pub events: Vec<LifecycleEvent>,
    /// Pass as `after_seq` to continue.
    pub next_after_seq: u64,
}

/// `POST /v1/threads/{id}/reset`: the fresh sandbox, and the reminder that files were lost.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResetView {
    #[serde(flatten)]
    pub handle: SandboxHandle,
    pub files_lost: bool,
    pub message: String,
}

/// The body of `PUT /v1/threads/{id}/image`, and of a resolve choosing one.
#[derive(Clone, Debug, Serialize)]
pub struct ImageBody<'a> {
    pub image: &'a ImageName,
}

/// The answer to `PUT /v1/threads/{id}/image`: the record as stored, where the image applies
/// (`next_sandbox`, `unchanged`) and what that means.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ImageSet {
    pub session: ThreadView,
    pub applied: String,
    pub message: String,
}

/// The answer to `GET /v1/images`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ImageList {
    pub images: Vec<ImageInfo>,
}

/// The body of `PUT /v1/threads/{id}/network`.
#[derive(Clone, Debug, Serialize)]
pub struct NetworkBody<'a> {
    pub network: &'a NetworkProfile,
}

/// The answer to `PUT /v1/threads/{id}/network`: the record as stored, where the profile
/// applies (`live`, `next_sandbox` or `unchanged`) and a sentence saying so.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NetworkSet {
    pub session: ThreadView,
    pub applied: String,
    pub message: String,
}
