//! The fan-out's `main`: the handler [`fanout::build`] makes, on the lifecycle queue's batches.

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_sqs(fanout::build, fanout::FanoutHandler::handle).await
}
