//! threadbox's shared crate: the pure domain, the ports, their adapters and the use cases that
//! every Lambda function and the `threadbox` CLI are thin wrappers around.
//!
//! - [`domain`]: thread ids, the session record, states, the transition table, events, holds.
//! - [`ports`]: the session store, durable queue, sandbox provider and clock traits.
//! - [`adapters`]: implementations of the ports (SQLite, runc, ...), each behind a feature.
//! - [`usecases`]: resolve, pause, resume, holds, keep-alive and the janitor sweep.
//! - [`fanout`]: lifecycle events to every target (Slack, WebSocket, log), each seeing each once.
//! - `live` (feature `live`): live events over WebSocket: tokens, the protocol, the subscribers
//!   fan-out target and the connect/disconnect/message routes as plain functions.
//! - `http` (feature `http`): the HTTP API as an axum router, the same in `threadbox dev` and Lambda.
//! - `mcp` (feature `mcp`): the sandbox's tools for MCP, over stdio (the CLI) and HTTP (the API).
//! - `slack` (feature `slack`): the Slack app's ingress, worker and status fan-out target.
//! - `lambda` (feature `lambda`): what every Lambda function shares: clients built from the
//!   environment, JSON logs, the HTTP router served through `lambda_http`.
//! - [`fault`]: fault points where crash tests kill the process (armed only with the
//!   `fault-injection` feature).
//! - `testing` (feature `testing`): an in-memory provider, a manual clock and the conformance
//!   suites every adapter must pass.

pub mod adapters;
pub mod config;
pub mod domain;
pub mod fanout;
pub mod fault;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(feature = "live")]
pub mod live;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod ports;
pub mod providers;
#[cfg(feature = "slack")]
pub mod slack;
pub mod usecases;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
