//! Why a code block that reached out failed: when a block exits non-zero and its sandbox's
//! network refused destinations while it ran, the reply names them and says how to allow them
//! (the thread's profile, `PUT /v1/threads/{id}/network`). What is new is told by comparing the
//! provider's report before the block with the one after (never clocks).
//!
//! Where the provider does not count refusals (E2B; runc's restricted sandboxes, which have no
//! network to refuse with) the reply says so only when the output reads like a failed lookup or
//! connection, naming the thread's profile and how to change it.

use std::fmt::Write;

use super::SlackWorker;
use crate::format::escape;
use threadbox_core::domain::{NetworkProfile, ThreadId};
use threadbox_core::ports::{
    ExecResult, NetworkRefusals, RefusalReason, RefusedBy, RefusedDestination,
};
use threadbox_core::usecases::{SandboxRefusals, UseCaseError};

/// Destinations a reply names at most (the port keeps a few more).
const NAMED: usize = 5;
/// Characters of the thread's profile a reply quotes.
const PROFILE_CHARS: usize = 200;
/// Characters the suggested request body may take; past it the reply shows its shape.
const SUGGESTION_CHARS: usize = 400;

/// What the thread's sandbox had refused before a block ran.
pub(super) enum Baseline {
    /// No sandbox yet (the block makes it): everything refused afterwards is the block's.
    NoSandbox,
    Read(SandboxRefusals),
    /// The report could not be read: nothing can be told new afterwards.
    Unknown,
}

impl SlackWorker {
    /// Read before a block runs.
    pub(super) async fn refusals_before(&self, thread_id: &ThreadId) -> Baseline {
        match self.tb.peek_network_refusals(thread_id).await {
            Ok(read) => Baseline::Read(read),
            Err(UseCaseError::UnknownThread(_) | UseCaseError::NoSandbox { .. }) => {
                Baseline::NoSandbox
            }
            Err(error) => {
                tracing::debug!(%thread_id, %error, "no refusals baseline for this block");
                Baseline::Unknown
            }
        }
    }

    /// After a block ran: the lines its reply gets when it failed and the network may be why.
    pub(super) async fn refusal_hint(
        &self,
        thread_id: &ThreadId,
        before: Baseline,
        result: &ExecResult,
    ) -> Option<String> {
        if result.exit_code == Some(0) {
            return None;
        }
        let session = self.tb.session(thread_id).await.ok().flatten()?;
        let after = match self.tb.peek_network_refusals(thread_id).await {
            Ok(after) => after,
            Err(error) => {
                tracing::debug!(%thread_id, %error, "no refusals to compare after a block");
                return None;
            }
        };
        let Some(now) = &after.refusals else {
            return looks_like_network_failure(result)
                .then(|| uncounted_hint(thread_id, &session.network));
        };
        let earlier = match &before {
            Baseline::NoSandbox => None,
            Baseline::Read(read) if read.sandbox_id != after.sandbox_id => None,
            Baseline::Read(read) => read.refusals.as_ref(),
            Baseline::Unknown => return None,
        };
        let new = now.refused_since(earlier);
        let grew = now.total() > earlier.map_or(0, NetworkRefusals::total);
        if new.is_empty() && !grew {
            return None;
        }
        Some(refused_hint(thread_id, &session.network, &new))
    }
}

/// "…refused `other.test` (DNS)…" and how to allow what an allowlist can open.
pub(super) fn refused_hint(
    thread_id: &ThreadId,
    profile: &NetworkProfile,
    new: &[&RefusedDestination],
) -> String {
    let mut text = if new.is_empty() {
        // Counted, but with no destination kept (a packet without a port, or the packet
        // filter's list was full).
        ":no_entry_sign: The sandbox's network refused connections while this ran.".to_owned()
    } else {
        let named: Vec<String> = new
            .iter()
            .rev()
            .take(NAMED)
            .map(|r| format!("`{}` ({})", r.destination, r.by.describe()))
            .collect();
        let more = new.len().saturating_sub(NAMED);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!(
            ":no_entry_sign: The sandbox's network refused {}{more}.",
            named.join(", ")
        )
    };
    let _ = write!(
        text,
        " This thread's network: {}.",
        cut(&profile.describe(), PROFILE_CHARS)
    );
    let never: Vec<&str> = new
        .iter()
        .filter(|r| r.reason == RefusalReason::AlwaysRefused)
        .map(|r| r.destination.as_str())
        .collect();
    let openable: Vec<String> = new
        .iter()
        .filter(|r| r.reason == RefusalReason::NotAllowed)
        .map(|r| allow_entry(r))
        .fold(Vec::new(), |mut seen, entry| {
            if !seen.contains(&entry) {
                seen.push(entry);
            }
            seen
        });
    if !openable.is_empty() || new.is_empty() {
        let _ = write!(
            text,
            "\nTo allow a host, set the thread's profile (someone with API access): `PUT \
             /v1/threads/{thread_id}/network` with `{}`. It applies to the running sandbox where \
             the provider can change it, otherwise after `reset` (a fresh sandbox).",
            escape(&suggestion(profile, &openable))
        );
    }
    if !never.is_empty() {
        let _ = write!(
            text,
            "\n`{}`: private, loopback or metadata addresses, which no thread's profile opens \
             (only the operator's settings).",
            never.join("`, `")
        );
    }
    text
}

/// The reply's lines where refusals are not counted but the output reads like the network.
pub(super) fn uncounted_hint(thread_id: &ThreadId, profile: &NetworkProfile) -> String {
    let what = match profile {
        NetworkProfile::Restricted => {
            "This thread's sandbox has no network (profile `restricted`).".to_owned()
        }
        NetworkProfile::Networked { .. } => format!(
            "If a host was refused: this thread's network is {}.",
            cut(&profile.describe(), PROFILE_CHARS)
        ),
    };
    format!(
        ":no_entry_sign: {what}\nTo allow a host, set the thread's profile (someone with API \
         access): `PUT /v1/threads/{thread_id}/network` with `{}`. New threads get the \
         operator's default.",
        escape(&suggestion(profile, &[]))
    )
}

/// The body that allows `add` on top of what the profile allows (`<host>` where it would allow
/// nothing yet). Raw text: the reply escapes it.
fn suggestion(profile: &NetworkProfile, add: &[String]) -> String {
    let mut allow = match profile {
        NetworkProfile::Networked { allow } => allow.to_strings(),
        NetworkProfile::Restricted => Vec::new(),
    };
    let had = allow.len();
    allow.extend(add.iter().cloned());
    if allow.is_empty() {
        allow.push("<host>".to_owned());
    }
    let body = serde_json::json!({ "network": { "networked": { "allow": allow } } }).to_string();
    if body.chars().count() <= SUGGESTION_CHARS {
        return body;
    }
    let added = serde_json::to_string(add).unwrap_or_default();
    format!(
        r#"{{"network": {{"networked": {{"allow": [<the thread's {had} entries>, {}]}}}}}}"#,
        added.trim_start_matches('[').trim_end_matches(']')
    )
}

/// What to add to an allowlist for a refused destination: the name, or the address without
/// its port and protocol.
fn allow_entry(refused: &RefusedDestination) -> String {
    match refused.by {
        RefusedBy::PacketFilter => refused
            .destination
            .rsplit_once(':')
            .map_or(refused.destination.as_str(), |(ip, _)| ip)
            .to_owned(),
        RefusedBy::Dns | RefusedBy::Proxy => refused.destination.clone(),
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}…")
}

/// Whether a failed command's output reads like a lookup or connection that could not be made.
fn looks_like_network_failure(result: &ExecResult) -> bool {
    const SIGNS: [&str; 9] = [
        "Temporary failure in name resolution",
        "Name or service not known",
        "Could not resolve host",
        "No address associated with hostname",
        "Network is unreachable",
        "getaddrinfo ENOTFOUND",
        "getaddrinfo EAI_AGAIN",
        "Failed to establish a new connection",
        "Could not resolve",
    ];
    [&result.stderr, &result.stdout]
        .iter()
        .any(|out| SIGNS.iter().any(|sign| out.contains(sign)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::domain::{Allowlist, Millis};

    fn tid() -> ThreadId {
        ThreadId::parse("slack:T1:C1:1767225600.000100").unwrap()
    }

    fn refused(destination: &str, by: RefusedBy, reason: RefusalReason) -> RefusedDestination {
        RefusedDestination {
            destination: destination.into(),
            by,
            reason,
            at: Millis(0),
            times: 1,
        }
    }

    #[test]
    fn the_hint_names_what_was_refused_and_the_body_that_allows_it() {
        let profile = NetworkProfile::Networked {
            allow: Allowlist::parse(["pkg.test"]).unwrap(),
        };
        let dns = refused("other.test", RefusedBy::Dns, RefusalReason::NotAllowed);
        let raw = refused(
            "203.0.113.11:80",
            RefusedBy::PacketFilter,
            RefusalReason::NotAllowed,
        );
        let meta = refused(
            "169.254.169.254:80",
            RefusedBy::PacketFilter,
            RefusalReason::AlwaysRefused,
        );
        let text = refused_hint(&tid(), &profile, &[&dns, &raw, &meta]);
        assert!(text.contains("`other.test` (DNS)"), "{text}");
        assert!(text.contains("`203.0.113.11:80` (packet filter)"), "{text}");
        assert!(
            text.contains("PUT /v1/threads/slack:T1:C1:1767225600.000100/network"),
            "{text}"
        );
        assert!(
            text.contains(
                r#"{"network":{"networked":{"allow":["pkg.test","other.test","203.0.113.11"]}}}"#
            ),
            "{text}"
        );
        assert!(text.contains("`169.254.169.254:80`: private"), "{text}");
        assert!(
            !text.contains("\"169.254.169.254\""),
            "never suggested: {text}"
        );
    }

    #[test]
    fn a_long_allowlist_is_not_repeated_in_the_reply() {
        let many: Vec<String> = (0..500).map(|i| format!("h{i}.test")).collect();
        let profile = NetworkProfile::Networked {
            allow: Allowlist::parse(&many).unwrap(),
        };
        let dns = refused("other.test", RefusedBy::Dns, RefusalReason::NotAllowed);
        let text = refused_hint(&tid(), &profile, &[&dns]);
        assert!(text.chars().count() < 1_200, "{}", text.len());
        assert!(
            text.contains(r#"[&lt;the thread's 500 entries&gt;, "other.test"]"#),
            "{text}"
        );
    }

    #[test]
    fn without_counts_only_output_that_reads_like_the_network_gets_a_hint() {
        let mut result = ExecResult {
            exit_code: Some(6),
            stdout: String::new(),
            stderr: "curl: (6) Could not resolve host: pypi.org\n".into(),
            duration_ms: 5,
            timed_out: false,
            truncated: false,
            out_of_memory: false,
        };
        assert!(looks_like_network_failure(&result));
        result.stderr = "Traceback: ZeroDivisionError".into();
        assert!(!looks_like_network_failure(&result));
        let text = uncounted_hint(&tid(), &NetworkProfile::Restricted);
        assert!(text.contains("no network (profile `restricted`)"), "{text}");
        assert!(
            text.contains(r#"{"network":{"networked":{"allow":["&lt;host&gt;"]}}}"#),
            "{text}"
        );
    }
}
