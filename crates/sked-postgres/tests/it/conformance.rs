//! The shared conformance suite on PostgreSQL, each case in a schema of its own. Skipped
//! without `SKED_TEST_DATABASE_URL`, except under CI, where that is a failure.

sked_store::conformance_tests!(sked_postgres::testing::pooled_store());

/// The suite's cases that make workflows, with every stage that qualifies kept as one row
/// until it is released (docs/decisions/0023-tasks-made-when-released.md): what the store
/// answers must be what it answers with rows.
mod kept_stages {
    sked_store::conformance_tests!(@cases sked_postgres::testing::pooled_store_keeping_stages();
        a_workflow_is_made_whole_and_runs_in_its_order, a_workflow_with_a_missing_parent_makes_nothing,
        a_workflow_fails_is_cancelled_and_goes_with_its_tasks, stages_wait_as_their_tasks_would_alone,
        a_scheduled_workflow_runs_whole_and_counts_as_one_run, a_workflow_run_made_ahead_is_withdrawn_whole,
        a_workflow_schedule_is_triggered_and_backfilled_whole, a_workflow_run_with_a_dead_task_is_a_dead_run);
}
