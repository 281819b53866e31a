//! What a sandbox's network refused: counts by where the refusal happened and the last few
//! destinations, so a person can learn why a command that reaches out failed (the API's
//! `GET /v1/threads/{id}`, `threadbox threads show`, and the Slack reply to a failed block).
//!
//! A provider answers this only where it enforces the network itself (runc); one whose egress is
//! someone else's (E2B) answers `None`, never a zero it cannot vouch for.

use serde::{Deserialize, Serialize};

use crate::domain::Millis;

/// Destinations a report keeps, newest last.
pub const MAX_RECENT_REFUSALS: usize = 8;
/// Characters of a destination kept (a DNS name may have 253); longer ones end in `…`.
pub const MAX_DESTINATION_CHARS: usize = 80;

/// A sandbox's refusals so far. Each count is `None` when the provider process asked cannot see
/// that part (the runc proxy and resolver count in the process that serves the sandbox, and
/// start again from zero when another process takes it over).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkRefusals {
    /// Names the sandbox's resolver would not answer (not in the allowlist).
    pub lookups: Option<u64>,
    /// Connections the egress proxy refused (a name not in the allowlist, an address where a
    /// name belongs, a name whose every address is one no sandbox may reach).
    pub connections: Option<u64>,
    /// Packets the sandbox's packet filter rejected (raw addresses the allowlist does not name,
    /// private and metadata networks, other ports of the host). Packets, not connections: a
    /// client that retries a connection sends several.
    pub packets: Option<u64>,
    /// The last destinations refused, oldest first, at most [`MAX_RECENT_REFUSALS`]; one entry
    /// per destination and way, with how often.
    pub recent: Vec<RefusedDestination>,
}

impl NetworkRefusals {
    /// Every refusal counted, whatever its kind.
    pub fn total(&self) -> u64 {
        [self.lookups, self.connections, self.packets]
            .into_iter()
            .flatten()
            .fold(0, u64::saturating_add)
    }

    /// The destinations refused since `before` was read from the same sandbox: new ones, and
    /// ones refused again (their `times` changed: grew, or started again after the entry had
    /// left). Every one when there was no `before` (the sandbox did not exist yet). Compares
    /// what the provider reported, never clocks.
    pub fn refused_since(&self, before: Option<&NetworkRefusals>) -> Vec<&RefusedDestination> {
        self.recent
            .iter()
            .filter(|now| {
                let earlier = before.and_then(|b| {
                    b.recent
                        .iter()
                        .find(|e| e.destination == now.destination && e.by == now.by)
                });
                earlier.is_none_or(|e| now.times != e.times)
            })
            .collect()
    }
}

/// One destination a sandbox was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedDestination {
    /// A name (`other.test`), or an address and port (`203.0.113.11:443`, and the protocol when
    /// it is not TCP: `203.0.113.11:53/udp`). Only the characters
    /// of names and addresses are kept (others become `?`), at most [`MAX_DESTINATION_CHARS`].
    pub destination: String,
    pub by: RefusedBy,
    pub reason: RefusalReason,
    /// When it was last refused.
    pub at: Millis,
    /// How often it was refused (for the packet filter: packets while it stayed recent).
    pub times: u64,
}

/// Where a refusal happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusedBy {
    Dns,
    Proxy,
    PacketFilter,
}

impl RefusedBy {
    pub fn describe(self) -> &'static str {
        match self {
            RefusedBy::Dns => "DNS",
            RefusedBy::Proxy => "egress proxy",
            RefusedBy::PacketFilter => "packet filter",
        }
    }
}

/// Why: something the thread's allowlist could open, or something no sandbox may reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// Not in the thread's allowlist: adding it to the thread's profile opens it.
    NotAllowed,
    /// A private, loopback, link-local or metadata address (or a name that resolves only to
    /// such): refused whatever the allowlist says; only the operator can open one.
    AlwaysRefused,
}

/// A destination as reports keep it: only the characters of names, addresses and ports
/// (anything else, which a hostile `Host` header may carry, becomes `?`), and at most
/// [`MAX_DESTINATION_CHARS`] of them.
pub fn clean_destination(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len().min(MAX_DESTINATION_CHARS + 3));
    for (i, c) in raw.chars().enumerate() {
        if i == MAX_DESTINATION_CHARS {
            out.push('…');
            break;
        }
        let kept =
            c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '/' | '[' | ']');
        out.push(if kept { c.to_ascii_lowercase() } else { '?' });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(destination: &str, by: RefusedBy, times: u64, at: i64) -> RefusedDestination {
        RefusedDestination {
            destination: destination.into(),
            by,
            reason: RefusalReason::NotAllowed,
            at: Millis(at),
            times,
        }
    }

    #[test]
    fn destinations_keep_only_name_characters_and_a_bounded_length() {
        assert_eq!(clean_destination("Other.Test"), "other.test");
        assert_eq!(clean_destination("203.0.113.11:443"), "203.0.113.11:443");
        assert_eq!(clean_destination("a\nb<c>`d"), "a?b?c??d");
        let long = clean_destination(&"x".repeat(300));
        assert_eq!(long.chars().count(), MAX_DESTINATION_CHARS + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn what_was_refused_since_an_earlier_report_is_new_or_again() {
        let before = NetworkRefusals {
            lookups: Some(2),
            connections: Some(0),
            packets: None,
            recent: vec![
                refused("old.test", RefusedBy::Dns, 2, 1_000),
                refused("again.test", RefusedBy::Dns, 1, 1_000),
            ],
        };
        let after = NetworkRefusals {
            lookups: Some(4),
            connections: Some(1),
            packets: None,
            recent: vec![
                refused("old.test", RefusedBy::Dns, 2, 1_000),
                refused("again.test", RefusedBy::Dns, 2, 2_000),
                refused("again.test", RefusedBy::Proxy, 1, 2_000),
            ],
        };
        assert_eq!(after.total(), 5);
        let since: Vec<_> = after
            .refused_since(Some(&before))
            .into_iter()
            .map(|r| (r.destination.as_str(), r.by))
            .collect();
        assert_eq!(
            since,
            [
                ("again.test", RefusedBy::Dns),
                ("again.test", RefusedBy::Proxy)
            ]
        );
        assert_eq!(after.refused_since(None).len(), 3);
        assert!(before.refused_since(Some(&before)).is_empty());
    }
}
