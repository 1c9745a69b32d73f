//! Tasks that wait for tasks, in waits: the tasks made with the same parents share one count
//! of parents not yet counted, one failure rule and the parents' edges
//! (docs/decisions/0022-tasks-with-the-same-parents-wait-together.md). A wait waits for tasks
//! one by one (`sked_wait_parents`) or for every task of another wait (`sked_wait_stages`: the
//! fan-in after a stage); what a parent's end does to the waits it reaches is decided in the
//! ending's transaction (the rules: `sked_store::rules::dependents`).
//!
//! The insert of a task with parents sets `has_children` on its parents, so it takes their
//! row locks (in id order) and reads their states under them: an ending that races it either
//! committed first (the insert sees the end) or waits for the insert's commit (and then sees
//! the flag, and the edges with its next statement). A release locks the waits it reaches in
//! id order before it counts them down, so two last parents ending at once cannot both miss
//! that they were last.
//!
//! An end reads its edges and counts the waits down; it does not write the edges. An edge's
//! `done`, or a (task, wait) pair in `sked_wait_counted` for a task of a stage, says the
//! parent's end was counted before its present life (it had ended when the wait was made, or
//! ended and was retried by hand), so an end counts each wait once.

use std::collections::{BTreeMap, HashMap};

use deadpool_postgres::Transaction;
use jiff::Timestamp;
use sked_core::{ParentFailure, Task, TaskId, TaskState};
use sked_store::rules::dependents::{self, Start, WaitChange};
use sked_store::states::ACTIVE;
use sked_store::*;
use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use crate::codec::{col, db_err, state};

/// A wait: tasks that share one count of parents and one failure rule.
pub(crate) type WaitId = i64;

/// Sets `has_children` on `parents`, under their row locks taken in id order, and returns
/// their states in the order given (`None`: no such task). A parent in a kept stage is made a
/// row first.
pub(crate) async fn lock_parents<C: GenericClient + Sync>(
    c: &C,
    parents: &[TaskId],
) -> Result<Vec<(TaskId, Option<TaskState>)>> {
    super::kept_stages::make_rows_of(c, parents, false).await?;
    let rows = c
        .query(
            "UPDATE sked_tasks t SET has_children = true FROM ( \
               SELECT id FROM sked_tasks WHERE id = ANY($1) ORDER BY id FOR UPDATE) l \
             WHERE t.id = l.id RETURNING t.id, t.state",
            &[&parents],
        )
        .await
        .map_err(db_err)?;
    let mut found = HashMap::with_capacity(rows.len());
    for r in &rows {
        found.insert(col::<TaskId>(r, 0)?, state(&col::<String>(r, 1)?)?);
    }
    Ok(parents
        .iter()
        .map(|p| (*p, found.get(p).copied()))
        .collect())
}

/// What a transaction has made so far: the states of its tasks (later tasks' parents, not read
/// or locked again), and its waits, so that a task that waits for all the tasks of a wait this
/// transaction made waits for the wait.
#[derive(Default)]
pub(crate) struct Made {
    states: HashMap<TaskId, TaskState>,
    /// The wait of each task made with one.
    waits: HashMap<TaskId, WaitId>,
    /// How many tasks each wait was made with; `None` once one of them started ended.
    sizes: HashMap<WaitId, Option<usize>>,
}

impl Made {
    /// The tasks made, with the states they were made in.
    pub(crate) fn states(&self) -> &HashMap<TaskId, TaskState> {
        &self.states
    }

    /// Notes a task made in `state` with `wait`.
    fn add(&mut self, id: TaskId, state: TaskState, wait: Option<WaitId>) {
        self.states.insert(id, state);
        if let Some(w) = wait {
            self.waits.insert(id, w);
            let size = self.sizes.entry(w).or_insert(Some(0));
            *size = size.filter(|_| !state.is_finished()).map(|n| n + 1);
        }
    }

    /// The waits this transaction made all of whose tasks are among `parents`: two or more,
    /// none ended as it was made.
    fn stages_among(&self, parents: &[(TaskId, Option<TaskState>)]) -> Vec<WaitId> {
        let mut found: HashMap<WaitId, usize> = HashMap::new();
        for (p, _) in parents {
            if let Some(w) = self.waits.get(p) {
                *found.entry(*w).or_default() += 1;
            }
        }
        let mut stages: Vec<WaitId> = (found.into_iter())
            .filter(|(w, n)| *n >= 2 && self.sizes.get(w) == Some(&Some(*n)))
            .map(|(w, _)| w)
            .collect();
        stages.sort_unstable();
        stages
    }
}

/// The waits of the tasks of one insert: tasks with the same parents and failure rule share
/// one. Their ids are taken before the tasks' rows are written (each row names its wait), and
/// the waits with their edges after, with one statement.
#[derive(Default)]
pub(crate) struct NewWaits {
    by_parents: HashMap<(Vec<TaskId>, bool), usize>,
    /// Each wait's parents not yet ended and whether its tasks run anyway.
    left: Vec<i32>,
    run_anyway: Vec<bool>,
    /// Its parents (with whether each had ended) and the waits whose tasks it waits for.
    parents: Vec<Vec<(TaskId, bool)>>,
    stages: Vec<Vec<WaitId>>,
    /// Each task's wait, by place (an index into the lists above; none without parents).
    of_task: Vec<Option<usize>>,
}

impl NewWaits {
    /// Notes the next task, whose parents (with their states) `parents` are, starting as
    /// `start` says: in the wait of an earlier task of the insert with the same parents and
    /// rule, or a new one; none when it has no parents.
    pub(crate) fn add(
        &mut self,
        made: &Made,
        parents: &[(TaskId, Option<TaskState>)],
        then: ParentFailure,
        start: &Start,
    ) {
        if parents.is_empty() {
            self.of_task.push(None);
            return;
        }
        let key = (parents.iter().map(|(p, _)| *p).collect(), !then.is_cancel());
        let n = self.left.len();
        let w = *self.by_parents.entry(key).or_insert(n);
        if w == n {
            let stages = made.stages_among(parents);
            let loose = (parents.iter())
                .filter(|(p, _)| !made.waits.get(p).is_some_and(|w| stages.contains(w)))
                .map(|(p, s)| (*p, s.is_some_and(TaskState::is_finished)))
                .collect();
            self.left.push(start.parents_left);
            self.run_anyway.push(!then.is_cancel());
            self.parents.push(loose);
            self.stages.push(stages);
        }
        self.of_task.push(Some(w));
    }

    /// Takes the waits' ids from their sequence; returns each task's wait id, by place.
    pub(crate) async fn number<C: GenericClient + Sync>(
        &self,
        c: &C,
    ) -> Result<Vec<Option<WaitId>>> {
        let n = self.left.len() as i64;
        if n == 0 {
            return Ok(vec![None; self.of_task.len()]);
        }
        let rows = c
            .query(
                "SELECT nextval('sked_waits_id_seq') FROM generate_series(1, $1::bigint)",
                &[&n],
            )
            .await
            .map_err(db_err)?;
        let ids: Vec<WaitId> = rows.iter().map(|r| col(r, 0)).collect::<Result<_>>()?;
        Ok(self.of_task.iter().map(|w| w.map(|w| ids[w])).collect())
    }

    /// Writes the waits of the tasks `tasks` (made in the states `states`), whose wait ids
    /// [`NewWaits::number`] gave as `waits`, with their edges, and notes the tasks in `made`.
    pub(crate) async fn write<C: GenericClient + Sync>(
        &self,
        c: &C,
        made: &mut Made,
        tasks: &[(TaskId, TaskState)],
        waits: &[Option<WaitId>],
    ) -> Result<()> {
        for ((id, s), w) in tasks.iter().zip(waits) {
            made.add(*id, *s, *w);
        }
        if self.left.is_empty() {
            return Ok(());
        }
        let mut ids: Vec<WaitId> = vec![0; self.left.len()];
        let mut of_wait: Vec<Vec<TaskId>> = vec![Vec::new(); self.left.len()];
        for ((&w, &id), (task, _)) in self.of_task.iter().zip(waits).zip(tasks) {
            if let (Some(w), Some(id)) = (w, id) {
                ids[w] = id;
                of_wait[w].push(*task);
            }
        }
        // Each wait's tasks, in id order, as a slice `first..=last` (from 1) of one array.
        let (mut task_ids, mut first, mut last) = (Vec::new(), Vec::new(), Vec::new());
        for mut mine in of_wait {
            mine.sort_unstable();
            first.push(task_ids.len() as i32 + 1);
            task_ids.extend(mine);
            last.push(task_ids.len() as i32);
        }
        let (mut parent, mut parent_wait, mut done) = (Vec::new(), Vec::new(), Vec::new());
        let (mut stage, mut stage_wait) = (Vec::new(), Vec::new());
        for (w, id) in ids.iter().enumerate() {
            for (p, d) in &self.parents[w] {
                parent.push(*p);
                parent_wait.push(*id);
                done.push(*d);
            }
            for s in &self.stages[w] {
                stage.push(*s);
                stage_wait.push(*id);
            }
        }
        c.execute(
            "WITH w AS (INSERT INTO sked_waits (id, parents_left, run_anyway, tasks) \
               SELECT w.id, w.left_, w.run_anyway, ($4::bigint[])[w.first:w.last] \
               FROM unnest($1::bigint[], $2::int[], $3::bool[], $5::int[], $11::int[]) \
                 AS w(id, left_, run_anyway, first, last)), \
             p AS (INSERT INTO sked_wait_parents (parent, wait, done) \
               SELECT * FROM unnest($6::bigint[], $7::bigint[], $8::bool[])) \
             INSERT INTO sked_wait_stages (stage, wait) \
               SELECT * FROM unnest($9::bigint[], $10::bigint[])",
            &[
                &ids,
                &self.left,
                &self.run_anyway,
                &task_ids,
                &first,
                &parent,
                &parent_wait,
                &done,
                &stage,
                &stage_wait,
                &last,
            ],
        )
        .await
        .map_err(db_err)?;
        Ok(())
    }
}

/// A task inserted on its own (with a unique key) in a wait of its own: its wait and edges,
/// and what [`dependents::at_enqueue`] made of its parents written to its row.
pub(crate) async fn link<C: GenericClient + Sync>(
    c: &C,
    task: TaskId,
    parents: &[(TaskId, Option<TaskState>)],
    then: ParentFailure,
    start: &Start,
    now: Timestamp,
) -> Result<()> {
    let mut waits = NewWaits::default();
    waits.add(&Made::default(), parents, then, start);
    let wait = waits.number(c).await?;
    let finished = start.state.is_finished().then_some(now);
    c.execute(
        "UPDATE sked_tasks SET state = $2, wait = $3, last_error = $4, finished_at = $5 \
         WHERE id = $1",
        &[
            &task,
            &start.state.as_str(),
            &wait[0],
            &start.error,
            &finished,
        ],
    )
    .await
    .map_err(db_err)?;
    waits
        .write(c, &mut Made::default(), &[(task, start.state)], &wait)
        .await
}

/// What a release made claimable or waiting, as the store's claim positions take it: the
/// highest priority and the earliest run time among the tasks, and whether they wait (see
/// `PgStore::claimable`). Moved back once the release is committed, a claim that follows at
/// once sees the tasks without waiting for their announcement.
pub(crate) type Released = Vec<(i32, Timestamp, bool)>;

/// An end for [`release`] to count: the task, the state it ended in, and its wait when the
/// caller read it with the end (`Some(None)`: it has none); without it, the release reads it.
pub(crate) struct End {
    id: TaskId,
    state: TaskState,
    wait: Option<Option<WaitId>>,
}

impl From<(TaskId, TaskState)> for End {
    fn from((id, state): (TaskId, TaskState)) -> End {
        End {
            id,
            state,
            wait: None,
        }
    }
}

impl From<(TaskId, TaskState, Option<WaitId>)> for End {
    fn from((id, state, wait): (TaskId, TaskState, Option<WaitId>)) -> End {
        End {
            id,
            state,
            wait: Some(wait),
        }
    }
}

/// What the ends in `ended` (tasks and the state each ended in; others are skipped) do to the
/// tasks waiting for them, and so on down the graph: each wait they reach, locked in id order,
/// is counted down, released or cancelled. Released tasks are announced on `channel`, and
/// returned as [`Released`].
pub(crate) async fn release<E: Into<End>>(
    tx: &Transaction<'_>,
    channel: &str,
    ended: impl IntoIterator<Item = E>,
    now: Timestamp,
) -> Result<Released> {
    let mut ended: Vec<End> = (ended.into_iter().map(Into::into))
        .filter(|e| e.state.is_finished())
        .collect();
    // Every end, those cascaded to waiting tasks included, for the batches they belong to.
    let mut all: Vec<(TaskId, TaskState)> = ended.iter().map(|e| (e.id, e.state)).collect();
    let mut out = Released::new();
    while !ended.is_empty() {
        let states: HashMap<TaskId, TaskState> = ended.iter().map(|e| (e.id, e.state)).collect();
        let ids: Vec<TaskId> = ended.iter().map(|e| e.id).collect();
        let (mut known, mut waits, mut unknown) = (Vec::new(), Vec::new(), Vec::new());
        for e in ended.drain(..) {
            match e.wait {
                Some(Some(w)) => {
                    known.push(e.id);
                    waits.push(w);
                }
                Some(None) => {}
                None => unknown.push(e.id),
            }
        }
        let reached = tx
            .query(WAITS_REACHED, &[&ids, &known, &waits, &unknown])
            .await
            .map_err(db_err)?;
        let mut by_wait: BTreeMap<WaitId, Vec<(TaskId, TaskState)>> = BTreeMap::new();
        for r in &reached {
            let parent: TaskId = col(r, 1)?;
            by_wait
                .entry(col(r, 0)?)
                .or_default()
                .push((parent, states[&parent]));
        }
        if by_wait.is_empty() {
            break;
        }
        let waits: Vec<WaitId> = by_wait.keys().copied().collect();
        let rows = tx
            .query(
                "SELECT id, parents_left, run_anyway FROM sked_waits \
                 WHERE id = ANY($1) ORDER BY id FOR UPDATE",
                &[&waits],
            )
            .await
            .map_err(db_err)?;
        let (mut counted, mut left) = (Vec::new(), Vec::new());
        let mut release = Vec::new();
        let (mut cancel, mut error) = (Vec::new(), Vec::new());
        for r in &rows {
            let wait: WaitId = col(r, 0)?;
            let then = match col::<bool>(r, 2)? {
                true => ParentFailure::Run,
                false => ParentFailure::Cancel,
            };
            match dependents::count(col(r, 1)?, then, &by_wait[&wait]) {
                WaitChange::Wait { parents_left } => {
                    counted.push(wait);
                    left.push(parents_left);
                }
                WaitChange::Release => {
                    counted.push(wait);
                    left.push(0);
                    release.push(wait);
                }
                WaitChange::Cancel { error: e } => {
                    cancel.push(wait);
                    error.push(e);
                }
            }
        }
        // Rows, and then the kept stages of the same waits, in one round trip.
        let params: [&(dyn ToSql + Sync); 6] = [&counted, &left, &release, &now, &cancel, &error];
        let kept_params: [&(dyn ToSql + Sync); 4] = [&release, &now, &cancel, &error];
        let (rows, kept) = tokio::try_join!(tx.query(COUNT_RELEASE_CANCEL, &params), async {
            match release.is_empty() && cancel.is_empty() {
                true => Ok(Vec::new()),
                false => {
                    tx.query(super::kept_stages::RELEASE_KEPT, &kept_params)
                        .await
                }
            }
        })
        .map_err(db_err)?;
        for r in rows.iter().chain(&kept) {
            match col::<Option<TaskId>>(r, 0)? {
                Some(id) => {
                    let wait: Option<WaitId> = col(r, 4)?;
                    ended.push((id, TaskState::Cancelled, wait).into());
                    all.push((id, TaskState::Cancelled));
                }
                None => {
                    if let Some(at) = col::<Option<Timestamp>>(r, 1)? {
                        let top: i32 = col::<Option<i32>>(r, 2)?.unwrap_or(i32::MAX);
                        let timed = col::<Option<Timestamp>>(r, 3)?;
                        out.push((top, at, false));
                        out.extend(timed.map(|t| (top, t, true)));
                    }
                }
            }
        }
    }
    let first = (out.iter())
        .filter(|(.., timed)| !timed)
        .map(|(_, at, _)| *at)
        .min();
    if let Some(run_at) = first {
        // Where in claim order they are is not worked out: claims look from the front. When
        // none is due yet, the first run time says when to look.
        let waiting = (run_at > now).then_some(run_at);
        tx.execute(
            &format!(
                "SELECT {}",
                crate::listen::notify_tasks_sql(
                    "NULL::timestamptz",
                    "NULL::int",
                    "$2::timestamptz"
                )
            ),
            &[&channel, &waiting],
        )
        .await
        .map_err(db_err)?;
    }
    super::batches::ended(&**tx, channel, &all, now).await?;
    Ok(out)
}

/// What the ends do to the waits they reached: `$1` the waits counted with `$2` their
/// parents now left; `$3` the waits whose waiting tasks are released at `$4` (now), each as
/// [`sked_store::rules::state_for_run_at`] says for its run time; `$5` the waits whose waiting
/// tasks are cancelled, each with its error in `$6`. Answers the earliest run time of the
/// tasks released, their highest priority and the earliest run time of those not due, then
/// the ids of those cancelled, each with its wait (in the fifth column).
pub(crate) const COUNT_RELEASE_CANCEL: &str = "WITH counts AS (UPDATE sked_waits w SET parents_left = u.left_ \
      FROM unnest($1::bigint[], $2::int[]) AS u(id, left_) WHERE w.id = u.id), \
    released AS (UPDATE sked_tasks t \
      SET state = CASE WHEN t.run_at <= $4 THEN 'available' ELSE 'scheduled' END \
      WHERE t.wait = ANY($3) AND t.state = 'waiting' RETURNING t.run_at, t.priority), \
    cancelled AS (UPDATE sked_tasks t SET state = 'cancelled', finished_at = $4, \
      last_error = u.error \
      FROM unnest($5::bigint[], $6::text[]) AS u(wait, error) \
      WHERE t.wait = u.wait AND t.state = 'waiting' RETURNING t.id, t.wait) \
    SELECT NULL::bigint, min(run_at), max(priority), \
      min(run_at) FILTER (WHERE run_at > $4), NULL::bigint FROM released \
    UNION ALL SELECT id, NULL, NULL, NULL, wait FROM cancelled";

/// The waits the ends of tasks `$1` count: those that wait for an ended task and have not
/// counted it, and those that wait for the whole of an ended task's wait and have not counted
/// it; each with the ended task. The ended tasks' waits: `$3` of the tasks `$2`, as their
/// ends read them, and read here for the tasks `$4` (tasks in neither have none). Reading
/// them from the rows took most of this statement's time in a workflow's middle tasks' ends.
const WAITS_REACHED: &str = "SELECT p.wait, p.parent FROM sked_wait_parents p \
    WHERE p.parent = ANY($1) AND NOT p.done \
    UNION ALL \
    SELECT s.wait, e.id FROM ( \
        SELECT * FROM unnest($2::bigint[], $3::bigint[]) AS u(id, wait) \
        UNION ALL SELECT t.id, t.wait FROM sked_tasks t WHERE t.id = ANY($4::bigint[])) e \
      JOIN sked_wait_stages s ON s.stage = e.wait \
    WHERE NOT EXISTS \
      (SELECT 1 FROM sked_wait_counted c WHERE c.task = e.id AND c.wait = s.wait)";

/// Marks the ends of `parent`, which has ended and is about to run again by hand, counted: the
/// waits that waited for it heard of its end, and its next end must not count them again.
pub(crate) async fn counted<C: GenericClient + Sync>(c: &C, parent: TaskId) -> Result<()> {
    c.execute(
        "WITH d AS (UPDATE sked_wait_parents SET done = true WHERE parent = $1 AND NOT done) \
         INSERT INTO sked_wait_counted (task, wait) \
         SELECT t.id, s.wait FROM sked_tasks t JOIN sked_wait_stages s ON s.stage = t.wait \
         WHERE t.id = $1 ON CONFLICT DO NOTHING",
        &[&parent],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Fills in `task`'s parents (all, and those it still waits for) and children, each in id
/// order, and what a failed parent does to it: through its wait's edges (its parents one by
/// one, and the tasks of the waits it waits for whole), and the waits that wait for it.
pub(crate) async fn family<C: GenericClient + Sync>(c: &C, task: &mut Task) -> Result<()> {
    let rows = c
        .query(
            &format!(
                "WITH me AS (SELECT t.id, t.wait, w.run_anyway FROM sked_tasks t \
                   LEFT JOIN sked_waits w ON w.id = t.wait WHERE t.id = $1) \
                 SELECT 'rule', NULL::bigint, (SELECT run_anyway FROM me) \
                 UNION ALL \
                 SELECT 'parent', p.parent, NOT p.done AND coalesce(q.state IN {ACTIVE}, false) \
                   FROM sked_wait_parents p LEFT JOIN sked_tasks q ON q.id = p.parent \
                   WHERE p.wait = (SELECT wait FROM me) \
                 UNION ALL \
                 SELECT 'parent', q.id, q.state IN {ACTIVE} AND NOT EXISTS \
                     (SELECT 1 FROM sked_wait_counted k WHERE k.task = q.id AND k.wait = s.wait) \
                   FROM sked_wait_stages s JOIN sked_waits m ON m.id = s.stage \
                   JOIN sked_tasks q ON q.id = ANY(m.tasks) \
                   WHERE s.wait = (SELECT wait FROM me) \
                 UNION ALL \
                 SELECT 'child', x.id, NULL FROM ( \
                   SELECT w.tasks FROM sked_wait_parents p JOIN sked_waits w ON w.id = p.wait \
                     WHERE p.parent = $1 \
                   UNION ALL \
                   SELECT w.tasks FROM sked_wait_stages s JOIN sked_waits w ON w.id = s.wait \
                     WHERE s.stage = (SELECT wait FROM me)) c \
                   JOIN sked_tasks x ON x.id = ANY(c.tasks)"
            ),
            &[&task.id],
        )
        .await
        .map_err(db_err)?;
    for r in &rows {
        let tag: &str = r.get(0);
        match tag {
            "rule" => {
                if col::<Option<bool>>(r, 2)? == Some(true) {
                    task.on_parent_failure = ParentFailure::Run;
                }
            }
            "child" => task.dependents.push(col(r, 1)?),
            _ => {
                let id: TaskId = col(r, 1)?;
                task.depends_on.push(id);
                if col::<bool>(r, 2)? {
                    task.waiting_for.push(id);
                }
            }
        }
    }
    // In id order whatever order the union's parts come back in.
    for ids in [
        &mut task.depends_on,
        &mut task.waiting_for,
        &mut task.dependents,
    ] {
        ids.sort_unstable();
        ids.dedup();
    }
    Ok(())
}

/// Fills in what each waiting task among `tasks` still waits for.
pub(crate) async fn fill_waiting_for<C: GenericClient + Sync>(
    c: &C,
    tasks: &mut [Task],
) -> Result<()> {
    let waiting: Vec<TaskId> = (tasks.iter())
        .filter(|t| t.state == TaskState::Waiting)
        .map(|t| t.id)
        .collect();
    if waiting.is_empty() {
        return Ok(());
    }
    let rows = c
        .query(
            &format!(
                "SELECT t.id, p.parent FROM sked_tasks t \
                   JOIN sked_wait_parents p ON p.wait = t.wait \
                   JOIN sked_tasks q ON q.id = p.parent \
                 WHERE t.id = ANY($1) AND NOT p.done AND q.state IN {ACTIVE} \
                 UNION ALL \
                 SELECT t.id, q.id FROM sked_tasks t \
                   JOIN sked_wait_stages s ON s.wait = t.wait \
                   JOIN sked_waits m ON m.id = s.stage JOIN sked_tasks q ON q.id = ANY(m.tasks) \
                 WHERE t.id = ANY($1) AND q.state IN {ACTIVE} AND NOT EXISTS \
                   (SELECT 1 FROM sked_wait_counted k WHERE k.task = q.id AND k.wait = s.wait) \
                 ORDER BY 1, 2"
            ),
            &[&waiting],
        )
        .await
        .map_err(db_err)?;
    let mut by_child: HashMap<TaskId, Vec<TaskId>> = HashMap::new();
    for r in &rows {
        by_child.entry(col(r, 0)?).or_default().push(col(r, 1)?);
    }
    for t in tasks {
        if let Some(parents) = by_child.remove(&t.id) {
            t.waiting_for = parents;
        }
    }
    Ok(())
}

/// The data-modifying parts of a statement that removes what the tasks `ids` (an SQL list of
/// ids: tasks being deleted in the same statement, or to be deleted after it) with the waits
/// `waits` (an SQL list) leave of the graph: their ends counted, the edges from them, and each
/// of their waits left with no other task, with its edges.
pub(crate) fn forget_sql(ids: &str, waits: &str) -> String {
    format!(
        "waits_gone AS (DELETE FROM sked_waits w WHERE w.id IN ({waits}) AND NOT EXISTS \
           (SELECT 1 FROM sked_tasks x WHERE x.id = ANY(w.tasks) AND x.id NOT IN ({ids})) \
           RETURNING w.id), \
         wait_parents_gone AS (DELETE FROM sked_wait_parents WHERE parent IN ({ids}) \
           OR wait IN (SELECT id FROM waits_gone)), \
         wait_stages_gone AS (DELETE FROM sked_wait_stages \
           WHERE wait IN (SELECT id FROM waits_gone) OR stage IN (SELECT id FROM waits_gone)), \
         wait_counted_gone AS (DELETE FROM sked_wait_counted WHERE task IN ({ids}) \
           OR wait IN (SELECT id FROM waits_gone))"
    )
}

/// Removes what the deleted tasks `$1` with the waits `$2` leave of the graph
/// ([`forget_sql`]).
pub(crate) static FORGET: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH {} SELECT 1",
        forget_sql("SELECT unnest($1::bigint[])", "SELECT unnest($2::bigint[])")
    )
});
