//! `POST /slack/interactions`: the app's interactivity URL. Slack posts button clicks
//! (`block_actions`) and modal submissions (`view_submission`) here, form-encoded as
//! `payload=<json>` and signed like events.
//!
//! Within Slack's 3 seconds the route only checks the signature, claims the click (its
//! `action_ts`, so a redelivered request acts once) and queues it to the worker in the thread's
//! FIFO group, so a button never races a command in the same thread. Pause and Resume are
//! queued as they are. Reset and Undo lose files, so their buttons open a confirmation modal instead (the
//! click's `trigger_id` is only good for 3 seconds, so this is done here, not by the worker);
//! submitting the modal queues the reset. Who may act (members of the thread's channel) and
//! what happens to a thread whose sandbox is gone are the worker's to decide (`worker`).

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::blocks::{self, Action};
use super::format::escape;
use super::ingress::SlackIngress;
use super::thread::SlackPlace;
use super::work::{ActionRequest, AnswerPlace, WorkItem};
use threadbox_api::http::ApiError;
use threadbox_core::domain::{CheckpointId, ThreadId};

/// The reset confirmation modal's `callback_id`.
pub const RESET_CALLBACK: &str = "reset_confirm";
/// The undo confirmation modal's `callback_id`.
pub const UNDO_CALLBACK: &str = "undo_confirm";

/// Slack's form: one field, the JSON payload.
#[derive(Deserialize)]
struct Form {
    payload: String,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Payload {
    BlockActions(BlockActions),
    ViewSubmission(ViewSubmission),
    /// `view_closed`, `shortcut`, …: nothing to do.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct Id {
    id: String,
}

#[derive(Deserialize)]
struct BlockActions {
    team: Id,
    user: Id,
    /// Absent for clicks in the App Home.
    #[serde(default)]
    channel: Option<Id>,
    trigger_id: String,
    actions: Vec<ClickedAction>,
}

#[derive(Deserialize)]
struct ClickedAction {
    action_id: String,
    #[serde(default)]
    value: Option<String>,
    action_ts: String,
}

#[derive(Deserialize)]
struct ViewSubmission {
    team: Id,
    user: Id,
    view: SubmittedView,
}

#[derive(Deserialize)]
struct SubmittedView {
    id: String,
    #[serde(default)]
    callback_id: String,
    #[serde(default)]
    private_metadata: String,
}

/// What the reset and undo modals carry through Slack and back: the thread, where the click
/// was, and for an undo the checkpoint.
#[derive(Serialize, Deserialize)]
struct ResetMetadata {
    thread_id: ThreadId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint: Option<CheckpointId>,
}

impl SlackIngress {
    /// Handle one interactivity request from its headers and raw body.
    pub async fn handle_interaction(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Response, ApiError> {
        self.verify(headers, body)?;
        let form: Form = serde_urlencoded::from_bytes(body).map_err(|error| {
            ApiError::bad_request(
                "invalid_form",
                format!("not a Slack interaction (a form with `payload`): {error}"),
            )
        })?;
        let payload: Payload = serde_json::from_str(&form.payload).map_err(|error| {
            ApiError::bad_request(
                "invalid_json",
                format!("not a Slack interaction payload: {error}"),
            )
        })?;
        match payload {
            Payload::BlockActions(clicks) => self.clicked(clicks).await,
            Payload::ViewSubmission(view) => self.submitted(view).await,
            Payload::Other => Ok(acknowledged()),
        }
    }

    async fn clicked(&self, clicks: BlockActions) -> Result<Response, ApiError> {
        // Slack sends one action per click; a payload with several is handled in order.
        for click in &clicks.actions {
            let Some(action) = Action::of_action_id(&click.action_id) else {
                tracing::debug!(action_id = %click.action_id, "click on an element with no action");
                continue;
            };
            let channel = clicks.channel.as_ref().map(|c| c.id.clone());
            if action == Action::Undo {
                let (checkpoint, thread_id) =
                    undo_of_click(click.value.as_deref(), &clicks.team.id)?;
                self.confirm(&clicks.trigger_id, &thread_id, channel, Some(checkpoint))
                    .await?;
                continue;
            }
            let thread_id = thread_of_click(click.value.as_deref(), &clicks.team.id)?;
            if action == Action::Reset {
                self.confirm(&clicks.trigger_id, &thread_id, channel, None)
                    .await?;
                continue;
            }
            let id = format!("{}:{}:{}", clicks.team.id, clicks.user.id, click.action_ts);
            let request = ActionRequest {
                id: id.clone(),
                thread_id: thread_id.clone(),
                action,
                checkpoint: None,
                team: clicks.team.id.clone(),
                user: clicks.user.id.clone(),
                answer_in: channel.map(|channel| answer_place(&thread_id, channel)),
            };
            let queued = self.queue_action(request).await?;
            tracing::info!(%thread_id, action = action.name(), queued, "Slack button click");
        }
        Ok(acknowledged())
    }

    /// Queue a control for the worker once per click (its id): Slack retries a click whose
    /// answer was slow, and a retry must not pause or reset twice. `false` for a repeat.
    async fn queue_action(&self, request: ActionRequest) -> Result<bool, ApiError> {
        let id = request.id.clone();
        self.queue_once(
            &format!("slack:action:{id}"),
            &WorkItem::Action(request),
            &id,
        )
        .await
    }

    /// Open the modal that asks whether to reset (or, with a checkpoint, to undo), with the
    /// click's `trigger_id`.
    async fn confirm(
        &self,
        trigger_id: &str,
        thread_id: &ThreadId,
        channel: Option<String>,
        checkpoint: Option<CheckpointId>,
    ) -> Result<(), ApiError> {
        let Some(api) = &self.api else {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "slack_not_configured",
                "This button needs to ask for confirmation, and this deployment cannot call Slack",
            ));
        };
        let metadata = ResetMetadata {
            thread_id: thread_id.clone(),
            channel,
            checkpoint: checkpoint.clone(),
        };
        let metadata = serde_json::to_string(&metadata).expect("metadata serialises");
        let view = match &checkpoint {
            Some(checkpoint) => undo_modal(thread_id, checkpoint, &metadata),
            None => reset_modal(thread_id, &metadata),
        };
        api.open_view(trigger_id, &view).await.map_err(|error| {
            tracing::warn!(%error, %thread_id, "could not open the reset confirmation");
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "slack_unavailable",
                format!("could not ask for confirmation: {error}"),
            )
        })
    }

    async fn submitted(&self, submission: ViewSubmission) -> Result<Response, ApiError> {
        let action = match submission.view.callback_id.as_str() {
            RESET_CALLBACK => Action::Reset,
            UNDO_CALLBACK => Action::Undo,
            _ => return Ok(acknowledged()),
        };
        let metadata: ResetMetadata = serde_json::from_str(&submission.view.private_metadata)
            .map_err(|error| {
                ApiError::bad_request(
                    "invalid_metadata",
                    format!("the reset modal's metadata is not ours: {error}"),
                )
            })?;
        let thread_id = metadata.thread_id;
        same_team(&thread_id, &submission.team.id)?;
        if action == Action::Undo && metadata.checkpoint.is_none() {
            return Err(ApiError::bad_request(
                "invalid_metadata",
                "the undo modal's metadata names no checkpoint",
            ));
        }
        // One modal, one reset or undo: its view id is the click's identity.
        let id = format!("view:{}", submission.view.id);
        let request = ActionRequest {
            id: id.clone(),
            thread_id: thread_id.clone(),
            action,
            checkpoint: metadata.checkpoint,
            team: submission.team.id,
            user: submission.user.id,
            answer_in: metadata
                .channel
                .map(|channel| answer_place(&thread_id, channel)),
        };
        let queued = self.queue_action(request).await?;
        tracing::info!(%thread_id, queued, action = action.name(), "Slack confirmation submitted");
        // An empty 200 closes the modal.
        Ok(acknowledged())
    }
}

/// The modal asking whether to reset `thread_id`; `metadata` comes back with the submission.
pub fn reset_modal(thread_id: &ThreadId, metadata: &str) -> Value {
    blocks::modal(
        RESET_CALLBACK,
        "Reset the sandbox?",
        "Reset",
        metadata,
        vec![
            blocks::section(
                ":warning: Reset throws this thread's sandbox away, with *all its files and \
                 running processes*, and starts a fresh one. This cannot be undone.",
            ),
            blocks::context(&format!("Thread `{}`", escape(thread_id.as_str()))),
        ],
    )
}

/// The modal asking whether to put `thread_id`'s files back to `checkpoint`.
pub fn undo_modal(thread_id: &ThreadId, checkpoint: &CheckpointId, metadata: &str) -> Value {
    blocks::modal(
        UNDO_CALLBACK,
        "Undo this code block?",
        "Undo",
        metadata,
        vec![
            blocks::section(
                ":rewind: Undo puts this thread's files (`/home/user`) back as they were just                  before that code block ran. Files made or changed since are lost, and *every                  running process in the sandbox is stopped*.",
            ),
            blocks::context(&format!(
                "Thread `{}` · checkpoint `{}`",
                escape(thread_id.as_str()),
                checkpoint
            )),
        ],
    )
}

/// The checkpoint and thread an Undo button names (`{checkpoint}@{thread}`), checked like any
/// click: the thread must be a Slack thread of the clicker's workspace.
fn undo_of_click(value: Option<&str>, team: &str) -> Result<(CheckpointId, ThreadId), ApiError> {
    let (checkpoint, thread) = value.and_then(|v| v.split_once('@')).ok_or_else(|| {
        ApiError::bad_request("invalid_action", "the Undo button names no checkpoint")
    })?;
    let checkpoint = CheckpointId::parse(checkpoint)
        .map_err(|e| ApiError::bad_request("invalid_checkpoint_id", e))?;
    Ok((checkpoint, thread_of_click(Some(thread), team)?))
}

/// Where an answer to a click in `channel` goes: into the thread, when the click was in the
/// thread's own channel.
fn answer_place(thread_id: &ThreadId, channel: String) -> AnswerPlace {
    let thread_ts = SlackPlace::of(thread_id)
        .filter(|place| place.channel == channel)
        .and_then(|place| place.thread_ts);
    AnswerPlace { channel, thread_ts }
}

/// The thread a button names, which must be a Slack thread of the workspace the click came
/// from: a payload naming another workspace's thread is refused, whatever signed it.
fn thread_of_click(value: Option<&str>, team: &str) -> Result<ThreadId, ApiError> {
    let value = value.ok_or_else(|| {
        ApiError::bad_request("invalid_action", "the button carries no thread id")
    })?;
    let thread_id = ThreadId::parse(value)
        .map_err(|e| ApiError::bad_request("invalid_thread_id", e.to_string()))?;
    same_team(&thread_id, team)?;
    Ok(thread_id)
}

fn same_team(thread_id: &ThreadId, team: &str) -> Result<(), ApiError> {
    match SlackPlace::of(thread_id) {
        Some(place) if place.team == team => Ok(()),
        _ => Err(ApiError::bad_request(
            "invalid_thread_id",
            format!("{thread_id} is not a Slack thread of workspace {team}"),
        )),
    }
}

/// An empty 200: Slack's "got it" for a click, and "close" for a modal.
fn acknowledged() -> Response {
    StatusCode::OK.into_response()
}
