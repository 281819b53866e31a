//! One `#[tokio::test]` per conformance function, for any backend, from one list.
//!
//! A backend's test file names a constructor `async fn(test_name: &str) -> Option<B>` (where `B`
//! has `store` and `events` fields; `None` skips, for backends that need a server) and invokes
//! the macros. Adding a function to a suite adds it here once, and every backend runs it.

/// Every function of `store_conformance`.
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:path) => {
        $crate::store_conformance_tests!(@each $make,
            insert_then_load_round_trips,
            an_image_round_trips_with_its_change,
            second_insert_conflicts_and_changes_nothing,
            save_writes_session_and_events_together,
            stale_save_conflicts_and_writes_nothing,
            a_duplicate_event_id_fails_the_whole_write,
            exactly_one_of_many_concurrent_saves_wins,
            due_reads_only_due_rows_of_a_shard_in_pages,
            events_after_and_outbox,
            list_pages_through_every_session,
        );
    };
    (@each $make:path, $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some(backend) = $make(stringify!($name)).await else { return };
            $crate::store_conformance::$name(backend.store.clone()).await;
        }
    )*};
}

/// Retention by the janitor (`SessionStore::purge_retired`), for stores that delete retired
/// threads themselves. DynamoDB expires them with TTL attributes instead, so it does not run
/// these; its TTL values are tested in the AWS backend's own tests.
#[macro_export]
macro_rules! store_purge_tests {
    ($make:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn purge_spares_live_recent_and_undelivered_threads() {
            let Some(backend) = $make("purge_spares_live_recent_and_undelivered_threads").await else {
                return;
            };
            $crate::store_conformance::purge_spares_live_recent_and_undelivered_threads(
                backend.store.clone(),
            )
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn retention_deletes_old_destroyed_threads_and_keeps_the_rest() {
            let Some(backend) = $make("retention_deletes_old_destroyed_threads_and_keeps_the_rest").await else {
                return;
            };
            $crate::lifecycle_conformance::retention_deletes_old_destroyed_threads_and_keeps_the_rest(
                backend.store.clone(),
                backend.events.clone(),
            )
            .await;
        }
    };
}

/// Every function of `lifecycle_conformance`.
#[macro_export]
macro_rules! lifecycle_conformance_tests {
    ($make:path) => {
        $crate::lifecycle_conformance_tests!(@each $make,
            concurrent_resolves_create_exactly_one_sandbox,
            resolve_racing_retention_never_points_at_a_killed_sandbox,
            an_aborted_create_leaves_an_orphan_the_next_sweep_kills,
            every_change_yields_one_event_with_gapless_sequence,
            unsent_events_are_redriven_by_the_janitor,
            idle_pause_respects_state_and_holds,
            the_janitor_never_acts_on_a_stale_read,
            a_running_command_is_never_paused,
            resolve_resumes_a_paused_sandbox,
            a_command_to_a_paused_thread_resumes_it_in_the_same_call,
            a_gone_sandbox_is_recreated_and_the_event_says_so,
            illegal_commands_are_refused_and_change_nothing,
            retention_destroys_and_the_next_resolve_starts_fresh,
            stuck_transitions_and_drift_are_reconciled,
            the_sweep_stops_at_its_deadline,
            a_failed_create_is_an_error_event_not_a_stuck_record,
            a_command_on_a_sandbox_paused_behind_our_back_resumes_it,
        );

        $crate::lifecycle_conformance_tests!(@handoff $make,
            a_parallel_sweep_claims_only_what_it_read,
            a_handed_off_pause_runs_exactly_once,
        );

        /// Needs its own configuration (the expire policy), so it builds its own harness.
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn a_gone_sandbox_expires_the_thread_under_the_expire_policy() {
            let Some(backend) = $make("a_gone_sandbox_expires_the_thread_under_the_expire_policy").await else {
                return;
            };
            $crate::lifecycle_conformance::a_gone_sandbox_expires_the_thread_under_the_expire_policy(
                backend.store.clone(),
                backend.events.clone(),
            )
            .await;
        }
    };
    // The janitor handing its claims to the backend's transition queue.
    (@handoff $make:path, $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some(backend) = $make(stringify!($name)).await else { return };
            $crate::lifecycle_conformance::$name(
                backend.store.clone(),
                backend.events.clone(),
                backend.transitions.clone(),
            )
            .await;
        }
    )*};
    (@each $make:path, $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some(backend) = $make(stringify!($name)).await else { return };
            $crate::lifecycle_conformance::$name(
                $crate::lifecycle_conformance::Harness::new(
                    backend.store.clone(),
                    backend.events.clone(),
                ),
            )
            .await;
        }
    )*};
}

/// Every function of `budget_conformance`; `$make(test_name)` gives the store, the lifecycle
/// queue and the window counter to test with, and whatever must live as long as the test, or
/// `None` to skip: `Option<(Arc<dyn SessionStore>, Arc<dyn DurableQueue>, Arc<dyn WindowCounter>,
/// impl Any)>`.
#[macro_export]
macro_rules! budget_conformance_tests {
    ($make:path) => {
        $crate::budget_conformance_tests!(@each $make,
            a_create_storm_past_the_cap_creates_exactly_the_cap,
            slots_taken_by_a_lost_race_are_given_back,
            a_thread_over_its_compute_budget_is_paused_and_kept,
            a_scope_over_its_compute_budget_pauses_its_threads,
            an_api_key_is_a_scope_of_its_own,
            without_budgets_nothing_changes,
        );
    };
    (@each $make:path, $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some((store, events, counter, _keep)) = $make(stringify!($name)).await else {
                return;
            };
            $crate::budget_conformance::$name(store, events, counter).await;
        }
    )*};
}

/// Every function of `warm_pool_conformance`; `$make(test_name)` gives the session store, the
/// same backend's warm pool store and the lifecycle queue, and whatever must live as long as the
/// test, or `None` to skip: `Option<(Arc<dyn SessionStore>, Arc<dyn WarmPoolStore>,
/// Arc<dyn DurableQueue>, impl Any)>`.
#[macro_export]
macro_rules! warm_pool_conformance_tests {
    ($make:path) => {
        $crate::warm_pool_conformance_tests!(@each $make,
            a_new_thread_takes_a_ready_member_and_the_pool_refills,
            a_thread_on_an_image_takes_only_a_member_of_that_image,
            sixty_four_new_threads_never_share_a_member,
            old_and_lost_members_are_replaced_and_size_zero_drains,
            reconciliation_knows_members_from_orphans,
            a_lost_members_record_goes_with_its_replacement,
            a_retire_racing_claims_never_kills_a_taken_member,
        );
    };
    (@each $make:path, $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some((store, pool, events, _keep)) = $make(stringify!($name)).await else {
                return;
            };
            $crate::warm_pool_conformance::$name(store, pool, events).await;
        }
    )*};
}

/// Every function of `window_counter_conformance`; `$make(test_name)` gives the counter to test
/// and whatever must live as long as the test (a temporary directory), or `None` to skip:
/// `Option<(Arc<dyn WindowCounter>, impl Any)>`.
#[macro_export]
macro_rules! window_counter_conformance_tests {
    ($make:path) => {
        $crate::window_counter_conformance_tests!(@each $make,
            counts_start_at_one_and_each_key_counts_alone,
            concurrent_increments_each_get_their_own_number,
            capped_takes_give_exactly_the_cap_and_refusals_cost_nothing,
            adds_total_and_never_go_below_zero,
            raises_rise_by_each_unit_once,
        );
    };
    (@each $make:path, $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some((counter, _keep)) = $make(stringify!($name)).await else { return };
            $crate::window_counter_conformance::$name(counter).await;
        }
    )*};
}

/// Every function of `provider_conformance`, one test each, by capability: `lifecycle`
/// (create, list, pause and connect, timeouts, kill), `files` and `exec` (which needs a real
/// shell in the sandbox). `$make` is an async fn taking the test's name and returning
/// `Option<(keep, Arc<dyn SandboxProvider>)>`: `None` skips the test (what it needs is missing
/// here), and `keep` (a fake, a fixture) lives as long as the test.
#[macro_export]
macro_rules! provider_conformance_tests {
    ($make:path) => {
        $crate::provider_conformance_tests!($make; lifecycle, files, exec, processes);
    };
    ($make:path; $($group:ident),+ $(,)?) => {
        $( $crate::provider_conformance_tests!(@group $make; $group); )+
    };
    (@group $make:path; lifecycle) => {
        $crate::provider_conformance_tests!(@tests $make;
            create_reports_running_with_owner_metadata,
            list_filters_by_metadata,
            pause_and_connect,
            set_timeout_moves_the_deadline,
            kill_makes_everything_gone,
        );
    };
    (@group $make:path; files) => {
        $crate::provider_conformance_tests!(@tests $make;
            files_round_trip,
            files_search,
            file_paths_with_dotdot_are_refused,
            a_missing_path_is_not_found,
            uploads_reach_home_and_tmp_and_failures_leave_nothing,
        );
    };
    (@group $make:path; exec) => {
        $crate::provider_conformance_tests!(@tests $make;
            exec_shell_and_argv,
            exec_streaming_hands_over_the_output,
            exec_streaming_delivers_output_before_the_end,
            exec_stdin_env_and_cwd,
            exec_timeout_and_output_cap,
            files_and_commands_share_the_sandbox,
        );
    };
    (@group $make:path; processes) => {
        $crate::provider_conformance_tests!(@tests $make;
            processes_outlive_the_call_take_input_and_end_with_their_status,
            processes_are_followed_and_signalled,
            process_output_is_a_bounded_ring_and_ptys_are_terminals,
            process_output_keeps_stdout_and_stderr_apart,
            tampered_process_records_are_refused_not_trusted,
        );
    };
    (@tests $make:path; $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some((_keep, provider)) = $make(stringify!($name)).await else {
                return;
            };
            $crate::provider_conformance::$name(provider.as_ref()).await;
        }
    )*};
}

/// Every function of `subscription_conformance`; `$make(test_name)` gives the store to test and
/// whatever must live as long as the test (a temporary directory), or `None` to skip:
/// `Option<(Arc<dyn SubscriptionStore>, impl Any)>`.
#[macro_export]
macro_rules! subscription_conformance_tests {
    ($make:path) => {
        $crate::subscription_conformance_tests!(@each $make,
            connections_are_recorded_and_removed_with_their_subscriptions,
            subscribe_needs_a_connection_and_resubscribing_moves_the_position,
            subscribers_are_found_by_thread,
            advance_is_a_compare_and_set,
            advance_many_moves_only_the_named_and_up_to_date,
            concurrent_advances_have_one_winner,
            reusing_a_connection_id_starts_clean,
        );
    };
    (@each $make:path, $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some((store, _keep)) = $make(stringify!($name)).await else { return };
            $crate::subscription_conformance::$name(store).await;
        }
    )*};
}

/// Every function of `checkpoint_conformance`. `$make` is an async fn taking the test's name
/// and returning `Option<(Arc<dyn CheckpointStore>, keep)>`.
#[macro_export]
macro_rules! checkpoint_conformance_tests {
    ($make:path) => {
        $crate::checkpoint_conformance_tests!(@each $make,
            records_round_trip_newest_first_per_thread,
            equal_times_are_ordered_by_id,
            retention_keeps_the_last_n_oldest_dropped_first,
            retention_keeps_within_the_byte_cap,
            remove_forgets_one_and_answers_what_it_removed,
            concurrent_adds_all_land,
        );
    };
    (@each $make:path, $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some((store, _keep)) = $make(stringify!($name)).await else { return };
            $crate::checkpoint_conformance::$name(store).await;
        }
    )*};
}
