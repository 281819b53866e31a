//! Wiring only: the signing secret, dedupe table and work queue from the environment, once,
//! then the events route through `lambda_http`.

use std::sync::Arc;

use threadbox_shared::lambda::{self, Env};
use threadbox_shared::ports::SystemClock;
use threadbox_shared::slack::SlackIngress;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::init_tracing();
    let env = Env::process();
    let sdk = lambda::aws_config().await;
    let ingress = SlackIngress::new(
        Some(lambda::signing_secret(&env)?),
        Arc::new(lambda::dedupe(&sdk, &env)?),
        Arc::new(lambda::work_queue(&sdk, &env)?),
        Arc::new(SystemClock),
    );
    lambda::run_http(slack_events::app(ingress)).await
}
