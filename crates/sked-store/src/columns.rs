//! The task and schedule columns every backend reads, named once. Backends select them in this
//! order and decode a row by these names ([`TaskColumn::at`], [`ScheduleColumn::at`]), so that
//! no backend holds a list of positions of its own; each backend's tests check its task column
//! list against [`TASK_COLUMNS`], and both select schedules with [`schedule_columns`].

use crate::states::{FAILING, FINISHED};

/// A column of a task row, in the order backends select them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // Named as the columns are.
pub enum TaskColumn {
    Id,
    Queue,
    Kind,
    Payload,
    Priority,
    State,
    RunAt,
    Attempt,
    MaxAttempts,
    TimeoutMs,
    UniqueKey,
    BackoffBaseMs,
    BackoffMaxMs,
    Schedule,
    NominalAt,
    CreatedAt,
    StartedAt,
    FinishedAt,
    LeaseExpiresAt,
    Worker,
    CancelRequested,
    LastError,
    Result,
    ConcurrencyKey,
    Traceparent,
    /// A backoff of another shape than the exponential one, as its spec (see [`backoff`]).
    Backoff,
    /// Its deadline to start.
    ExpiresAt,
}

impl TaskColumn {
    /// Its position in a row selected with [`TASK_COLUMNS`].
    pub const fn at(self) -> usize {
        self as usize
    }
}

/// The column names, in order.
pub const TASK_COLUMNS: [&str; 27] = [
    "id",
    "queue",
    "kind",
    "payload",
    "priority",
    "state",
    "run_at",
    "attempt",
    "max_attempts",
    "timeout_ms",
    "unique_key",
    "backoff_base_ms",
    "backoff_max_ms",
    "schedule",
    "nominal_at",
    "created_at",
    "started_at",
    "finished_at",
    "lease_expires_at",
    "worker",
    "cancel_requested",
    "last_error",
    "result",
    "concurrency_key",
    "traceparent",
    "backoff",
    "expires_at",
];

/// How a task's backoff is stored: the exponential shape in `backoff_base_ms` and
/// `backoff_max_ms` (as SQL's `sked_enqueue` writes it too), any other as its spec in
/// `backoff`.
pub mod backoff {
    use jiff::SignedDuration;
    use sked_core::Backoff;

    /// The columns `backoff_base_ms`, `backoff_max_ms` and `backoff` of `b`.
    pub fn columns(b: Option<&Backoff>) -> (Option<i64>, Option<i64>, Option<String>) {
        let ms = |d: &SignedDuration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        match b {
            None => (None, None, None),
            Some(Backoff::Exponential { base, max }) => (Some(ms(base)), Some(ms(max)), None),
            Some(other) => (None, None, Some(other.to_string())),
        }
    }

    /// The backoff those columns hold. A spec that no longer parses (written by a later
    /// version, say) reads as none: the task retries with the default.
    pub fn from_columns(
        base_ms: Option<i64>,
        max_ms: Option<i64>,
        spec: Option<&str>,
    ) -> Option<Backoff> {
        if let Some(spec) = spec {
            return spec.parse().ok();
        }
        Some(Backoff::Exponential {
            base: SignedDuration::from_millis(base_ms?),
            max: SignedDuration::from_millis(max_ms?),
        })
    }
}

/// Whether a backend's select list (`"id, queue, …"`, optionally qualified like `t.id`, or
/// `expression AS name`) names the task columns in order.
pub fn selects_task_columns(list: &str) -> bool {
    let names: Vec<&str> = list
        .split(", ")
        .map(|c| {
            let c = c.trim();
            if let Some((_, name)) = c.rsplit_once(" AS ") {
                return name;
            }
            c.rsplit_once('.').map_or(c, |(_, name)| name)
        })
        .collect();
    names == TASK_COLUMNS
}

/// A column of a schedule row selected with [`schedule_columns`], in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleColumn {
    /// The schedule's name.
    Name,
    /// Its spec (cron expression or interval).
    Spec,
    /// Its time zone.
    Tz,
    /// The task template, as JSON.
    Task,
    /// The overlap policy.
    Overlap,
    /// The catch-up policy.
    Catchup,
    /// The catch-up window, in milliseconds.
    CatchupWindowMs,
    /// Whether it is paused.
    Paused,
    /// Where intervals count from.
    AnchorAt,
    /// Its next occurrence still to run: the first one not planned yet, or an earlier one
    /// made ahead whose task has not been staged (derived).
    NextFireAt,
    /// The occurrence held back by `buffer_one`.
    BufferedAt,
    /// When it was created.
    CreatedAt,
    /// When it was last changed.
    UpdatedAt,
    /// When its latest task started (derived from its tasks).
    LastStartedAt,
    /// When its latest finished task ended (derived).
    LastFinishedAt,
    /// Whether one of its tasks is running (derived).
    Running,
    /// How its latest finished task ended (derived).
    LastOutcome,
    /// The node that declared it, if declared in code.
    DeclaredBy,
    /// Where an interval counts from.
    IntervalFrom,
    /// The jitter, in milliseconds.
    JitterMs,
    /// The DST policy.
    Dst,
    /// Dead runs in a row that pause it.
    PauseAfterFailures,
    /// Why it paused itself.
    PausedReason,
    /// The first occurrence not planned yet.
    UnplannedFrom,
    /// Its latest run waiting to retry, as `id:attempt:max_attempts` (derived; read with
    /// [`retrying_run`]).
    RetryingRun,
    /// Whether a failed run keeps retrying past the next occurrence.
    KeepRetrying,
    /// No occurrence before this.
    StartAt,
    /// No occurrence after this.
    EndAt,
    /// The most runs it makes at its occurrences.
    MaxRuns,
    /// The runs it has made at its occurrences.
    Runs,
    /// The calendars it skips, as a JSON array (read with
    /// [`crate::rules::skip_calendars_of_column`]).
    SkipCalendars,
}

impl ScheduleColumn {
    /// Its position in a row selected with [`schedule_columns`].
    pub const fn at(self) -> usize {
        self as usize
    }

    /// The position of the first column a backend appends after these.
    pub const APPENDED: usize = ScheduleColumn::SkipCalendars as usize + 1;
}

/// The select list of a schedule row, the schedules table aliased `s`, its task figures
/// computed from `tasks_table` (the backend's name for the task table). Columns come in
/// [`ScheduleColumn`]'s order; a backend may append more after them.
pub fn schedule_columns(tasks_table: &str) -> String {
    select_list(tasks_table, Figures::All)
}

/// [`schedule_columns`] with the schedule's own columns only: no figure of its tasks (null or
/// false), the stored next fire time as the next fire time. What a write compares with.
pub fn stored_columns() -> String {
    select_list("", Figures::None)
}

/// [`schedule_columns`] as a materialising pass reads them: the figures of its last run only
/// where an interval counts from it (else null, not computed), and the stored next fire time
/// (the first occurrence not planned) as the next fire time.
pub fn planning_columns(tasks_table: &str) -> String {
    select_list(tasks_table, Figures::Planning)
}

/// Which figures of a schedule's tasks a select list computes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Figures {
    All,
    /// Those of the last run where an interval counts from it.
    Planning,
    None,
}

fn select_list(tasks_table: &str, figures: Figures) -> String {
    // A figure of the last run: computed only where it is needed.
    let run = |sql: String, otherwise: &str| match figures {
        Figures::All => sql,
        Figures::Planning => {
            format!("CASE WHEN s.interval_from = 'fixed' THEN {otherwise} ELSE {sql} END")
        }
        Figures::None => otherwise.to_string(),
    };
    // Typed nulls: PostgreSQL decodes a column by its type (SQLite ignores the cast).
    let latest_finished = |column: &str, null: &str| {
        run(
            format!(
                "(SELECT {column} FROM {tasks_table} t WHERE t.schedule = s.name AND t.state IN {FINISHED} \
                 AND {ended} ORDER BY t.id DESC LIMIT 1)",
                ended = run_ended(tasks_table, "t"),
            ),
            null,
        )
    };
    // The earliest run made ahead and not staged yet, if it comes before the first occurrence
    // not planned. Its partial index holds a schedule's unfinished tasks only.
    let made = "min(t.nominal_at)";
    let next_fire = match figures {
        Figures::Planning | Figures::None => "s.next_fire_at".to_string(),
        Figures::All => format!(
            "(SELECT coalesce(CASE WHEN {made} < s.next_fire_at THEN {made} END, s.next_fire_at, {made}) \
               FROM {tasks_table} t WHERE t.schedule = s.name AND t.state = 'scheduled' AND t.attempt = 0 \
               AND {active})",
            active = crate::states::ACTIVE_ANY,
        ),
    };
    let started = run(
        format!(
            "(SELECT started_at FROM {tasks_table} t WHERE t.schedule = s.name AND t.started_at IS NOT NULL \
               ORDER BY t.id DESC LIMIT 1)"
        ),
        "CAST(NULL AS timestamptz)",
    );
    let retrying = match figures {
        Figures::All => format!(
            "(SELECT t.id || ':' || t.attempt || ':' || t.max_attempts FROM {tasks_table} t \
               WHERE t.schedule = s.name AND t.state = 'retrying' ORDER BY t.id DESC LIMIT 1)"
        ),
        Figures::Planning | Figures::None => "CAST(NULL AS text)".to_string(),
    };
    let running = run(
        format!(
            "EXISTS (SELECT 1 FROM {tasks_table} t WHERE t.schedule = s.name AND t.state = 'running')"
        ),
        "false",
    );
    format!(
        "s.name, s.spec, s.tz, s.task, s.overlap, s.catchup, s.catchup_window_ms, s.paused, \
         s.anchor_at, {next_fire}, s.buffered_at, s.created_at, s.updated_at, \
         {started}, {}, {running}, {}, \
         s.declared_by, s.interval_from, s.jitter_ms, s.dst, s.pause_after_failures, s.paused_reason, \
         s.next_fire_at, {retrying}, s.keep_retrying, s.start_at, s.end_at, s.max_runs, s.runs, \
         s.skip_calendars",
        latest_finished("finished_at", "CAST(NULL AS timestamptz)"),
        latest_finished(&run_outcome(tasks_table, "t"), "CAST(NULL AS text)"),
    )
}

/// The [`ScheduleColumn::RetryingRun`] column read: `None` when null; an error when it is not
/// `id:attempt:max_attempts`.
pub fn retrying_run(v: Option<&str>) -> Result<Option<crate::RetryingRun>, String> {
    let Some(v) = v else { return Ok(None) };
    let bad = || format!("not a retrying run: {v:?}");
    let mut parts = v
        .splitn(3, ':')
        .map(|p| p.parse::<i64>().map_err(|_| bad()));
    let (Some(id), Some(attempt), Some(max)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    Ok(Some(crate::RetryingRun {
        task_id: id?,
        attempt: i32::try_from(attempt?).map_err(|_| bad())?,
        max_attempts: i32::try_from(max?).map_err(|_| bad())?,
    }))
}

/// A value a [`schedule_filter`] condition compares with, in the order of its placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterValue {
    Text(String),
    Bool(bool),
}

/// The conditions of a [`crate::ScheduleFilter`] on the schedules table aliased `s`, each
/// starting with ` AND `, and the values of their placeholders, numbered by `placeholder` from
/// `first`. A prefix is a range of `name_bytes`, the backend's expression of the name in the
/// order of its bytes (the order pages are in), so that an index on it finds the page; failing
/// schedules are looked for among those with a dead or retrying task.
pub fn schedule_filter(
    f: &crate::ScheduleFilter,
    tasks_table: &str,
    name_bytes: &str,
    placeholder: impl Fn(usize) -> String,
    first: usize,
) -> (String, Vec<FilterValue>) {
    let mut sql = String::new();
    let mut values = Vec::new();
    let mut next = |v: FilterValue| {
        values.push(v);
        placeholder(first + values.len() - 1)
    };
    if let Some(p) = f.prefix.as_deref().filter(|p| !p.is_empty()) {
        let from = next(FilterValue::Text(p.into()));
        sql.push_str(&format!(" AND {name_bytes} >= {from}"));
        if let Some(upper) = crate::rules::prefix_end(p) {
            let upper = next(FilterValue::Text(upper));
            sql.push_str(&format!(" AND {name_bytes} < {upper}"));
        }
    }
    if let Some(paused) = f.paused {
        sql.push_str(&format!(
            " AND s.paused = {}",
            next(FilterValue::Bool(paused))
        ));
    }
    if f.failing {
        sql.push_str(&format!(
            " AND s.name IN (SELECT t.schedule FROM {tasks_table} t WHERE t.state IN {FAILING} \
               AND t.schedule IS NOT NULL) \
             AND (EXISTS (SELECT 1 FROM {tasks_table} t WHERE t.schedule = s.name AND t.state = 'retrying') \
               OR (SELECT {outcome} FROM {tasks_table} t WHERE t.schedule = s.name AND t.state IN {FINISHED} \
                   AND {ended} ORDER BY t.id DESC LIMIT 1) = 'dead')",
            outcome = run_outcome(tasks_table, "t"),
            ended = run_ended(tasks_table, "t"),
        ));
    }
    (sql, values)
}

/// For a schedule with `pause_after_failures`: how many of its runs in a row, since it was
/// last resumed, ended dead (those after the latest run that ended otherwise). A run is the
/// tasks of one occurrence (a workflow's, or one task): it ended dead when one of them died,
/// and ended otherwise when none is unfinished and none died. Selected beside
/// [`schedule_columns`] where schedules fall due; 0 for a schedule without the policy.
pub fn dead_runs(tasks_table: &str) -> String {
    format!(
        "CASE WHEN s.pause_after_failures IS NULL THEN 0 ELSE \
           (SELECT count(DISTINCT t.nominal_at) FROM {tasks_table} t WHERE t.schedule = s.name \
              AND t.state = 'dead' AND (s.resumed_at IS NULL OR t.created_at >= s.resumed_at) \
              AND t.id > coalesce((SELECT max(u.id) FROM {tasks_table} u WHERE u.schedule = s.name \
                AND u.state IN {FINISHED} AND u.state <> 'dead' AND {ended} AND NOT {died}), 0)) END",
        ended = run_ended(tasks_table, "u"),
        died = run_died(tasks_table, "u"),
    )
}

/// Whether the run of the schedule's task aliased `t` has ended: no task of its occurrence
/// is unfinished (probing the schedule's few unfinished tasks).
fn run_ended(tasks_table: &str, t: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM {tasks_table} a WHERE a.schedule = s.name \
           AND a.nominal_at = {t}.nominal_at AND {active})",
        active = crate::states::ACTIVE_ANY,
    )
}

/// Whether a task of the run of the task aliased `t` died (probing the schedule's few dead
/// tasks).
fn run_died(tasks_table: &str, t: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM {tasks_table} d WHERE d.schedule = s.name \
           AND d.nominal_at = {t}.nominal_at AND d.state = 'dead')"
    )
}

/// How the run of the finished task aliased `t` ended: dead when one of its tasks died (a
/// workflow's dependents are then cancelled after it), else as `t` did.
fn run_outcome(tasks_table: &str, t: &str) -> String {
    format!(
        "CASE WHEN {t}.state <> 'dead' AND {died} THEN 'dead' ELSE {t}.state END",
        died = run_died(tasks_table, t),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retrying_run_is_read_back() {
        let run = retrying_run(Some("42:3:25")).unwrap().unwrap();
        assert_eq!((run.task_id, run.attempt, run.max_attempts), (42, 3, 25));
        assert_eq!(retrying_run(None).unwrap(), None);
        for bad in ["", "42", "42:3", "a:b:c", "1:99999999999:2"] {
            assert!(retrying_run(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn positions_follow_the_names() {
        assert_eq!(TASK_COLUMNS[TaskColumn::Id.at()], "id");
        assert_eq!(
            TASK_COLUMNS[TaskColumn::BackoffMaxMs.at()],
            "backoff_max_ms"
        );
        assert_eq!(TASK_COLUMNS[TaskColumn::Result.at()], "result");
        assert_eq!(TASK_COLUMNS[TaskColumn::Traceparent.at()], "traceparent");
        assert_eq!(TaskColumn::ExpiresAt.at() + 1, TASK_COLUMNS.len());
        assert!(selects_task_columns(&TASK_COLUMNS.join(", ")));
        assert!(!selects_task_columns("id, kind, queue"));
    }

    #[test]
    fn schedule_positions_follow_the_select_list() {
        let list = schedule_columns("tasks");
        // Split on the commas between top-level items only.
        let (mut depth, mut items, mut item) = (0, Vec::new(), String::new());
        for ch in list.chars() {
            match ch {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut item).trim().to_string());
                    continue;
                }
                _ => {}
            }
            item.push(ch);
        }
        items.push(item.trim().to_string());
        assert_eq!(items.len(), ScheduleColumn::APPENDED);
        assert_eq!(items[ScheduleColumn::Name.at()], "s.name");
        assert_eq!(items[ScheduleColumn::UpdatedAt.at()], "s.updated_at");
        assert!(items[ScheduleColumn::LastStartedAt.at()].starts_with("(SELECT started_at"));
        assert!(items[ScheduleColumn::LastFinishedAt.at()].starts_with("(SELECT finished_at"));
        assert!(items[ScheduleColumn::Running.at()].starts_with("EXISTS"));
        assert!(items[ScheduleColumn::LastOutcome.at()].starts_with("(SELECT CASE WHEN t.state"));
        assert_eq!(items[ScheduleColumn::DeclaredBy.at()], "s.declared_by");
        assert_eq!(items[ScheduleColumn::IntervalFrom.at()], "s.interval_from");
        assert_eq!(items[ScheduleColumn::PausedReason.at()], "s.paused_reason");
        assert!(items[ScheduleColumn::NextFireAt.at()].contains("min(t.nominal_at)"));
        assert_eq!(items[ScheduleColumn::UnplannedFrom.at()], "s.next_fire_at");
        assert!(items[ScheduleColumn::RetryingRun.at()].contains("t.state = 'retrying'"));
        let planning = planning_columns("tasks");
        assert!(
            planning.contains(
                "CASE WHEN s.interval_from = 'fixed' THEN CAST(NULL AS timestamptz) ELSE (SELECT started_at"
            )
        );
        assert!(!planning.contains("min(t.nominal_at)"));
        // A write compares with the schedule's own columns: no task is read.
        let stored = stored_columns();
        assert!(
            !stored.contains("SELECT") && !stored.contains("tasks"),
            "{stored}"
        );
    }
}
