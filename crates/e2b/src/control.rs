//! The control plane: E2B's REST API for a sandbox's lifecycle (docs/e2b.md §1 and §2).
//!
//! Paths as E2B's current SDK uses them: `POST /v2/sandboxes` (with an `Idempotency-Key`),
//! `POST /v2/sandboxes/{id}/connect`, `GET /v2/sandboxes` (paged by `X-Next-Token`), and the
//! v1 paths for info, timeout, pause and kill. Every call goes through the retry policy; this
//! file only shapes requests and reads answers, and leaves meaning (what a 409 on pause says
//! about the sandbox, say) to the provider.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use threadbox_core::ports::{SandboxInfo, SandboxState};

use super::config::{E2bConfig, Secret};
use super::errors::E2bError;
use super::retry::RetryPolicy;
use super::rfc3339;

/// `NewSandboxV2`. v2 has no `secure` flag: every v2 sandbox is secured (its envd demands the
/// access token), which is what threadbox wants anyway. `autoResume` is left off on purpose:
/// traffic must not wake a sandbox behind the session record's back; threadbox resumes with
/// an explicit connect.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct NewSandbox<'a> {
    #[serde(rename = "templateID")]
    pub template_id: &'a str,
    pub timeout: u64,
    #[serde(rename = "autoPause")]
    pub auto_pause: bool,
    pub allow_internet_access: bool,
    /// `network.allowOut`/`denyOut` for a networked sandbox with an allowlist; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<serde_json::Value>,
    pub metadata: &'a BTreeMap<String, String>,
    #[serde(rename = "envVars")]
    pub env_vars: &'a BTreeMap<String, String>,
}

/// `Sandbox`: what create and connect return.
#[derive(Clone, Deserialize)]
pub(crate) struct Sandbox {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "envdAccessToken", default)]
    pub envd_access_token: Option<String>,
    /// Absent or null for the default cluster; the client then uses its own domain.
    #[serde(default)]
    pub domain: Option<String>,
}

/// `SandboxDetail` (info) and `ListedSandbox` (list): the fields threadbox reads.
#[derive(Clone, Deserialize)]
pub(crate) struct SandboxDetail {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    pub state: String,
    #[serde(rename = "startedAt", default)]
    pub started_at: Option<String>,
    #[serde(rename = "endAt", default)]
    pub end_at: Option<String>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Info only, for secured sandboxes: the token envd wants now.
    #[serde(rename = "envdAccessToken", default)]
    pub envd_access_token: Option<String>,
    #[serde(default)]
    pub domain: Option<String>,
}

impl SandboxDetail {
    pub fn to_info(&self) -> Result<SandboxInfo, E2bError> {
        let state = match self.state.as_str() {
            "running" => SandboxState::Running,
            // E2B reports a sandbox that is still pausing as paused too.
            "paused" => SandboxState::Paused,
            other => {
                return Err(E2bError::Protocol(format!(
                    "sandbox {} has unknown state {other:?}",
                    self.sandbox_id
                )))
            }
        };
        let time = |t: &Option<String>| t.as_deref().and_then(rfc3339::parse);
        Ok(SandboxInfo {
            sandbox_id: self.sandbox_id.clone(),
            state,
            metadata: self.metadata.clone().unwrap_or_default(),
            started_at: time(&self.started_at),
            // A paused sandbox's `endAt` is when it paused, not a deadline: nothing will stop it.
            deadline: match state {
                SandboxState::Running => time(&self.end_at),
                SandboxState::Paused => None,
            },
            // E2B reports a sandbox's disk size but not what it holds.
            disk: None,
        })
    }
}

/// What a connect did.
pub(crate) struct Connection {
    /// 201: the sandbox was paused and has been resumed (with a new envd token, possibly).
    pub resumed: bool,
    pub sandbox: Sandbox,
}

/// Largest page E2B serves; also the page size we ask for.
const PAGE_SIZE: u32 = 100;
/// A listing longer than this many pages is a server bug (a token loop), not a big team.
const MAX_PAGES: usize = 10_000;

/// Told when the control plane refuses the API key (see [`ControlClient::on_refused_key`]).
pub(crate) type RefusedKeyHook = Arc<dyn Fn() + Send + Sync>;

pub(crate) struct ControlClient {
    http: Client,
    base: String,
    api_key: Secret,
    retry: RetryPolicy,
    request_timeout: Duration,
    refused_key: Option<RefusedKeyHook>,
}

impl ControlClient {
    pub fn new(http: Client, config: &E2bConfig) -> Self {
        Self {
            http,
            base: config.api_url.clone(),
            api_key: config.api_key.clone(),
            retry: config.retry.clone(),
            request_timeout: config.request_timeout,
            refused_key: None,
        }
    }

    /// Call `hook` whenever E2B answers 401 or 403 to the API key: the key may have been
    /// rotated since it was read, and whoever holds the secret can fetch it again.
    pub fn on_refused_key(&mut self, hook: RefusedKeyHook) {
        self.refused_key = Some(hook);
    }

    /// One call through the retry policy, reporting a refused key to the hook.
    async fn send(
        &self,
        operation: &'static str,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Response, E2bError> {
        let result = self.retry.send(operation, build).await;
        if let (Err(E2bError::Unauthorized { .. }), Some(hook)) = (&result, &self.refused_key) {
            tracing::warn!(operation, "E2B refused the API key");
            hook();
        }
        result
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header("X-API-Key", self.api_key.expose())
            .timeout(self.request_timeout)
    }

    /// `POST /v2/sandboxes`. The same key and body within a day give back the same sandbox, so
    /// retrying (here, or in a later call after an ambiguous failure) never makes a second one.
    pub async fn create(
        &self,
        body: &NewSandbox<'_>,
        idempotency_key: &str,
    ) -> Result<Sandbox, E2bError> {
        let response = self
            .send("create", || {
                self.request(Method::POST, "/v2/sandboxes")
                    .header("Idempotency-Key", idempotency_key)
                    .json(body)
            })
            .await?;
        read_json(response).await
    }

    /// `POST /v2/sandboxes/{id}/connect`: 200 when it was running (its timeout only extended),
    /// 201 when it was paused and has been resumed under the same id.
    pub async fn connect(
        &self,
        sandbox_id: &str,
        timeout: Duration,
        keep_memory: bool,
    ) -> Result<Connection, E2bError> {
        #[derive(Serialize)]
        struct Body {
            timeout: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            memory: Option<bool>,
        }
        let body = Body {
            timeout: whole_secs(timeout),
            memory: (!keep_memory).then_some(false),
        };
        let path = format!("/v2/sandboxes/{sandbox_id}/connect");
        let response = self
            .send("connect", || self.request(Method::POST, &path).json(&body))
            .await?;
        let resumed = response.status() == StatusCode::CREATED;
        Ok(Connection {
            resumed,
            sandbox: read_json(response).await?,
        })
    }

    /// `POST /sandboxes/{id}/pause` (204). The body is `{}`: a full memory snapshot.
    pub async fn pause(&self, sandbox_id: &str) -> Result<(), E2bError> {
        let path = format!("/sandboxes/{sandbox_id}/pause");
        self.send("pause", || {
            self.request(Method::POST, &path)
                .json(&serde_json::json!({}))
        })
        .await
        .map(drop)
    }

    /// `DELETE /sandboxes/{id}` (204); works on running and paused sandboxes.
    pub async fn kill(&self, sandbox_id: &str) -> Result<(), E2bError> {
        let path = format!("/sandboxes/{sandbox_id}");
        self.send("kill", || self.request(Method::DELETE, &path))
            .await
            .map(drop)
    }

    /// `POST /sandboxes/{id}/timeout` (204): the deadline becomes now + `timeout`, which may
    /// shorten it. Only running sandboxes have one: a paused sandbox answers 404.
    pub async fn set_timeout(&self, sandbox_id: &str, timeout: Duration) -> Result<(), E2bError> {
        let path = format!("/sandboxes/{sandbox_id}/timeout");
        let body = serde_json::json!({ "timeout": whole_secs(timeout) });
        self.send("set_timeout", || {
            self.request(Method::POST, &path).json(&body)
        })
        .await
        .map(drop)
    }

    /// `PUT /sandboxes/{id}/network`: replaces the sandbox's egress rules.
    pub async fn set_network(
        &self,
        sandbox_id: &str,
        network: &serde_json::Value,
    ) -> Result<(), E2bError> {
        let path = format!("/sandboxes/{sandbox_id}/network");
        self.send("set_network", || {
            self.request(Method::PUT, &path).json(network)
        })
        .await
        .map(drop)
    }

    /// `GET /sandboxes/{id}`.
    pub async fn info(&self, sandbox_id: &str) -> Result<SandboxDetail, E2bError> {
        let path = format!("/sandboxes/{sandbox_id}");
        let response = self
            .send("info", || self.request(Method::GET, &path))
            .await?;
        read_json(response).await
    }

    /// `GET /v2/sandboxes`, running and paused, every page, filtered by `metadata` (all pairs
    /// must match) when it is not empty.
    pub async fn list(
        &self,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<SandboxDetail>, E2bError> {
        let filter = metadata_query(metadata);
        let mut out = Vec::new();
        let mut next_token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let response = self
                .send("list", || {
                    let mut query: Vec<(&str, String)> = vec![
                        ("state", "running,paused".to_owned()),
                        ("limit", PAGE_SIZE.to_string()),
                    ];
                    if !filter.is_empty() {
                        query.push(("metadata", filter.clone()));
                    }
                    if let Some(token) = &next_token {
                        query.push(("nextToken", token.clone()));
                    }
                    self.request(Method::GET, "/v2/sandboxes").query(&query)
                })
                .await?;
            let token = response
                .headers()
                .get("x-next-token")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .filter(|t| !t.is_empty());
            let page: Vec<SandboxDetail> = read_json(response).await?;
            out.extend(page);
            match token {
                Some(t) if next_token.as_deref() == Some(t.as_str()) => {
                    return Err(E2bError::Protocol("list repeated its X-Next-Token".into()))
                }
                Some(t) => next_token = Some(t),
                None => return Ok(out),
            }
        }
        Err(E2bError::Protocol(format!(
            "list did not end within {MAX_PAGES} pages"
        )))
    }
}

/// E2B takes whole seconds; round up so a keep-alive never grants less than asked, and never
/// send 0 (create rejects it).
pub(crate) fn whole_secs(d: Duration) -> u64 {
    (d.as_millis().div_ceil(1000) as u64).max(1)
}

/// Parse a success body, typing a body that is not what the contract promises.
async fn read_json<T: DeserializeOwned>(response: reqwest::Response) -> Result<T, E2bError> {
    let status = response.status();
    let bytes = response.bytes().await.map_err(E2bError::from_transport)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| E2bError::Protocol(format!("{status} with a body that does not parse: {e}")))
}

/// The `metadata` query value of `GET /v2/sandboxes`. The server URL-unescapes the (already
/// decoded) value, splits it on `&` and `=`, and unescapes each key and value again, so each
/// is encoded twice inside the value, as the JS SDK does:
/// `URLSearchParams({encodeURIComponent(k): encodeURIComponent(v)})`. reqwest's query
/// encoding is the third layer.
pub(crate) fn metadata_query(metadata: &BTreeMap<String, String>) -> String {
    metadata
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                form_encode(&encode_uri_component(k)),
                form_encode(&encode_uri_component(v))
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// JavaScript's `encodeURIComponent`.
fn encode_uri_component(s: &str) -> String {
    percent_encode(
        s,
        |b| b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b),
        false,
    )
}

/// `application/x-www-form-urlencoded` as `URLSearchParams` writes it.
fn form_encode(s: &str) -> String {
    percent_encode(
        s,
        |b| b.is_ascii_alphanumeric() || b"*-._".contains(&b),
        true,
    )
}

fn percent_encode(s: &str, keep: impl Fn(u8) -> bool, space_as_plus: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if keep(b) {
            out.push(b as char);
        } else if b == b' ' && space_as_plus {
            out.push('+');
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::domain::Millis;

    #[test]
    fn metadata_filters_are_encoded_twice_inside_the_value() {
        let meta = BTreeMap::from([
            (
                "threadbox.thread_id".to_owned(),
                "slack:T1:C1:17.5".to_owned(),
            ),
            ("a b".to_owned(), "x&y=z".to_owned()),
        ]);
        assert_eq!(
            metadata_query(&meta),
            "a%2520b=x%2526y%253Dz&threadbox.thread_id=slack%253AT1%253AC1%253A17.5"
        );
    }

    #[test]
    fn create_body_uses_the_contract_field_names() {
        let meta = BTreeMap::from([("k".to_owned(), "v".to_owned())]);
        let env = BTreeMap::new();
        let body = NewSandbox {
            template_id: "base",
            timeout: 300,
            auto_pause: true,
            allow_internet_access: false,
            network: None,
            metadata: &meta,
            env_vars: &env,
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({
                "templateID": "base",
                "timeout": 300,
                "autoPause": true,
                "allow_internet_access": false,
                "metadata": {"k": "v"},
                "envVars": {}
            })
        );
    }

    #[test]
    fn paused_sandboxes_have_no_deadline() {
        let detail: SandboxDetail = serde_json::from_value(serde_json::json!({
            "templateID": "base", "sandboxID": "iabc", "clientID": "c",
            "startedAt": "2024-01-01T00:00:00Z", "endAt": "2024-01-01T00:05:00Z",
            "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024,
            "state": "paused", "envdVersion": "0.6.6",
            "metadata": {"threadbox.thread_id": "t", "threadbox.generation": "1"}
        }))
        .unwrap();
        let info = detail.to_info().unwrap();
        assert_eq!(info.state, SandboxState::Paused);
        assert_eq!(info.deadline, None);
        assert_eq!(info.started_at, Some(Millis(1_704_067_200_000)));
        assert_eq!(info.metadata.len(), 2);
    }

    #[test]
    fn timeouts_round_up_to_whole_seconds() {
        assert_eq!(whole_secs(Duration::from_millis(1)), 1);
        assert_eq!(whole_secs(Duration::from_millis(1500)), 2);
        assert_eq!(whole_secs(Duration::ZERO), 1);
        assert_eq!(whole_secs(Duration::from_secs(900)), 900);
    }
}
