//! Ports: what the use cases need from the outside world, as traits. Adapters implement them.

mod clock;
mod connection_sender;
mod dedupe;
mod provider;
mod queue;
mod session_store;
mod subscription_store;
mod window_counter;

pub use clock::{Clock, SystemClock};
pub use connection_sender::{ConnectionSender, Frame, SendError};
pub use dedupe::DedupeStore;
pub use provider::*;
pub use queue::{DurableQueue, OutgoingMessage, QueueError, ReceivedMessage};
pub use session_store::{Page, Purged, SessionStore, StoreError, StoreStats};
pub use subscription_store::{Connection, Subscription, SubscriptionStore};
pub use window_counter::WindowCounter;
