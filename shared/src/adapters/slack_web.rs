//! `SlackWebClient`: the `SlackApi` port over Slack's Web API with reqwest (rustls), one client
//! per process.
//!
//! Slack answers most failures with HTTP 200 and `{"ok": false, "error": "..."}`; those become
//! typed `SlackError::Api` codes. HTTP 429 carries `Retry-After` (seconds), which callers honour.
//! The bot token goes only to Slack (or the configured API host): a download link from anywhere
//! else is refused rather than handed our credentials.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::Value;

use crate::config::{ConfigError, Env};
use crate::ports::{
    ApiErrorCode, PostMessage, Posted, SlackApi, SlackError, SlackFile, UpdateMessage,
};

/// Slack's Web API.
pub const DEFAULT_API_URL: &str = "https://slack.com/api/";
/// The bot token's variable.
pub const BOT_TOKEN_VAR: &str = "SLACK_BOT_TOKEN";
/// Another Web API base than Slack's (a fake, a proxy).
pub const API_URL_VAR: &str = "SLACK_API_URL";

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
        let response = self
            .http
            .post(self.method_url(method))
            .timeout(self.config.request_timeout)
            .header(AUTHORIZATION, self.config.token.bearer())
            .header(CONTENT_TYPE, "application/json; charset=utf-8")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| transport(method, e))?;
        read_answer(method, response).await
    }

    /// GET a read method with query parameters (Slack takes JSON bodies only for writes).
    async fn get(
        &self,
        method: &str,
        query: &[(&str, &str)],
    ) -> Result<serde_json::Map<String, Value>, SlackError> {
        let response = self
            .http
            .get(self.method_url(method))
            .timeout(self.config.request_timeout)
            .header(AUTHORIZATION, self.config.token.bearer())
            .query(query)
            .send()
            .await
            .map_err(|e| transport(method, e))?;
        read_answer(method, response).await
    }

    /// Whether `url` may receive the bot token: HTTPS on slack.com or a subdomain (where
    /// Slack's file links point), or the configured API host itself.
    fn may_receive_token(&self, url: &Url) -> bool {
        let api = &self.config.api_url;
        let same_origin = url.scheme() == api.scheme()
            && url.host_str() == api.host_str()
            && url.port_or_known_default() == api.port_or_known_default();
        let slack = url.scheme() == "https"
            && url
                .host_str()
                .is_some_and(|h| h == "slack.com" || h.ends_with(".slack.com"));
        same_origin || slack
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
