//! What a networked sandbox's network refused (see `network`): the sandbox's resolver and the
//! egress proxy count here, in the process that serves the sandbox, and keep the last few
//! destinations; the packet filter counts in the sandbox's own nftables table (a named counter,
//! and a set of recent destinations with a packet counter each), read back with `nft -j`.
//!
//! Bounded however hostile the sandbox: a few destinations per sandbox, each cut to
//! [`threadbox_core::ports::MAX_DESTINATION_CHARS`]; the kernel's set has a fixed size and forgets after
//! [`RECENT_PACKETS_TIMEOUT_SECS`] (when it is full, further destinations are only counted).
//! Each refusal may be logged with its sandbox, thread and destination, at most one line per
//! [`LOG_INTERVAL`] per sandbox, the next line saying how many were left out.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use threadbox_core::domain::Millis;
use threadbox_core::ports::{
    clean_destination, Clock, NetworkRefusals, RefusalReason, RefusedBy, RefusedDestination,
    SystemClock, MAX_RECENT_REFUSALS,
};

/// The sandbox table's counter of rejected packets.
pub(crate) const PACKET_COUNTER: &str = "refused";
/// The sandbox table's set of recently rejected destinations (address, protocol, port).
pub(crate) const RECENT_PACKETS_SET: &str = "refused_recent";
/// Destinations the set holds at most.
pub(crate) const RECENT_PACKETS_SIZE: u32 = 256;
/// How long the set remembers a destination after its last rejected packet.
pub(crate) const RECENT_PACKETS_TIMEOUT_SECS: u64 = 600;
/// At most one log line per sandbox this often.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The refusals of one sandbox's resolver and proxy, counted in this process.
pub(crate) struct RefusalRecorder {
    sandbox_id: String,
    thread_id: Option<String>,
    state: Mutex<Recorded>,
}

#[derive(Default)]
struct Recorded {
    lookups: u64,
    connections: u64,
    recent: VecDeque<RefusedDestination>,
    log: LogGate,
}

impl RefusalRecorder {
    pub fn new(sandbox_id: &str, thread_id: Option<String>) -> Self {
        Self {
            sandbox_id: sandbox_id.to_owned(),
            thread_id,
            state: Mutex::new(Recorded::default()),
        }
    }

    /// Count one refusal of `destination` (as the sandbox named it) and maybe log it.
    pub fn refused(&self, by: RefusedBy, reason: RefusalReason, destination: &str) {
        let destination = clean_destination(destination);
        let at = SystemClock.now();
        let held_back = {
            let mut state = self.state.lock().expect("poisoned");
            match by {
                RefusedBy::Dns => state.lookups = state.lookups.saturating_add(1),
                _ => state.connections = state.connections.saturating_add(1),
            }
            remember(&mut state.recent, by, reason, &destination, at);
            state.log.admit(Instant::now())
        };
        if let Some(held_back) = held_back {
            tracing::info!(
                sandbox_id = %self.sandbox_id,
                thread_id = self.thread_id.as_deref().unwrap_or("-"),
                destination,
                by = by.describe(),
                reason = ?reason,
                more_since_last_line = held_back,
                "sandbox network refused a destination"
            );
        }
    }

    /// What this process counted, with nothing of the packet filter's.
    pub fn snapshot(&self) -> NetworkRefusals {
        let state = self.state.lock().expect("poisoned");
        NetworkRefusals {
            lookups: Some(state.lookups),
            connections: Some(state.connections),
            packets: None,
            recent: state.recent.iter().cloned().collect(),
        }
    }
}

/// Move `destination` to the end of `recent` (one entry per destination and way, counting how
/// often), dropping the oldest past [`MAX_RECENT_REFUSALS`].
fn remember(
    recent: &mut VecDeque<RefusedDestination>,
    by: RefusedBy,
    reason: RefusalReason,
    destination: &str,
    at: Millis,
) {
    let times = match recent
        .iter()
        .position(|r| r.by == by && r.destination == destination)
    {
        Some(i) => recent.remove(i).map_or(0, |r| r.times),
        None => 0,
    };
    recent.push_back(RefusedDestination {
        destination: destination.to_owned(),
        by,
        reason,
        at,
        times: times.saturating_add(1),
    });
    while recent.len() > MAX_RECENT_REFUSALS {
        recent.pop_front();
    }
}

/// One log line now and then: the first refusal at once, then at most one per interval; a line
/// carries how many were left out since the one before.
#[derive(Debug)]
pub(crate) struct LogGate {
    interval: Duration,
    last: Option<Instant>,
    held_back: u64,
}

impl Default for LogGate {
    fn default() -> Self {
        Self {
            interval: LOG_INTERVAL,
            last: None,
            held_back: 0,
        }
    }
}

impl LogGate {
    /// Whether to log a refusal seen at `now`; if so, how many were left out before it.
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.interval => {
                self.held_back = self.held_back.saturating_add(1);
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }
}

/// The packet filter's part, from `nft -j list table inet threadbox` in the sandbox's
/// namespace: its counter, and its recent destinations (`reason` says whether an address is one
/// no allowlist opens). `None` for output that is not that table.
pub(crate) fn packet_filter_refusals(
    json: &str,
    now: Millis,
    reason: impl Fn(Ipv4Addr) -> RefusalReason,
) -> Option<(u64, Vec<RefusedDestination>)> {
    let doc: serde_json::Value = serde_json::from_str(json).ok()?;
    let items = doc.get("nftables")?.as_array()?;
    let named = |kind: &str, name: &str| {
        items
            .iter()
            .filter_map(|item| item.get(kind))
            .find(|object| object.get("name").and_then(|n| n.as_str()) == Some(name))
    };
    let packets = named("counter", PACKET_COUNTER)?.get("packets")?.as_u64()?;
    let mut recent = Vec::new();
    let elements = named("set", RECENT_PACKETS_SET)
        .and_then(|set| set.get("elem"))
        .and_then(|e| e.as_array());
    for element in elements.into_iter().flatten() {
        let element = element.get("elem").unwrap_or(element);
        let Some([ip, proto, port]) = element
            .pointer("/val/concat")
            .and_then(|c| c.as_array())
            .map(Vec::as_slice)
        else {
            continue;
        };
        let (Some(ip), Some(proto), Some(port)) = (
            ip.as_str().and_then(|s| s.parse::<Ipv4Addr>().ok()),
            proto.as_str(),
            port.as_u64(),
        ) else {
            continue;
        };
        let expires = element.get("expires").and_then(|e| e.as_u64()).unwrap_or(0);
        let ago = RECENT_PACKETS_TIMEOUT_SECS.saturating_sub(expires);
        let times = element
            .pointer("/counter/packets")
            .and_then(|p| p.as_u64())
            .unwrap_or(1);
        let destination = if proto == "tcp" {
            format!("{ip}:{port}")
        } else {
            format!("{ip}:{port}/{proto}")
        };
        recent.push(RefusedDestination {
            destination: clean_destination(&destination),
            by: RefusedBy::PacketFilter,
            reason: reason(ip),
            at: now.minus(Duration::from_secs(ago)),
            times,
        });
    }
    Some((packets, recent))
}

/// The recorder's view and the packet filter's as one: the newest destinations of both.
pub(crate) fn merge(
    counted: Option<NetworkRefusals>,
    packets: Option<(u64, Vec<RefusedDestination>)>,
) -> NetworkRefusals {
    let mut merged = counted.unwrap_or_default();
    if let Some((count, recent)) = packets {
        merged.packets = Some(count);
        merged.recent.extend(recent);
    }
    // Oldest first; on a tie, the order they came in.
    merged.recent.sort_by_key(|r| r.at);
    let extra = merged.recent.len().saturating_sub(MAX_RECENT_REFUSALS);
    merged.recent.drain(..extra);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::ports::MAX_DESTINATION_CHARS;

    #[test]
    fn the_log_says_the_first_refusal_then_one_per_interval_with_how_many_were_left_out() {
        let mut gate = LogGate::default();
        let start = Instant::now();
        assert_eq!(gate.admit(start), Some(0), "the first at once");
        for i in 1..=50 {
            assert_eq!(gate.admit(start + Duration::from_millis(i * 100)), None);
        }
        assert_eq!(
            gate.admit(start + LOG_INTERVAL),
            Some(50),
            "the next after the interval, with the count"
        );
        assert_eq!(
            gate.admit(start + LOG_INTERVAL + Duration::from_secs(1)),
            None
        );
        assert_eq!(gate.admit(start + LOG_INTERVAL * 3), Some(1));
        assert_eq!(gate.admit(start + LOG_INTERVAL * 5), Some(0));
    }

    #[test]
    fn a_hostile_sandbox_leaves_a_bounded_record() {
        let recorder = RefusalRecorder::new("sb", Some("t".into()));
        for i in 0..10_000 {
            let name = format!("{i}-{}.test", "x".repeat(400));
            recorder.refused(RefusedBy::Dns, RefusalReason::NotAllowed, &name);
        }
        recorder.refused(RefusedBy::Proxy, RefusalReason::NotAllowed, "other.test");
        recorder.refused(RefusedBy::Proxy, RefusalReason::NotAllowed, "other.test");
        let seen = recorder.snapshot();
        assert_eq!(seen.lookups, Some(10_000));
        assert_eq!(seen.connections, Some(2));
        assert_eq!(seen.packets, None);
        assert_eq!(seen.recent.len(), MAX_RECENT_REFUSALS);
        assert!(seen
            .recent
            .iter()
            .all(|r| r.destination.chars().count() <= MAX_DESTINATION_CHARS + 1));
        let last = seen.recent.last().unwrap();
        assert_eq!(
            (last.destination.as_str(), last.by, last.times),
            ("other.test", RefusedBy::Proxy, 2),
            "one entry per destination, counted"
        );
    }

    /// As nftables 1.0 prints the sandbox's table (trimmed to what is read).
    const LISTED: &str = r#"{"nftables": [
        {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
        {"table": {"family": "inet", "name": "threadbox", "handle": 1}},
        {"counter": {"family": "inet", "name": "refused", "table": "threadbox", "packets": 14, "bytes": 807}},
        {"set": {"family": "inet", "name": "refused_recent", "table": "threadbox",
          "type": ["ipv4_addr", "inet_proto", "inet_service"], "size": 256, "timeout": 600,
          "elem": [
            {"elem": {"val": {"concat": ["203.0.113.11", "tcp", 80]}, "expires": 590, "counter": {"packets": 4, "bytes": 240}}},
            {"elem": {"val": {"concat": ["169.254.169.254", "udp", 53]}, "expires": 599, "counter": {"packets": 1, "bytes": 60}}},
            {"elem": {"val": {"concat": ["bogus", "tcp", 1]}, "expires": 1}}
          ]}},
        {"chain": {"family": "inet", "table": "threadbox", "name": "refuse"}}
    ]}"#;

    #[test]
    fn the_packet_filter_is_read_from_nft_json() {
        let now = Millis(1_000_000);
        let always = |ip: Ipv4Addr| {
            if ip.is_link_local() {
                RefusalReason::AlwaysRefused
            } else {
                RefusalReason::NotAllowed
            }
        };
        let (packets, recent) = packet_filter_refusals(LISTED, now, always).unwrap();
        assert_eq!(packets, 14);
        assert_eq!(recent.len(), 2, "{recent:?}");
        assert_eq!(recent[0].destination, "203.0.113.11:80");
        assert_eq!(recent[0].times, 4);
        assert_eq!(recent[0].at, Millis(1_000_000 - 10_000));
        assert_eq!(recent[0].reason, RefusalReason::NotAllowed);
        assert_eq!(recent[1].destination, "169.254.169.254:53/udp");
        assert_eq!(recent[1].reason, RefusalReason::AlwaysRefused);
        assert!(packet_filter_refusals("{}", now, always).is_none());
        assert!(packet_filter_refusals("not json", now, always).is_none());

        // Merged with the recorder's, newest last, at most the port's number.
        let recorder = RefusalRecorder::new("sb", None);
        recorder.refused(RefusedBy::Dns, RefusalReason::NotAllowed, "other.test");
        let merged = merge(
            Some(recorder.snapshot()),
            packet_filter_refusals(LISTED, now, always),
        );
        assert_eq!(merged.packets, Some(14));
        assert_eq!(merged.lookups, Some(1));
        assert_eq!(merged.recent.len(), 3);
        assert_eq!(merged.recent[0].destination, "203.0.113.11:80");
        assert_eq!(merged.recent[2].destination, "other.test", "{merged:?}");
    }
}
