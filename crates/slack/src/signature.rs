//! Slack's request signing (scheme `v0`): `X-Slack-Signature: v0=hex(HMAC-SHA256(secret,
//! "v0:{X-Slack-Request-Timestamp}:{raw body}"))`, with the timestamp at most five minutes from
//! now so a captured request cannot be replayed later.
//!
//! The check runs on the raw body bytes exactly as received: re-serialising parsed JSON would
//! change them and break every signature.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far a request's timestamp may be from our clock, either way (Slack's recommendation).
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
pub const SIGNATURE_HEADER: &str = "x-slack-signature";

type HmacSha256 = Hmac<Sha256>;

/// The app's signing secret. Cheap to clone; never shown in `Debug` or logs.
#[derive(Clone)]
pub struct SigningSecret(Arc<[u8]>);

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(<redacted>)")
    }
}

/// Why a request's signature was refused. The messages are safe to return to the caller: they
/// name what is wrong, never the expected value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing X-Slack-Request-Timestamp header")]
    MissingTimestamp,
    #[error("missing X-Slack-Signature header")]
    MissingSignature,
    #[error("X-Slack-Request-Timestamp is not a Unix time in seconds")]
    BadTimestamp,
    #[error("X-Slack-Request-Timestamp is {skew_secs} s away from now; the limit is 300 s (a replay, or a wrong clock)")]
    Stale { skew_secs: i64 },
    #[error("X-Slack-Signature is not a v0 signature")]
    UnknownScheme,
    #[error("X-Slack-Signature does not match the request (wrong signing secret, or the body was changed)")]
    Mismatch,
}

impl SigningSecret {
    /// `None` for an empty (or all-blank) secret: an empty HMAC key would accept forgeries
    /// made by anyone who knows the scheme.
    pub fn new(secret: &str) -> Option<Self> {
        let secret = secret.trim();
        (!secret.is_empty()).then(|| Self(secret.as_bytes().into()))
    }

    fn mac(&self, timestamp: &[u8], body: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(b"v0:");
        mac.update(timestamp);
        mac.update(b":");
        mac.update(body);
        mac
    }

    /// The `X-Slack-Signature` value for a request: what Slack sends, and what
    /// `threadbox slack send` and the tests send.
    pub fn sign(&self, timestamp: i64, body: &[u8]) -> String {
        let tag = self
            .mac(timestamp.to_string().as_bytes(), body)
            .finalize()
            .into_bytes();
        format!("v0={}", hex_encode(&tag))
    }

    /// Check a request: both headers present, the timestamp within [`MAX_CLOCK_SKEW`] of
    /// `now_secs`, and the signature matching the raw body, compared in constant time.
    pub fn verify(
        &self,
        timestamp: Option<&[u8]>,
        signature: Option<&[u8]>,
        body: &[u8],
        now_secs: i64,
    ) -> Result<(), SignatureError> {
        let timestamp = timestamp.ok_or(SignatureError::MissingTimestamp)?;
        let signature = signature.ok_or(SignatureError::MissingSignature)?;
        let sent: i64 = std::str::from_utf8(timestamp)
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse().ok())
            .ok_or(SignatureError::BadTimestamp)?;
        let skew = now_secs.saturating_sub(sent);
        if skew.unsigned_abs() > MAX_CLOCK_SKEW.as_secs() {
            return Err(SignatureError::Stale { skew_secs: skew });
        }
        let hex = signature
            .strip_prefix(b"v0=")
            .ok_or(SignatureError::UnknownScheme)?;
        let tag = hex_decode(hex).ok_or(SignatureError::Mismatch)?;
        // `verify_slice` compares in constant time.
        self.mac(timestamp, body)
            .verify_slice(&tag)
            .map_err(|_| SignatureError::Mismatch)
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

/// Hex (either case) to bytes; `None` for odd lengths or other characters.
fn hex_decode(hex: &[u8]) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let pairs = hex.chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return None;
    }
    pairs
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn secret() -> SigningSecret {
        SigningSecret::new("8f742231b10e8888abcd99yyyzzz85a5").unwrap()
    }

    fn check(
        secret: &SigningSecret,
        ts: Option<&str>,
        sig: Option<&str>,
        body: &str,
    ) -> Result<(), SignatureError> {
        secret.verify(
            ts.map(str::as_bytes),
            sig.map(str::as_bytes),
            body.as_bytes(),
            NOW,
        )
    }

    #[test]
    fn matches_slacks_published_example() {
        // The worked example in Slack's "Verifying requests from Slack" guide.
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let ts = 1_531_420_618;
        let expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(secret().sign(ts, body.as_bytes()), expected);
        secret()
            .verify(
                Some(b"1531420618"),
                Some(expected.as_bytes()),
                body.as_bytes(),
                ts + 10,
            )
            .unwrap();
    }

    #[test]
    fn a_valid_signature_passes_and_case_of_hex_does_not_matter() {
        let sig = secret().sign(NOW, b"{\"a\":1}");
        check(&secret(), Some(&NOW.to_string()), Some(&sig), "{\"a\":1}").unwrap();
        let upper = format!("v0={}", sig[3..].to_uppercase());
        check(&secret(), Some(&NOW.to_string()), Some(&upper), "{\"a\":1}").unwrap();
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let body = "{\"type\":\"event_callback\"}";
        let ts = NOW.to_string();
        let good = secret().sign(NOW, body.as_bytes());
        let other = SigningSecret::new("another-secret").unwrap();
        let stale_ts = (NOW - 301).to_string();
        let stale_sig = secret().sign(NOW - 301, body.as_bytes());
        let future_ts = (NOW + 400).to_string();
        let future_sig = secret().sign(NOW + 400, body.as_bytes());
        let wrong_secret_sig = other.sign(NOW, body.as_bytes());
        let later_ts = (NOW + 1).to_string();
        let v1_sig = good.replacen("v0=", "v1=", 1);
        // (name, timestamp, signature, body, expected)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            &'a str,
            SignatureError,
        );
        let cases: Vec<Case> = vec![
            (
                "wrong secret",
                Some(&ts),
                Some(&wrong_secret_sig),
                body,
                SignatureError::Mismatch,
            ),
            (
                "tampered body",
                Some(&ts),
                Some(&good),
                "{\"type\":\"event_callback\" }",
                SignatureError::Mismatch,
            ),
            (
                "stale",
                Some(&stale_ts),
                Some(&stale_sig),
                body,
                SignatureError::Stale { skew_secs: 301 },
            ),
            (
                "from the future",
                Some(&future_ts),
                Some(&future_sig),
                body,
                SignatureError::Stale { skew_secs: -400 },
            ),
            (
                "timestamp changed after signing",
                Some(&later_ts),
                Some(&good),
                body,
                SignatureError::Mismatch,
            ),
            (
                "missing timestamp",
                None,
                Some(&good),
                body,
                SignatureError::MissingTimestamp,
            ),
            (
                "missing signature",
                Some(&ts),
                None,
                body,
                SignatureError::MissingSignature,
            ),
            (
                "not a number",
                Some("17e8"),
                Some(&good),
                body,
                SignatureError::BadTimestamp,
            ),
            (
                "negative",
                Some("-5"),
                Some(&good),
                body,
                SignatureError::BadTimestamp,
            ),
            (
                "v1 scheme",
                Some(&ts),
                Some(&v1_sig),
                body,
                SignatureError::UnknownScheme,
            ),
            (
                "not hex",
                Some(&ts),
                Some("v0=zz"),
                body,
                SignatureError::Mismatch,
            ),
            (
                "truncated",
                Some(&ts),
                Some(&good[..good.len() - 2]),
                body,
                SignatureError::Mismatch,
            ),
        ];
        for (name, ts, sig, body, expected) in cases {
            assert_eq!(check(&secret(), ts, sig, body), Err(expected), "{name}");
        }
    }

    #[test]
    fn the_boundary_of_the_window_is_inside() {
        let body = b"x";
        let edge = NOW - 300;
        let sig = secret().sign(edge, body);
        secret()
            .verify(
                Some(edge.to_string().as_bytes()),
                Some(sig.as_bytes()),
                body,
                NOW,
            )
            .unwrap();
    }

    #[test]
    fn blank_secrets_are_refused_and_debug_hides_the_secret() {
        assert!(SigningSecret::new("").is_none());
        assert!(SigningSecret::new("  ").is_none());
        let shown = format!("{:?}", secret());
        assert!(!shown.contains("8f742231"), "{shown}");
    }
}
