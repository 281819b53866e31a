//! Create the tables and queues the local Lambda loop uses, on the endpoint `AWS_ENDPOINT_URL`
//! names (moto's server), and print the functions' variables for them.
//!
//! ```sh
//! AWS_ENDPOINT_URL=http://127.0.0.1:5000 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//! AWS_SECRET_ACCESS_KEY=test cargo run -p threadbox-tests --features aws,lambda \
//!   --example lambda_local_resources [PREFIX]
//! ```
//!
//! The default prefix, `threadbox-local`, gives the names `[workspace.metadata.lambda.env]`
//! expects, so `cargo lambda watch` needs no overrides.

use threadbox_tests::aws::sdk_config;
use threadbox_tests::lambda::local::LocalResources;

#[tokio::main]
async fn main() -> Result<(), String> {
    if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
        return Err(
            "AWS_ENDPOINT_URL is not set: point it at moto's server (docs/aws.md#the-local-lambda-loop)"
                .into(),
        );
    }
    let prefix = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "threadbox-local".to_owned());
    let resources = LocalResources::create(&sdk_config().await, &prefix).await?;
    for (name, value) in resources.env() {
        println!("{name}={value}");
    }
    Ok(())
}
