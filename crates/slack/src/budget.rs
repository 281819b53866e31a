//! What a thread is told when a budget refuses its work (`usecases::budget`): which budget, how
//! much of it, that nothing was lost, and when it resets.

use super::format::escape;
use threadbox_core::domain::{BudgetExceeded, BudgetScope, Budgeted};

/// The reply to a message a budget refused.
pub fn budget_reply(exceeded: &BudgetExceeded) -> String {
    let resets = exceeded.resets_in_words();
    match exceeded {
        BudgetExceeded::Compute {
            who,
            used_vcpu_secs,
            limit_vcpu_secs,
            ..
        } => {
            let whose = match who {
                Budgeted::Thread(_) => "this thread's".to_owned(),
                Budgeted::Scope(BudgetScope::SlackTeam(_)) => "this workspace's".to_owned(),
                Budgeted::Scope(scope) => format!("{}'s", escape(&scope.to_string())),
            };
            format!(
                ":money_with_wings: Not run: {whose} compute budget for today is used \
                 ({used_vcpu_secs} of {limit_vcpu_secs} vCPU-seconds). The sandbox is paused \
                 with its files kept; commands run again after the budget resets at {resets}."
            )
        }
        BudgetExceeded::Creates { scope, limit, .. } => {
            let who = match scope {
                BudgetScope::SlackTeam(_) => "This workspace".to_owned(),
                other => escape(&other.to_string()),
            };
            format!(
                ":no_entry: Not run: {who} has created its {limit} new sandboxes for this hour, \
                 so none was created for this thread. Send it again after {resets}."
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::domain::{day_of, hour_of, Millis, ThreadId};

    /// 2026-11-01T22:30:00Z.
    const NOW: Millis = Millis(1_793_491_200_000 + 22 * 3_600_000 + 30 * 60_000);

    #[test]
    fn replies_name_the_budget_the_unit_and_the_reset() {
        let thread_id = ThreadId::parse("slack:T1:C1:1.1").unwrap();
        let compute = budget_reply(&BudgetExceeded::Compute {
            who: Budgeted::Thread(thread_id.clone()),
            thread_id: thread_id.clone(),
            used_vcpu_secs: 3_601,
            limit_vcpu_secs: 3_600,
            now: NOW,
            resets_at: day_of(NOW).1,
        });
        assert_eq!(
            compute,
            ":money_with_wings: Not run: this thread's compute budget for today is used (3601 \
             of 3600 vCPU-seconds). The sandbox is paused with its files kept; commands run \
             again after the budget resets at 00:00 UTC (in 1 h 30 min)."
        );
        let creates = budget_reply(&BudgetExceeded::Creates {
            scope: BudgetScope::SlackTeam("T1".into()),
            thread_id,
            limit: 3,
            now: NOW,
            resets_at: hour_of(NOW).1,
        });
        assert_eq!(
            creates,
            ":no_entry: Not run: This workspace has created its 3 new sandboxes for this hour, \
             so none was created for this thread. Send it again after 23:00 UTC (in 30 min)."
        );
    }
}
