//! resume's `main`: the router of [`resume::ROUTES`] over the use cases, behind API Gateway.

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_api(resume::app).await
}
