//! threadbox's API edge: the HTTP API as one axum router and live events over WebSocket, the
//! same in `threadbox dev` and behind API Gateway.
//!
//! - [`http`]: the routes (threads, sandbox exec and files, background processes), bearer API
//!   keys, input validation and the JSON error shape;
//! - [`live`]: live events: subscription tokens, the WebSocket protocol, the subscribers fan-out
//!   target and the connect/disconnect/message routes as plain functions, transport-free;
//! - [`wire`]: the exec and process bodies and their streams' events, which the MCP tools and
//!   the CLI's client send and read as the routes take and write them.
//!
//! The MCP endpoint (`threadbox-mcp`) and the Slack app's routes (`threadbox-slack`) are merged
//! into the router by whoever serves it.

pub mod http;
pub mod live;
pub mod wire;
