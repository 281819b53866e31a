//! Use cases: what threadbox does, written against the ports only.
//!
//! [`Threadbox`] bundles the ports and the configuration; each file adds one family of verbs:
//! - `budget`: the cap on new sandboxes per scope and hour, and compute budgets per thread and
//!   scope and day (checked on resolve and by the janitor; a thread over one is paused);
//! - `checkpoints`: checkpoints of a thread's home (take within the thread's limits, list,
//!   delete), restore in place, and fork into a new thread;
//! - `resolve`: get-or-create a thread's sandbox (under a lease, fenced by generation), resume it
//!   when paused, and apply the gone policy when the provider lost it;
//! - `pause`: pause, destroy and reset, and the handler of transitions the janitor handed off;
//! - `hold_request`: what a hold asks for, shared by `resolve` and `holds`;
//! - `holds`: holds, keep-alive, and running commands and file operations under a hold;
//! - `processes`: background processes, each a hold on its thread while it runs, their starts
//!   and ends events in the thread's stream;
//! - `history`: reading sessions and their events (listing, one thread, events after a seq);
//! - `inspect`: reading a sandbox's files as they are, for GETs (never creates or resumes);
//! - `janitor`: the scheduled sweep;
//! - `image`: the image a thread's sandboxes start from (checked against the provider's, changed
//!   with a `user` event for the thread's next sandbox);
//! - `network`: changing a thread's network profile (recorded with a `user` event, applied live
//!   where the provider can, otherwise to the thread's next sandbox);
//! - `settle`: waiting, with backoff and an end, for another worker's transition of a thread;
//! - `race`: what a call that lost a race with a pause, reset or destroy of its thread answers;
//! - `outbox`: handing written events to the lifecycle queue, and re-driving the ones that were not;
//! - `usage`: what threads' sandboxes used and cost, from their events (one thread, or a page);
//! - `warm_pool`: sandboxes made ahead, bound to a new thread in the write that claims them, and
//!   the janitor's tending of the pool.

mod budget;
mod checkpoints;
mod error;
mod history;
mod hold_request;
mod holds;
mod image;
mod inspect;
mod janitor;
mod network;
mod outbox;
mod pause;
mod processes;
mod race;
mod resolve;
mod settle;
mod threadbox;
mod usage;
mod warm_pool;

pub use checkpoints::{ForkRequest, RestoreOutcome};
pub use error::UseCaseError;
pub use hold_request::HoldRequest;
pub use image::{ImageApplied, ImageChange};
pub use inspect::{SandboxRefusals, SandboxStatus};
pub use janitor::{SweepOptions, SweepReport};
pub use network::{NetworkApplied, NetworkChange};
pub use pause::{Handoff, TransitionOutcome, TransitionWork};
pub use processes::{ProcessRequest, DEFAULT_PROCESS_IDLE, MAX_PROCESS_IDLE};
pub use resolve::{ResolveOptions, SandboxHandle};
pub use threadbox::{
    Checkpoints, Config, Threadbox, WarmPool, DEFAULT_POOL_MAX_AGE, DEFAULT_RECORD_RETENTION,
};
pub use usage::{read_usage, MAX_USAGE_EVENTS};
pub use warm_pool::{PoolReport, MAX_POOL_SIZE};
