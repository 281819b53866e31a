//! The Slack app: every thread, or DM, is one sandbox; people run code blocks
//! and commands there and see results and the sandbox's status.
//!
//! - `blocks`: Block Kit builders within Slack's limits, and the buttons' actions;
//! - `signature`: Slack's `v0` request signing, on the raw body;
//! - `events`: the Events API payloads, and which become work;
//! - `thread`: which thread id (sandbox) a message belongs to, and where replies go;
//! - `ingress`: `POST /slack/events`, verify, dedupe, enqueue, ack (axum router);
//! - `interactions`: `POST /slack/interactions`, button clicks and the reset modal;
//! - `slash`: `POST /slack/commands`, the `/sandbox` command;
//! - `work`: what the work queue carries;
//! - `command`: what a message asks for (code blocks, `status`, `reset`, ...);
//! - `worker`: runs it in the thread's sandbox and replies;
//! - `rate_limit`: messages acted on per thread and per workspace, per minute;
//! - `budget`: the reply when a budget refuses a thread's work;
//! - `format`: replies within Slack's limits;
//! - `sink_route`: `GET /v1/slack/sink`, what `threadbox dev` would have posted
//!   to Slack without a bot token;
//! - `status`: the fan-out target keeping one status message per thread (its record is the
//!   `SlackStatusStore` port);
//!
//! The Web API client over reqwest is an adapter: `threadbox-slack-web`.
//!
//! The ports Slack needs (`SlackApi`: post, update, file info, download, with typed errors;
//! `SlackStatusStore`) are in `ports`, behind the same feature; they are re-exported here.

pub mod blocks;
pub mod budget;
pub mod command;
pub mod events;
pub mod format;
pub mod ingress;
pub mod interactions;
pub mod local_click;
pub mod rate_limit;
pub mod signature;
pub mod sink_route;
pub mod slash;
pub mod status;
pub mod thread;
pub mod work;
pub mod worker;

pub use ingress::{router, Ack, SlackIngress, COMMANDS_PATH, EVENTS_PATH, INTERACTIONS_PATH};
pub use rate_limit::{MessageRates, RateLimits};
pub use signature::{SignatureError, SigningSecret};
pub use sink_route::slack_sink_routes;
pub use status::SlackStatusTarget;
pub use threadbox_core::ports::{
    ApiErrorCode, PostMessage, Posted, SlackApi, SlackError, SlackFile, SlackStatusStore,
    StatusMessage, UpdateMessage,
};
pub use work::{IncomingMessage, PendingReply, WorkItem, WORK_QUEUE};
pub use worker::{SlackWorker, SlackWorkerConfig, MIN_BLOCK_TIME, REPLY_MARGIN};
