//! The janitor's `main`: the handler [`janitor::build`] makes, on EventBridge's schedule.

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_schedule(janitor::build, janitor::Janitor::handle).await
}
