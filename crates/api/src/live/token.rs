//! Subscription tokens: who may open a live-events connection, to watch which threads, until when.
//!
//! A token is `base64url(claims JSON) "." base64url(HMAC-SHA256(secret, "threadbox.subscription.v1." + first part))`,
//! both parts unpadded. Claims are `{"v":1,"threads":["t1",…] | "*","exp":<epoch seconds>}`, plus
//! `"exec":true` when the token may also run commands in its threads' sandboxes over the socket (an
//! `exec` frame). That capability is off unless asked for when minting; a token without the claim
//! (every token minted before it existed) never runs anything, and is byte for byte what it was.
//!
//! A token with `exec` also names who minted it, `"by":"key:<id>"` (the budget scope of the API
//! key that asked, `http::key_scope`) or `"by":"none"` (no key: authentication off, or minted
//! offline from the secret by `threadbox token`), and what it runs is charged to that scope's
//! budgets, as the key's own HTTP calls are. An `exec` token without `by` (minted before the
//! claim existed, so at most [`MAX_TOKEN_TTL`] before this version) can only watch: its key is
//! not known, and running its commands on no scope would step around that key's caps.
//! The MAC covers a fixed prefix so a tag made with the same secret for any other purpose can never
//! pass as a subscription token. Verification checks the MAC (in constant time) before it parses
//! anything the client sent, then the expiry.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use threadbox_core::domain::{BudgetScope, Millis, ThreadId, ThreadScope};

type HmacSha256 = Hmac<Sha256>;

/// What the MAC is computed over, before the encoded claims.
const MAC_CONTEXT: &[u8] = b"threadbox.subscription.v1.";
const CLAIMS_VERSION: u8 = 1;
/// Longest token accepted: 50 thread ids of 128 characters fit with room to spare, and nothing
/// near a URL's practical limit.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;
/// Longest lifetime a token can be minted with. Dashboards mint a fresh one per connection.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);
/// Shortest secret accepted: 32 bytes, the HMAC-SHA256 block's half, as RFC 2104 advises.
pub const MIN_SECRET_LEN: usize = 32;

/// The signing secret. Any string of at least [`MIN_SECRET_LEN`] bytes; its bytes are the HMAC
/// key. Never shown: `Debug` prints a placeholder.
#[derive(Clone)]
pub struct TokenSecret(String);

impl std::fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSecret(<redacted>)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("the token secret is {0} bytes long; it must be at least {MIN_SECRET_LEN}")]
    TooShort(usize),
    #[error("no randomness from the operating system: {0}")]
    NoRandomness(String),
}

impl TokenSecret {
    pub fn new(secret: impl Into<String>) -> Result<Self, SecretError> {
        let secret = secret.into();
        let trimmed = secret.trim();
        if trimmed.len() < MIN_SECRET_LEN {
            return Err(SecretError::TooShort(trimmed.len()));
        }
        Ok(Self(trimmed.to_owned()))
    }

    /// A fresh secret: 32 random bytes from the OS, base64url-encoded (43 characters), so it can
    /// be stored in a file or an environment variable as it is.
    pub fn generate() -> Result<Self, SecretError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| SecretError::NoRandomness(e.to_string()))?;
        Ok(Self(URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The secret itself, for persisting it. Handle with care.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// What a valid token grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionToken {
    pub scope: ThreadScope,
    pub expires_at: Millis,
    /// Whether the holder may run commands in its threads' sandboxes (`exec` frames).
    pub exec: bool,
    /// Whose budgets those commands are charged to: the scope of the API key that minted the
    /// token (`None`: minted without a key).
    pub caller: Option<BudgetScope>,
}

impl SubscriptionToken {
    /// Whether the token lets its holder watch `thread`.
    pub fn check_thread(&self, thread: &ThreadId) -> Result<(), TokenError> {
        if self.scope.allows(thread) {
            Ok(())
        } else {
            Err(TokenError::ThreadNotAllowed(thread.clone()))
        }
    }
}

/// A freshly minted token and when it stops working.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MintedToken {
    pub token: String,
    /// Epoch milliseconds, like every time in the API.
    pub expires_at: Millis,
    pub threads: ThreadScope,
    /// Whether the token may run commands (`exec` frames), not only watch.
    pub exec: bool,
}

/// Why a token was refused. `code()` is the stable name clients branch on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("no token: pass ?token=<subscription token> (mint one with POST /v1/tokens or `threadbox token`)")]
    Missing,
    #[error("the token is malformed: {0}")]
    Malformed(String),
    #[error("the token's signature does not match (minted with another secret, or altered)")]
    BadSignature,
    #[error("the token expired at {} (epoch ms); mint a new one", .0 .0)]
    Expired(Millis),
    #[error("the token does not allow watching thread {0}")]
    ThreadNotAllowed(ThreadId),
}

impl TokenError {
    pub fn code(&self) -> &'static str {
        match self {
            TokenError::Missing => "token_missing",
            TokenError::Malformed(_) => "token_malformed",
            TokenError::BadSignature => "token_bad_signature",
            TokenError::Expired(_) => "token_expired",
            TokenError::ThreadNotAllowed(_) => "thread_not_allowed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ttl must be between 1 second and {} hours; got {} seconds", MAX_TOKEN_TTL.as_secs() / 3600, .0.as_secs())]
pub struct InvalidTtl(pub Duration);

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Claims {
    v: u8,
    threads: ThreadScope,
    /// Epoch seconds, as in JWTs.
    exp: i64,
    /// Absent (false) unless the token may run commands; left out when false, so tokens that
    /// only watch are exactly what they were before the claim existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    exec: bool,
    /// With `exec`: the budget scope that minted it (`BudgetScope::key`), or [`NO_CALLER`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    by: Option<String>,
}

/// `by` of a token minted without an API key.
const NO_CALLER: &str = "none";

/// Mints and verifies subscription tokens with one secret.
#[derive(Clone, Debug)]
pub struct TokenKey {
    secret: TokenSecret,
}

impl TokenKey {
    pub fn new(secret: TokenSecret) -> Self {
        Self { secret }
    }

    fn mac(&self, encoded_claims: &str) -> HmacSha256 {
        // HMAC takes keys of any length, so this cannot fail.
        let mut mac = HmacSha256::new_from_slice(self.secret.0.as_bytes())
            .expect("HMAC accepts any key length");
        mac.update(MAC_CONTEXT);
        mac.update(encoded_claims.as_bytes());
        mac
    }

    /// An HMAC-SHA256 tag of `message` under this secret, for another kind of credential than a
    /// subscription token (E2B's envd access tokens, `threadbox-e2b-api`). `context` names that
    /// kind and goes first into the MAC, so no tag made for one purpose passes for another, nor
    /// for a subscription token.
    pub fn tag(&self, context: &[u8], message: &[u8]) -> [u8; 32] {
        let mut mac = HmacSha256::new_from_slice(self.secret.0.as_bytes())
            .expect("HMAC accepts any key length");
        mac.update(context);
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// A token for `scope`, valid from `now` for `ttl` (whole seconds; at most [`MAX_TOKEN_TTL`]).
    /// It may watch, never run commands: see [`TokenKey::mint_with_exec`].
    pub fn mint(
        &self,
        scope: ThreadScope,
        ttl: Duration,
        now: Millis,
    ) -> Result<MintedToken, InvalidTtl> {
        self.mint_with_exec(scope, ttl, now, false, None)
    }

    /// [`TokenKey::mint`], and with `exec` the token may also run commands in its threads'
    /// sandboxes over the socket, charged to `caller`'s budgets. Only for callers that could run
    /// them anyway (an API key, whose scope `caller` is).
    pub fn mint_with_exec(
        &self,
        scope: ThreadScope,
        ttl: Duration,
        now: Millis,
        exec: bool,
        caller: Option<BudgetScope>,
    ) -> Result<MintedToken, InvalidTtl> {
        if ttl.as_secs() == 0 || ttl > MAX_TOKEN_TTL {
            return Err(InvalidTtl(ttl));
        }
        let exp = now.plus(ttl).0.div_euclid(1000);
        let claims = Claims {
            v: CLAIMS_VERSION,
            threads: scope,
            exp,
            exec,
            by: exec.then(|| caller.map_or_else(|| NO_CALLER.to_owned(), |c| c.key())),
        };
        let json = serde_json::to_vec(&claims).expect("claims always serialize");
        let encoded = URL_SAFE_NO_PAD.encode(json);
        let tag = URL_SAFE_NO_PAD.encode(self.mac(&encoded).finalize().into_bytes());
        Ok(MintedToken {
            token: format!("{encoded}.{tag}"),
            expires_at: Millis::from_secs(exp),
            threads: claims.threads,
            exec,
        })
    }

    /// Check a token's signature and expiry, then what it grants.
    pub fn verify(&self, token: &str, now: Millis) -> Result<SubscriptionToken, TokenError> {
        let malformed = |why: &str| TokenError::Malformed(why.to_owned());
        if token.is_empty() {
            return Err(TokenError::Missing);
        }
        if token.len() > MAX_TOKEN_LEN {
            return Err(malformed(&format!(
                "{} characters long; the limit is {MAX_TOKEN_LEN}",
                token.len()
            )));
        }
        let (encoded, tag) = token
            .split_once('.')
            .filter(|(_, tag)| !tag.contains('.'))
            .ok_or_else(|| malformed("expected two base64url parts separated by one '.'"))?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| malformed("the signature part is not base64url"))?;
        // `verify_slice` compares in constant time.
        self.mac(encoded)
            .verify_slice(&tag)
            .map_err(|_| TokenError::BadSignature)?;
        // Signed by us, so what follows only fails for a token minted by an incompatible version.
        let json = URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|_| malformed("the claims part is not base64url"))?;
        let claims: Claims = serde_json::from_slice(&json)
            .map_err(|e| malformed(&format!("the claims are not valid: {e}")))?;
        if claims.v != CLAIMS_VERSION {
            return Err(malformed(&format!("unknown token version {}", claims.v)));
        }
        let expires_at = Millis::from_secs(claims.exp);
        if expires_at <= now {
            return Err(TokenError::Expired(expires_at));
        }
        // Who the commands are charged to. An `exec` token that does not say was minted before
        // tokens said: it may only watch (see the module's docs).
        let caller = match claims.by.as_deref() {
            None => None,
            Some(NO_CALLER) => Some(None),
            Some(by) => {
                Some(Some(BudgetScope::from_key(by).ok_or_else(|| {
                    malformed(&format!("unknown minter {by:?}"))
                })?))
            }
        };
        Ok(SubscriptionToken {
            scope: claims.threads,
            expires_at,
            exec: claims.exec && caller.is_some(),
            caller: caller.flatten(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = Millis(1_767_225_600_000);

    fn key(secret: &str) -> TokenKey {
        TokenKey::new(TokenSecret::new(secret).unwrap())
    }

    fn t(s: &str) -> ThreadId {
        ThreadId::parse(s).unwrap()
    }

    fn scope(ids: &[&str]) -> ThreadScope {
        ThreadScope::only(ids.iter().map(|s| t(s))).unwrap()
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_minted_token_verifies_and_grants_its_threads() {
        let k = key(SECRET);
        let minted = k
            .mint(
                scope(&["a", "slack:T1:C1:1.2"]),
                Duration::from_secs(3600),
                NOW,
            )
            .unwrap();
        assert_eq!(minted.expires_at, NOW.plus(Duration::from_secs(3600)));
        assert!(!minted.token.contains('='), "unpadded");
        assert!(minted
            .token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
        let granted = k.verify(&minted.token, NOW).unwrap();
        assert_eq!(granted.expires_at, minted.expires_at);
        granted.check_thread(&t("a")).unwrap();
        granted.check_thread(&t("slack:T1:C1:1.2")).unwrap();
        assert_eq!(
            granted.check_thread(&t("b")).unwrap_err(),
            TokenError::ThreadNotAllowed(t("b"))
        );

        let any = k
            .mint(ThreadScope::Any, Duration::from_secs(60), NOW)
            .unwrap();
        let granted = k.verify(&any.token, NOW).unwrap();
        granted.check_thread(&t("whatever")).unwrap();
    }

    #[test]
    fn exec_is_granted_only_when_minted_with_it() {
        let k = key(SECRET);
        let watching = k.mint(scope(&["a"]), Duration::from_secs(60), NOW).unwrap();
        assert!(!watching.exec);
        assert!(!k.verify(&watching.token, NOW).unwrap().exec);
        // A watch-only token's claims are what they were before `exec` existed.
        let (claims, _) = watching.token.split_once('.').unwrap();
        let json = String::from_utf8(URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
        assert!(!json.contains("exec"), "{json}");

        let running = k
            .mint_with_exec(scope(&["a"]), Duration::from_secs(60), NOW, true, None)
            .unwrap();
        assert!(running.exec);
        let granted = k.verify(&running.token, NOW).unwrap();
        assert!(granted.exec);
        assert_eq!(granted.caller, None);
        granted.check_thread(&t("a")).unwrap();

        // A token made the old way (no claim) verifies, without exec.
        let encoded = URL_SAFE_NO_PAD.encode(r#"{"v":1,"threads":"*","exp":4000000000}"#);
        let tag = URL_SAFE_NO_PAD.encode(k.mac(&encoded).finalize().into_bytes());
        let old = k.verify(&format!("{encoded}.{tag}"), NOW).unwrap();
        assert!(!old.exec);
        assert_eq!(old.scope, ThreadScope::Any);

        // Adding the claim to a watch-only token breaks its signature.
        let (_, tag) = watching.token.split_once('.').unwrap();
        let widened = URL_SAFE_NO_PAD.encode(json.replace('}', r#","exec":true}"#));
        assert_eq!(
            k.verify(&format!("{widened}.{tag}"), NOW).unwrap_err(),
            TokenError::BadSignature
        );
    }

    #[test]
    fn an_exec_token_carries_the_key_that_minted_it_and_an_older_one_only_watches() {
        let k = key(SECRET);
        let by_key = BudgetScope::ApiKey("ab12cd34ef56".into());
        let minted = k
            .mint_with_exec(
                ThreadScope::Any,
                Duration::from_secs(60),
                NOW,
                true,
                Some(by_key.clone()),
            )
            .unwrap();
        let granted = k.verify(&minted.token, NOW).unwrap();
        assert!(granted.exec);
        assert_eq!(granted.caller, Some(by_key));

        let signed = |claims: &str| {
            let encoded = URL_SAFE_NO_PAD.encode(claims);
            let tag = URL_SAFE_NO_PAD.encode(k.mac(&encoded).finalize().into_bytes());
            format!("{encoded}.{tag}")
        };
        // Minted with `exec` before tokens named their minter: its key is unknown, so running
        // on no scope could step around that key's caps. It still watches.
        let old = k
            .verify(
                &signed(r#"{"v":1,"threads":"*","exp":4000000000,"exec":true}"#),
                NOW,
            )
            .unwrap();
        assert!(!old.exec, "{old:?}");
        assert_eq!(old.scope, ThreadScope::Any);
        // A minter we do not know is not read as "none".
        let odd = k.verify(
            &signed(r#"{"v":1,"threads":"*","exp":4000000000,"exec":true,"by":"key:"}"#),
            NOW,
        );
        assert_eq!(odd.unwrap_err().code(), "token_malformed");
    }

    #[test]
    fn expired_tokens_are_refused_at_their_expiry() {
        let k = key(SECRET);
        let minted = k
            .mint(ThreadScope::Any, Duration::from_secs(60), NOW)
            .unwrap();
        let just_before = Millis(minted.expires_at.0 - 1);
        assert!(k.verify(&minted.token, just_before).is_ok());
        let err = k.verify(&minted.token, minted.expires_at).unwrap_err();
        assert_eq!(err, TokenError::Expired(minted.expires_at));
        assert_eq!(err.code(), "token_expired");
        assert!(err.to_string().contains("mint a new one"), "{err}");
    }

    #[test]
    fn another_secret_or_any_edit_breaks_the_signature() {
        let k = key(SECRET);
        let minted = k.mint(scope(&["a"]), Duration::from_secs(60), NOW).unwrap();
        let other = key("another-secret-of-at-least-32-bytes!");
        assert_eq!(
            other.verify(&minted.token, NOW).unwrap_err(),
            TokenError::BadSignature
        );

        // Widen the claims to every thread and keep the old signature.
        let (_, tag) = minted.token.split_once('.').unwrap();
        let forged_claims = URL_SAFE_NO_PAD.encode(format!(
            r#"{{"v":1,"threads":"*","exp":{}}}"#,
            4_000_000_000i64
        ));
        let forged = format!("{forged_claims}.{tag}");
        assert_eq!(
            k.verify(&forged, NOW).unwrap_err(),
            TokenError::BadSignature
        );

        // Flip one character of the signature.
        let mut chars: Vec<char> = minted.token.chars().collect();
        let last = chars.len() - 1;
        chars[last] = if chars[last] == 'A' { 'B' } else { 'A' };
        let flipped: String = chars.into_iter().collect();
        assert_eq!(
            k.verify(&flipped, NOW).unwrap_err().code(),
            "token_bad_signature"
        );
    }

    #[test]
    fn malformed_tokens_say_what_is_wrong() {
        let k = key(SECRET);
        for (token, why) in [
            ("no-dot-here", "separated by one '.'"),
            ("a.b.c", "separated by one '.'"),
            ("abc.!!!", "signature part is not base64url"),
        ] {
            let err = k.verify(token, NOW).unwrap_err();
            assert_eq!(err.code(), "token_malformed", "{token}");
            assert!(err.to_string().contains(why), "{token}: {err}");
        }
        assert_eq!(k.verify("", NOW).unwrap_err(), TokenError::Missing);
        let long = "a".repeat(MAX_TOKEN_LEN + 1);
        assert!(k
            .verify(&long, NOW)
            .unwrap_err()
            .to_string()
            .contains("the limit is"));
        // Well signed but not claims we understand (a future version, say).
        let encoded = URL_SAFE_NO_PAD.encode(r#"{"v":2,"threads":"*","exp":4000000000}"#);
        let tag = URL_SAFE_NO_PAD.encode(k.mac(&encoded).finalize().into_bytes());
        let err = k.verify(&format!("{encoded}.{tag}"), NOW).unwrap_err();
        assert!(err.to_string().contains("unknown token version 2"), "{err}");
    }

    #[test]
    fn ttl_is_bounded() {
        let k = key(SECRET);
        for bad in [
            Duration::ZERO,
            Duration::from_millis(500),
            MAX_TOKEN_TTL + Duration::from_secs(1),
        ] {
            assert!(k.mint(ThreadScope::Any, bad, NOW).is_err(), "{bad:?}");
        }
        assert!(k.mint(ThreadScope::Any, MAX_TOKEN_TTL, NOW).is_ok());
    }

    #[test]
    fn secrets_are_long_enough_and_never_shown() {
        assert_eq!(
            TokenSecret::new("short").unwrap_err(),
            SecretError::TooShort(5)
        );
        let secret = TokenSecret::new(SECRET).unwrap();
        let shown = format!("{secret:?} {:?}", TokenKey::new(secret.clone()));
        assert!(!shown.contains(SECRET), "{shown}");
        let a = TokenSecret::generate().unwrap();
        let b = TokenSecret::generate().unwrap();
        assert_eq!(a.expose().len(), 43);
        assert_ne!(a.expose(), b.expose());
        assert!(
            TokenSecret::new(a.expose()).is_ok(),
            "a generated secret is a valid secret"
        );
    }
}
