//! The checkpoint routes: `/v1/threads/{id}/checkpoints[/{cp}]`, `/restore` and `/fork` (the
//! server's side is `crates/api/src/http/checkpoints.rs`). Answers come back as the API's JSON.

use reqwest::{Method, Url};
use serde_json::{json, Value};

use super::{Client, ClientError};

impl Client {
    async fn checkpoint_call(
        &self,
        method: Method,
        url: Url,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        let shown = url.to_string();
        let mut request = self.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        Self::send_and_decode(request, shown).await
    }

    /// Take a checkpoint of the thread's home.
    pub async fn take_checkpoint(
        &self,
        thread_id: &str,
        label: Option<&str>,
    ) -> Result<Value, ClientError> {
        let url = self.url(Some(thread_id), Some("checkpoints"));
        let body = label.map(|label| json!({ "label": label }));
        self.checkpoint_call(Method::POST, url, body).await
    }

    /// `{"checkpoints": [...]}`, newest first.
    pub async fn list_checkpoints(&self, thread_id: &str) -> Result<Value, ClientError> {
        let url = self.url(Some(thread_id), Some("checkpoints"));
        self.checkpoint_call(Method::GET, url, None).await
    }

    /// Put the thread's home back to `checkpoint`.
    pub async fn restore(&self, thread_id: &str, checkpoint: &str) -> Result<Value, ClientError> {
        let url = self.url(Some(thread_id), Some("restore"));
        let body = json!({ "checkpoint": checkpoint });
        self.checkpoint_call(Method::POST, url, Some(body)).await
    }

    /// Fork the thread into `new_thread`.
    pub async fn fork(
        &self,
        thread_id: &str,
        new_thread: &str,
        checkpoint: Option<&str>,
        network: Option<Value>,
    ) -> Result<Value, ClientError> {
        let url = self.url(Some(thread_id), Some("fork"));
        let mut body = json!({ "thread": new_thread });
        if let Some(checkpoint) = checkpoint {
            body["checkpoint"] = json!(checkpoint);
        }
        if let Some(network) = network {
            body["network"] = network;
        }
        self.checkpoint_call(Method::POST, url, Some(body)).await
    }
}
