//! A small typed client for threadbox's HTTP API, the same against `threadbox dev` and a deployed
//! stack (an API Gateway stage URL with a path prefix works: routes are appended to it).
//!
//! - `types`: the bodies, built on the shared crate's own session and event types;
//! - `events`: the one reader of server-sent events, for every route that streams;
//! - `exec_stream`: a command's output as it happens (server-sent events);
//! - `files`: reading, writing, listing and removing files in a thread's sandbox;
//! - `processes`: background processes: start, list, read or follow output, input, signal;
//! - `error`: failures and the exit status each one means.

mod checkpoints;
mod error;
mod events;
mod exec_stream;
mod files;
mod processes;
mod types;

use std::time::Duration;

use reqwest::header::{HeaderValue, AUTHORIZATION, RETRY_AFTER};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use threadbox_core::domain::{ImageName, Millis, NetworkProfile};
use threadbox_core::ports::ExecResult;
use threadbox_core::usecases::SandboxHandle;

pub use error::{is_busy, ClientError};
pub use exec_stream::ExecUpdate;
pub use processes::FollowUpdate;
// The exec and process bodies are the API's own.
pub use threadbox_api::wire::{ExecBody, ProcessBody};
pub use types::{
    CheckpointUse, EventPage, ImageBody, ImageList, ImageSet, NetworkBody, NetworkSet, ResetView,
    ThreadDetail, ThreadPage, ThreadView,
};

/// Whether a listing carries each thread's usage (`?usage=true`), and from when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageQuery {
    None,
    /// From this time (epoch milliseconds), or each thread's start.
    Since(Option<Millis>),
}

/// The stream URL a 406 `stream_elsewhere` answer names, when the API key may go there: over
/// https, or to the host that answered.
fn stream_elsewhere(body: &[u8], from: &Url) -> Option<Url> {
    let answer: serde_json::Value = serde_json::from_slice(body).ok()?;
    let error = answer.get("error")?;
    if error.get("code")?.as_str()? != "stream_elsewhere" {
        return None;
    }
    let url = Url::parse(error.get("stream_url")?.as_str()?).ok()?;
    let same_host = url.host_str() == from.host_str()
        && url.port_or_known_default() == from.port_or_known_default();
    (url.scheme() == "https" || (url.scheme() == "http" && same_host)).then_some(url)
}

/// Where `threadbox dev` listens by default.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8787";
/// Limit for one call; exec adds its command's own timeout to this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Which API to talk to and how: shared by every command that calls the API.
#[derive(clap::Args, Clone, Debug)]
pub struct ApiArgs {
    /// Base URL of the API: `threadbox dev`, or a deployed stack's API Gateway URL.
    #[arg(long, env = "THREADBOX_URL", default_value = DEFAULT_URL, global = true)]
    pub url: String,

    /// API key, sent as `Authorization: Bearer <key>` (not needed when the API has no keys).
    #[arg(long, env = "THREADBOX_API_KEY", hide_env_values = true, global = true)]
    pub api_key: Option<String>,
}

impl ApiArgs {
    pub fn client(&self) -> Result<Client, ClientError> {
        Client::new(&self.url, self.api_key.as_deref())
    }
}

#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    /// The ready-made header; marked sensitive so it never shows in debug output.
    auth: Option<HeaderValue>,
}

impl Client {
    pub fn new(base_url: &str, api_key: Option<&str>) -> Result<Self, ClientError> {
        let base = Url::parse(base_url.trim())
            .map_err(|e| ClientError::Config(format!("--url {base_url:?} is not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(ClientError::Config(format!(
                "--url {base_url:?} must be an http:// or https:// URL"
            )));
        }
        let auth = match api_key.map(str::trim).filter(|k| !k.is_empty()) {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    ClientError::Config("the API key has characters a header cannot carry".into())
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("threadbox-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Config(format!("building the HTTP client: {e}")))?;
        Ok(Self { http, base, auth })
    }

    /// `base` + `/v1/threads[/{id}[/{tail}]]`, each part percent-encoded as one path segment, so
    /// an odd thread id reaches the server's validation instead of a different route.
    fn url(&self, thread_id: Option<&str>, tail: Option<&str>) -> Url {
        let mut url = self.base.clone();
        {
            let mut segments = url
                .path_segments_mut()
                .expect("checked in new: the base URL can be a base");
            segments.pop_if_empty().extend(["v1", "threads"]);
            segments.extend(thread_id);
            segments.extend(tail);
        }
        url
    }

    /// A request to `url` with the API key, if any.
    fn request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        let request = self.http.request(method, url);
        match &self.auth {
            Some(auth) => request.header(AUTHORIZATION, auth.clone()),
            None => request,
        }
    }

    /// Open an answer of server-sent events: a request to `url` with `Accept: text/event-stream`,
    /// finished by `finish` (its body, its timeout). A deployed stack's HTTP API cannot stream:
    /// it answers 406 `stream_elsewhere` naming the same request at the stack's stream URL,
    /// where it goes once more, with the API key, so only to an https URL or to the same host.
    /// Returns the answer and the URL that gave it (for messages).
    async fn open_stream(
        &self,
        method: Method,
        url: Url,
        finish: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<(reqwest::Response, String), ClientError> {
        let mut url = url;
        let mut moved = false;
        loop {
            let shown = url.to_string();
            let request = self
                .request(method.clone(), url.clone())
                .header(reqwest::header::ACCEPT, "text/event-stream");
            let response = finish(request)
                .send()
                .await
                .map_err(|e| ClientError::unreachable(&shown, &e))?;
            let status = response.status();
            if status.is_success() {
                return Ok((response, shown));
            }
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let body = response
                .bytes()
                .await
                .map_err(|e| ClientError::unreachable(&shown, &e))?;
            if status == reqwest::StatusCode::NOT_ACCEPTABLE && !moved {
                if let Some(elsewhere) = stream_elsewhere(&body, &url) {
                    url = elsewhere;
                    moved = true;
                    continue;
                }
            }
            return Err(ClientError::from_response(
                status.as_u16(),
                retry_after,
                &body,
            ));
        }
    }

    /// Send a request and decode a success body as `T`, or turn the answer into a `ClientError`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&ExecBody>,
        timeout: Option<Duration>,
    ) -> Result<T, ClientError> {
        let shown = url.to_string();
        let mut request = self.request(method, url);
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        Self::send_and_decode(request, shown).await
    }

    /// Send `request` and decode a success body as `T`.
    async fn send_and_decode<T: DeserializeOwned>(
        request: reqwest::RequestBuilder,
        shown: String,
    ) -> Result<T, ClientError> {
        let bytes = Self::answer(request, &shown).await?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol {
            url: shown,
            detail: format!("a body that is not threadbox's JSON ({e})"),
        })
    }

    /// Send `request` and return a success's body, or the error the answer means.
    async fn answer(request: reqwest::RequestBuilder, shown: &str) -> Result<Vec<u8>, ClientError> {
        let response = request
            .send()
            .await
            .map_err(|e| ClientError::unreachable(shown, &e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ClientError::unreachable(shown, &e))?;
        if !status.is_success() {
            return Err(ClientError::from_response(
                status.as_u16(),
                retry_after,
                &bytes,
            ));
        }
        Ok(bytes.to_vec())
    }

    /// One page of threads, with each one's usage when `usage` asks for it; pass the previous
    /// page's `next` as `cursor`.
    pub async fn list_page_with(
        &self,
        limit: Option<usize>,
        cursor: Option<&str>,
        usage: UsageQuery,
    ) -> Result<ThreadPage, ClientError> {
        let mut url = self.url(None, None);
        {
            let mut query = url.query_pairs_mut();
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
            if let Some(cursor) = cursor {
                query.append_pair("cursor", cursor);
            }
            if let UsageQuery::Since(since) = usage {
                query.append_pair("usage", "true");
                if let Some(since) = since {
                    query.append_pair("usage_since", &since.0.to_string());
                }
            }
        }
        // An empty query string would still leave a bare "?" behind.
        if url.query() == Some("") {
            url.set_query(None);
        }
        self.call(Method::GET, url, None, None).await
    }

    /// Threads across pages, up to `max` (every thread when `None`), with their usage when
    /// `usage` asks for it.
    pub async fn list_with(
        &self,
        max: Option<usize>,
        usage: UsageQuery,
    ) -> Result<Vec<ThreadView>, ClientError> {
        // The API's largest page, so a big listing takes few round trips.
        const PAGE: usize = 500;
        let mut threads = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let want = max.map_or(PAGE, |m| m.saturating_sub(threads.len()).min(PAGE));
            if want == 0 {
                break;
            }
            let page = self
                .list_page_with(Some(want), cursor.as_deref(), usage)
                .await?;
            threads.extend(page.threads);
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(threads)
    }

    pub async fn show(&self, thread_id: &str) -> Result<ThreadDetail, ClientError> {
        self.call(Method::GET, self.url(Some(thread_id), None), None, None)
            .await
    }

    /// Events with a sequence number above `after_seq`, at most `limit` (the server's default
    /// page when `None`).
    pub async fn events(
        &self,
        thread_id: &str,
        after_seq: u64,
        limit: Option<usize>,
    ) -> Result<EventPage, ClientError> {
        let mut url = self.url(Some(thread_id), Some("events"));
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("after_seq", &after_seq.to_string());
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
        }
        self.call(Method::GET, url, None, None).await
    }

    /// Get-or-create the thread's sandbox, resuming it when paused.
    pub async fn resolve(&self, thread_id: &str) -> Result<SandboxHandle, ClientError> {
        self.call(
            Method::POST,
            self.url(Some(thread_id), Some("resolve")),
            None,
            None,
        )
        .await
    }

    /// Resolve, choosing the image of a thread this call creates (`{"image": NAME}`); a thread
    /// that exists with another image is a conflict.
    pub async fn resolve_on(
        &self,
        thread_id: &str,
        image: &ImageName,
    ) -> Result<SandboxHandle, ClientError> {
        let url = self.url(Some(thread_id), Some("resolve"));
        let shown = url.to_string();
        let request = self.request(Method::POST, url).json(&ImageBody { image });
        Self::send_and_decode(request, shown).await
    }

    /// Change the thread's image (recorded with a `user` event; its next sandbox starts from
    /// it).
    pub async fn set_image(
        &self,
        thread_id: &str,
        image: &ImageName,
    ) -> Result<ImageSet, ClientError> {
        let url = self.url(Some(thread_id), Some("image"));
        let shown = url.to_string();
        let request = self.request(Method::PUT, url).json(&ImageBody { image });
        Self::send_and_decode(request, shown).await
    }

    /// The images the deployment's sandboxes can start from (`GET /v1/images`).
    pub async fn images(&self) -> Result<ImageList, ClientError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in new: the base URL can be a base")
            .pop_if_empty()
            .extend(["v1", "images"]);
        self.call(Method::GET, url, None, None).await
    }

    pub async fn pause(&self, thread_id: &str) -> Result<ThreadView, ClientError> {
        self.call(
            Method::POST,
            self.url(Some(thread_id), Some("pause")),
            None,
            None,
        )
        .await
    }

    pub async fn resume(&self, thread_id: &str) -> Result<SandboxHandle, ClientError> {
        self.call(
            Method::POST,
            self.url(Some(thread_id), Some("resume")),
            None,
            None,
        )
        .await
    }

    /// Destroy the thread's sandbox and every file in it, and start a fresh one.
    pub async fn reset(&self, thread_id: &str) -> Result<ResetView, ClientError> {
        self.call(
            Method::POST,
            self.url(Some(thread_id), Some("reset")),
            None,
            None,
        )
        .await
    }

    /// Change the thread's network profile (recorded with a `user` event; applied in place
    /// where the provider can, otherwise to the thread's next sandbox).
    pub async fn set_network(
        &self,
        thread_id: &str,
        network: &NetworkProfile,
    ) -> Result<NetworkSet, ClientError> {
        let url = self.url(Some(thread_id), Some("network"));
        let shown = url.to_string();
        let request = self
            .request(Method::PUT, url)
            .json(&NetworkBody { network });
        Self::send_and_decode(request, shown).await
    }

    /// Run a command; the call may take as long as the command's own timeout (the server's
    /// default when the spec has none), plus time to create or resume the sandbox first.
    pub async fn exec(&self, thread_id: &str, spec: &ExecBody) -> Result<ExecResult, ClientError> {
        let command = spec.timeout_ms.map_or(
            threadbox_core::ports::DEFAULT_EXEC_TIMEOUT,
            Duration::from_millis,
        );
        self.call(
            Method::POST,
            self.url(Some(thread_id), Some("exec")),
            Some(spec),
            Some(command + REQUEST_TIMEOUT),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_the_base_path_and_encode_thread_ids() {
        let client = Client::new("https://api.example.com/prod/", None).unwrap();
        assert_eq!(
            client
                .url(Some("slack:T1:C2:1700.5"), Some("events"))
                .as_str(),
            "https://api.example.com/prod/v1/threads/slack:T1:C2:1700.5/events"
        );
        let client = Client::new(DEFAULT_URL, None).unwrap();
        assert_eq!(
            client.url(None, None).as_str(),
            "http://127.0.0.1:8787/v1/threads"
        );
        // A slash or a space cannot turn into another route.
        assert_eq!(
            client.url(Some("a/b c"), Some("pause")).as_str(),
            "http://127.0.0.1:8787/v1/threads/a%2Fb%20c/pause"
        );
    }

    #[test]
    fn bad_settings_are_usage_errors() {
        for url in ["127.0.0.1:8787", "ftp://x", "not a url", "mailto:a@b"] {
            let error = Client::new(url, None).unwrap_err();
            assert!(matches!(error, ClientError::Config(_)), "{url}: {error}");
        }
        assert!(Client::new(DEFAULT_URL, Some("bad\nkey")).is_err());
        let client = Client::new(DEFAULT_URL, Some("  ")).unwrap();
        assert!(client.auth.is_none(), "a blank key is no key");
        let client = Client::new(DEFAULT_URL, Some("secret-key")).unwrap();
        assert!(!format!("{client:?}").contains("secret-key"));
    }
}
