//! Fault points: named places where a test may make this process die at once, to prove that a
//! crash at the worst moment leaves nothing behind that the next start cannot repair.
//!
//! With the `fault-injection` feature, [`point`] reads `THREADBOX_FAULT` once: a comma-separated
//! list of point names. When the running code reaches a listed point, the process sends itself
//! `SIGKILL`, the one signal nothing can catch or clean up after, so what is on disk (SQLite, runc's
//! state, the provider's sandboxes) is exactly what a power cut or an OOM kill would leave.
//! Without the feature (every normal build), [`point`] is an empty inline function and the names
//! are never looked at.
//!
//! The points:
//!
//! | name | where | what a crash there leaves |
//! |---|---|---|
//! | `after-provider-create` | resolve, the sandbox made, before the record is bound to it | a record `creating` under a lease, and a sandbox no record points to |
//! | `after-provider-pause` | pause, the sandbox frozen, before the record says so | a record `pausing` under a lease, and a paused sandbox |
//! | `after-deliver` | fan-out, an event delivered to a target, before that is recorded | an event a target has but the dedupe store does not, still in flight in the queue |
//! | `checkpoint-warmed` | runc checkpoint, the first pass copied with the sandbox running, before it is frozen | a `.partial-` copy, which the provider's next open removes; no record; a sandbox never frozen |
//! | `checkpoint-before-publish` | runc checkpoint, the home copied, before the copy is renamed into place | a `.partial-` copy, which the provider's next open removes; no record |
//! | `after-checkpoint-copy` | checkpoint, the copy made, before its record is written | a whole copy no record names (not listed, never restored) |
//! | `restore-marked` | runc restore, the mark written, before anything is stopped | the mark: the next open puts the checkpoint back |
//! | `restore-emptied` | runc restore, the home emptied, before the checkpoint is copied in | the mark and an empty home: the next open puts the checkpoint back |
//! | `after-restore` | restore, the home put back, before its event is written | the home as asked, no `restore` event |
//! | `fork-copying` | runc fork, the new sandbox made, the first pass copied and the source frozen, before the second pass | a sandbox no record is bound to (the fork's thread `creating` under a lease, then `error`; the same fork again makes it), and a frozen source its next use or open thaws |
//! | `after-fork` | fork, the new thread bound to its sandbox, before the `fork` events | both threads as asked, without their `fork` events |
//!
//! `after-deliver` may name one target: `after-deliver:slack` fires only for the `slack` target.
//! `cli/tests/fault_injection.rs` kills `threadbox dev` at each point, restarts it, and checks the
//! janitor and the consumer repair everything.

/// The environment variable naming the armed points.
pub const ENV: &str = "THREADBOX_FAULT";

/// Die here if `name` is armed. Compiled out without the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point(_name: &str) {}

/// Die here if `name`, or `name:qualifier`, is armed (a fault point that can name one target).
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point_for(_name: &str, _qualifier: &str) {}

#[cfg(feature = "fault-injection")]
pub use armed::{point, point_for};

#[cfg(feature = "fault-injection")]
mod armed {
    use std::io::Write;
    use std::sync::OnceLock;

    fn armed() -> &'static [String] {
        static ARMED: OnceLock<Vec<String>> = OnceLock::new();
        ARMED.get_or_init(|| parse(&std::env::var(super::ENV).unwrap_or_default()))
    }

    pub(super) fn parse(value: &str) -> Vec<String> {
        value
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect()
    }

    pub fn point(name: &str) {
        if armed().iter().any(|p| p == name) {
            die(name);
        }
    }

    pub fn point_for(name: &str, qualifier: &str) {
        let matches = |p: &String| {
            p == name
                || p.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .is_some_and(|q| q == qualifier)
        };
        if armed().iter().any(matches) {
            die(&format!("{name}:{qualifier}"));
        }
    }

    fn die(at: &str) -> ! {
        // The one line a test reads to know the crash happened where it meant it to.
        let _ = writeln!(std::io::stderr(), "fault injection: SIGKILL at {at}");
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        // A signal sent to oneself is delivered before kill returns; this is never reached.
        loop {
            std::thread::park();
        }
    }
}

#[cfg(all(test, feature = "fault-injection"))]
mod tests {
    #[test]
    fn the_list_is_comma_separated_and_trimmed() {
        assert_eq!(
            super::armed::parse(" after-provider-create, after-deliver:slack ,,"),
            vec!["after-provider-create", "after-deliver:slack"]
        );
        assert!(super::armed::parse("").is_empty());
    }

    #[test]
    fn unarmed_points_do_nothing() {
        // THREADBOX_FAULT is not set for unit tests: reaching a point must be harmless.
        assert!(std::env::var_os(super::ENV).is_none());
        super::point("after-provider-create");
        super::point_for("after-deliver", "slack");
    }
}
