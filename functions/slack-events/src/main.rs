//! slack-events' `main`: the router [`slack_events::build`] makes, behind API Gateway.

use threadbox_lambda::HttpModes;

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_http(HttpModes::BufferedOnly, slack_events::build).await
}
