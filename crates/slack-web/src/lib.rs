//! `SlackWebClient`: the `SlackApi` port over Slack's Web API with reqwest (rustls), one client
//! per process.
//!
//! Slack answers most failures with HTTP 200 and `{"ok": false, "error": "..."}`; those become
//! typed `SlackError::Api` codes. HTTP 429 carries `Retry-After` (seconds), which callers honour.
//! The bot token goes only to Slack (or the configured API host): a download link from anywhere
//! else is refused rather than handed our credentials, and a file's bytes go to the upload URL
//! Slack hands out without it unless that URL is on the API host itself (the URL is its own
//! permission).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::Value;

use threadbox_core::config::{ConfigError, Env};
use threadbox_core::ports::{
    ApiErrorCode, EphemeralMessage, FileUpload, PostMessage, Posted, SlackApi, SlackError,
    SlackFile, UpdateMessage,
};

/// Slack's Web API.
pub const DEFAULT_API_URL: &str = "https://slack.com/api/";
/// The bot token's variable.
pub const BOT_TOKEN_VAR: &str = "SLACK_BOT_TOKEN";
/// Another Web API base than Slack's (a fake, a proxy).
pub const API_URL_VAR: &str = "SLACK_API_URL";

/// `conversations.members` pages `is_member` reads before giving up: 100 pages of 1,000 is
/// 100,000 members, past any channel threadbox serves, so more means a cursor that never ends
/// (Slack's bug or ours), which must not become a loop that never ends.
pub const MAX_MEMBER_PAGES: usize = 100;
/// Members asked for per page: Slack's documented maximum, for the fewest round trips.
const MEMBERS_PAGE_LIMIT: &str = "1000";

/// A bot token (`xoxb-…`). Never shown in `Debug` or logs.
#[derive(Clone)]
pub struct BotToken(Arc<str>);

impl BotToken {
    /// `None` for a blank token.
    pub fn new(token: &str) -> Option<Self> {
        let token = token.trim();
        (!token.is_empty()).then(|| Self(token.into()))
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl std::fmt::Debug for BotToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BotToken(<redacted>)")
    }
}

#[derive(Clone, Debug)]
pub struct SlackClientConfig {
    pub token: BotToken,
    /// Where the Web API methods live; `https://slack.com/api/` unless testing.
    pub api_url: Url,
    /// Per call to an API method.
    pub request_timeout: Duration,
    /// Per file download.
    pub download_timeout: Duration,
    pub connect_timeout: Duration,
}

impl SlackClientConfig {
    pub fn new(token: BotToken) -> Self {
        Self {
            token,
            api_url: Url::parse(DEFAULT_API_URL).expect("a valid URL"),
            request_timeout: Duration::from_secs(15),
            download_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// Point at another API base (the tests' fake); a missing trailing `/` is added so method
    /// names join under it.
    pub fn with_api_url(mut self, url: &str) -> Result<Self, ConfigError> {
        let with_slash = if url.ends_with('/') {
            url.to_owned()
        } else {
            format!("{url}/")
        };
        self.api_url = Url::parse(&with_slash).map_err(|e| ConfigError::Invalid {
            variable: API_URL_VAR,
            reason: format!("{url:?} is not a URL: {e}"),
        })?;
        Ok(self)
    }

    /// `SLACK_BOT_TOKEN` (required for a client: `None` without it) and `SLACK_API_URL`.
    pub fn from_env(env: &Env) -> Result<Option<Self>, ConfigError> {
        let Some(token) = env.get(BOT_TOKEN_VAR).and_then(|t| BotToken::new(&t)) else {
            return Ok(None);
        };
        let config = Self::new(token);
        match env.get(API_URL_VAR) {
            Some(url) => config.with_api_url(&url).map(Some),
            None => Ok(Some(config)),
        }
    }
}

pub struct SlackWebClient {
    http: reqwest::Client,
    config: SlackClientConfig,
}

impl std::fmt::Debug for SlackWebClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackWebClient")
            .field("api_url", &self.config.api_url.as_str())
            .finish_non_exhaustive()
    }
}

/// The envelope of every Web API answer.
#[derive(Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

impl SlackWebClient {
    pub fn new(config: SlackClientConfig) -> Result<Self, SlackError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            // A few hops for file downloads; reqwest drops Authorization on a hop to another host.
            .redirect(reqwest::redirect::Policy::limited(3))
            .user_agent(concat!("threadbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| SlackError::Transport {
                method: "(building the client)".into(),
                detail: e.to_string(),
            })?;
        Ok(Self { http, config })
    }

    fn method_url(&self, method: &str) -> Url {
        self.config
            .api_url
            .join(method)
            .expect("method names are plain path segments")
    }

    /// POST a JSON body to a write method.
    async fn call(
        &self,
        method: &str,
        body: &Value,
    ) -> Result<serde_json::Map<String, Value>, SlackError> {
        let request = self
            .http
            .post(self.method_url(method))
            .header(CONTENT_TYPE, "application/json; charset=utf-8")
            .body(body.to_string());
        self.send(method, request).await
    }

    /// GET a read method with query parameters (Slack takes JSON bodies only for writes).
    async fn get(
        &self,
        method: &str,
        query: &[(&str, &str)],
    ) -> Result<serde_json::Map<String, Value>, SlackError> {
        let request = self.http.get(self.method_url(method)).query(query);
        self.send(method, request).await
    }

    /// POST form-encoded arguments, for methods documented with form bodies only
    /// (`files.getUploadURLExternal`).
    async fn post_form(
        &self,
        method: &str,
        form: &[(&str, &str)],
    ) -> Result<serde_json::Map<String, Value>, SlackError> {
        let request = self.http.post(self.method_url(method)).form(form);
        self.send(method, request).await
    }

    /// Send a request to `method` with the bot token and the request timeout, and read Slack's
    /// answer (`ok`, or the error it names).
    async fn send(
        &self,
        method: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<serde_json::Map<String, Value>, SlackError> {
        let response = request
            .timeout(self.config.request_timeout)
            .header(AUTHORIZATION, self.config.token.bearer())
            .send()
            .await
            .map_err(|e| transport(method, e))?;
        read_answer(method, response).await
    }

    /// Whether `url` is on the configured API host (scheme, host and port).
    fn is_api_origin(&self, url: &Url) -> bool {
        let api = &self.config.api_url;
        url.scheme() == api.scheme()
            && url.host_str() == api.host_str()
            && url.port_or_known_default() == api.port_or_known_default()
    }

    /// Whether `url` may receive the bot token: HTTPS on slack.com or a subdomain (where
    /// Slack's file links point), or the configured API host itself.
    fn may_receive_token(&self, url: &Url) -> bool {
        let slack = url.scheme() == "https"
            && url
                .host_str()
                .is_some_and(|h| h == "slack.com" || h.ends_with(".slack.com"));
        self.is_api_origin(url) || slack
    }

    /// The middle step of `upload_file`: the raw bytes to the URL Slack handed out. Slack's
    /// upload service takes a raw body as well as multipart, and answers 200 when it has it.
    async fn send_upload_bytes(&self, upload_url: &str, bytes: &[u8]) -> Result<(), SlackError> {
        const METHOD: &str = "file upload";
        let url = Url::parse(upload_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "https" | "http"))
            .ok_or_else(|| SlackError::Transport {
                method: "files.getUploadURLExternal".to_owned(),
                detail: "the upload_url is not an HTTP(S) URL".to_owned(),
            })?;
        let mut request = self
            .http
            .post(url.clone())
            // As long as a download may take: the body is as big as a file.
            .timeout(self.config.download_timeout)
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(bytes.to_vec());
        // The URL carries its own permission, so Slack's upload host (files.slack.com) gets no
        // token; only the configured API host itself (a proxy, the tests' fake) is sent it.
        if self.is_api_origin(&url) {
            request = request.header(AUTHORIZATION, self.config.token.bearer());
        }
        let response = request.send().await.map_err(|e| transport(METHOD, e))?;
        let status = response.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            return Err(SlackError::RateLimited {
                method: METHOD.to_owned(),
                retry_after: retry_after(response.headers()),
            });
        }
        if status.is_server_error() {
            return Err(SlackError::Transport {
                method: METHOD.to_owned(),
                detail: format!("HTTP {status}"),
            });
        }
        if !status.is_success() {
            // A 4xx from the upload service is about this request (an expired URL, a length
            // that does not match): the same bytes again will not do better.
            return Err(SlackError::Api {
                method: METHOD.to_owned(),
                code: ApiErrorCode::Other(format!("upload_rejected_http_{}", status.as_u16())),
            });
        }
        Ok(())
    }
}

fn transport(method: &str, error: reqwest::Error) -> SlackError {
    SlackError::Transport {
        method: method.to_owned(),
        detail: if error.is_timeout() {
            "timed out".to_owned()
        } else {
            // Without the URL: file links carry ids better kept out of logs.
            error.without_url().to_string()
        },
    }
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

async fn read_answer(
    method: &str,
    response: reqwest::Response,
) -> Result<serde_json::Map<String, Value>, SlackError> {
    let status = response.status();
    if status == StatusCode::TOO_MANY_REQUESTS {
        return Err(SlackError::RateLimited {
            method: method.to_owned(),
            retry_after: retry_after(response.headers()),
        });
    }
    if !status.is_success() {
        return Err(SlackError::Transport {
            method: method.to_owned(),
            detail: format!("HTTP {status}"),
        });
    }
    let bytes = response.bytes().await.map_err(|e| transport(method, e))?;
    let answer: Answer = serde_json::from_slice(&bytes).map_err(|e| SlackError::Transport {
        method: method.to_owned(),
        detail: format!("not Slack's JSON: {e}"),
    })?;
    if answer.ok {
        return Ok(answer.rest);
    }
    let code = ApiErrorCode::parse(answer.error.as_deref().unwrap_or("unknown_error"));
    if code == ApiErrorCode::Ratelimited {
        return Err(SlackError::RateLimited {
            method: method.to_owned(),
            retry_after: None,
        });
    }
    Err(SlackError::Api {
        method: method.to_owned(),
        code,
    })
}

fn string_field(
    method: &str,
    map: &serde_json::Map<String, Value>,
    field: &str,
) -> Result<String, SlackError> {
    map.get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| SlackError::Transport {
            method: method.to_owned(),
            detail: format!("the answer has no {field:?}"),
        })
}

#[async_trait]
impl SlackApi for SlackWebClient {
    async fn post_ephemeral(&self, message: &EphemeralMessage) -> Result<(), SlackError> {
        let body = serde_json::to_value(message).expect("messages serialise");
        self.call("chat.postEphemeral", &body).await.map(|_| ())
    }

    async fn open_view(&self, trigger_id: &str, view: &Value) -> Result<(), SlackError> {
        // In a JSON body the view goes as an object; the "JSON-encoded string" of Slack's docs
        // is for form-encoded calls.
        let body = serde_json::json!({ "trigger_id": trigger_id, "view": view });
        self.call("views.open", &body).await.map(|_| ())
    }

    async fn publish_view(&self, user: &str, view: &Value) -> Result<(), SlackError> {
        let body = serde_json::json!({ "user_id": user, "view": view });
        self.call("views.publish", &body).await.map(|_| ())
    }

    async fn upload_file(&self, upload: &FileUpload) -> Result<String, SlackError> {
        const GET_URL: &str = "files.getUploadURLExternal";
        const COMPLETE: &str = "files.completeUploadExternal";
        let length = upload.bytes.len().to_string();
        let answer = self
            .post_form(
                GET_URL,
                &[("filename", &upload.filename), ("length", &length)],
            )
            .await?;
        let upload_url = string_field(GET_URL, &answer, "upload_url")?;
        let file_id = string_field(GET_URL, &answer, "file_id")?;

        self.send_upload_bytes(&upload_url, &upload.bytes).await?;

        let mut file = serde_json::json!({ "id": file_id });
        if !upload.title.is_empty() {
            file["title"] = Value::from(upload.title.as_str());
        }
        let mut body = serde_json::json!({
            "files": [file],
            "channel_id": upload.channel,
        });
        if let Some(thread_ts) = &upload.thread_ts {
            body["thread_ts"] = Value::from(thread_ts.as_str());
        }
        // An empty comment would be an empty message; without one Slack shares the file alone.
        if !upload.initial_comment.is_empty() {
            body["initial_comment"] = Value::from(upload.initial_comment.as_str());
        }
        self.call(COMPLETE, &body).await?;
        Ok(file_id)
    }

    async fn is_member(&self, channel: &str, user: &str) -> Result<bool, SlackError> {
        const METHOD: &str = "conversations.members";
        let mut cursor = String::new();
        let mut cursors_seen = HashSet::new();
        for _ in 0..MAX_MEMBER_PAGES {
            let mut query = vec![("channel", channel), ("limit", MEMBERS_PAGE_LIMIT)];
            if !cursor.is_empty() {
                query.push(("cursor", cursor.as_str()));
            }
            let answer = self.get(METHOD, &query).await?;
            let members = answer
                .get("members")
                .and_then(Value::as_array)
                .ok_or_else(|| SlackError::Transport {
                    method: METHOD.to_owned(),
                    detail: "the answer has no \"members\" list".to_owned(),
                })?;
            // The first page that names the user settles it; the rest need not be read.
            if members.iter().any(|m| m.as_str() == Some(user)) {
                return Ok(true);
            }
            // Slack ends the list with an empty (or null, or no) next_cursor.
            let next = answer
                .get("response_metadata")
                .and_then(|m| m.get("next_cursor"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if next.is_empty() {
                return Ok(false);
            }
            if !cursors_seen.insert(next.to_owned()) {
                return Err(SlackError::Transport {
                    method: METHOD.to_owned(),
                    detail: "the member list's cursor came round again".to_owned(),
                });
            }
            cursor = next.to_owned();
        }
        Err(SlackError::Unsupported(format!(
            "{METHOD}: {channel} has more than {MAX_MEMBER_PAGES} pages of members; gave up"
        )))
    }

    async fn post_message(&self, message: &PostMessage) -> Result<Posted, SlackError> {
        const METHOD: &str = "chat.postMessage";
        let body = serde_json::to_value(message).expect("messages serialise");
        let answer = self.call(METHOD, &body).await?;
        Ok(Posted {
            channel: string_field(METHOD, &answer, "channel")?,
            ts: string_field(METHOD, &answer, "ts")?,
        })
    }

    async fn update_message(&self, update: &UpdateMessage) -> Result<(), SlackError> {
        let body = serde_json::to_value(update).expect("updates serialise");
        self.call("chat.update", &body).await.map(|_| ())
    }

    async fn file_info(&self, file_id: &str) -> Result<SlackFile, SlackError> {
        const METHOD: &str = "files.info";
        let answer = self.get(METHOD, &[("file", file_id)]).await?;
        let file = answer
            .get("file")
            .cloned()
            .ok_or_else(|| SlackError::Transport {
                method: METHOD.to_owned(),
                detail: "the answer has no \"file\"".to_owned(),
            })?;
        serde_json::from_value(file).map_err(|e| SlackError::Transport {
            method: METHOD.to_owned(),
            detail: format!("unexpected file description: {e}"),
        })
    }

    async fn download_file(&self, url: &str, max_bytes: u64) -> Result<Vec<u8>, SlackError> {
        const METHOD: &str = "file download";
        let url =
            Url::parse(url).map_err(|e| SlackError::Unsupported(format!("bad file link: {e}")))?;
        if !self.may_receive_token(&url) {
            return Err(SlackError::Unsupported(format!(
                "refusing to send the bot token to {}: file links must be on slack.com",
                url.host_str().unwrap_or("?")
            )));
        }
        let mut response = self
            .http
            .get(url.clone())
            .timeout(self.config.download_timeout)
            .header(AUTHORIZATION, self.config.token.bearer())
            .send()
            .await
            .map_err(|e| transport(METHOD, e))?;
        let status = response.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            return Err(SlackError::RateLimited {
                method: METHOD.to_owned(),
                retry_after: retry_after(response.headers()),
            });
        }
        if status == StatusCode::NOT_FOUND {
            return Err(SlackError::Api {
                method: METHOD.to_owned(),
                code: ApiErrorCode::FileNotFound,
            });
        }
        if !status.is_success() {
            return Err(SlackError::Transport {
                method: METHOD.to_owned(),
                detail: format!("HTTP {status}"),
            });
        }
        // Slack answers a download it will not authorise with its sign-in page, not an error.
        let html = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/html"));
        let html_file = url.path().ends_with(".html") || url.path().ends_with(".htm");
        if html && !html_file {
            return Err(SlackError::Api {
                method: METHOD.to_owned(),
                code: ApiErrorCode::Other(
                    "sign_in_page_instead_of_file (does the token have files:read?)".to_owned(),
                ),
            });
        }
        if let Some(length) = response.content_length().filter(|l| *l > max_bytes) {
            return Err(SlackError::TooLarge {
                size: length,
                limit: max_bytes,
            });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport(METHOD, e))? {
            if (bytes.len() + chunk.len()) as u64 > max_bytes {
                return Err(SlackError::TooLarge {
                    size: (bytes.len() + chunk.len()) as u64,
                    limit: max_bytes,
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(api: &str) -> SlackWebClient {
        let config = SlackClientConfig::new(BotToken::new("xoxb-test").unwrap())
            .with_api_url(api)
            .unwrap();
        SlackWebClient::new(config).unwrap()
    }

    #[test]
    fn the_token_goes_only_to_slack_or_the_api_host() {
        let c = client("http://127.0.0.1:4000/api");
        let ok = |u: &str| c.may_receive_token(&Url::parse(u).unwrap());
        assert!(ok("https://files.slack.com/files-pri/T1-F1/download/a.csv"));
        assert!(ok("https://slack.com/x"));
        assert!(ok("http://127.0.0.1:4000/files/F1"));
        assert!(!ok("http://files.slack.com/x"), "not over plain HTTP");
        assert!(!ok("https://files.slack.com.evil.example/x"));
        assert!(!ok("https://evilslack.com/x"));
        assert!(!ok("http://127.0.0.1:4001/files/F1"), "another port");
    }

    #[test]
    fn upload_urls_get_the_token_only_on_the_api_host() {
        let c = client("https://slack.com/api");
        let api = |u: &str| c.is_api_origin(&Url::parse(u).unwrap());
        assert!(api("https://slack.com/upload/v1/abc"));
        // Slack's own upload host needs no token: the URL is the permission.
        assert!(!api("https://files.slack.com/upload/v1/abc"));
        assert!(
            !api("http://slack.com/upload/v1/abc"),
            "not over plain HTTP"
        );
        assert!(!api("https://slack.com:8443/upload/v1/abc"), "another port");
    }

    #[test]
    fn api_urls_join_method_names_and_secrets_stay_hidden() {
        let c = client("http://127.0.0.1:4000/api");
        assert_eq!(
            c.method_url("chat.postMessage").as_str(),
            "http://127.0.0.1:4000/api/chat.postMessage"
        );
        let shown = format!("{:?} {:?}", c, BotToken::new("xoxb-secret-1").unwrap());
        assert!(!shown.contains("xoxb"), "{shown}");
        assert!(BotToken::new("  ").is_none());
    }
}
