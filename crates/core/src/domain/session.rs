//! The session record (one per thread), its lifecycle events and holds, and the pure rules that
//! change them. Use cases load a session, call `apply`, and hand the result to the store, which
//! writes the session and its new events in one atomic write (the outbox).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::image::ImageName;
use super::network::NetworkProfile;
use super::status::{Cause, Status};
use super::thread_id::ThreadId;
use super::time::Millis;
use super::transition::{transition, Command, Rejected, Transition};

/// A promise that the sandbox stays awake: a running command, an agent's turn. Holds expire, so
/// a crashed holder cannot pin a sandbox forever.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub hold_id: String,
    /// Who holds it, for operators ("exec", "slack-worker", an agent's name).
    pub owner: String,
    pub expires_at: Millis,
}

/// The id prefix of a background process's hold (`process-<id>`).
pub const PROCESS_HOLD_PREFIX: &str = "process-";

/// Expired process holds a record keeps, newest first (see [`Session::prune_holds`]).
pub const MAX_EXPIRED_PROCESS_HOLDS: usize = 64;

impl Hold {
    /// A background process's hold: it keeps the janitor from pausing the thread while the
    /// process works, but a pause asked for by a person goes ahead (the process is frozen with
    /// the sandbox and continues on resume), where a running command's hold refuses it.
    pub fn is_process(&self) -> bool {
        self.hold_id.starts_with(PROCESS_HOLD_PREFIX)
    }
}

/// The largest sequence number there can be: stores keep them as signed 64-bit integers (SQLite
/// has no unsigned type), so a position past this names no event. Callers' `after_seq` values are
/// checked against it rather than wrapped into negatives that would replay from the start.
pub const MAX_SEQ: u64 = i64::MAX as u64;

/// One state change, written in the same atomic write as the session that made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleEvent {
    pub event_id: String,
    pub thread_id: ThreadId,
    /// Gapless per thread: previous + 1.
    pub seq: u64,
    pub generation: u64,
    pub from: Option<Status>,
    pub to: Status,
    pub cause: Cause,
    pub at: Millis,
    pub sandbox_id: Option<String>,
    pub detail: Option<String>,
}

/// Timings the rules need. Defaults follow the design brief.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timers {
    /// An active thread with no activity and no live hold for this long is paused.
    pub idle_pause: Duration,
    /// A thread with no activity for this long is destroyed.
    pub retention: Duration,
    /// How long one worker may hold a transitional state before it counts as stuck.
    pub lease: Duration,
}

impl Default for Timers {
    fn default() -> Self {
        Self {
            idle_pause: Duration::from_secs(10 * 60),
            retention: Duration::from_secs(7 * 24 * 60 * 60),
            lease: Duration::from_secs(120),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub thread_id: ThreadId,
    /// Which provider made the sandbox ("runc", "e2b", ...).
    pub provider: String,
    pub sandbox_id: Option<String>,
    /// The provider's own session or access token reference, where it has one.
    pub provider_session_id: Option<String>,
    pub status: Status,
    /// Bumped each time a new sandbox is bound to the thread; fences late workers out.
    pub generation: u64,
    /// Bumped on every write; every write is conditional on the version it read.
    pub version: u64,
    pub last_seq: u64,
    pub holds: Vec<Hold>,
    pub last_activity_at: Millis,
    /// When the janitor should next look at this thread; `None` when there is nothing to do.
    pub next_action_at: Option<Millis>,
    /// While transitional: when the worker's claim runs out.
    pub lease_until: Option<Millis>,
    pub created_at: Millis,
    pub paused_at: Option<Millis>,
    pub resumed_at: Option<Millis>,
    pub destroyed_at: Option<Millis>,
    pub last_error: Option<String>,
    /// The thread's network profile: chosen when the thread is created, changed with a `user`
    /// event, and given to the provider for every sandbox it makes. Records written before
    /// profiles existed read as restricted.
    #[serde(default)]
    pub network: NetworkProfile,
    /// The image the thread's sandboxes start from (`domain::image`): chosen when the thread is
    /// created, changed with a `user` event (applying to its next sandbox), and given to the
    /// provider for every sandbox it makes. Records written before images existed read as
    /// `host`.
    #[serde(default)]
    pub image: ImageName,
    /// The warm pool member whose sandbox this generation took over (`domain::warm_pool`), so
    /// destroying the thread also drops the member's record; `None` for a sandbox made for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_member: Option<String>,
    /// Labels its creator gave the thread (E2B's sandbox `metadata`, `threadbox-e2b-api`),
    /// kept for its life and never read by the rules. Bounded by [`MAX_LABELS`] and
    /// [`MAX_LABEL_BYTES`], which whoever takes them from a caller checks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The environment its creator gave the thread's commands by default (E2B's `envVars`,
    /// applied by `threadbox-e2b-api` to the commands started through it). Readable by whoever
    /// may run a command in the thread, which could print it anyway; the HTTP API shows only
    /// the names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The thread this one was forked from (`Threadbox::fork`), kept for its life. While no
    /// sandbox was ever bound to it (a fork that failed or crashed before its copy was whole),
    /// a fork from the same source may make it again: see [`Session::is_unfinished_fork_of`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ThreadId>,
}

/// The label that names a thread (E2B's sandbox `metadata` key `threadbox-e2b-api` reads a
/// create's thread from): a fork's copy of its source's labels names the fork instead.
pub const THREAD_LABEL: &str = "threadbox_thread";

/// The most labels a thread carries.
pub const MAX_LABELS: usize = 64;
/// The longest label key or value, in bytes.
pub const MAX_LABEL_BYTES: usize = 256;

/// The context of one state change that the pure rules cannot make up themselves.
#[derive(Clone, Debug)]
pub struct Change {
    pub event_id: String,
    pub now: Millis,
    pub detail: Option<String>,
}

impl Session {
    /// A brand-new thread claiming its creation lease, and the event that says so.
    pub fn new_creating(
        thread_id: ThreadId,
        provider: &str,
        change: Change,
        timers: &Timers,
    ) -> (Session, LifecycleEvent) {
        let mut session = Session {
            thread_id,
            provider: provider.to_owned(),
            sandbox_id: None,
            provider_session_id: None,
            status: Status::Creating,
            generation: 0,
            version: 0,
            last_seq: 0,
            holds: Vec::new(),
            last_activity_at: change.now,
            next_action_at: None,
            lease_until: None,
            created_at: change.now,
            paused_at: None,
            resumed_at: None,
            destroyed_at: None,
            last_error: None,
            network: NetworkProfile::Restricted,
            image: ImageName::host(),
            pool_member: None,
            labels: BTreeMap::new(),
            env: BTreeMap::new(),
            forked_from: None,
        };
        // The table decides even the first step, so there is one path for every change.
        let event = session
            .apply_from(None, Command::Create, Cause::User, change, timers)
            .expect("a new thread can always be created")
            .expect("creating a new thread is a state change");
        (session, event)
    }

    /// Run `command` through the transition table and, when it moves, update the record and
    /// return the event to write with it. `Ok(None)` is an explicit no-op.
    pub fn apply(
        &mut self,
        command: Command,
        cause: Cause,
        change: Change,
        timers: &Timers,
    ) -> Result<Option<LifecycleEvent>, Rejected> {
        self.apply_from(Some(self.status), command, cause, change, timers)
    }

    fn apply_from(
        &mut self,
        from: Option<Status>,
        command: Command,
        cause: Cause,
        change: Change,
        timers: &Timers,
    ) -> Result<Option<LifecycleEvent>, Rejected> {
        let (to, cause) = match transition(from, command, cause)? {
            Transition::NoOp => return Ok(None),
            Transition::Move { to, cause } => (to, cause),
        };
        let now = change.now;
        // The sandbox the event is about: the old one for a change that leaves it behind.
        let sandbox_id = self.sandbox_id.clone();
        self.status = to;
        self.last_seq += 1;
        self.lease_until = to.is_transitional().then(|| now.plus(timers.lease));
        match to {
            Status::Creating => {
                self.generation += 1;
                self.sandbox_id = None;
                self.provider_session_id = None;
            }
            Status::Active => {
                self.last_error = None;
                if from == Some(Status::Resuming) || from == Some(Status::Paused) {
                    self.resumed_at = Some(now);
                }
            }
            Status::Paused => self.paused_at = Some(now),
            Status::Destroyed | Status::Expired => {
                self.sandbox_id = None;
                self.provider_session_id = None;
                self.holds.clear();
                if to == Status::Destroyed {
                    self.destroyed_at = Some(now);
                }
            }
            Status::Error => self.last_error = change.detail.clone(),
            Status::Pausing | Status::Resuming | Status::Deleting => {}
        }
        if cause == Cause::User {
            self.last_activity_at = now;
        }
        self.reschedule(now, timers);
        Ok(Some(LifecycleEvent {
            event_id: change.event_id,
            thread_id: self.thread_id.clone(),
            seq: self.last_seq,
            generation: self.generation,
            from,
            to,
            cause,
            at: now,
            sandbox_id: sandbox_id.or_else(|| self.sandbox_id.clone()),
            detail: change.detail,
        }))
    }

    /// An event that is not a change of state (a background process started or ended), in the
    /// thread's stream with the others: `from` and `to` are the current state.
    pub fn note(&mut self, cause: Cause, change: Change) -> LifecycleEvent {
        self.last_seq += 1;
        LifecycleEvent {
            event_id: change.event_id,
            thread_id: self.thread_id.clone(),
            seq: self.last_seq,
            generation: self.generation,
            from: Some(self.status),
            to: self.status,
            cause,
            at: change.now,
            sandbox_id: self.sandbox_id.clone(),
            detail: change.detail,
        }
    }

    /// Change the thread's network profile, with a `user` event in its stream (`from` and `to`
    /// are the current state). `None` when the profile is already this one: nothing to write.
    pub fn set_network(
        &mut self,
        network: NetworkProfile,
        change: Change,
    ) -> Option<LifecycleEvent> {
        if self.network == network {
            return None;
        }
        let detail = format!("network: {}", network.describe());
        self.network = network;
        Some(self.note(
            Cause::User,
            Change {
                detail: Some(detail),
                ..change
            },
        ))
    }

    /// Change the thread's image, with a `user` event in its stream (`from` and `to` are the
    /// current state). The sandbox it has keeps the image it was made from; the next one (a
    /// reset, or a recreate) starts from this. `None` when it is already this image.
    pub fn set_image(&mut self, image: ImageName, change: Change) -> Option<LifecycleEvent> {
        if self.image == image {
            return None;
        }
        let detail = format!("image: {image} (from {})", self.image);
        self.image = image;
        Some(self.note(
            Cause::User,
            Change {
                detail: Some(detail),
                ..change
            },
        ))
    }

    /// Bind the sandbox a create just made (before `CreateSucceeded`, so the event names it).
    pub fn bind_sandbox(&mut self, sandbox_id: String, provider_session_id: Option<String>) {
        self.sandbox_id = Some(sandbox_id);
        self.provider_session_id = provider_session_id;
        self.pool_member = None;
    }

    /// Record activity: the thread is in use, so idle and retention clocks restart.
    pub fn touch(&mut self, now: Millis, timers: &Timers) {
        self.last_activity_at = self.last_activity_at.max(now);
        self.reschedule(now, timers);
    }

    pub fn live_holds(&self, now: Millis) -> impl Iterator<Item = &Hold> {
        self.holds.iter().filter(move |h| h.expires_at > now)
    }

    pub fn has_live_hold(&self, now: Millis) -> bool {
        self.live_holds(now).next().is_some()
    }

    /// A live hold that refuses even a requested pause: a command or file operation running.
    pub fn has_live_command_hold(&self, now: Millis) -> bool {
        self.live_holds(now).any(|h| !h.is_process())
    }

    /// Add a hold (dropping expired ones on the way) and count it as activity.
    pub fn acquire_hold(&mut self, hold: Hold, now: Millis, timers: &Timers) {
        self.holds.retain(|h| h.hold_id != hold.hold_id);
        self.holds.push(hold);
        self.prune_holds(now);
        self.touch(now, timers);
    }

    /// Remove a hold; returns whether it was there. Releasing counts as activity: the thread
    /// was busy until now.
    pub fn release_hold(&mut self, hold_id: &str, now: Millis, timers: &Timers) -> bool {
        let found = self.holds.iter().any(|h| h.hold_id == hold_id);
        self.holds.retain(|h| h.hold_id != hold_id);
        self.prune_holds(now);
        self.touch(now, timers);
        found
    }

    /// Drop expired holds, except a background process's: expired, it no longer keeps the
    /// thread awake, but it still marks a process whose end is not recorded yet, so that
    /// whoever sees the end records it (and a process that shows activity again gets its
    /// hold back). At most [`MAX_EXPIRED_PROCESS_HOLDS`] of those are kept, the newest.
    fn prune_holds(&mut self, now: Millis) {
        let mut expired: Vec<Millis> = self
            .holds
            .iter()
            .filter(|h| h.is_process() && h.expires_at <= now)
            .map(|h| h.expires_at)
            .collect();
        expired.sort_unstable_by(|a, b| b.cmp(a));
        let oldest_kept = expired.get(MAX_EXPIRED_PROCESS_HOLDS - 1).copied();
        let mut kept = 0;
        self.holds.retain(|h| {
            if h.expires_at > now {
                return true;
            }
            if !h.is_process() || oldest_kept.is_some_and(|oldest| h.expires_at < oldest) {
                return false;
            }
            kept += 1;
            kept <= MAX_EXPIRED_PROCESS_HOLDS
        });
    }

    /// When the janitor should next look, from the state and the timers.
    pub fn reschedule(&mut self, now: Millis, timers: &Timers) {
        self.next_action_at = match self.status {
            Status::Creating | Status::Pausing | Status::Resuming | Status::Deleting => {
                self.lease_until
            }
            Status::Active => {
                let idle_at = self.last_activity_at.plus(timers.idle_pause);
                let hold_until = self.live_holds(now).map(|h| h.expires_at).max();
                Some(hold_until.map_or(idle_at, |h| h.max(idle_at)))
            }
            Status::Paused | Status::Error | Status::Expired => {
                Some(self.last_activity_at.plus(timers.retention))
            }
            Status::Destroyed => None,
        };
    }

    /// Whether a transitional claim has run out, so another worker may recover it.
    pub fn lease_expired(&self, now: Millis) -> bool {
        self.status.is_transitional() && self.lease_until.is_none_or(|until| until <= now)
    }

    /// Whether this is a fork of `source` that never got its sandbox: still being made, or
    /// left `creating` or `error` by an attempt that failed or crashed mid-copy. A fork from
    /// the same source may make such a thread again; any other existing thread is taken.
    pub fn is_unfinished_fork_of(&self, source: &ThreadId) -> bool {
        self.forked_from.as_ref() == Some(source)
            && self.sandbox_id.is_none()
            && matches!(self.status, Status::Creating | Status::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{GonePolicy, Observed, RejectKind};

    fn change(n: u32, now: i64) -> Change {
        Change {
            event_id: format!("e{n}"),
            now: Millis(now),
            detail: None,
        }
    }

    fn new_session() -> (Session, Timers) {
        let timers = Timers::default();
        let (s, _) = Session::new_creating(
            ThreadId::parse("t1").unwrap(),
            "test",
            change(0, 1_000),
            &timers,
        );
        (s, timers)
    }

    #[test]
    fn a_network_change_is_a_user_event_in_place_and_a_repeat_writes_nothing() {
        use crate::domain::Allowlist;
        let (mut s, _) = new_session();
        assert_eq!(s.network, NetworkProfile::Restricted);
        let seq = s.last_seq;
        let networked = NetworkProfile::Networked {
            allow: Allowlist::parse(["pkg.test", "203.0.113.0/24"]).unwrap(),
        };
        let ev = s.set_network(networked.clone(), change(1, 2_000)).unwrap();
        assert_eq!(s.network, networked);
        assert_eq!(ev.cause, Cause::User);
        assert_eq!((ev.from, ev.to), (Some(s.status), s.status));
        assert_eq!(ev.seq, seq + 1);
        assert_eq!(s.last_seq, seq + 1);
        assert_eq!(
            ev.detail.as_deref(),
            Some("network: networked (allow: pkg.test, 203.0.113.0/24)")
        );
        assert_eq!(s.set_network(networked, change(2, 3_000)), None);
        assert_eq!(s.last_seq, seq + 1, "no change, no event");
    }

    #[test]
    fn a_record_from_before_network_profiles_reads_as_restricted() {
        let (s, _) = new_session();
        let mut json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["network"], "restricted");
        json.as_object_mut().unwrap().remove("network");
        let old: Session = serde_json::from_value(json).unwrap();
        assert_eq!(old.network, NetworkProfile::Restricted);
        assert_eq!(old, s);
    }

    #[test]
    fn an_image_change_is_a_user_event_in_place_and_a_repeat_writes_nothing() {
        let (mut s, _) = new_session();
        assert!(s.image.is_host());
        let seq = s.last_seq;
        let py = ImageName::parse("python-3.12").unwrap();
        let ev = s.set_image(py.clone(), change(1, 2_000)).unwrap();
        assert_eq!(s.image, py);
        assert_eq!(ev.cause, Cause::User);
        assert_eq!((ev.from, ev.to), (Some(s.status), s.status));
        assert_eq!(ev.seq, seq + 1);
        assert_eq!(ev.detail.as_deref(), Some("image: python-3.12 (from host)"));
        assert_eq!(s.set_image(py, change(2, 3_000)), None);
        assert_eq!(s.last_seq, seq + 1, "no change, no event");
    }

    #[test]
    fn a_record_from_before_images_reads_as_host() {
        let (s, _) = new_session();
        let mut json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["image"], "host");
        json.as_object_mut().unwrap().remove("image");
        let old: Session = serde_json::from_value(json).unwrap();
        assert!(old.image.is_host());
        assert_eq!(old, s);
        json = serde_json::to_value(&s).unwrap();
        json["image"] = "Not An Image".into();
        assert!(serde_json::from_value::<Session>(json).is_err());
    }

    #[test]
    fn a_new_thread_starts_creating_in_generation_one_with_a_lease() {
        let timers = Timers::default();
        let (s, ev) = Session::new_creating(
            ThreadId::parse("t1").unwrap(),
            "test",
            change(0, 1_000),
            &timers,
        );
        assert_eq!(
            (s.status, s.generation, s.last_seq),
            (Status::Creating, 1, 1)
        );
        assert_eq!(
            (ev.from, ev.to, ev.seq, ev.cause),
            (None, Status::Creating, 1, Cause::User)
        );
        assert_eq!(s.lease_until, Some(Millis(1_000).plus(timers.lease)));
        assert_eq!(
            s.next_action_at, s.lease_until,
            "a stuck create is due when its lease ends"
        );
    }

    #[test]
    fn events_carry_gapless_sequence_numbers_and_no_ops_write_nothing() {
        let (mut s, t) = new_session();
        s.bind_sandbox("sb-1".into(), None);
        let e2 = s
            .apply(Command::CreateSucceeded, Cause::User, change(2, 2_000), &t)
            .unwrap()
            .unwrap();
        assert_eq!((e2.seq, e2.sandbox_id.as_deref()), (2, Some("sb-1")));
        assert_eq!(
            s.apply(Command::Resume, Cause::User, change(3, 2_500), &t)
                .unwrap(),
            None
        );
        let e3 = s
            .apply(Command::Pause, Cause::Idle, change(4, 3_000), &t)
            .unwrap()
            .unwrap();
        assert_eq!(e3.seq, 3);
        assert_eq!(
            s.apply(Command::Pause, Cause::Idle, change(5, 3_100), &t)
                .unwrap(),
            None
        );
        assert_eq!(s.last_seq, 3);
    }

    #[test]
    fn idle_causes_do_not_count_as_activity_but_user_ones_do() {
        let (mut s, t) = new_session();
        s.apply(Command::CreateSucceeded, Cause::User, change(1, 2_000), &t)
            .unwrap();
        assert_eq!(s.last_activity_at, Millis(2_000));
        s.apply(Command::Pause, Cause::Idle, change(2, 900_000), &t)
            .unwrap();
        assert_eq!(s.last_activity_at, Millis(2_000));
    }

    #[test]
    fn schedule_follows_status_activity_and_holds() {
        let (mut s, t) = new_session();
        s.apply(Command::CreateSucceeded, Cause::User, change(1, 2_000), &t)
            .unwrap();
        assert_eq!(s.next_action_at, Some(Millis(2_000).plus(t.idle_pause)));
        let far = Millis(2_000)
            .plus(t.idle_pause)
            .plus(Duration::from_secs(60));
        s.acquire_hold(
            Hold {
                hold_id: "h".into(),
                owner: "exec".into(),
                expires_at: far,
            },
            Millis(2_000),
            &t,
        );
        assert_eq!(
            s.next_action_at,
            Some(far),
            "a live hold postpones the idle pause"
        );
        assert!(s.release_hold("h", Millis(3_000), &t));
        assert!(!s.release_hold("h", Millis(3_000), &t));
        assert_eq!(s.next_action_at, Some(Millis(3_000).plus(t.idle_pause)));
        s.apply(Command::Pause, Cause::User, change(2, 4_000), &t)
            .unwrap();
        s.apply(Command::PauseSucceeded, Cause::User, change(3, 4_100), &t)
            .unwrap();
        assert_eq!(s.next_action_at, Some(Millis(4_100).plus(t.retention)));
        s.apply(Command::Destroy, Cause::Retention, change(4, 5_000), &t)
            .unwrap();
        s.apply(
            Command::DestroySucceeded,
            Cause::Retention,
            change(5, 5_100),
            &t,
        )
        .unwrap();
        assert_eq!(s.next_action_at, None, "a destroyed thread is never due");
    }

    #[test]
    fn expired_holds_stop_protecting() {
        let (mut s, t) = new_session();
        s.acquire_hold(
            Hold {
                hold_id: "h".into(),
                owner: "x".into(),
                expires_at: Millis(5_000),
            },
            Millis(1_000),
            &t,
        );
        assert!(s.has_live_hold(Millis(4_999)));
        assert!(!s.has_live_hold(Millis(5_000)));
    }

    #[test]
    fn expired_process_holds_are_kept_as_markers_up_to_a_bound() {
        let (mut s, t) = new_session();
        let hold = |id: String, at: i64| Hold {
            hold_id: id,
            owner: "x".into(),
            expires_at: Millis(at),
        };
        s.acquire_hold(hold("exec".into(), 2_000), Millis(1_000), &t);
        for i in 0..100 {
            s.acquire_hold(
                hold(format!("{PROCESS_HOLD_PREFIX}{i}"), 2_000 + i),
                Millis(1_000),
                &t,
            );
        }
        // Later, another hold comes and goes: the expired command hold is dropped, the expired
        // process holds stay (not live: they protect nothing), the newest 64 of them.
        s.acquire_hold(hold("exec2".into(), 90_000), Millis(50_000), &t);
        assert!(!s.holds.iter().any(|h| h.hold_id == "exec"));
        let expired: Vec<&Hold> = s.holds.iter().filter(|h| h.is_process()).collect();
        assert_eq!(expired.len(), MAX_EXPIRED_PROCESS_HOLDS);
        assert!(
            expired.iter().all(|h| h.expires_at.0 >= 2_036),
            "the newest are kept"
        );
        assert_eq!(s.live_holds(Millis(50_000)).count(), 1);
        assert!(s.release_hold(&format!("{PROCESS_HOLD_PREFIX}99"), Millis(50_001), &t));
        assert_eq!(s.holds.iter().filter(|h| h.is_process()).count(), 63);
    }

    #[test]
    fn a_gone_sandbox_is_recreated_in_a_new_generation_or_expired_by_policy() {
        let (mut s, t) = new_session();
        s.bind_sandbox("sb-1".into(), None);
        s.apply(Command::CreateSucceeded, Cause::User, change(1, 2_000), &t)
            .unwrap();
        let mut expired = s.clone();
        let ev = s
            .apply(
                Command::Observe(Observed::Gone(GonePolicy::Recreate)),
                Cause::User,
                change(2, 3_000),
                &t,
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            (ev.to, ev.cause, ev.generation),
            (Status::Creating, Cause::Recreated, 2)
        );
        assert_eq!(
            ev.sandbox_id.as_deref(),
            Some("sb-1"),
            "the event names the sandbox that was lost"
        );
        assert_eq!(s.sandbox_id, None);

        let ev = expired
            .apply(
                Command::Observe(Observed::Gone(GonePolicy::Expire)),
                Cause::User,
                change(2, 3_000),
                &t,
            )
            .unwrap()
            .unwrap();
        assert_eq!((ev.to, ev.cause), (Status::Expired, Cause::ProviderGone));
        let err = expired
            .apply(Command::Create, Cause::User, change(3, 4_000), &t)
            .unwrap_err();
        assert_eq!(err.kind, RejectKind::Expired);
        assert_eq!(expired.last_seq, 3, "a refused command changes nothing");
    }

    #[test]
    fn leases_expire() {
        let (s, t) = new_session();
        assert!(!s.lease_expired(Millis(1_000)));
        assert!(s.lease_expired(Millis(1_000).plus(t.lease)));
    }
}
