//! The `pause-queue` binary's `main`: the handler [`pause::build_queue_handler`] makes, on the
//! transition queue's batches.

use pause::{build_queue_handler, TransitionHandler};

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_sqs(build_queue_handler, TransitionHandler::handle).await
}
