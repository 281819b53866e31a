//! Wiring only: clients and the schedule from the environment, once, then the handler.

use janitor::{Janitor, Schedule};
use lambda_runtime::service_fn;
use threadbox_shared::lambda::{self, Env};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::init_tracing();
    let env = Env::process();
    let sdk = lambda::aws_config().await;
    let janitor = Janitor::new(
        lambda::threadbox(&sdk, &env).await?,
        Schedule::from_env(&env)?,
    );
    lambda_runtime::run(service_fn(|event| janitor.handle(event))).await
}
