//! The transition table: the one place that decides which state changes are allowed.
//!
//! It is pure (no clock, no I/O) and exhaustive over `(state, command)`, so adding a state or a
//! command does not compile until every pair has an answer. Repeated commands are explicit no-ops,
//! because queues deliver at least once and callers retry.

use serde::{Deserialize, Serialize};

use super::status::{Cause, GonePolicy, Status};

/// What the provider reports about a sandbox, fed in by reconciliation and stuck-transition recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Observed {
    Running,
    Paused,
    Gone(GonePolicy),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Claim the creation lease (first use, after a destroy, or to recover from an error).
    Create,
    CreateSucceeded,
    Pause,
    PauseSucceeded,
    Resume,
    ResumeSucceeded,
    Destroy,
    DestroySucceeded,
    /// The transition in flight failed for a reason other than the sandbox being gone.
    Fail,
    /// The provider reports the sandbox in this state.
    Observe(Observed),
}

impl Command {
    /// Every command, for exhaustive tests.
    pub const ALL: [Command; 13] = [
        Command::Create,
        Command::CreateSucceeded,
        Command::Pause,
        Command::PauseSucceeded,
        Command::Resume,
        Command::ResumeSucceeded,
        Command::Destroy,
        Command::DestroySucceeded,
        Command::Fail,
        Command::Observe(Observed::Running),
        Command::Observe(Observed::Paused),
        Command::Observe(Observed::Gone(GonePolicy::Recreate)),
        Command::Observe(Observed::Gone(GonePolicy::Expire)),
    ];
}

/// The table's answer when a command is allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Change state; the event records `cause`.
    Move { to: Status, cause: Cause },
    /// Already there or already on the way: nothing to write.
    NoOp,
}

/// Why a command was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// Another transition holds the thread; retry once it settles.
    Busy,
    /// The thread's sandbox expired and the policy forbids recreating it; reset the thread.
    Expired,
    /// The command makes no sense in this state (pause a destroyed thread, a completion out of order).
    Illegal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot {command:?} a thread that is {}: {}", from.map(Status::as_str).unwrap_or("new"), explain(*kind, *from))]
pub struct Rejected {
    pub kind: RejectKind,
    pub from: Option<Status>,
    pub command: Command,
}

fn explain(kind: RejectKind, from: Option<Status>) -> &'static str {
    match (kind, from) {
        (RejectKind::Busy, _) => "another transition is in progress; retry shortly",
        (RejectKind::Expired, _) => "its sandbox is gone and this thread does not recreate sandboxes; reset the thread to start fresh",
        (RejectKind::Illegal, None) => "the thread has no session yet; resolve it first",
        (RejectKind::Illegal, Some(Status::Destroyed)) => "its sandbox was destroyed; resolve the thread to start a new one",
        (RejectKind::Illegal, Some(Status::Error)) => "it is in error; resolve the thread to recover it",
        (RejectKind::Illegal, Some(Status::Deleting)) => "its sandbox is being destroyed",
        (RejectKind::Illegal, _) => "that step does not follow from this state",
    }
}

/// The transition table. `from` is `None` for a thread with no session yet. `cause` is the reason
/// the caller gives; the table overrides it where the state change itself names the reason
/// (a gone sandbox is `recreated` or `provider_gone`, an observed correction is `reconcile`).
pub fn transition(
    from: Option<Status>,
    command: Command,
    cause: Cause,
) -> Result<Transition, Rejected> {
    use Command as C;
    use Status as S;
    use Transition::NoOp;
    let mv = |to| Ok(Transition::Move { to, cause });
    let reconcile = |to| {
        Ok(Transition::Move {
            to,
            cause: Cause::Reconcile,
        })
    };
    let reject = |kind| {
        Err(Rejected {
            kind,
            from,
            command,
        })
    };
    let busy = || reject(RejectKind::Busy);
    let illegal = || reject(RejectKind::Illegal);
    let gone = |policy| match policy {
        GonePolicy::Recreate => Ok(Transition::Move {
            to: S::Creating,
            cause: Cause::Recreated,
        }),
        GonePolicy::Expire => Ok(Transition::Move {
            to: S::Expired,
            cause: Cause::ProviderGone,
        }),
    };

    let Some(state) = from else {
        return match command {
            C::Create => mv(S::Creating),
            _ => illegal(),
        };
    };

    match (state, command) {
        // Creating: one worker holds the lease; everyone else waits for it.
        (S::Creating, C::Create) => Ok(NoOp),
        (S::Creating, C::CreateSucceeded) => mv(S::Active),
        (S::Creating, C::Pause | C::Resume | C::Destroy) => busy(),
        (S::Creating, C::PauseSucceeded | C::ResumeSucceeded | C::DestroySucceeded) => illegal(),
        (S::Creating, C::Fail) => mv(S::Error),
        // No sandbox is bound yet, so there is nothing to observe; recovery goes through Fail.
        (S::Creating, C::Observe(_)) => illegal(),

        (S::Active, C::Create | C::CreateSucceeded | C::Resume | C::ResumeSucceeded) => Ok(NoOp),
        (S::Active, C::Pause) => mv(S::Pausing),
        (S::Active, C::PauseSucceeded | C::DestroySucceeded) => illegal(),
        (S::Active, C::Destroy) => mv(S::Deleting),
        (S::Active, C::Fail) => mv(S::Error),
        (S::Active, C::Observe(Observed::Running)) => Ok(NoOp),
        // E2B pauses an idle sandbox at its deadline on its own (autoPause): follow it.
        (S::Active, C::Observe(Observed::Paused)) => reconcile(S::Paused),
        (S::Active, C::Observe(Observed::Gone(policy))) => gone(policy),

        (S::Pausing, C::Create | C::Pause) => Ok(NoOp),
        (S::Pausing, C::PauseSucceeded) => mv(S::Paused),
        (S::Pausing, C::Resume | C::Destroy) => busy(),
        (S::Pausing, C::CreateSucceeded | C::ResumeSucceeded | C::DestroySucceeded) => illegal(),
        (S::Pausing, C::Fail) => mv(S::Error),
        (S::Pausing, C::Observe(Observed::Running)) => reconcile(S::Active),
        (S::Pausing, C::Observe(Observed::Paused)) => reconcile(S::Paused),
        (S::Pausing, C::Observe(Observed::Gone(policy))) => gone(policy),

        (S::Paused, C::Create | C::Pause | C::PauseSucceeded) => Ok(NoOp),
        (S::Paused, C::Resume) => mv(S::Resuming),
        (S::Paused, C::Destroy) => mv(S::Deleting),
        (S::Paused, C::CreateSucceeded | C::ResumeSucceeded | C::DestroySucceeded) => illegal(),
        (S::Paused, C::Fail) => mv(S::Error),
        (S::Paused, C::Observe(Observed::Running)) => reconcile(S::Active),
        (S::Paused, C::Observe(Observed::Paused)) => Ok(NoOp),
        (S::Paused, C::Observe(Observed::Gone(policy))) => gone(policy),

        (S::Resuming, C::Create | C::Resume) => Ok(NoOp),
        (S::Resuming, C::ResumeSucceeded) => mv(S::Active),
        (S::Resuming, C::Pause | C::Destroy) => busy(),
        (S::Resuming, C::CreateSucceeded | C::PauseSucceeded | C::DestroySucceeded) => illegal(),
        (S::Resuming, C::Fail) => mv(S::Error),
        (S::Resuming, C::Observe(Observed::Running)) => reconcile(S::Active),
        (S::Resuming, C::Observe(Observed::Paused)) => reconcile(S::Paused),
        (S::Resuming, C::Observe(Observed::Gone(policy))) => gone(policy),

        // A new sandbox has to wait until the old one is gone.
        (S::Deleting, C::Create) => busy(),
        (S::Deleting, C::Destroy) => Ok(NoOp),
        (S::Deleting, C::DestroySucceeded) => mv(S::Destroyed),
        (S::Deleting, C::Pause | C::Resume) => illegal(),
        (S::Deleting, C::CreateSucceeded | C::PauseSucceeded | C::ResumeSucceeded) => illegal(),
        (S::Deleting, C::Fail) => mv(S::Error),
        // Still there: the kill has to be retried, which recovery does; the state stays.
        (S::Deleting, C::Observe(Observed::Running | Observed::Paused)) => Ok(NoOp),
        (S::Deleting, C::Observe(Observed::Gone(_))) => reconcile(S::Destroyed),

        (S::Destroyed, C::Create) => mv(S::Creating),
        (S::Destroyed, C::Destroy | C::DestroySucceeded) => Ok(NoOp),
        (S::Destroyed, C::Observe(Observed::Gone(_))) => Ok(NoOp),
        (S::Destroyed, C::Pause | C::Resume | C::Fail) => illegal(),
        (S::Destroyed, C::CreateSucceeded | C::PauseSucceeded | C::ResumeSucceeded) => illegal(),
        // A live sandbox for a destroyed thread is an orphan: reconciliation kills it instead.
        (S::Destroyed, C::Observe(Observed::Running | Observed::Paused)) => illegal(),

        (S::Expired, C::Create | C::Resume) => reject(RejectKind::Expired),
        (S::Expired, C::Destroy) => mv(S::Deleting),
        (S::Expired, C::Observe(Observed::Gone(_))) => Ok(NoOp),
        (S::Expired, C::Pause | C::Fail | C::DestroySucceeded) => illegal(),
        (S::Expired, C::CreateSucceeded | C::PauseSucceeded | C::ResumeSucceeded) => illegal(),
        (S::Expired, C::Observe(Observed::Running | Observed::Paused)) => illegal(),

        (S::Error, C::Create) => mv(S::Creating),
        (S::Error, C::Destroy) => mv(S::Deleting),
        (S::Error, C::Fail) => Ok(NoOp),
        (S::Error, C::Pause | C::Resume) => illegal(),
        (
            S::Error,
            C::CreateSucceeded | C::PauseSucceeded | C::ResumeSucceeded | C::DestroySucceeded,
        ) => illegal(),
        (S::Error, C::Observe(Observed::Running)) => reconcile(S::Active),
        (S::Error, C::Observe(Observed::Paused)) => reconcile(S::Paused),
        (S::Error, C::Observe(Observed::Gone(policy))) => gone(policy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Command as C;
    use Status as S;

    /// One row per state (plus "new"), one column per command in `Command::ALL` order.
    /// `cr`=Creating `ac`=Active `pg`=Pausing `pd`=Paused `rs`=Resuming `dl`=Deleting
    /// `ds`=Destroyed `ex`=Expired `er`=Error; `--` no-op; `B` busy; `X` illegal; `E` expired.
    /// Columns: Create CreateOk Pause PauseOk Resume ResumeOk Destroy DestroyOk Fail
    ///          Obs(Running) Obs(Paused) Obs(Gone,recreate) Obs(Gone,expire)
    #[rustfmt::skip]
    const TABLE: &[(Option<Status>, [&str; 13])] = &[
        //                  Crt   CrOk  Pse   PsOk  Res   RsOk  Dst   DsOk  Fail  Run   Psd   Recr  Exp
        (None,              ["cr", "X" , "X" , "X" , "X" , "X" , "X" , "X" , "X" , "X" , "X" , "X" , "X"]),
        (Some(S::Creating), ["--", "ac", "B" , "X" , "B" , "X" , "B" , "X" , "er", "X" , "X" , "X" , "X"]),
        (Some(S::Active),   ["--", "--", "pg", "X" , "--", "--", "dl", "X" , "er", "--", "pd", "cr", "ex"]),
        (Some(S::Pausing),  ["--", "X" , "--", "pd", "B" , "X" , "B" , "X" , "er", "ac", "pd", "cr", "ex"]),
        (Some(S::Paused),   ["--", "X" , "--", "--", "rs", "X" , "dl", "X" , "er", "ac", "--", "cr", "ex"]),
        (Some(S::Resuming), ["--", "X" , "B" , "X" , "--", "ac", "B" , "X" , "er", "ac", "pd", "cr", "ex"]),
        (Some(S::Deleting), ["B" , "X" , "X" , "X" , "X" , "X" , "--", "ds", "er", "--", "--", "ds", "ds"]),
        (Some(S::Destroyed),["cr", "X" , "X" , "X" , "X" , "X" , "--", "--", "X" , "X" , "X" , "--", "--"]),
        (Some(S::Expired),  ["E" , "X" , "X" , "X" , "E" , "X" , "dl", "X" , "X" , "X" , "X" , "--", "--"]),
        (Some(S::Error),    ["cr", "X" , "X" , "X" , "X" , "X" , "dl", "X" , "--", "ac", "pd", "cr", "ex"]),
    ];

    fn code(result: Result<Transition, Rejected>) -> String {
        match result {
            Ok(Transition::NoOp) => "--".into(),
            Ok(Transition::Move { to, .. }) => short(to).into(),
            Err(r) => match r.kind {
                RejectKind::Busy => "B".into(),
                RejectKind::Illegal => "X".into(),
                RejectKind::Expired => "E".into(),
            },
        }
    }

    fn short(s: Status) -> &'static str {
        match s {
            S::Creating => "cr",
            S::Active => "ac",
            S::Pausing => "pg",
            S::Paused => "pd",
            S::Resuming => "rs",
            S::Deleting => "dl",
            S::Destroyed => "ds",
            S::Expired => "ex",
            S::Error => "er",
        }
    }

    #[test]
    fn every_state_command_pair_matches_the_table() {
        assert_eq!(TABLE.len(), Status::ALL.len() + 1, "every state has a row");
        for (from, row) in TABLE {
            for (command, expected) in C::ALL.iter().zip(row.iter()) {
                let got = code(transition(*from, *command, Cause::User));
                assert_eq!(&got, expected, "{from:?} + {command:?}");
            }
        }
    }

    #[test]
    fn causes_come_from_the_caller_unless_the_change_names_its_own() {
        let mv = |from, cmd, cause| match transition(Some(from), cmd, cause).unwrap() {
            Transition::Move { cause, .. } => cause,
            Transition::NoOp => panic!("expected a move"),
        };
        assert_eq!(mv(S::Active, C::Pause, Cause::Idle), Cause::Idle);
        assert_eq!(
            mv(S::Paused, C::Destroy, Cause::Retention),
            Cause::Retention
        );
        assert_eq!(
            mv(
                S::Paused,
                C::Observe(Observed::Gone(GonePolicy::Recreate)),
                Cause::User
            ),
            Cause::Recreated
        );
        assert_eq!(
            mv(
                S::Paused,
                C::Observe(Observed::Gone(GonePolicy::Expire)),
                Cause::User
            ),
            Cause::ProviderGone
        );
        assert_eq!(
            mv(S::Active, C::Observe(Observed::Paused), Cause::User),
            Cause::Reconcile
        );
    }

    #[test]
    fn rejections_explain_themselves() {
        let err = transition(Some(S::Destroyed), C::Pause, Cause::User).unwrap_err();
        assert_eq!(err.kind, RejectKind::Illegal);
        assert!(err.to_string().contains("destroyed"), "{err}");
        let err = transition(Some(S::Expired), C::Resume, Cause::User).unwrap_err();
        assert_eq!(err.kind, RejectKind::Expired);
        assert!(err.to_string().contains("reset the thread"), "{err}");
        let err = transition(Some(S::Pausing), C::Resume, Cause::User).unwrap_err();
        assert!(err.to_string().contains("retry"), "{err}");
    }
}
