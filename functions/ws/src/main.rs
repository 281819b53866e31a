//! ws' `main`: the handler [`ws::build`] makes, on the WebSocket API's routes.

#[tokio::main]
async fn main() -> Result<(), threadbox_lambda::Error> {
    threadbox_lambda::serve_ws(ws::build, ws::WsHandler::handle).await
}
