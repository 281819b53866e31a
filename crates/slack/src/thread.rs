//! Which sandbox a Slack message belongs to, and where replies go.
//!
//! The rule (design brief: `slack:{team}:{channel}:{thread_ts}` for a thread,
//! `slack:{team}:{channel}` for a DM or an unthreaded conversation):
//!
//! - A direct message with the app (`channel_type` `im`, or the app's Messages tab `app_home`)
//!   maps to `slack:{team}:{channel}`: the DM is one conversation with one sandbox, and a thread
//!   started inside the DM stays in it (a user who replies in a thread expects the files they
//!   just made). Replies go where the user wrote: top level, or the thread they wrote in.
//! - Everything else (public and private channels, group DMs) maps to
//!   `slack:{team}:{channel}:{thread_ts or ts}`: a top-level mention starts a thread rooted at
//!   its own `ts`, and replies go into that thread. A channel never gets one channel-wide
//!   sandbox: unrelated people's top-level messages would share files and processes.
//!
//! `team` is the envelope's `team_id` (the workspace the app is installed in), not the event's
//! `team`, which in a shared channel names the sender's workspace and would split one thread in
//! two.

use threadbox_core::domain::{InvalidThreadId, ThreadId};
pub use threadbox_core::ports::is_ts;

/// Channel types whose messages are a direct conversation with the app.
pub fn is_direct(channel_type: Option<&str>) -> bool {
    matches!(channel_type, Some("im" | "app_home"))
}

/// The sandbox key of a message.
pub fn thread_of(
    team: &str,
    channel: &str,
    channel_type: Option<&str>,
    ts: &str,
    thread_ts: Option<&str>,
) -> Result<ThreadId, InvalidThreadId> {
    if is_direct(channel_type) {
        ThreadId::slack(team, channel, None)
    } else {
        ThreadId::slack(team, channel, Some(thread_ts.unwrap_or(ts)))
    }
}

/// Where a thread's own messages (the status message, notices) are posted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlackPlace {
    pub team: String,
    pub channel: String,
    /// `None` for a DM's top level.
    pub thread_ts: Option<String>,
}

impl SlackPlace {
    /// `None` for thread ids that are not Slack's (API-created threads have no Slack place).
    pub fn of(thread_id: &ThreadId) -> Option<Self> {
        let rest = thread_id.as_str().strip_prefix("slack:")?;
        let mut parts = rest.splitn(3, ':');
        let team = parts.next()?.to_owned();
        let channel = parts.next()?.to_owned();
        let thread_ts = parts.next().map(str::to_owned);
        Some(Self {
            team,
            channel,
            thread_ts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_map_to_threads_by_conversation_kind() {
        // (channel, channel_type, ts, thread_ts) -> thread id
        type Case<'a> = (&'a str, Option<&'a str>, &'a str, Option<&'a str>, &'a str);
        let cases: &[Case] = &[
            // A top-level mention in a channel starts a thread at its own ts.
            (
                "C1",
                Some("channel"),
                "100.000001",
                None,
                "slack:T1:C1:100.000001",
            ),
            // A reply in that thread lands in the same sandbox.
            (
                "C1",
                Some("channel"),
                "105.000002",
                Some("100.000001"),
                "slack:T1:C1:100.000001",
            ),
            // app_mention events carry no channel_type: channel rules.
            ("C1", None, "100.000001", None, "slack:T1:C1:100.000001"),
            (
                "G9",
                Some("group"),
                "7.000001",
                Some("6.000001"),
                "slack:T1:G9:6.000001",
            ),
            ("C7", Some("mpim"), "7.000001", None, "slack:T1:C7:7.000001"),
            // A DM is one conversation, threaded replies included.
            ("D1", Some("im"), "200.000001", None, "slack:T1:D1"),
            (
                "D1",
                Some("im"),
                "201.000001",
                Some("200.000001"),
                "slack:T1:D1",
            ),
            ("D2", Some("app_home"), "1.000001", None, "slack:T1:D2"),
        ];
        for (channel, kind, ts, thread_ts, expected) in cases {
            let id = thread_of("T1", channel, *kind, ts, *thread_ts).unwrap();
            assert_eq!(
                id.as_str(),
                *expected,
                "{channel} {kind:?} {ts} {thread_ts:?}"
            );
        }
        assert!(thread_of("T1", "c-lower", Some("channel"), "1.1", None).is_err());
    }

    #[test]
    fn places_come_back_from_thread_ids() {
        let place = SlackPlace::of(&ThreadId::parse("slack:T1:C1:100.000001").unwrap()).unwrap();
        assert_eq!(
            place,
            SlackPlace {
                team: "T1".into(),
                channel: "C1".into(),
                thread_ts: Some("100.000001".into())
            }
        );
        let dm = SlackPlace::of(&ThreadId::parse("slack:T1:D1").unwrap()).unwrap();
        assert_eq!(dm.thread_ts, None);
        assert!(SlackPlace::of(&ThreadId::parse("agent-1").unwrap()).is_none());
    }
}
