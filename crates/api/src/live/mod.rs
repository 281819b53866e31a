//! Live events: WebSocket subscribers of threads' lifecycle events.
//!
//! Transport-free, so the same logic runs behind API Gateway's WebSocket routes (a Lambda) and
//! behind `threadbox dev`'s own WebSocket endpoint:
//! - `token`: subscription tokens, HMAC-signed, naming the threads they may watch and an expiry;
//! - `protocol`: the JSON messages clients send and the frames the server sends;
//! - `subscribers`: [`Subscribers`], the fan-out target that sends each event to every
//!   connection subscribed to its thread, once, in order, filling gaps from the event log;
//! - `gateway`: [`LiveGateway`], the `$connect` / `$disconnect` / `$default` routes as plain
//!   functions over the ports;
//! - `in_process`: [`InProcessSender`], the connection sender of a server that holds its
//!   sockets itself;
//! - `locks`: per-connection ordering within one process;
//! - `limits`: [`FrameLimiter`], frames per second and work in flight per connection and per
//!   thread, the one place that bounds what frames may ask of the server;
//! - `exec`: [`ConnectionExec`], a connection's commands run from `exec`
//!   frames, their output streamed back as frames (served by `threadbox dev`);
//! - `pty`: terminal sessions opened, attached to, typed into and resized
//!   from `pty*` frames, on the same connection's commands.

mod exec;
mod gateway;
mod in_process;
mod limits;
mod locks;
mod protocol;
mod pty;
mod subscribers;
mod terminal_queue;
mod token;
// The token route is an HTTP route, served with the API's.
mod token_route;

#[cfg(test)]
mod tests;

pub use exec::{ConnectionExec, EXEC_LANE_FRAMES, MAX_EXECS_PER_CONNECTION};
pub use gateway::{ConnectError, LiveGateway, MAX_SUBSCRIPTIONS_PER_CONNECTION};
pub use in_process::{InProcessSender, DEFAULT_CONNECTION_BUFFER};
pub use limits::{
    FrameLimiter, FrameLimits, InFlight, Rate, Refusal, INPUT_BACKLOG_FULL, TOO_MANY_FRAMES,
    TOO_MANY_IN_FLIGHT,
};
pub use protocol::{
    parse, ClientMessage, ExecFrame, ProtocolError, PtyAction, PtyFrame, ServerFrame,
    MAX_CLIENT_MESSAGE, MAX_EXEC_FRAME, MAX_EXEC_MESSAGE, MAX_REQUEST_ID,
};
pub use subscribers::{LiveError, Subscribers, TARGET_NAME};
pub use token::{
    InvalidTtl, MintedToken, SecretError, SubscriptionToken, TokenError, TokenKey, TokenSecret,
    MAX_TOKEN_LEN, MAX_TOKEN_TTL, MIN_SECRET_LEN,
};
pub use token_route::{token_routes, DEFAULT_TOKEN_TTL};
