//! Ending attempts: the row changes and attempt history lines that finishing and rescuing
//! write, each as one statement over parallel arrays, and the announcements that follow.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use deadpool_postgres::{Object, Transaction};
use jiff::Timestamp;
use sked_core::{Task, TaskId, TaskState, Transition};
use sked_store::*;
use tokio_postgres::GenericClient;

use super::claim::positions::Key;
use super::dependents::Released;
use super::faster_statement::PlanChoice;
use crate::codec::{TASK_COLUMNS, col, db_err, task_from_row, tasks_from_rows};

/// How many columns [`TASK_COLUMNS`] names: a column selected after them is at this index.
const TASK_COLUMN_COUNT: usize = sked_store::columns::TASK_COLUMNS.len();
use crate::listen::notify_tasks_sql;

/// Attempt history lines, as parallel arrays.
#[derive(Default)]
pub(super) struct AttemptRows {
    task_id: Vec<TaskId>,
    attempt: Vec<i32>,
    worker: Vec<String>,
    started_at: Vec<Timestamp>,
    finished_at: Vec<Timestamp>,
    outcome: Vec<String>,
    error: Vec<Option<String>>,
}

impl AttemptRows {
    pub(super) fn push(
        &mut self,
        task: &Task,
        outcome: &str,
        error: Option<&str>,
        finished_at: Timestamp,
    ) {
        self.task_id.push(task.id);
        self.attempt.push(task.attempt);
        self.worker.push(task.worker.clone().unwrap_or_default());
        self.started_at.push(task.started_at.unwrap_or(finished_at));
        self.finished_at.push(finished_at);
        self.outcome.push(outcome.to_string());
        self.error.push(error.map(str::to_string));
    }

    pub(super) async fn insert(&self, tx: &Transaction<'_>) -> Result<()> {
        if self.task_id.is_empty() {
            return Ok(());
        }
        let stmt = tx
            .prepare_cached(
                "INSERT INTO sked_task_attempts (task_id, attempt, worker, started_at, finished_at, outcome, error) \
                 SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::timestamptz[], \
                   $5::timestamptz[], $6::text[], $7::text[]) \
                 ON CONFLICT (task_id, attempt) DO UPDATE SET worker = excluded.worker, \
                   started_at = excluded.started_at, finished_at = excluded.finished_at, \
                   outcome = excluded.outcome, error = excluded.error",
            )
            .await
            .map_err(db_err)?;
        tx.execute(
            &stmt,
            &[
                &self.task_id,
                &self.attempt,
                &self.worker,
                &self.started_at,
                &self.finished_at,
                &self.outcome,
                &self.error,
            ],
        )
        .await
        .map_err(db_err)?;
        Ok(())
    }
}

/// New values of changed task rows, as parallel arrays, written with one statement.
#[derive(Default)]
struct RowChanges {
    id: Vec<TaskId>,
    state: Vec<String>,
    run_at: Vec<Timestamp>,
    max_attempts: Vec<i32>,
    finished_at: Vec<Option<Timestamp>>,
    last_error: Vec<Option<String>>,
    result: Vec<Option<serde_json::Value>>,
    /// The first claim-order position among tasks left waiting or available (the highest
    /// priority, the earliest run time), for the announcement.
    first: Option<Key>,
    /// When the first of the tasks left waiting is due, for the announcement.
    waiting: Option<Timestamp>,
    /// A task of a schedule changed state.
    schedules: bool,
}

impl RowChanges {
    fn push(&mut self, after: &Task) {
        self.id.push(after.id);
        self.state.push(after.state.as_str().to_string());
        self.run_at.push(after.run_at);
        self.max_attempts.push(after.max_attempts);
        self.finished_at.push(after.finished_at);
        self.last_error.push(after.last_error.clone());
        self.result.push(after.result.clone());
        if !after.state.is_finished() {
            let this = Key::before(after.priority, after.run_at);
            self.first = Some(self.first.map_or(this, |k| k.covering(this)));
        }
        if after.state.is_timed() {
            self.waiting = Some(self.waiting.map_or(after.run_at, |w| w.min(after.run_at)));
        }
        self.schedules |= after.schedule.is_some();
    }

    /// Writes the changes (rows must be locked by the caller) and announces them.
    async fn write(&self, tx: &Transaction<'_>, channel: &str) -> Result<()> {
        if self.id.is_empty() {
            return Ok(());
        }
        let stmt = tx
            .prepare_cached(
                "UPDATE sked_tasks t SET state = u.state, run_at = u.run_at, \
                   max_attempts = u.max_attempts, finished_at = u.finished_at, \
                   last_error = u.last_error, result = u.result, lease_expires_at = NULL \
                 FROM unnest($1::bigint[], $2::text[], $3::timestamptz[], $4::int[], \
                   $5::timestamptz[], $6::text[], $7::jsonb[]) \
                   AS u(id, state, run_at, max_attempts, finished_at, last_error, result) \
                 WHERE t.id = u.id",
            )
            .await
            .map_err(db_err)?;
        tx.execute(
            &stmt,
            &[
                &self.id,
                &self.state,
                &self.run_at,
                &self.max_attempts,
                &self.finished_at,
                &self.last_error,
                &self.result,
            ],
        )
        .await
        .map_err(db_err)?;
        if let Some(first) = self.first {
            announce_tasks(&**tx, channel, Some(first), self.waiting).await?;
        }
        if self.schedules {
            announce_schedules(&**tx, channel).await?;
        }
        Ok(())
    }
}

/// Announces tasks that may be claimable from `first` on (their first claim-order position;
/// `None`: anywhere), and when the first of them that waits is due.
pub(crate) async fn announce_tasks<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    first: Option<Key>,
    waiting: Option<Timestamp>,
) -> Result<()> {
    let (run_at, priority) = (first.map(|k| k.run_at), first.map(|k| k.priority));
    c.execute(
        &format!(
            "SELECT {}",
            notify_tasks_sql("$2::timestamptz", "$3::int", "$4::timestamptz")
        ),
        &[&channel, &run_at, &priority, &waiting],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

pub(crate) async fn announce_schedules<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
) -> Result<()> {
    c.execute("SELECT pg_notify($1, 's')", &[&channel])
        .await
        .map_err(db_err)?;
    Ok(())
}

/// Announces that room may have freed under a concurrency or per-key limit, when one of
/// `queues` (where attempts ended) is claimed under its row's lock.
pub(crate) async fn announce_room(c: &Object, channel: &str, queues: &Vec<String>) -> Result<()> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT pg_notify($1, 'r') WHERE EXISTS (SELECT 1 FROM sked_queues q \
               WHERE q.name = ANY($2) AND {} AND NOT {})",
            sked_store::keyed::LIMITED,
            super::claim::rated::RATE_ONLY
        ))
        .await
        .map_err(db_err)?;
    c.execute(&stmt, &[&channel, queues])
        .await
        .map_err(db_err)?;
    Ok(())
}

/// The rows of `ids`, locked, and which of them have children.
async fn lock_rows(
    tx: &Transaction<'_>,
    ids: &[TaskId],
) -> Result<(HashMap<TaskId, Task>, HashSet<TaskId>)> {
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS}, t.has_children FROM sked_tasks t WHERE t.id = ANY($1) \
             ORDER BY t.id FOR UPDATE"
        ))
        .await
        .map_err(db_err)?;
    let rows = tx.query(&stmt, &[&ids]).await.map_err(db_err)?;
    let mut tasks = HashMap::with_capacity(rows.len());
    let mut parents = HashSet::new();
    for r in &rows {
        let t = task_from_row(r)?;
        if col::<bool>(r, TASK_COLUMN_COUNT)? {
            parents.insert(t.id);
        }
        tasks.insert(t.id, t);
    }
    Ok((tasks, parents))
}

/// Ends attempts; with what the ends released for the tasks waiting for them.
pub(crate) async fn finish_many(
    c: &mut Object,
    channel: &str,
    ps: &[TaskFinishParams],
    plans: &PlanChoice,
) -> Result<(Vec<Result<Task>>, Released)> {
    if ps.is_empty() {
        return Ok((Vec::new(), Released::new()));
    }
    if let Some(successes) = Successes::of(ps) {
        return successes.write::<Task>(c, channel, plans).await;
    }
    finish_locked(c, channel, ps).await
}

/// Ends attempts with their rows locked first, in one transaction, with what the ends do to
/// the tasks waiting for them.
async fn finish_locked(
    c: &mut Object,
    channel: &str,
    ps: &[TaskFinishParams],
) -> Result<(Vec<Result<Task>>, Released)> {
    let tx = c.transaction().await.map_err(db_err)?;
    let ids: Vec<TaskId> = ps.iter().map(|p| p.id).collect();
    let (mut current, parents) = lock_rows(&tx, &ids).await?;
    let mut changes = RowChanges::default();
    let mut attempts = AttemptRows::default();
    let mut out = Vec::with_capacity(ps.len());
    let queues = rules::queues_for_backoff(
        ps.iter()
            .filter_map(|p| current.get(&p.id).map(|t| (t, &p.outcome))),
    );
    let backoffs = queue_backoffs(&*tx, &queues).await?;
    for p in ps {
        let task = match rules::held(current.get(&p.id), p.id, p.attempt) {
            Ok(task) => task,
            Err(e) => {
                out.push(Err(e));
                continue;
            }
        };
        let change = rules::finish(task, &p.outcome, p.now, p.jitter, backoffs.get(&task.queue));
        let after = change.apply(task, p.now);
        if !change.state.is_finished() {
            attempts.push(task, change.outcome, change.error.as_deref(), p.now);
        }
        changes.push(&after);
        current.insert(p.id, after.clone());
        out.push(Ok(after));
    }
    changes.write(&tx, channel).await?;
    attempts.insert(&tx).await?;
    let mut released = Released::new();
    if let Some(now) = ps.iter().map(|p| p.now).max() {
        let ended = (out.iter().flatten())
            .filter(|t| parents.contains(&t.id))
            .map(|t| (t.id, t.state));
        released = super::dependents::release(&tx, channel, ended, now).await?;
    }
    tx.commit().await.map_err(db_err)?;
    Ok((out, released))
}

/// Whether any task matches `cond` at `now` (`$1`): one statement, without a transaction.
async fn any_task(c: &Object, cond: &str, now: &Timestamp) -> Result<bool> {
    let any = c
        .prepare_cached(&format!(
            "SELECT EXISTS (SELECT 1 FROM sked_tasks WHERE {cond})"
        ))
        .await
        .map_err(db_err)?;
    col(&c.query_one(&any, &[now]).await.map_err(db_err)?, 0)
}

/// Ends `expired` the tasks past their deadline that have not started (see
/// [`Store::task_expire`]), skipping rows another transaction holds: a claim that has one
/// locked checked its deadline against its own time.
pub(crate) async fn expire(
    c: &mut Object,
    channel: &str,
    p: &TaskExpireParams,
) -> Result<Vec<TaskId>> {
    use sked_store::states::EXPIRABLE;
    let expiring = format!("expires_at IS NOT NULL AND attempt = 0 AND state IN {EXPIRABLE}");
    // Most of the time nothing is due: find that out in one statement, without a transaction.
    let due = format!("{expiring} AND expires_at <= $1");
    if !any_task(c, &due, &p.now).await? {
        return Ok(Vec::new());
    }
    let tx = c.transaction().await.map_err(db_err)?;
    let limit = i64::from(p.limit);
    let stmt = tx
        .prepare_cached(&format!(
            "UPDATE sked_tasks t SET state = 'expired', finished_at = $2, last_error = $3 \
             WHERE t.id IN (SELECT id FROM sked_tasks WHERE {expiring} AND expires_at <= $2 \
               ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) \
             RETURNING t.id"
        ))
        .await
        .map_err(db_err)?;
    let rows = tx
        .query(&stmt, &[&limit, &p.now, &sked_store::expiry::REASON])
        .await
        .map_err(db_err)?;
    let expired: Vec<TaskId> = rows.iter().map(|r| col(r, 0)).collect::<Result<_>>()?;
    let ended = expired
        .iter()
        .map(|&id| (id, sked_core::TaskState::Expired));
    // The store moves its claim positions to the front after any expiry.
    super::dependents::release(&tx, channel, ended, p.now).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(expired)
}

pub(crate) async fn rescue(
    c: &mut Object,
    channel: &str,
    p: &TaskRescueParams,
) -> Result<Vec<TaskId>> {
    // Most of the time nothing has expired: find that out in one statement, without a
    // transaction.
    let expired = "state = 'running' AND lease_expires_at < $1";
    if !any_task(c, expired, &p.now).await? {
        return Ok(Vec::new());
    }
    let tx = c.transaction().await.map_err(db_err)?;
    let limit = i64::from(p.limit);
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM sked_tasks t WHERE t.state = 'running' AND t.lease_expires_at < $1 \
             ORDER BY t.lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED"
        ))
        .await
        .map_err(db_err)?;
    let rows = tx.query(&stmt, &[&p.now, &limit]).await.map_err(db_err)?;
    let expired = tasks_from_rows(&rows)?;
    let mut changes = RowChanges::default();
    let mut attempts = AttemptRows::default();
    let mut ended = Vec::new();
    for task in &expired {
        Transition::Rescue.check(task.state)?;
        let (state, error) = rules::rescue(task);
        let after = Task {
            state,
            run_at: p.now,
            finished_at: state.is_finished().then_some(p.now),
            last_error: Some(error.clone()),
            lease_expires_at: None,
            ..task.clone()
        };
        attempts.push(task, "rescued", Some(&error), p.now);
        changes.push(&after);
        ended.push((after.id, after.state));
    }
    changes.write(&tx, channel).await?;
    attempts.insert(&tx).await?;
    // The store moves its claim positions to the front after any rescue.
    super::dependents::release(&tx, channel, ended, p.now).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(expired.iter().map(|t| t.id).collect())
}

/// A batch of successes, each task named once: the common case, written with one statement
/// that checks and changes each row (no locking read first), in one transaction with the
/// release of what waits for those of its tasks that have children. What a success changes
/// is what [`rules::finish`] says for it: the state, the finish time and the result; the run
/// time, attempts left and last error stay.
pub(crate) struct Successes {
    id: Vec<TaskId>,
    attempt: Vec<i32>,
    now: Vec<Timestamp>,
    result: Vec<Option<serde_json::Value>>,
}

impl Successes {
    pub(crate) fn of(ps: &[TaskFinishParams]) -> Option<Successes> {
        let mut seen = std::collections::HashSet::with_capacity(ps.len());
        let mut out = Successes {
            id: Vec::with_capacity(ps.len()),
            attempt: Vec::with_capacity(ps.len()),
            now: Vec::with_capacity(ps.len()),
            result: Vec::with_capacity(ps.len()),
        };
        for p in ps {
            let FinishOutcome::Succeeded { result } = &p.outcome else {
                return None;
            };
            if !seen.insert(p.id) {
                return None;
            }
            out.id.push(p.id);
            out.attempt.push(p.attempt);
            out.now.push(p.now);
            out.result.push(result.clone());
        }
        Some(out)
    }

    /// Writes the successes, answering each as a whole task or as what [`TaskEnded`] says;
    /// with what they released of the tasks waiting for them.
    ///
    /// The success statement runs over the whole batch, and the release of the children of
    /// those that have any follows in the same transaction. The batch is not split by
    /// whether its tasks have children first: that takes a read of every task, and a batch of
    /// a workflow's middle tasks, all with children, would be found twice.
    pub(crate) async fn write<T: Ended>(
        &self,
        c: &mut Object,
        channel: &str,
        plans: &PlanChoice,
    ) -> Result<(Vec<Result<T>>, Released)> {
        let tx = c.transaction().await.map_err(db_err)?;
        let rows = self.succeed(&tx, T::succeed(), plans).await?;
        let mut done: HashMap<TaskId, T> = HashMap::with_capacity(rows.len());
        // The tasks with children, with their own waits: the rows' last two columns.
        let mut parents: Vec<(TaskId, TaskState, Option<i64>)> = Vec::new();
        for r in &rows {
            let t = T::of_row(r)?;
            if col::<bool>(r, r.len() - 2)? {
                parents.push((t.id(), TaskState::Succeeded, col(r, r.len() - 1)?));
            }
            done.insert(t.id(), t);
        }
        let mut released = Released::new();
        if !parents.is_empty() {
            // Released as of the last of those successes.
            let ids: HashSet<TaskId> = parents.iter().map(|p| p.0).collect();
            let at = (self.id.iter().zip(&self.now))
                .filter(|(id, _)| ids.contains(id))
                .map(|(_, now)| *now)
                .max();
            if let Some(at) = at {
                released = super::dependents::release(&tx, channel, parents, at).await?;
            }
        }
        tx.commit().await.map_err(db_err)?;
        let scheduled = done.values().any(|t| t.scheduled());
        Ok((self.answers(c, channel, done, scheduled).await?, released))
    }

    /// Runs the success statement over the batch: by key up to [`BY_KEY_MAX`] tasks, and for
    /// more whichever `plans` measured cheaper per row (see [`super::faster_statement`]), plainly
    /// or by key in parts of [`BY_KEY_MAX`]. The rows they changed.
    async fn succeed(
        &self,
        tx: &Transaction<'_>,
        sql: &[String; 2],
        plans: &PlanChoice,
    ) -> Result<Vec<tokio_postgres::Row>> {
        let n = self.id.len();
        let large = n > BY_KEY_MAX;
        // `sql` holds the plain statement, then the one by key: `plans`' first and second.
        let which = if large { plans.pick(Instant::now()) } else { 1 };
        let stmt = tx.prepare_cached(&sql[which]).await.map_err(db_err)?;
        let started = Instant::now();
        let rows = if large && which == 1 {
            self.succeed_in_parts(tx, &stmt).await?
        } else {
            tx.query(&stmt, &[&self.id, &self.attempt, &self.now, &self.result])
                .await
                .map_err(db_err)?
        };
        if large {
            plans.record(which, n, started.elapsed(), Instant::now());
        }
        Ok(rows)
    }

    /// The by-key statement over parts of [`BY_KEY_MAX`] successes, sent together. One
    /// statement over a large batch is planned by its size: a hash join over every task
    /// (98–250 ms for 1,000 among 200,000), where its parts find their rows by key.
    async fn succeed_in_parts(
        &self,
        tx: &Transaction<'_>,
        stmt: &tokio_postgres::Statement,
    ) -> Result<Vec<tokio_postgres::Row>> {
        let parts = (0..self.id.len()).step_by(BY_KEY_MAX).map(|from| {
            let to = (from + BY_KEY_MAX).min(self.id.len());
            let (id, attempt) = (&self.id[from..to], &self.attempt[from..to]);
            let (now, result) = (&self.now[from..to], &self.result[from..to]);
            async move { tx.query(stmt, &[&id, &attempt, &now, &result]).await }
        });
        let rows = futures_util::future::try_join_all(parts)
            .await
            .map_err(db_err)?;
        Ok(rows.into_iter().flatten().collect())
    }

    /// An answer per success, in order, from the tasks it ended (`done`, by id): those it did
    /// not end say why. Announces a change to schedules when a task of one ended.
    async fn answers<T: Ended>(
        &self,
        c: &mut Object,
        channel: &str,
        mut done: HashMap<TaskId, T>,
        scheduled: bool,
    ) -> Result<Vec<Result<T>>> {
        if scheduled {
            announce_schedules(&***c, channel).await?;
        }
        // The rows not changed: missing, or no longer running as that attempt.
        let missed: Vec<TaskId> = (self.id.iter().copied())
            .filter(|id| !done.contains_key(id))
            .collect();
        let mut current: HashMap<TaskId, Task> = HashMap::new();
        if !missed.is_empty() {
            let stmt = c
                .prepare_cached(&format!(
                    "SELECT {TASK_COLUMNS} FROM sked_tasks t WHERE t.id = ANY($1)"
                ))
                .await
                .map_err(db_err)?;
            for r in &c.query(&stmt, &[&missed]).await.map_err(db_err)? {
                let t = task_from_row(r)?;
                current.insert(t.id, t);
            }
        }
        Ok(self
            .id
            .iter()
            .zip(&self.attempt)
            .map(|(id, attempt)| match done.remove(id) {
                Some(task) => Ok(task),
                None => Err(rules::held(current.get(id), *id, *attempt).err().unwrap_or(
                    StoreError::StaleLease {
                        id: *id,
                        attempt: *attempt,
                    },
                )),
            })
            .collect())
    }
}

/// Batches of successes up to this size find their rows by key alone (see [`succeed_sql`]);
/// larger ones take whichever of the two statements was measured cheaper per row.
const BY_KEY_MAX: usize = 100;

/// The successes of `$1`–`$4`, returning `returning`.
///
/// Asked plainly whether each row is running (`t.state = 'running'`), the planner may read
/// the index of running tasks whole and join it to the batch by hash. For a large batch that
/// is the faster plan (a drain in batches of 1,000 ran 1.15 times as fast as with lookups by
/// key). For a small one it is not: it reads every running task to end a few, and while a
/// snapshot is held (a long report, a session left idle in a transaction) that index keeps an
/// entry for every task that ran since, so that under a steady load of 1,000 tasks a second,
/// with endings of a few tasks each, they took 3.6 ms a statement and most of the server's
/// time. With `by_key`, the state is asked through the arrays (`t.state = u.state`, a column
/// of `'running'`), which that index cannot answer: the rows are found by their key (0.25 and
/// 0.8 ms a statement in two runs under the same load). For a large batch under a held
/// snapshot the plain read grows too (261 ms a batch after half an hour), so the store
/// measures which is cheaper ([`super::faster_statement`]).
///
/// By key, the ids are also given to the table (`t.id = ANY($1)`): a table too small for the
/// planner to look its rows up one by one (a workflow's 10,000 tasks in a new schema) is
/// then read with that filter before the join, not joined whole (the successes of a
/// 1 → 10,000 → 1 workflow's middle tasks: 301–308 ms of server time, from 329–383 ms).
///
/// Each row answers, after `returning`, whether the task has children and its own wait, for
/// the release that follows ([`Successes::write`]).
fn succeed_sql(returning: &str, by_key: bool) -> String {
    // The array of states and its column, and what the row's state is compared with.
    let (states, column, running, keys) = match by_key {
        false => ("", "", "'running'", ""),
        true => (
            ", array_fill('running'::text, ARRAY[cardinality($1::bigint[])])",
            ", state",
            "u.state",
            " AND t.id = ANY($1::bigint[])",
        ),
    };
    format!(
        "UPDATE sked_tasks t SET state = 'succeeded', finished_at = u.now, result = u.result, \
           lease_expires_at = NULL \
         FROM unnest($1::bigint[], $2::int[], $3::timestamptz[], $4::jsonb[]{states}) \
           AS u(id, attempt, now, result{column}) \
         WHERE t.id = u.id{keys} AND t.state = {running} AND t.attempt = u.attempt \
         RETURNING {returning}, t.has_children, t.wait"
    )
}

/// What a success answers: a whole task, or what [`TaskEnded`] says of it. Each reads the
/// columns its statements return.
pub(crate) trait Ended: Sized + Send {
    /// The success statements (see [`succeed_sql`]): plain, then by key.
    fn succeed() -> &'static [String; 2];
    fn of_row(r: &tokio_postgres::Row) -> Result<Self>;
    fn id(&self) -> TaskId;
    /// Whether the task was a schedule's.
    fn scheduled(&self) -> bool;
}

/// The success statements returning `returning` ([`Ended::succeed`]): plain, then by key.
fn statements(returning: &str) -> [String; 2] {
    [false, true].map(|by_key| succeed_sql(returning, by_key))
}

static WHOLE: std::sync::LazyLock<[String; 2]> =
    std::sync::LazyLock::new(|| statements(TASK_COLUMNS));

impl Ended for Task {
    fn succeed() -> &'static [String; 2] {
        &WHOLE
    }
    fn of_row(r: &tokio_postgres::Row) -> Result<Self> {
        task_from_row(r)
    }
    fn id(&self) -> TaskId {
        self.id
    }
    fn scheduled(&self) -> bool {
        self.schedule.is_some()
    }
}

/// What [`TaskEnded`] needs, in the order [`TaskEnded::of_row`] reads it: a success of a
/// workflow's task with children decodes no payload or result.
static BRIEF: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
    statements("t.id, t.queue, t.attempt, t.run_at, t.started_at, t.finished_at, t.schedule")
});

impl Ended for TaskEnded {
    fn succeed() -> &'static [String; 2] {
        &BRIEF
    }
    fn of_row(r: &tokio_postgres::Row) -> Result<Self> {
        Ok(TaskEnded {
            id: col(r, 0)?,
            queue: col(r, 1)?,
            state: TaskState::Succeeded,
            attempt: col(r, 2)?,
            run_at: col(r, 3)?,
            started_at: col(r, 4)?,
            finished_at: col(r, 5)?,
            schedule: col(r, 6)?,
        })
    }
    fn id(&self) -> TaskId {
        self.id
    }
    fn scheduled(&self) -> bool {
        self.schedule.is_some()
    }
}

/// The success statement for a batch of `n` (see [`succeed_sql`]), returning ids, for tests.
#[cfg(feature = "testing")]
pub(crate) fn success_sql(n: usize) -> String {
    succeed_sql("t.id", n <= BY_KEY_MAX)
}

/// The default backoffs of these queues, those that have one.
async fn queue_backoffs<C: tokio_postgres::GenericClient + Sync>(
    c: &C,
    queues: &[String],
) -> Result<HashMap<String, sked_core::Backoff>> {
    let mut found = HashMap::new();
    if queues.is_empty() {
        return Ok(found);
    }
    let rows = c
        .query(
            "SELECT name, backoff FROM sked_queues WHERE name = ANY($1) AND backoff IS NOT NULL",
            &[&queues],
        )
        .await
        .map_err(db_err)?;
    for r in &rows {
        if let Some(b) = rules::queue_backoff_of_column(col(r, 1)?)? {
            found.insert(col(r, 0)?, b);
        }
    }
    Ok(found)
}
