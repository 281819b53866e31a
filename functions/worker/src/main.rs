//! The worker's `main`: the handler [`worker::build`] makes, on the work queue's batches.

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_sqs(worker::build, worker::WorkHandler::handle).await
}
