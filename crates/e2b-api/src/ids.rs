//! The names E2B's SDKs see: a sandbox id per thread, the thread a create names, and each
//! sandbox's envd access token.
//!
//! - The sandbox id is the thread id in lowercase hex: E2B's ids are `[a-z0-9]+`, thread ids are
//!   not, and the hex form reads back to its thread with no table to keep, so it is the same for
//!   the thread's whole life (pause, resume, a recreated sandbox) and on every process.
//! - The envd token is `<scope>.<tag>`: the budget scope of the API key that created or reached
//!   the sandbox (`-` with authentication off), and an HMAC of the sandbox id and that scope
//!   under the deployment's token secret. envd's calls carry no API key, so the token is what
//!   says whose budgets they are charged to; one minted for a key that has since been removed
//!   is refused.

use subtle::ConstantTimeEq;
use threadbox_api::live::TokenKey;
use threadbox_core::domain::{BudgetScope, ThreadId};

/// What an envd token's MAC is computed over first, so no tag made with the same secret for
/// another purpose passes as one.
const ENVD_TOKEN_CONTEXT: &[u8] = b"threadbox.e2b.envd.v1.";

/// The longest sandbox id a path or header may carry: a thread id of the longest length in hex.
pub const MAX_SANDBOX_ID_LEN: usize = 2 * threadbox_core::domain::MAX_THREAD_ID_LEN;

/// The sandbox id E2B's SDKs see for a thread.
pub fn sandbox_id(thread: &ThreadId) -> String {
    thread
        .as_str()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Why a sandbox id names no thread: E2B answers these with 400 (`Invalid sandbox ID`) where
/// the id is malformed, and 404 where it is well formed but unknown.
#[derive(Debug, PartialEq, Eq)]
pub enum BadSandboxId {
    /// Not `[a-z0-9]+`, or too long.
    Malformed,
    /// Well formed, but no thread id reads out of it.
    Unknown,
}

/// The thread a sandbox id names. E2B's legacy `<id>-<clientID>` form is accepted, as E2B does.
pub fn thread_of(sandbox_id: &str) -> Result<ThreadId, BadSandboxId> {
    let id = sandbox_id.split_once('-').map_or(sandbox_id, |(id, _)| id);
    if id.is_empty()
        || id.len() > MAX_SANDBOX_ID_LEN
        || !id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(BadSandboxId::Malformed);
    }
    if !id.len().is_multiple_of(2) {
        return Err(BadSandboxId::Unknown);
    }
    let bytes = (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| BadSandboxId::Unknown)?;
    let text = String::from_utf8(bytes).map_err(|_| BadSandboxId::Unknown)?;
    ThreadId::parse(&text).map_err(|_| BadSandboxId::Unknown)
}

/// A new thread's name, for a create that names none: `e2b-` and 20 random characters.
pub fn new_thread() -> ThreadId {
    let random = uuid::Uuid::new_v4().simple().to_string();
    ThreadId::parse(&format!("e2b-{}", &random[..20])).expect("a valid thread id")
}

fn scope_text(scope: Option<&BudgetScope>) -> String {
    match scope {
        Some(BudgetScope::ApiKey(id)) => id.clone(),
        // Only API keys reach this API; any other scope never mints a token.
        Some(BudgetScope::SlackTeam(team)) => format!("team-{team}"),
        None => "-".to_owned(),
    }
}

fn tag(key: &TokenKey, sandbox_id: &str, scope: &str) -> String {
    let message = format!("{sandbox_id}\n{scope}");
    key.tag(ENVD_TOKEN_CONTEXT, message.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The envd access token of `sandbox_id` for a caller of `scope`.
pub fn envd_token(key: &TokenKey, sandbox_id: &str, scope: Option<&BudgetScope>) -> String {
    let scope = scope_text(scope);
    let tag = tag(key, sandbox_id, &scope);
    format!("{scope}.{tag}")
}

/// The caller an envd token was minted for, if it is `sandbox_id`'s. The MAC is compared in
/// constant time before the scope is believed.
pub fn check_envd_token(
    key: &TokenKey,
    sandbox_id: &str,
    token: &str,
) -> Option<Option<BudgetScope>> {
    let (scope, presented) = token.split_once('.')?;
    let expected = tag(key, sandbox_id, scope);
    if !bool::from(expected.as_bytes().ct_eq(presented.as_bytes())) {
        return None;
    }
    match scope {
        "-" => Some(None),
        id => Some(Some(BudgetScope::ApiKey(id.to_owned()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_api::live::TokenSecret;

    fn key(secret: &str) -> TokenKey {
        TokenKey::new(TokenSecret::new(secret).unwrap())
    }

    #[test]
    fn a_sandbox_id_reads_back_to_its_thread() {
        for raw in ["slack:T1:C2:1712345678.123456", "agent-run-42", "e2b-abc"] {
            let thread = ThreadId::parse(raw).unwrap();
            let id = sandbox_id(&thread);
            assert!(id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
            assert_eq!(thread_of(&id).unwrap(), thread);
            assert_eq!(
                thread_of(&format!("{id}-client")).unwrap(),
                thread,
                "legacy form"
            );
        }
        let longest = ThreadId::parse(&"x".repeat(128)).unwrap();
        assert_eq!(thread_of(&sandbox_id(&longest)).unwrap(), longest);
    }

    #[test]
    fn bad_sandbox_ids_are_told_apart() {
        for malformed in ["", "ABC", "a b", "a_b", &"a".repeat(MAX_SANDBOX_ID_LEN + 1)] {
            assert_eq!(
                thread_of(malformed),
                Err(BadSandboxId::Malformed),
                "{malformed:?}"
            );
        }
        // Odd length, not hex, not UTF-8, not a thread id (a space; a reserved prefix).
        for unknown in ["abc", "zz", "ff", "6120", "706f6f6c3a78"] {
            assert_eq!(
                thread_of(unknown),
                Err(BadSandboxId::Unknown),
                "{unknown:?}"
            );
        }
    }

    #[test]
    fn new_threads_are_distinct_and_valid() {
        let (a, b) = (new_thread(), new_thread());
        assert_ne!(a, b);
        assert!(a.as_str().starts_with("e2b-") && a.as_str().len() == 24);
    }

    #[test]
    fn envd_tokens_name_their_caller_and_only_their_sandbox() {
        let k = key(&"s".repeat(32));
        let scope = BudgetScope::ApiKey("0123456789ab".into());
        let token = envd_token(&k, "abcd", Some(&scope));
        assert_eq!(check_envd_token(&k, "abcd", &token), Some(Some(scope)));
        assert_eq!(
            check_envd_token(&k, "abce", &token),
            None,
            "another sandbox"
        );
        assert_eq!(
            check_envd_token(&key(&"t".repeat(32)), "abcd", &token),
            None,
            "another secret"
        );
        let forged = token.replacen("0123456789ab", "ba9876543210", 1);
        assert_eq!(check_envd_token(&k, "abcd", &forged), None, "another scope");
        let open = envd_token(&k, "abcd", None);
        assert_eq!(check_envd_token(&k, "abcd", &open), Some(None));
        assert_eq!(check_envd_token(&k, "abcd", "garbage"), None);
    }
}
