//! The pure domain: no AWS, HTTP, clock or I/O. Everything here is plain data and rules.

mod scope;
mod session;
mod status;
mod thread_id;
mod time;
mod transition;

pub use scope::{InvalidScope, ThreadScope, ANY_THREAD, MAX_SCOPE_THREADS};
pub use session::{Change, Hold, LifecycleEvent, Session, Timers, MAX_SEQ};
pub use status::{Cause, GonePolicy, Status};
pub use thread_id::{InvalidThreadId, ThreadId, MAX_THREAD_ID_LEN};
pub use time::Millis;
pub use transition::{transition, Command, Observed, RejectKind, Rejected, Transition};
