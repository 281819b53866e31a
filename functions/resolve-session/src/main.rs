//! resolve-session's `main`: the router of [`resolve_session::ROUTES`] over the use cases,
//! behind API Gateway.

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_api(resolve_session::app).await
}
