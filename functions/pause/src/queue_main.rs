//! The `pause-queue` binary's `main`: the handler [`pause::build_queue_handler`] makes, on the
//! transition queue's batches.

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_sqs(pause::build_queue_handler).await
}
