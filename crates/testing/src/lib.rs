//! Test support, compiled only for tests and the `testing` feature.

pub mod accounts;
pub mod block_kit_limits;
mod clock;
pub mod eventually;
mod flaky_queue;
mod memory_provider;
pub mod sandbox_scripts;
mod suites;

pub mod budget_conformance;
pub mod dedupe_conformance;
pub mod lifecycle_conformance;
pub mod provider_conformance;
pub mod store_conformance;
pub mod subscription_conformance;
pub mod warm_pool_conformance;
pub mod window_counter_conformance;

pub use clock::ManualClock;
pub use flaky_queue::FlakyQueue;
pub use memory_provider::{InMemoryProvider, Op};

pub mod queue_conformance;

pub mod e2b_fake;

pub mod slack_fake;

pub mod slack_status_conformance;
