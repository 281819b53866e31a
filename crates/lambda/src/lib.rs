//! What every Lambda function shares, so each function's `main.rs` is one call and its `lib.rs`
//! says only what is particular to it:
//!
//! - `serve`: every function's `main`, one per kind of event ([`serve_http`], [`serve_api`],
//!   [`serve_sqs`], [`serve_schedule`], [`serve_ws`]): logs, secrets, the function's state built
//!   by its [`Build`] from a [`Setup`] and rebuilt when a secret changes, the runtime, and the
//!   start-up error;
//! - `env`: [`Env`], where settings come from, and [`SetupError`], a start-up failure that names
//!   the variable at fault (never its value: some are secrets);
//! - `settings`: [`Settings`], the use cases' settings read from the environment;
//! - `wiring`: building the clients once per process: [`aws_config`], [`threadbox`] (DynamoDB
//!   store, SQS lifecycle queue, the provider `THREADBOX_PROVIDER` names, the system clock),
//!   [`dedupe`] and [`api_auth`];
//! - `logging`: [`init_tracing`], JSON logs whose lines carry their spans' fields (`thread_id`,
//!   `sandbox_id`, the invocation's `requestId`);
//! - `http`: the shared axum router served through `lambda_http`, buffered behind API Gateway
//!   or streamed behind a function URL ([`HttpMode`]);
//! - `slack`: the Slack app's work queue, signing secret, Web API client and status target;
//! - `live`: the WebSocket gateway (`ws`) and the subscribers target (`fanout`);
//! - `batch`: settling an SQS batch (visibility per record, poison to the dead-letter queue,
//!   the invocation's deadline) for `worker`, `fanout` and `pause-queue`.
//!
//! # Environment
//!
//! | variable | default | used by |
//! |---|---|---|
//! | `THREADBOX_SESSIONS_TABLE`, `THREADBOX_EVENTS_TABLE` | required | every function that uses the store |
//! | `THREADBOX_DUE_SHARDS`, `THREADBOX_RECORD_RETENTION_DAYS` | 8, 30 | the same, and fanout's Slack status rows: days a destroyed thread's record, events and status row are kept (`never`: forever; see `adapters::dynamo`) |
//! | `THREADBOX_LIFECYCLE_QUEUE_URL`, `THREADBOX_LIFECYCLE_DLQ_URL` | required | the same: the outbox sends there |
//! | `THREADBOX_IDLE_PAUSE_SECS` | 600 | pause after this long idle |
//! | `THREADBOX_RETENTION_SECS` | 604800 (7 days) | destroy after this long idle |
//! | `THREADBOX_PROVIDER` (+ `E2B_*`) | `runc` | `e2b` in production (see `adapters::e2b`) |
//! | `THREADBOX_RUNC_STATE_DIR` | `/tmp/threadbox-runc` | runc only (the local loop) |
//! | `THREADBOX_CHECKPOINTS_KEPT`, `THREADBOX_CHECKPOINT_BYTES` | 20, `2GiB` | every function that uses the store: checkpoints a thread keeps and the bytes they may hold (records on the sessions table) |
//! | `THREADBOX_CHECKPOINT_TURNS` | `true` | worker: a checkpoint before each code block, and its Undo button |
//! | `THREADBOX_API_KEYS` | required | HTTP functions: bearer keys, comma-separated |
//! | `THREADBOX_INVOKE_MODE` | `BUFFERED` | sandbox-api: `RESPONSE_STREAM` behind a streaming function URL (see `http`) |
//! | `THREADBOX_STREAM_URL` | none | sandbox-api, buffered: the stream URL a streaming request is sent to |
//! | `THREADBOX_DEDUPE_TABLE` | required | fanout, slack-events, worker |
//! | `THREADBOX_WORK_QUEUE_URL`, `THREADBOX_WORK_DLQ_URL` | required | slack-events, worker |
//! | `SLACK_SIGNING_SECRET` | required | slack-events |
//! | `SLACK_BOT_TOKEN`, `SLACK_API_URL` | required, Slack's | worker; fanout (optional: without it, no Slack target) |
//! | `THREADBOX_SLACK_STATUS_TABLE` | required with a bot token | fanout |
//! | `THREADBOX_SUBSCRIPTIONS_TABLE`, `THREADBOX_WS_CALLBACK_URL` | required by ws; optional for fanout (both or neither: its WebSocket target) | ws, fanout |
//! | `THREADBOX_TOKEN_SECRET` | required | ws: checks subscription tokens (≥ 32 bytes) |
//! | `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL` | `info` | every function |
//!
//! Each secret variable (`E2B_API_KEY`, `THREADBOX_API_KEYS`, `SLACK_SIGNING_SECRET`,
//! `SLACK_BOT_TOKEN`, `THREADBOX_TOKEN_SECRET`) may instead be given by reference as
//! `<VAR>_SECRET_ID` (a Secrets Manager secret's name or ARN), as the SAM template does; see `secrets`.
//! `THREADBOX_SECRETS_REFRESH_SECS` (900) is how often they are fetched again.
//!
//! AWS endpoints, region and credentials come from the SDK's standard settings only.

// The HTTP serving future (axum inside lambda_http, across crates) is deeper than the default
// query depth allows.
#![recursion_limit = "256"]

pub mod batch;
mod env;
mod http;
mod live;
mod logging;
pub mod refresh;
pub mod secrets;
mod serve;
mod settings;
mod slack;
mod wiring;

pub use env::{Env, SetupError};
pub use http::{
    for_api_gateway, for_api_gateway_streaming_at, serving, thread_id_in_path, traced, HttpMode,
    GATEWAY_EXEC_LIMIT, INVOKE_MODE_VAR, STREAM_URL_VAR,
};
pub use live::{live_gateway, live_target, subscribers, token_key, TOKEN_SECRET_VAR};
pub use logging::init_tracing;
pub use refresh::Rebuilt;
pub use secrets::SecretSet;
pub use serve::{
    serve_api, serve_http, serve_schedule, serve_sqs, serve_ws, Build, Error, HttpModes, Setup,
};
pub use settings::{checkpoint_turns, Settings, CHECKPOINT_TURNS_VAR};
pub use slack::{
    signing_secret, slack_api, slack_status_target, slack_status_target_watched,
    slack_user_threads, watch_slack_auth, work_queue,
};
pub use wiring::{api_auth, aws_config, dedupe, slack_rates, threadbox, window_counter};
pub use wiring::{
    lifecycle_queue, transition_queue, TRANSITION_DLQ_URL_VAR, TRANSITION_QUEUE_URL_VAR,
};
