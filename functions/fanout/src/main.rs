//! Wiring only: the dedupe table and the targets from the environment, once, then the handler.

use std::sync::Arc;

use fanout::FanoutHandler;
use lambda_runtime::service_fn;
use threadbox_shared::fanout::{Fanout, LogTarget};
use threadbox_shared::lambda::{self, Env};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::init_tracing();
    let env = Env::process();
    let sdk = lambda::aws_config().await;
    let dedupe = Arc::new(lambda::dedupe(&sdk, &env)?);
    let handler = FanoutHandler::new(Fanout::new(dedupe, vec![Arc::new(LogTarget)]));
    lambda_runtime::run(service_fn(|event| handler.handle(event))).await
}
