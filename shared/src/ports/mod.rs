//! Ports: what the use cases need from the outside world, as traits. Adapters implement them.

mod clock;
mod dedupe;
mod provider;
mod queue;
mod session_store;

pub use clock::{Clock, SystemClock};
pub use dedupe::DedupeStore;
pub use provider::*;
pub use queue::{DurableQueue, OutgoingMessage, QueueError, ReceivedMessage};
pub use session_store::{Page, SessionStore, StoreError, StoreStats};
