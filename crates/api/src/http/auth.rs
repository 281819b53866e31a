//! Who may call the API: bearer API keys, compared in constant time.
//!
//! An empty key set turns authentication off, which `threadbox dev` does on loopback by default.
//! With it off, the API answers only what can have come from this machine's own tools (see
//! `local_only`): a web page the developer happens to visit can neither drive the local API
//! cross-site (no-body POSTs like reset need no CORS preflight) nor reach it through DNS
//! rebinding. Programs (curl, SDKs, agents) are unaffected.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::local_only::LocalOnly;
use threadbox_core::domain::BudgetScope;
use threadbox_core::usecases::Threadbox;

/// The shortest API key accepted from configuration. Keys are bearer secrets sent on every
/// request; 32 characters of `openssl rand -hex 32` (which gives 64) is far past guessing.
pub const MIN_API_KEY_LEN: usize = 32;

/// Why a configured key list was refused. Never shows a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiKeysError {
    #[error("holds no key (only commas, line breaks and spaces)")]
    Empty,
    #[error(
        "key {position} of {count} is {length} characters long; API keys must be at least \
         {MIN_API_KEY_LEN} (make one with `openssl rand -hex 32`)"
    )]
    TooShort {
        position: usize,
        count: usize,
        length: usize,
    },
}

/// The API keys a caller may present as `Authorization: Bearer <key>`.
#[derive(Clone, Default)]
pub struct ApiAuth {
    keys: Arc<[Vec<u8>]>,
}

impl std::fmt::Debug for ApiAuth {
    // Keys are secrets: never in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiAuth")
            .field("keys", &format_args!("<{} redacted>", self.keys.len()))
            .finish()
    }
}

impl ApiAuth {
    /// Accept any of `keys`; blank entries (from a trailing comma, say) are ignored.
    pub fn new<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let keys: Vec<Vec<u8>> = keys
            .into_iter()
            .map(|k| k.as_ref().trim().as_bytes().to_vec())
            .filter(|k| !k.is_empty())
            .collect();
        Self { keys: keys.into() }
    }

    /// Keys from configuration (a variable, a secret, a file): separated by commas or line
    /// breaks, blanks ignored, each at least [`MIN_API_KEY_LEN`] characters. An empty list is an
    /// error here: a caller that means "no keys" says so with [`ApiAuth::disabled`].
    pub fn parse(list: &str) -> Result<Self, ApiKeysError> {
        let keys: Vec<&str> = list
            .split([',', '\n'])
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .collect();
        if keys.is_empty() {
            return Err(ApiKeysError::Empty);
        }
        let count = keys.len();
        for (i, key) in keys.iter().enumerate() {
            let length = key.chars().count();
            if length < MIN_API_KEY_LEN {
                return Err(ApiKeysError::TooShort {
                    position: i + 1,
                    count,
                    length,
                });
            }
        }
        Ok(Self::new(keys))
    }

    /// No authentication (local development only).
    pub fn disabled() -> Self {
        Self::default()
    }

    pub fn is_enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Whether `presented` is one of the keys. Every key is compared, each in constant time, so
    /// the time taken says nothing about which key or how many leading bytes matched (only
    /// whether the lengths differ, and keys are long random strings).
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let mut matched = subtle::Choice::from(0);
        for key in self.keys.iter() {
            matched |= key.as_slice().ct_eq(presented);
        }
        matched.into()
    }

    /// Check a key presented in a header of another API's own (E2B's `X-API-Key`,
    /// `threadbox-e2b-api`) against the same keys, with the same rule without keys (only this
    /// machine's own tools): passing, the budget scope of the key presented. The error's
    /// message is what the caller is told; its shape is the other API's to choose.
    pub fn check_key(
        &self,
        presented: Option<&[u8]>,
        headers: &HeaderMap,
    ) -> Result<Option<BudgetScope>, ApiError> {
        if !self.is_enabled() {
            return LocalOnly::any_port().check(headers).map(|()| None);
        }
        let key = presented.ok_or_else(|| ApiError::unauthorized("missing API key"))?;
        match std::str::from_utf8(key) {
            Ok(key) if self.accepts(key.as_bytes()) => Ok(Some(key_scope(key))),
            _ => Err(ApiError::unauthorized("Invalid API key")),
        }
    }

    /// Whether `scope` is the budget scope of a key configured now (`None`: authentication is
    /// off), so a credential minted for a key stops working once the key is removed.
    pub fn knows_scope(&self, scope: Option<&BudgetScope>) -> bool {
        match scope {
            None => !self.is_enabled(),
            Some(scope) => self
                .keys
                .iter()
                .any(|key| std::str::from_utf8(key).is_ok_and(|key| key_scope(key) == *scope)),
        }
    }

    /// Check a request's headers. Passing, the budget scope of the key presented (none with
    /// authentication off).
    fn check(&self, headers: &HeaderMap) -> Result<Option<BudgetScope>, ApiError> {
        if !self.is_enabled() {
            return LocalOnly::any_port().check(headers).map(|()| None);
        }
        let value = headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <api key>"))?;
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .ok_or_else(|| {
                ApiError::unauthorized("the Authorization header must be 'Bearer <api key>'")
            })?;
        if self.accepts(token.as_bytes()) {
            Ok(Some(key_scope(token)))
        } else {
            Err(ApiError::unauthorized("the API key is not valid"))
        }
    }
}

/// The budget scope of an API key (`usecases::budget`): the first 12 hex digits of its SHA-256,
/// which names the key in errors and counters without showing it (`printf %s "$KEY" |
/// sha256sum | cut -c1-12` gives the same).
pub fn key_scope(key: &str) -> BudgetScope {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    BudgetScope::ApiKey(hex)
}

/// Who a request comes from, as [`require`] found it: the budget scope of the key it presented
/// (`None` with authentication off). `require` is the only place that decides it, and puts it
/// in the request's extensions; routes take it from there ([`Caller`] or [`ForCaller`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller(pub Option<BudgetScope>);

fn caller_of(parts: &Parts) -> Result<Caller, ApiError> {
    // A route outside `require` has no caller: refused loudly, never run on nobody's budget.
    parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
        tracing::error!(path = %parts.uri.path(), "a route that acts for a caller is not behind the API key check");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "this route is not behind the API key check",
        )
    })
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        caller_of(parts)
    }
}

/// The use cases acting for the request's [`Caller`] (`Threadbox::for_caller`): how every route
/// reaches them, so whatever a route does, or hands to a task or a service of its own (an SSE
/// stream, the MCP service), is charged to the key that asked.
pub struct ForCaller(pub Threadbox);

impl FromRequestParts<Threadbox> for ForCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        tb: &Threadbox,
    ) -> Result<Self, Self::Rejection> {
        let Caller(scope) = caller_of(parts)?;
        Ok(ForCaller(tb.for_caller(scope)))
    }
}

/// Middleware: reject the request unless its credentials pass; when they do, record who the
/// caller is ([`Caller`]) for the route to act for.
pub async fn require(State(auth): State<ApiAuth>, mut request: Request, next: Next) -> Response {
    match auth.check(request.headers()) {
        Ok(scope) => {
            request.extensions_mut().insert(Caller(scope));
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderValue, Request};

    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn accepts_only_configured_keys() {
        let auth = ApiAuth::new(["alpha-key", " beta-key ", ""]);
        assert!(auth.is_enabled());
        assert!(auth.accepts(b"alpha-key"));
        assert!(auth.accepts(b"beta-key"), "keys are trimmed");
        assert!(!auth.accepts(b"alpha-ke"));
        assert!(!auth.accepts(b"alpha-keyx"));
        assert!(!auth.accepts(b""), "a blank entry is not a key");
        assert!(!ApiAuth::new([""]).is_enabled());
    }

    #[test]
    fn a_key_scope_is_a_digest_prefix_never_the_key() {
        // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223…
        assert_eq!(key_scope("abc"), BudgetScope::ApiKey("ba7816bf8f01".into()));
    }

    #[test]
    fn bearer_header_is_parsed_strictly() {
        let auth = ApiAuth::new(["k1"]);
        assert_eq!(
            auth.check(&headers(&[(header::AUTHORIZATION, "Bearer k1")]))
                .unwrap(),
            Some(key_scope("k1")),
            "a passing request is on behalf of its key"
        );
        assert!(auth
            .check(&headers(&[(header::AUTHORIZATION, "bearer k1")]))
            .is_ok());
        for bad in ["k1", "Basic k1", "Bearer k2", "Bearer"] {
            let err = auth
                .check(&headers(&[(header::AUTHORIZATION, bad)]))
                .unwrap_err();
            assert_eq!(err.status, StatusCode::UNAUTHORIZED, "{bad}");
        }
        assert_eq!(
            auth.check(&HeaderMap::new()).unwrap_err().code,
            "unauthorized"
        );
    }

    #[test]
    fn without_keys_only_loopback_browser_origins_pass() {
        let auth = ApiAuth::disabled();
        assert!(auth.check(&HeaderMap::new()).is_ok());
        for ok in [
            "http://127.0.0.1:8787",
            "http://localhost:3000",
            "http://[::1]:8787",
        ] {
            assert!(
                auth.check(&headers(&[(header::ORIGIN, ok)])).is_ok(),
                "{ok}"
            );
        }
        for bad in [
            "https://evil.example",
            "http://127.0.0.1.evil.example",
            "http://localhost.evil.example:80",
            "null",
        ] {
            let err = auth.check(&headers(&[(header::ORIGIN, bad)])).unwrap_err();
            assert_eq!(err.code, "forbidden_origin", "{bad}");
        }
    }

    #[test]
    fn configured_keys_are_long_and_never_shown_in_errors() {
        let long_a = "a".repeat(32);
        let long_b = "b".repeat(64);
        let auth = ApiAuth::parse(&format!(" {long_a} ,\n{long_b}\n\n")).unwrap();
        assert!(auth.accepts(long_a.as_bytes()) && auth.accepts(long_b.as_bytes()));
        assert_eq!(ApiAuth::parse(" , \n ").unwrap_err(), ApiKeysError::Empty);
        let err = ApiAuth::parse(&format!("{long_a},short-secret-key")).unwrap_err();
        assert_eq!(
            err,
            ApiKeysError::TooShort {
                position: 2,
                count: 2,
                length: 16
            }
        );
        let shown = err.to_string();
        assert!(
            shown.contains("at least 32") && !shown.contains("short-secret-key"),
            "{shown}"
        );
        assert!(ApiAuth::parse(&"c".repeat(31)).is_err());
    }

    #[tokio::test]
    async fn a_route_outside_the_key_check_has_no_caller_and_is_refused() {
        let (mut parts, ()) = Request::new(()).into_parts();
        let refused = Caller::from_request_parts(&mut parts, &())
            .await
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::INTERNAL_SERVER_ERROR);
        let caller = Caller(Some(key_scope("k1")));
        parts.extensions.insert(caller.clone());
        assert_eq!(
            Caller::from_request_parts(&mut parts, &()).await.unwrap(),
            caller
        );
    }

    #[test]
    fn debug_output_hides_keys() {
        let shown = format!("{:?}", ApiAuth::new(["secret-value"]));
        assert!(!shown.contains("secret-value"), "{shown}");
    }
}
