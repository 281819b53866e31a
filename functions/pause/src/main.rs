//! pause's `main`: the router of [`pause::ROUTES`] over the use cases, behind API Gateway.

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_api(pause::app).await
}
