//! `E2bProvider`: the sandbox provider port over E2B — its REST control plane for lifecycle and
//! envd, the agent inside each sandbox, for commands and files.
//!
//! - `config`: typed settings from `E2B_*` variables; the API key is a redacted [`Secret`].
//! - `control`: create, connect, pause, kill, timeout, info and list over REST.
//! - `retry`: the SDK's retry policy for control-plane calls.
//! - `envd` and `connect`: commands over Connect streaming (and its envelope codec), files over
//!   `/files`.
//! - `fs`: list, stat, mkdir, remove, glob and grep as scripts run through envd.
//! - `errors`: E2B's failures, typed, and their mapping onto [`ProviderError`].
//! - `wire`: the same formats as a server writes them (Connect envelopes, error bodies, the
//!   list's metadata filter), for `threadbox-e2b-api` and the contract fake.
//!
//! Choices that matter to callers:
//! - Sandboxes are created with `autoPause`, so one whose keep-alive stops is paused at its
//!   deadline, not killed; the janitor folds that into the record.
//! - Create carries an `Idempotency-Key` derived from the owner (thread and generation): a
//!   retried or repeated create of one generation gets the same sandbox back, never a second.
//!   A create whose outcome stays unknown is still tagged with its owner, so reconciliation
//!   finds and kills what it left behind.
//! - envd's access token is a credential: it is cached here (per process) and never written to
//!   session records, so `provider_session_id` stays `None`. A process that does not have it
//!   (another Lambda created the sandbox) reads it from `GET /sandboxes/{id}`; a token refused
//!   with 401 (someone else's resume rotated it) is re-read once.

mod config;
mod connect;
mod control;
mod envd;
mod errors;
mod retry;
pub mod rfc3339;
pub mod wire;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use threadbox_core::domain::network::AllowEntry;
use threadbox_core::domain::{unknown_image, EgressCredentials, ImageInfo, ImageName};
use threadbox_core::ports::exec_files::checked_path;
use threadbox_core::ports::{
    always_refused_v4, Connected, CreateSandbox, CreatedSandbox, ExecCommand, ExecRequest,
    ExecResult, NetworkProfile, OutputSink, ProviderError, SandboxInfo, SandboxOwner,
    SandboxProvider, SandboxState, DEFAULT_FILE_CAP,
};

pub use config::{
    parse_templates, E2bConfig, Secret, EGRESS_CREDENTIALS_VAR, MAX_TEMPLATES, MAX_TIMEOUT,
    TEMPLATES_VAR,
};
pub use errors::E2bError;
pub use retry::RetryPolicy;

use control::{whole_secs, ControlClient, NewSandbox};
use envd::{EnvdClient, ProcessOutput, ProcessSpec, Target};

/// The error code E2B gives a connect whose memory snapshot has an unresponsive guest agent;
/// the sandbox can still come back from its disk (`memory: false`).
const GUEST_UNRESPONSIVE: &str = "sandbox_snapshot_guest_agent_unresponsive";

/// What envd needs to be reached for one sandbox.
#[derive(Clone)]
struct EnvdSession {
    token: Secret,
    /// E2B's `domain` for the sandbox, when it is outside the default cluster.
    domain: Option<String>,
}

pub struct E2bProvider {
    config: E2bConfig,
    control: ControlClient,
    envd: EnvdClient,
    sessions: Mutex<HashMap<String, EnvdSession>>,
}

impl std::fmt::Debug for E2bProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bProvider")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl E2bProvider {
    /// One HTTP client for both planes: HTTP/1.1 over rustls, no redirects (E2B answers
    /// directly; a redirect means something in between is wrong), explicit connect timeout and
    /// per-request timeouts.
    pub fn new(config: E2bConfig) -> Result<Self, ProviderError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("threadbox/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderError::Internal(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            control: ControlClient::new(http.clone(), &config),
            envd: EnvdClient::new(http, config.request_timeout),
            config,
            sessions: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &E2bConfig {
        &self.config
    }

    /// Call `hook` whenever E2B refuses the API key (401 or 403 from the control plane), so
    /// that whoever read the key can fetch it again: it may have been rotated since.
    pub fn on_refused_key(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.control.on_refused_key(std::sync::Arc::new(hook));
        self
    }

    /// The `Idempotency-Key` of the create for `owner`: `[a-z0-9-]`, at most 255 characters, as
    /// E2B requires. The thread id is hashed (SHA-256) rather than spelled out: thread ids may
    /// hold characters the key may not, and a caller-chosen id must not be able to collide with
    /// another thread's key (which would hand it that thread's sandbox).
    pub fn idempotency_key(owner: &SandboxOwner) -> String {
        let digest = Sha256::digest(owner.thread_id.to_string().as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("threadbox-{hex}-{}", owner.generation)
    }

    fn cached(&self, sandbox_id: &str) -> Option<EnvdSession> {
        self.sessions.lock().unwrap().get(sandbox_id).cloned()
    }

    fn remember(&self, sandbox_id: &str, token: Option<String>, domain: Option<String>) {
        let session = EnvdSession {
            // v2 sandboxes always have a token; an unsecured (v1) one takes an empty header.
            token: Secret::new(token.unwrap_or_default()),
            domain,
        };
        self.sessions
            .lock()
            .unwrap()
            .insert(sandbox_id.to_owned(), session);
    }

    fn forget(&self, sandbox_id: &str) {
        self.sessions.lock().unwrap().remove(sandbox_id);
    }

    /// Ask the control plane for the sandbox's current token. A paused sandbox has no envd to
    /// talk to, so that is a conflict the caller resolves by connecting first.
    async fn refresh_session(&self, sandbox_id: &str) -> Result<EnvdSession, ProviderError> {
        let detail = self
            .control
            .info(sandbox_id)
            .await
            .map_err(|e| self.control_error(sandbox_id, e))?;
        if detail.state != "running" {
            return Err(paused(sandbox_id));
        }
        self.remember(sandbox_id, detail.envd_access_token, detail.domain);
        self.cached(sandbox_id)
            .ok_or_else(|| ProviderError::Internal("token cache lost an entry".into()))
    }

    fn target(&self, sandbox_id: &str, session: &EnvdSession) -> Target {
        Target {
            sandbox_id: sandbox_id.to_owned(),
            base: self.config.envd_url(sandbox_id, session.domain.as_deref()),
            token: session.token.clone(),
        }
    }

    /// Run one data-plane operation: with the cached token (or a fresh one), once more with a
    /// re-read token if envd refuses a cached one, and with the proxy's "not found" explained.
    async fn with_envd<T, F, Fut>(&self, sandbox_id: &str, op: F) -> Result<T, ProviderError>
    where
        F: Fn(Target) -> Fut,
        Fut: Future<Output = Result<T, E2bError>>,
    {
        check_id(sandbox_id)?;
        let (session, fresh) = match self.cached(sandbox_id) {
            Some(session) => (session, false),
            None => (self.refresh_session(sandbox_id).await?, true),
        };
        let result = match op(self.target(sandbox_id, &session)).await {
            Err(E2bError::Unauthorized { .. }) if !fresh => {
                tracing::info!(
                    sandbox_id,
                    "envd refused the cached token; reading the current one"
                );
                let session = self.refresh_session(sandbox_id).await?;
                op(self.target(sandbox_id, &session)).await
            }
            other => other,
        };
        match result {
            Ok(value) => Ok(value),
            Err(E2bError::SandboxNotRunning { message }) => {
                Err(self.explain_not_running(sandbox_id, message).await)
            }
            Err(error) => Err(error.into_provider(sandbox_id)),
        }
    }

    /// The proxy says there is no running sandbox behind the id: ask the control plane whether
    /// it is gone, paused, or (a proxy hiccup) running after all.
    async fn explain_not_running(&self, sandbox_id: &str, message: String) -> ProviderError {
        match self.control.info(sandbox_id).await {
            Ok(detail) if detail.state == "paused" => paused(sandbox_id),
            Ok(_) => ProviderError::Unavailable(format!(
                "sandbox {sandbox_id} is running but envd is unreachable: {message}"
            )),
            Err(error) => self.control_error(sandbox_id, error),
        }
    }

    /// Map a control-plane error, dropping the cached token of a sandbox that is gone.
    fn control_error(&self, sandbox_id: &str, error: E2bError) -> ProviderError {
        if matches!(error, E2bError::NotFound { .. }) {
            self.forget(sandbox_id);
        }
        error.into_provider(sandbox_id)
    }

    /// A command through envd, its output kept in the result or sent to `output` as it comes.
    async fn run_command(
        &self,
        sandbox_id: &str,
        request: ExecRequest,
        output: Option<OutputSink>,
    ) -> Result<ExecResult, ProviderError> {
        let (cmd, args) = match request.command {
            // A login shell, as E2B's SDK runs commands: the template's profile sets PATH.
            ExecCommand::Shell(line) => (
                "/bin/bash".to_owned(),
                vec!["-l".to_owned(), "-c".to_owned(), line],
            ),
            ExecCommand::Argv(mut argv) => {
                if argv.is_empty() {
                    return Err(ProviderError::InvalidRequest("empty command".into()));
                }
                let cmd = argv.remove(0);
                (cmd, argv)
            }
        };
        let spec = ProcessSpec {
            cmd,
            args,
            envs: request.env,
            cwd: request.cwd,
            stdin: request.stdin,
            timeout: request.timeout,
            output_cap: request.output_cap,
            output,
            user: request.user,
        };
        let out = self.run(sandbox_id, &spec).await?;
        Ok(ExecResult {
            exit_code: out.exit_code,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            duration_ms: out.duration.as_millis() as u64,
            timed_out: out.timed_out,
            truncated: out.truncated,
            // envd does not say why a process died; an OOM kill shows as a signal.
            out_of_memory: false,
        })
    }

    async fn run(
        &self,
        sandbox_id: &str,
        spec: &ProcessSpec,
    ) -> Result<ProcessOutput, ProviderError> {
        self.with_envd(sandbox_id, |target| {
            let envd = &self.envd;
            async move { envd.run(&target, spec).await }
        })
        .await
    }

    async fn connect_once(
        &self,
        sandbox_id: &str,
        keep_memory: bool,
    ) -> Result<control::Connection, E2bError> {
        self.control
            .connect(sandbox_id, self.config.default_timeout, keep_memory)
            .await
    }
}

/// E2B's `network` for a profile: a networked sandbox with an allowlist allows its entries out
/// and denies the rest (`denyOut: ["0.0.0.0/0"]`, which E2B requires beside a domain entry);
/// everything public denies the private, link-local and metadata networks (`denyOut` with
/// each of them), as the runc provider refuses them. A networked sandbox also gets
/// the operator's credentials for the hosts it may reach as `rules` (E2B's egress proxy adds
/// the headers; the sandbox never holds them). Restricted needs none (`allow_internet_access`
/// says it).
fn e2b_network(
    profile: &NetworkProfile,
    credentials: &EgressCredentials,
) -> Option<serde_json::Value> {
    let NetworkProfile::Networked { allow } = profile else {
        return None;
    };
    let mut network = serde_json::Map::new();
    if allow.is_everything_public() {
        // Every public address, and none of the private, shared, link-local (the metadata
        // service) and reserved ones, which threadbox refuses on every provider.
        let refused: Vec<String> = always_refused_v4()
            .iter()
            .map(ToString::to_string)
            .collect();
        network.insert("denyOut".into(), serde_json::json!(refused));
    } else {
        network.insert("allowOut".into(), serde_json::json!(allow.to_strings()));
        network.insert("denyOut".into(), serde_json::json!(["0.0.0.0/0"]));
    }
    if let Some(rules) = e2b_rules(allow, credentials) {
        network.insert("rules".into(), rules);
    }
    (!network.is_empty()).then_some(serde_json::Value::Object(network))
}

/// `network.rules`: for each host with credentials that the allowlist can reach, one transform
/// that sets its headers (`{"api.github.com": [{"transform": {"headers": {..}}}]}`).
fn e2b_rules(
    allow: &threadbox_core::ports::Allowlist,
    credentials: &EgressCredentials,
) -> Option<serde_json::Value> {
    let rules: serde_json::Map<String, serde_json::Value> = credentials
        .entries()
        .iter()
        .filter(|entry| reachable(allow, &entry.host))
        .map(|entry| {
            let headers: serde_json::Map<String, serde_json::Value> = entry
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), value.expose().into()))
                .collect();
            (
                entry.host.to_string(),
                serde_json::json!([{"transform": {"headers": headers}}]),
            )
        })
        .collect();
    (!rules.is_empty()).then_some(serde_json::Value::Object(rules))
}

/// Whether an allowlist lets a sandbox reach some name a credentials entry covers (so the
/// credentials of hosts it cannot reach are not sent along with it).
fn reachable(allow: &threadbox_core::ports::Allowlist, host: &AllowEntry) -> bool {
    let under = |name: &str, suffix: &str| {
        name.strip_suffix(suffix)
            .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
    };
    match host {
        AllowEntry::Domain(name) => allow.allows_host(name),
        AllowEntry::Suffix(suffix) => {
            allow.is_everything_public()
                || allow.entries().iter().any(|entry| match entry {
                    AllowEntry::Domain(name) => under(name, suffix),
                    AllowEntry::Suffix(other) => {
                        other == suffix || under(other, suffix) || under(suffix, other)
                    }
                    AllowEntry::Net(_) => false,
                })
        }
        AllowEntry::Net(_) => false,
    }
}

/// The body of `PUT /sandboxes/{id}/network`, which replaces the egress rules whole: restricted
/// denies everything out (what `allow_internet_access: false` means on create); networked is
/// what create sends.
fn e2b_network_update(
    profile: &NetworkProfile,
    credentials: &EgressCredentials,
) -> serde_json::Value {
    match profile {
        NetworkProfile::Restricted => serde_json::json!({"denyOut": ["0.0.0.0/0"]}),
        other => e2b_network(other, credentials).unwrap_or_else(|| serde_json::json!({})),
    }
}

fn paused(sandbox_id: &str) -> ProviderError {
    ProviderError::Conflict(format!(
        "sandbox {sandbox_id} is paused; connect to resume it"
    ))
}

/// E2B ids are lowercase letters and digits (a legacy `-clientID` suffix is allowed). Anything
/// else is refused before it can reach a URL path.
fn check_id(sandbox_id: &str) -> Result<(), ProviderError> {
    let ok = !sandbox_id.is_empty()
        && sandbox_id.len() <= 128
        && sandbox_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ProviderError::InvalidRequest(format!(
            "{sandbox_id:?} is not an E2B sandbox id"
        )))
    }
}

/// Paths with a `..` component are refused before they reach the sandbox: what a caller may
/// name is decided here, the same for every provider, not by how the sandbox resolves it.

#[async_trait]
impl SandboxProvider for E2bProvider {
    fn name(&self) -> &str {
        "e2b"
    }

    /// None: the contract threadbox builds on lists E2B's snapshot and fork endpoints only as
    /// optional, with no restore into a running sandbox (docs/checkpoints.md).
    fn checkpoint_support(&self) -> Result<(), ProviderError> {
        Err(threadbox_core::ports::checkpoints_unsupported(self.name()))
    }

    /// `host` (the deployment's `E2B_TEMPLATE`), then every image `THREADBOX_E2B_TEMPLATES`
    /// names; each one's digest is its template id.
    fn images(&self) -> Vec<ImageInfo> {
        let info = |name: ImageName, template: &str| ImageInfo {
            name,
            digest: Some(template.to_owned()),
            size_bytes: None,
            source: format!("e2b template {template}"),
            setup: false,
        };
        let mut images = vec![info(ImageName::host(), &self.config.template)];
        images.extend(
            self.config
                .templates
                .iter()
                .map(|(name, template)| info(name.clone(), template)),
        );
        images
    }

    #[tracing::instrument(skip_all, fields(thread_id = %request.owner.thread_id, generation = request.owner.generation))]
    async fn create(&self, request: CreateSandbox) -> Result<CreatedSandbox, ProviderError> {
        let key = Self::idempotency_key(&request.owner);
        let metadata = request.owner.to_metadata();
        let timeout = if request.timeout.is_zero() {
            self.config.default_timeout
        } else {
            request.timeout.min(MAX_TIMEOUT)
        };
        let Some(template_id) = self.config.template_for(&request.image) else {
            return Err(ProviderError::InvalidRequest(unknown_image(
                request.image.as_str(),
                &self.images(),
            )));
        };
        let body = NewSandbox {
            template_id,
            timeout: whole_secs(timeout),
            auto_pause: true,
            allow_internet_access: request.network.is_networked(),
            network: e2b_network(&request.network, &self.config.egress_credentials),
            metadata: &metadata,
            env_vars: &request.env,
        };
        let sandbox = self
            .control
            .create(&body, &key)
            .await
            .map_err(|error| match error {
                // On create, 404 is about the template, not a sandbox.
                E2bError::NotFound { message } => ProviderError::InvalidRequest(message),
                other => other.into_provider("(new sandbox)"),
            })?;
        tracing::info!(sandbox_id = %sandbox.sandbox_id, "E2B sandbox created");
        self.remember(
            &sandbox.sandbox_id,
            sandbox.envd_access_token,
            sandbox.domain,
        );
        Ok(CreatedSandbox {
            sandbox_id: sandbox.sandbox_id,
            provider_session_id: None,
        })
    }

    #[tracing::instrument(skip(self))]
    async fn connect(&self, sandbox_id: &str) -> Result<Connected, ProviderError> {
        check_id(sandbox_id)?;
        let connection = match self.connect_once(sandbox_id, true).await {
            Err(E2bError::Conflict {
                error_code: Some(code),
                message,
            }) if code == GUEST_UNRESPONSIVE => {
                // Its memory snapshot cannot be resumed; its disk can. Processes are lost,
                // files are kept, which beats losing the sandbox.
                tracing::warn!(sandbox_id, %message, "memory snapshot unusable; resuming from disk");
                self.connect_once(sandbox_id, false).await
            }
            other => other,
        }
        .map_err(|e| self.control_error(sandbox_id, e))?;
        // A resume may come with a new token; from now on only that one works.
        self.remember(
            sandbox_id,
            connection.sandbox.envd_access_token,
            connection.sandbox.domain,
        );
        if connection.resumed {
            tracing::info!(sandbox_id, "E2B sandbox resumed");
        }
        Ok(Connected {
            resumed: connection.resumed,
            provider_session_id: None,
        })
    }

    #[tracing::instrument(skip(self))]
    async fn pause(&self, sandbox_id: &str) -> Result<(), ProviderError> {
        check_id(sandbox_id)?;
        match self.control.pause(sandbox_id).await {
            Ok(()) => Ok(()),
            // 409 means "already paused" or "cannot pause now (being killed)"; E2B gives no
            // code to tell them apart, so ask rather than read the message.
            Err(E2bError::Conflict { message, .. }) => match self.control.info(sandbox_id).await {
                Ok(detail) if detail.state == "paused" => Ok(()),
                Ok(_) => Err(ProviderError::Conflict(message)),
                Err(error) => Err(self.control_error(sandbox_id, error)),
            },
            Err(error) => Err(self.control_error(sandbox_id, error)),
        }
    }

    #[tracing::instrument(skip(self))]
    async fn kill(&self, sandbox_id: &str) -> Result<(), ProviderError> {
        check_id(sandbox_id)?;
        let result = match self.control.kill(sandbox_id).await {
            // Gone already, or someone else's kill is under way: either way it ends gone.
            Ok(()) | Err(E2bError::NotFound { .. }) | Err(E2bError::Conflict { .. }) => Ok(()),
            Err(error) => Err(error.into_provider(sandbox_id)),
        };
        if result.is_ok() {
            self.forget(sandbox_id);
        }
        result
    }

    #[tracing::instrument(skip(self))]
    async fn set_timeout(&self, sandbox_id: &str, timeout: Duration) -> Result<(), ProviderError> {
        check_id(sandbox_id)?;
        let timeout = timeout.min(MAX_TIMEOUT);
        match self.control.set_timeout(sandbox_id, timeout).await {
            Ok(()) => Ok(()),
            // A paused sandbox answers 404 here too: only a 404 from info means gone.
            Err(E2bError::NotFound { .. }) => match self.control.info(sandbox_id).await {
                Ok(detail) if detail.state == "paused" => Err(paused(sandbox_id)),
                Ok(_) => self
                    .control
                    .set_timeout(sandbox_id, timeout)
                    .await
                    .map_err(|e| self.control_error(sandbox_id, e)),
                Err(error) => Err(self.control_error(sandbox_id, error)),
            },
            Err(error) => Err(self.control_error(sandbox_id, error)),
        }
    }

    /// `PUT /sandboxes/{id}/network`: E2B changes a running or paused sandbox's egress in
    /// place, so its files and processes are kept.
    #[tracing::instrument(skip(self, profile))]
    async fn set_network(
        &self,
        sandbox_id: &str,
        profile: &NetworkProfile,
    ) -> Result<(), ProviderError> {
        check_id(sandbox_id)?;
        self.control
            .set_network(
                sandbox_id,
                &e2b_network_update(profile, &self.config.egress_credentials),
            )
            .await
            .map_err(|e| self.control_error(sandbox_id, e))
    }

    #[tracing::instrument(skip(self))]
    async fn info(&self, sandbox_id: &str) -> Result<SandboxInfo, ProviderError> {
        check_id(sandbox_id)?;
        let detail = self
            .control
            .info(sandbox_id)
            .await
            .map_err(|e| self.control_error(sandbox_id, e))?;
        let info = detail.to_info().map_err(|e| e.into_provider(sandbox_id))?;
        if info.state == SandboxState::Running {
            self.remember(sandbox_id, detail.envd_access_token, detail.domain);
        }
        Ok(info)
    }

    #[tracing::instrument(skip(self))]
    async fn list(
        &self,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<SandboxInfo>, ProviderError> {
        let listed = self
            .control
            .list(metadata)
            .await
            .map_err(|e| e.into_provider("(list)"))?;
        let mut out = Vec::with_capacity(listed.len());
        for detail in listed {
            match detail.to_info() {
                Ok(info) => out.push(info),
                // One sandbox in a state we do not know must not hide all the others from
                // reconciliation.
                Err(error) => tracing::warn!(%error, "skipping a listed sandbox"),
            }
        }
        Ok(out)
    }

    #[tracing::instrument(skip(self, request), fields(timeout_ms = request.timeout.as_millis() as u64))]
    async fn exec(
        &self,
        sandbox_id: &str,
        request: ExecRequest,
    ) -> Result<ExecResult, ProviderError> {
        self.run_command(sandbox_id, request, None).await
    }

    /// envd streams a process's output as it comes; it is sent on as each frame arrives.
    async fn exec_streaming(
        &self,
        sandbox_id: &str,
        request: ExecRequest,
        output: OutputSink,
    ) -> Result<ExecResult, ProviderError> {
        self.run_command(sandbox_id, request, Some(output)).await
    }

    #[tracing::instrument(skip(self))]
    async fn read_file(&self, sandbox_id: &str, path: &str) -> Result<Vec<u8>, ProviderError> {
        let path = checked_path(path)?;
        self.with_envd(sandbox_id, |target| {
            let envd = &self.envd;
            async move { envd.read_file(&target, path, DEFAULT_FILE_CAP).await }
        })
        .await
    }

    #[tracing::instrument(skip(self, contents), fields(bytes = contents.len()))]
    async fn write_file(
        &self,
        sandbox_id: &str,
        path: &str,
        contents: &[u8],
    ) -> Result<(), ProviderError> {
        let path = checked_path(path)?;
        if contents.len() as u64 > DEFAULT_FILE_CAP {
            return Err(ProviderError::InvalidRequest(format!(
                "{path}: {} bytes is more than the {DEFAULT_FILE_CAP}-byte limit",
                contents.len()
            )));
        }
        self.with_envd(sandbox_id, |target| {
            let envd = &self.envd;
            async move { envd.write_file(&target, path, contents).await }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::domain::ThreadId;

    #[test]
    fn an_allowlist_becomes_allow_out_beside_deny_all() {
        use threadbox_core::ports::Allowlist;
        let none = EgressCredentials::default();
        let e2b_network = |profile: &NetworkProfile| super::e2b_network(profile, &none);
        assert_eq!(e2b_network(&NetworkProfile::Restricted), None);
        assert_eq!(
            e2b_network_update(&NetworkProfile::Restricted, &none),
            serde_json::json!({"denyOut": ["0.0.0.0/0"]}),
            "a change replaces the rules whole: restricted denies everything out"
        );
        let public = NetworkProfile::Networked {
            allow: Allowlist::everything_public(),
        };
        let public = e2b_network(&public).unwrap();
        assert_eq!(public.get("allowOut"), None);
        let denied: Vec<&str> = public["denyOut"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for private in [
            "10.0.0.0/8",
            "169.254.0.0/16",
            "172.16.0.0/12",
            "192.168.0.0/16",
        ] {
            assert!(denied.contains(&private), "{private} in {denied:?}");
        }
        assert!(
            !denied.contains(&"0.0.0.0/0"),
            "public stays open: {denied:?}"
        );
        let listed = NetworkProfile::Networked {
            allow: Allowlist::parse(["pkg.test", "203.0.113.0/24"]).unwrap(),
        };
        assert_eq!(
            e2b_network(&listed),
            Some(serde_json::json!({
                "allowOut": ["pkg.test", "203.0.113.0/24"],
                "denyOut": ["0.0.0.0/0"]
            }))
        );
    }

    #[test]
    fn credentials_become_rules_for_the_hosts_a_networked_sandbox_reaches() {
        use threadbox_core::ports::Allowlist;
        let credentials = EgressCredentials::parse_json(
            r#"{"pkg.test": {"Authorization": "Bearer tb-secret"},
                "*.cdn.test": {"X-Key": "k"},
                "other.test": {"X-Key": "o"}}"#,
        )
        .unwrap();
        let networked = |allow: &[&str]| NetworkProfile::Networked {
            allow: Allowlist::parse(allow).unwrap(),
        };
        assert_eq!(
            e2b_network(&networked(&["pkg.test", "a.cdn.test"]), &credentials),
            Some(serde_json::json!({
                "allowOut": ["pkg.test", "a.cdn.test"],
                "denyOut": ["0.0.0.0/0"],
                "rules": {
                    "pkg.test": [{"transform": {"headers": {"authorization": "Bearer tb-secret"}}}],
                    "*.cdn.test": [{"transform": {"headers": {"x-key": "k"}}}]
                }
            })),
            "other.test is not reachable, so its credentials stay out"
        );
        let public = e2b_network(&networked(&[]), &credentials).unwrap();
        assert_eq!(public.get("allowOut"), None);
        assert_eq!(public["rules"].as_object().unwrap().len(), 3);
        assert_eq!(e2b_network(&NetworkProfile::Restricted, &credentials), None);
        assert_eq!(
            e2b_network_update(&NetworkProfile::Restricted, &credentials),
            serde_json::json!({"denyOut": ["0.0.0.0/0"]})
        );
        let none = e2b_network(&networked(&["203.0.113.0/24"]), &credentials).unwrap();
        assert_eq!(none.get("rules"), None, "{none}");
    }

    #[test]
    fn idempotency_keys_fit_e2b_and_differ_by_thread_and_generation() {
        let owner = |t: &str, g| SandboxOwner {
            thread_id: ThreadId::parse(t).unwrap(),
            generation: g,
        };
        let a = E2bProvider::idempotency_key(&owner("slack:T1:C1:1712345678.123456", 1));
        assert!(a.len() <= 255);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{a}"
        );
        assert_eq!(
            a,
            E2bProvider::idempotency_key(&owner("slack:T1:C1:1712345678.123456", 1))
        );
        assert_ne!(
            a,
            E2bProvider::idempotency_key(&owner("slack:T1:C1:1712345678.123456", 2))
        );
        assert_ne!(
            a,
            E2bProvider::idempotency_key(&owner("slack:T1:C1:1712345678.123457", 1))
        );
    }

    #[test]
    fn ids_that_could_escape_a_url_path_are_refused() {
        assert!(check_id("i0123456789abcdefghij").is_ok());
        assert!(check_id("iabc-client").is_ok());
        for bad in ["", "../x", "a/b", "ABC", "a?b", "a b"] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
    }
}
