//! The states a thread's sandbox can be in, and why it moved between them.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A worker holds the creation lease and is asking the provider for a sandbox.
    Creating,
    Active,
    Pausing,
    Paused,
    Resuming,
    Deleting,
    /// The sandbox was killed on purpose (retention or reset); a new resolve starts a new generation.
    Destroyed,
    /// The provider lost the sandbox and the policy says not to recreate: new work is refused
    /// until the thread is reset.
    Expired,
    Error,
}

impl Status {
    pub const ALL: [Status; 9] = [
        Status::Creating,
        Status::Active,
        Status::Pausing,
        Status::Paused,
        Status::Resuming,
        Status::Deleting,
        Status::Destroyed,
        Status::Expired,
        Status::Error,
    ];

    /// States of a thread whose sandbox is gone for good: its record and events are history,
    /// which retention deletes after a while.
    pub fn is_retired(self) -> bool {
        matches!(self, Status::Destroyed | Status::Expired)
    }

    /// States held under a lease by one worker; a lease that runs out marks the transition stuck.
    pub fn is_transitional(self) -> bool {
        matches!(
            self,
            Status::Creating | Status::Pausing | Status::Resuming | Status::Deleting
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Creating => "creating",
            Status::Active => "active",
            Status::Pausing => "pausing",
            Status::Paused => "paused",
            Status::Resuming => "resuming",
            Status::Deleting => "deleting",
            Status::Destroyed => "destroyed",
            Status::Expired => "expired",
            Status::Error => "error",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown status {s:?}"))
    }
}

/// Why a state changed. Every lifecycle event names one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Someone asked: a message in the thread, an API call, the CLI.
    User,
    /// The janitor paused a thread that went quiet.
    Idle,
    /// The janitor destroyed a thread idle past retention.
    Retention,
    /// The provider no longer has the sandbox.
    ProviderGone,
    /// Resuming failed for a reason other than the sandbox being gone.
    ResumeFailed,
    /// The sandbox was gone and a fresh one replaced it: files and processes were lost.
    Recreated,
    /// The record was corrected to match what the provider reports.
    Reconcile,
    /// Not a change of state: a background process started or ended (the event's `detail` says
    /// which, and how it ended). Its `from` and `to` are the same.
    Process,
    /// A compute budget (the thread's, or its workspace's or API key's) was used up for the
    /// day: the thread was paused, never destroyed (`domain::budget`).
    Budget,
    /// Not a change of state: a checkpoint of the thread's home was taken (`detail` names it).
    Checkpoint,
    /// The thread's home was put back to a checkpoint (`detail` names it and the processes
    /// stopped); the state is the same.
    Restore,
    /// The thread was forked into another, or made as a fork of one (`detail` names the other).
    Fork,
    Error,
}

/// What the thread's policy does when the provider says its sandbox is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GonePolicy {
    /// Start a fresh sandbox in a new generation and say so with a `recreated` event.
    Recreate,
    /// Mark the thread expired and refuse new work with a clear message.
    Expire,
}
