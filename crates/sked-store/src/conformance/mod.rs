//! The conformance suite: the behaviour every [`Store`] backend must have. A backend runs it
//! with [`conformance_tests!`](crate::conformance_tests), which makes one test per case, each on
//! a fresh store. A change to store behaviour comes with a case here.
//!
//! The cases live by concern: `tasks` (inserting, claiming, ending attempts), `operations`
//! (cancel, rescue, retry, reschedule, prune, list), `queues` (counts, limits, leases),
//! `schedules` (declaring, applying plans), `schedule_policies` (jitter, pausing after dead
//! runs, backfills), `ahead` (passes that plan schedules ahead of their time), `dependents`
//! (tasks that wait for tasks), `expiry` (deadlines to start), `workflows`, `scheduled_workflows`, `batches`, `observe` (activity,
//! workers), `reference` (every claim against a stateless reference) and `claimers` (several
//! stores claiming at once, which a backend runs from a test of its own); here the macro and
//! the helpers they share.

mod ahead;
mod batches;
mod bulk;
mod claimers;
mod dependents;
mod endings;
mod expiry;
mod inserts;
mod kept_stages;
mod keys;
mod observe;
mod operations;
mod queues;
mod reference;
mod schedule_policies;
mod scheduled_workflows;
mod schedules;
mod tasks;
mod unique;
mod workflows;

pub use ahead::*;
pub use batches::*;
pub use bulk::*;
pub use claimers::*;
pub use dependents::*;
pub use endings::*;
pub use expiry::*;
pub use inserts::*;
pub use kept_stages::*;
pub use keys::*;
pub use observe::*;
pub use operations::*;
pub use queues::*;
pub use reference::*;
pub use schedule_policies::*;
pub use scheduled_workflows::*;
pub use schedules::*;
pub use tasks::*;
pub use unique::*;
pub use workflows::*;

use jiff::{SignedDuration, Timestamp};
use sked_core::NewTask;

use crate::*;

/// Makes one `#[tokio::test]` per conformance case. `$make` is an async block that returns
/// `Some((store, guard))`, or `None` to skip the case (no test database configured); the
/// guard (say, a temporary directory) lives until the test ends.
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            insert_and_get, a_large_batch_answers_in_order, a_trace_context_travels_with_its_task, insert_claimed_leases_unless_held_back, unique_key_returns_the_holder, unique_key_under_concurrency, a_dedup_window_holds_the_key_for_the_window_alone, a_dedup_window_under_concurrency, a_debounced_enqueue_moves_the_waiting_task,
            claim_in_priority_order, claim_merges_queues_in_priority_order, future_tasks_wait_until_due, paused_queue_gives_nothing,
            concurrency_limit_caps_running, claim_filters_queues_and_kinds,
            a_per_key_limit_caps_each_key, a_per_key_rate_caps_each_keys_starts, keys_take_turns_across_claims, a_higher_priority_goes_first_across_keys,
            heartbeat_extends_and_rejects_stale, complete_records_result_and_attempt, a_batch_of_endings_ends_each_as_alone, each_backoff_shape_sets_the_next_run_time, a_batch_of_distinct_endings_ends_each_as_alone,
            a_batch_of_brief_endings_ends_each_as_alone, a_batch_of_distinct_brief_endings_ends_each_as_alone,
            a_batch_of_successes_alone_answers_briefly,
            fail_retries_with_backoff_until_dead, fatal_failure_is_dead_at_once,
            snooze_does_not_spend_an_attempt, release_gives_the_task_back_at_once,
            claim_with_min_priority, cancel_before_and_while_running,
            rescue_requeues_expired_and_fences_old_worker, rescue_out_of_attempts_is_dead, a_timed_out_attempt_loses_its_lease,
            retry_and_reschedule, bulk_retry_and_cancel_by_filter_in_batches, filters_by_key_and_time_and_bulk_delete, a_task_is_deleted_by_id_once_it_has_ended, run_samples_are_the_runs_that_ended, prune_removes_old_finished_tasks, prune_deletes_up_to_its_limit, prune_since_leaves_what_finished_before, list_filters, list_pages_are_bounded,
            queue_counts, a_mistyped_queue_is_refused_and_a_queue_without_tasks_is_removed, rate_limit_caps_starts_per_window, rate_and_concurrency_limits_hold_together, a_rate_burst_adds_to_one_window_not_to_the_rate, limits_hold_for_claims_at_once, a_short_rated_claim_counts_only_its_starts, leases_renew_and_take_over, schedule_crud_and_pause, schedule_list_pages_by_name_and_bytes,
            schedule_apply_is_exactly_once, schedule_buffer_release_and_replace,
            schedule_policies_are_stored_and_read_back, a_jittered_occurrence_is_due_when_its_plan_says,
            dead_runs_in_a_row_count_since_the_last_resume, a_backfill_enqueues_each_past_occurrence_once,
            schedule_sync_creates_updates_and_removes, schedule_sync_concurrently_one_copy, a_dry_run_reports_and_pruning_needs_a_group,
            runs_within_the_horizon_are_made_ahead_once, a_decision_that_needs_its_time_waits_for_the_run_or_the_time,
            edits_pauses_and_deletes_withdraw_runs_made_ahead, passes_at_once_make_each_occurrence_once,
            many_schedules_are_written_at_once_or_not_at_all, a_run_waiting_to_retry_stops_when_the_next_occurrence_is_planned, schedules_are_listed_and_counted_by_prefix_paused_and_failing,
            activity_counts_ended_work_per_bucket, workers_beat_list_and_prune, claims_agree_with_the_reference_claim,
            a_child_waits_until_every_parent_succeeded, a_failed_parent_cancels_what_waits_for_it_or_lets_it_run,
            every_way_a_parent_ends_reaches_its_children, a_new_task_starts_from_its_parents_states,
            parents_ending_at_once_release_their_child_once,
            a_parent_run_again_by_hand_counts_once, a_task_waits_exactly_while_a_parent_is_uncounted,
            stages_wait_as_their_tasks_would_alone,
            a_heartbeat_keeps_the_progress_of_the_attempt_that_holds_the_task,
            a_workflow_is_made_whole_and_runs_in_its_order, a_workflow_with_a_missing_parent_makes_nothing,
            a_workflow_fails_is_cancelled_and_goes_with_its_tasks,
            a_batch_enqueues_its_callbacks_once_when_closed_and_ended, a_failed_task_skips_on_success_and_an_empty_batch_ends_at_close,
            a_batch_grows_from_its_own_tasks_and_ends_after_the_last, batch_tasks_ending_at_once_enqueue_the_callback_once,
            a_scheduled_workflow_runs_whole_and_counts_as_one_run, a_workflow_run_made_ahead_is_withdrawn_whole, a_workflow_schedule_is_triggered_and_backfilled_whole,
            a_workflow_run_with_a_dead_task_is_a_dead_run,
            a_task_not_started_by_its_deadline_expires_and_never_runs, a_deadline_is_for_the_first_start, a_queue_keeps_each_ended_state_as_its_retention_says,
            a_deadline_that_could_never_be_met_is_refused, a_schedule_ends_after_its_most_runs_and_at_its_end,
            a_calendar_excludes_its_dates_and_stays_while_skipped,
            a_queue_backoff_times_the_retries_of_tasks_without_their_own,
            strict_order_starts_a_keys_tasks_one_after_another);
    };
    (@cases $make:expr; $($case:ident),+) => {
        $(
            #[tokio::test]
            async fn $case() {
                let Some((store, _guard)) = $make.await else {
                    return;
                };
                let store: ::std::sync::Arc<dyn $crate::Store> = ::std::sync::Arc::new(store);
                $crate::conformance::$case(&store).await;
            }
        )+
    };
}
/// A fixed start time for every case.
pub fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

pub(crate) fn at(secs: i64) -> Timestamp {
    t0().checked_add(SignedDuration::from_secs(secs)).unwrap()
}

/// Cases take a shared store so that they can hand it to spawned tasks.
pub type Shared = std::sync::Arc<dyn Store>;

pub(crate) const TTL: SignedDuration = SignedDuration::from_secs(30);

pub(crate) async fn insert(store: &Shared, task: NewTask, now: Timestamp) -> TaskInserted {
    insert_batch(store, &[task], now).await.remove(0)
}

/// Inserts `tasks` in one call; the answers in their order.
pub(crate) async fn insert_batch(
    store: &Shared,
    tasks: &[NewTask],
    now: Timestamp,
) -> Vec<TaskInserted> {
    store
        .task_insert_many(TaskInsertParams {
            tasks: tasks.iter().cloned().map(Into::into).collect(),
            now,
        })
        .await
        .unwrap()
}

pub(crate) fn task(kind: &str) -> NewTask {
    NewTask::new(kind)
}

pub(crate) async fn claim(store: &Shared, max: u32, now: Timestamp) -> Vec<sked_core::Task> {
    claim_from(store, &[], max, now).await
}

pub(crate) async fn claim_from(
    store: &Shared,
    queues: &[&str],
    max: u32,
    now: Timestamp,
) -> Vec<sked_core::Task> {
    store
        .task_claim(TaskClaimParams {
            min_priority: None,
            queues: queues.iter().map(|q| q.to_string()).collect(),
            kinds: vec![],
            max,
            worker: "w1".into(),
            lease_ttl: TTL,
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now,
        })
        .await
        .unwrap()
}

pub(crate) async fn finish(
    store: &Shared,
    id: i64,
    attempt: i32,
    outcome: FinishOutcome,
    now: Timestamp,
) -> Result<sked_core::Task> {
    store
        .task_finish_many(vec![TaskFinishParams {
            id,
            attempt,
            outcome,
            now,
            jitter: 0.5,
        }])
        .await
        .unwrap()
        .remove(0)
}

pub(crate) fn failed(retryable: bool) -> FinishOutcome {
    FinishOutcome::Failed {
        error: "boom".into(),
        retryable,
    }
}

/// A small, seeded generator (SplitMix64), so that a failing sequence can be run again; for
/// backends' tests of their own too.
pub struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
