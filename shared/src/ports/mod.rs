//! Ports: what the core needs from the outside world, as traits. Adapters implement them; the
//! use cases, the fan-out, the Slack app and the live-events gateway depend on these alone.
//! The Slack ports (`SlackApi`, `SlackStatusStore`) exist only with the `slack` feature.

mod clock;
mod connection_sender;
mod dedupe;
mod fanout_target;
mod provider;
mod queue;
mod session_store;
#[cfg(feature = "slack")]
mod slack_api;
#[cfg(feature = "slack")]
mod slack_sink;
#[cfg(feature = "slack")]
mod slack_status_store;
mod subscription_store;
mod window_counter;

pub use clock::{Clock, SystemClock};
pub use connection_sender::{ConnectionSender, Frame, SendError};
pub use dedupe::DedupeStore;
pub use fanout_target::{DeliveryError, FanoutTarget};
/// The file operations a provider gets over its exec (used by E2B for its path checks too).
pub(crate) use provider::exec_files;
pub use provider::*;
pub use queue::{DurableQueue, OutgoingMessage, QueueError, ReceivedMessage};
pub use session_store::{Page, Purged, SessionStore, StoreError, StoreStats};
#[cfg(feature = "slack")]
pub use slack_api::{
    ApiErrorCode, PostMessage, Posted, SlackApi, SlackError, SlackFile, UpdateMessage,
};
#[cfg(feature = "slack")]
pub use slack_sink::{SinkMessage, SinkQuery, SlackSink};
#[cfg(feature = "slack")]
pub use slack_status_store::{SlackStatusStore, StatusMessage};
pub use subscription_store::{Connection, Subscription, SubscriptionStore};
pub use window_counter::WindowCounter;
