//! Test support, compiled only for tests and the `testing` feature.

pub mod accounts;
pub mod bench;
pub mod block_kit_limits;
mod clock;
pub mod eventually;
mod flaky_queue;
mod memory_provider;
mod suites;

pub mod budget_conformance;
pub mod checkpoint_conformance;
pub mod dedupe_conformance;
pub mod lifecycle_conformance;
pub mod provider_conformance;
pub mod store_conformance;
pub mod subscription_conformance;
pub mod warm_pool_conformance;
pub mod window_counter_conformance;

/// A Python program (`python3 -c FORK_FILLER`) that fills its sandbox's process table, for the
/// tests of a sandbox at its pid limit: it prints `filling`, forks sleepers until fork fails,
/// prints `full after N` and sleeps.
pub const FORK_FILLER: &str = include_str!("fork_filler.py");

pub use clock::ManualClock;
pub use flaky_queue::FlakyQueue;
pub use memory_provider::{InMemoryProvider, Op};

pub mod queue_conformance;

pub mod e2b_fake;

pub mod slack_fake;

pub mod slack_status_conformance;
