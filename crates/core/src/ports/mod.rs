//! Ports: what the core needs from the outside world, as traits. Adapters implement them; the
//! use cases, the fan-out, the Slack app and the live-events gateway depend on these alone.

mod checkpoint_store;
mod clock;
mod connection_sender;
mod dedupe;
mod fanout_target;
mod provider;
mod queue;
mod session_store;
mod slack_api;
mod slack_sink;
mod slack_status_store;
mod slack_user_threads;
mod subscription_store;
mod warm_pool_store;
mod window_counter;

pub use checkpoint_store::CheckpointStore;
pub use clock::{Clock, SystemClock};
pub use connection_sender::{ConnectionSender, Frame, SendError};
pub use dedupe::DedupeStore;
pub use fanout_target::{DeliveryError, FanoutTarget};
/// The file operations a provider gets over its exec (used by E2B for its path checks too).
pub use provider::exec_files;
pub use provider::*;
pub use queue::{DurableQueue, OutgoingMessage, QueueError, ReceivedMessage, RecordOutcome};
pub use session_store::{
    Page, Purged, SessionStore, StatsCounter, StoreError, StoreFailure, StoreKind, StoreStats,
    WriteCondition,
};
pub use slack_api::{
    is_ts, ApiErrorCode, EphemeralMessage, FileUpload, PostMessage, Posted, SlackApi, SlackError,
    SlackFile, UpdateMessage,
};
pub use slack_sink::{
    SinkFile, SinkMessage, SinkQuery, SinkView, SinkViewKind, SinkViewState, SlackSink,
    FILE_PREVIEW_BYTES,
};
pub use slack_status_store::{SlackStatusStore, StatusMessage};
pub use slack_user_threads::{check_slack_user, SlackUserThreads, UserThread, MAX_USER_THREADS};
pub use subscription_store::{Connection, Subscription, SubscriptionStore};
pub use warm_pool_store::{PoolClaim, WarmPoolStore};
pub use window_counter::WindowCounter;
