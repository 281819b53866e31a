//! threadbox's core: the pure domain, the ports it needs from the outside world, and the use
//! cases every Lambda function, the HTTP API and the `threadbox` CLI are thin wrappers around.
//!
//! Its dependency tree holds no AWS SDK, SQLite, HTTP framework, HTTP client or TLS: Cargo keeps
//! those in the adapter and edge crates, which depend on this one and never the other way round
//! (docs/architecture.md draws the house).
//!
//! - [`domain`]: thread ids, the session record, states, the transition table, events, holds,
//!   network profiles, budgets and usage;
//! - [`ports`]: the session store, durable queue, sandbox provider, clock and the other traits
//!   adapters implement;
//! - [`usecases`]: resolve, pause, resume, holds, keep-alive, the janitor sweep and the warm pool;
//! - [`fanout`]: lifecycle events to every target (Slack, WebSocket, log), each seeing each once;
//! - [`config`]: reading settings from the environment, with errors that name the variable;
//! - [`fault`]: fault points where crash tests kill the process (armed only with the
//!   `fault-injection` feature).

pub mod config;
pub mod domain;
pub mod fanout;
pub mod fault;
pub mod ports;
pub mod usecases;
