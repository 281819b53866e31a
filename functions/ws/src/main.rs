//! Wiring only: the token key, subscription store, event log and `PostToConnection` sender from
//! the environment, once, then the handler.

use lambda_runtime::service_fn;
use threadbox_shared::lambda::{self, Env};
use ws::WsHandler;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::init_tracing();
    let env = Env::process();
    let sdk = lambda::aws_config().await;
    let handler = WsHandler::new(lambda::live_gateway(&sdk, &env)?);
    lambda_runtime::run(service_fn(|event| handler.handle(event))).await
}
