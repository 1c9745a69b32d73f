//! sked's pure domain: tasks and their transitions, retry policy, schedules (cron, interval,
//! once) with overlap and catch-up planning, durations and the injected clock. No I/O, no async.

mod backoff;
mod batch;
mod builtin;
mod clock;
mod duration;
mod error;
mod new_task;
#[cfg(feature = "openapi")]
pub mod openapi;
mod rate;
mod retry;
pub mod schedule;
pub mod serde_duration;
mod task;
mod trace_context;
mod workflow;

pub use backoff::{Backoff, MAX_BACKOFF_STEPS};
pub use batch::{BatchId, NewBatch, callback_payload};
pub use builtin::{HttpPayload, ShellCommand, ShellPayload, check_builtin_payload};
pub use clock::{Clock, ManualClock, SystemClock};
pub use duration::{MAX_DURATION, check_duration, format_duration, parse_duration, parse_time};
pub use error::SpecError;
pub use rate::{MAX_RATE_BURST, MAX_RATE_PERIOD, RateLimit, Room};
pub use retry::RetryPolicy;
pub use schedule::plan::{
    ActiveTask, Ahead, DEFAULT_CATCHUP_LIMIT, LastRun, OccurrenceOutcome, Plan, PlanInput,
    PlannedOccurrence, plan_ahead, runs_of,
};
pub use schedule::{
    Bounds, Calendar, CalendarDef, CatchupPolicy, CronExpr, DEFAULT_CATCHUP_WINDOW, DstPolicy,
    IntervalFrom, MAX_CALENDAR_DATES, MAX_RUNS, MAX_SKIP_CALENDARS, OverlapPolicy, RunTemplate,
    ScheduleDef, Spec, TaskTemplate, check_skip_calendars, jitter_offset, parse_dates, parse_zone,
};
pub use task::{
    Attempt, DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, MAX_KEY_CHARS, MAX_PARENTS, MAX_PAYLOAD_BYTES,
    MAX_PROGRESS_BYTES, NewTask, ParentFailure, Task, TaskId, TaskState, TaskWorkflow, Transition,
    TransitionError, check_parents, check_payload_size, check_progress, state_after_failure,
    validate_name,
};

pub use trace_context::{check_traceparent, format_traceparent, parse_traceparent};
pub use workflow::{
    IndexLists, MAX_WORKFLOW_EDGES, MAX_WORKFLOW_TASKS, NewWorkflow, WorkflowId, WorkflowTask,
};

// Re-exported so users of sked-core name the same time types.
pub use jiff;
