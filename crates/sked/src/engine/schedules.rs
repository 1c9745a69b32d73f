//! Schedules: made at run time or declared in code, paused and resumed, triggered by hand,
//! and their ledger of occurrences. Turning due occurrences into tasks on time is the
//! scheduler's job ([`crate::maintenance::Scheduler`]).

use jiff::{SignedDuration, Timestamp};
use sked_core::{IntervalFrom, ScheduleDef, TaskId};
use sked_store::rules::LIST_LIMIT_MAX;
use sked_store::{
    BackfillReport, CalendarInfo, CalendarPutParams, DeclaredSchedule, Occurrence,
    OccurrenceListParams, Page, Schedule, ScheduleApplyParams, ScheduleBackfillParams,
    ScheduleListParams, SchedulePauseParams, ScheduleSyncReport, ScheduleUpsertParams,
    ScheduleWriteParams, StoreError,
};

use super::{Engine, every_page};

/// How [`Engine::schedules_apply`] writes a set of schedules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyOptions {
    /// The group the schedules belong to: each joins it, and one that exists keeps its paused
    /// flag. Without a group each is written as [`Engine::schedule_put`] writes one.
    pub group: Option<String>,
    /// Deletes the group's schedules missing from the set. Only with a group.
    pub prune: bool,
    /// Changes nothing; the report says what would change.
    pub dry_run: bool,
}

/// The most occurrences one backfill enqueues.
pub const MAX_BACKFILL: usize = 10_000;
use crate::error::{Error, Result};

/// How many times a trigger reads and writes its schedule before a conflict is answered.
const TRIGGER_TRIES: u32 = 5;

/// `op`'s answer, tried again while it is a conflict, `tries` times in all.
async fn again_on_conflict<T, F: Future<Output = Result<T>>>(
    tries: u32,
    mut op: impl FnMut() -> F,
) -> Result<T> {
    let mut tried = 1;
    loop {
        match op().await {
            Err(Error::Store(sked_store::StoreError::Conflict(_))) if tried < tries => tried += 1,
            answer => return answer,
        }
    }
}

impl Engine {
    /// Creates or replaces a schedule.
    pub async fn schedule_put(&self, def: ScheduleDef) -> Result<Schedule> {
        let (spec, tz) = def.validate()?;
        let now = self.now();
        // A new or changed schedule fires from now on; intervals count from now (or from its
        // start).
        let next_fire_at = match def.paused {
            true => None,
            false => def.bounds().next_after(&spec, now, &tz, now),
        };
        let s = self
            .inner
            .store
            .schedule_upsert(ScheduleUpsertParams {
                def,
                next_fire_at,
                now,
            })
            .await?;
        self.inner.schedules_changed.notify_waiters();
        Ok(s)
    }

    /// Creates or replaces many schedules in one transaction: all of them, or, when one is
    /// invalid or a name is given twice, none (the error names each bad one). Those equal to
    /// the stored ones are left as they are.
    pub async fn schedule_put_many(&self, defs: Vec<ScheduleDef>) -> Result<ScheduleSyncReport> {
        self.schedules_apply(defs, ApplyOptions::default()).await
    }

    /// Writes a set of schedules in one transaction (see [`ApplyOptions`]): all of them, or,
    /// when one is invalid or a name is given twice, none (the error names each bad one). Those
    /// equal to the stored ones are left as they are; the answer lists what changed, or with
    /// `dry_run` what would.
    pub async fn schedules_apply(
        &self,
        defs: Vec<ScheduleDef>,
        options: ApplyOptions,
    ) -> Result<ScheduleSyncReport> {
        if let Some(g) = &options.group {
            sked_core::validate_name("schedule group", g)?;
        } else if options.prune {
            return Err(Error::Invalid(
                "--prune needs a group: it removes the group's schedules missing from the set"
                    .into(),
            ));
        }
        let bad = crate::api::check_defs(&defs);
        if !bad.is_empty() {
            return Err(Error::Invalid(crate::api::describe(bad)));
        }
        let now = self.now();
        let schedules = defs
            .into_iter()
            .map(|def| {
                let (spec, tz) = def.validate()?;
                // A new or changed schedule fires from now on; intervals count from now (or
                // from its start).
                let next_fire_at = match def.paused {
                    true => None,
                    false => def.bounds().next_after(&spec, now, &tz, now),
                };
                Ok(DeclaredSchedule { def, next_fire_at })
            })
            .collect::<Result<Vec<_>>>()?;
        let report = self
            .inner
            .store
            .schedule_write_many(ScheduleWriteParams {
                schedules,
                group: options.group,
                prune: options.prune,
                dry_run: options.dry_run,
                now,
            })
            .await?;
        if !options.dry_run {
            self.inner.schedules_changed.notify_waiters();
        }
        Ok(report)
    }

    /// Makes the schedules that `group` declares in code exist as declared: created, updated
    /// (an operator's pause kept), and those the group no longer declares removed. Idempotent,
    /// safe when many instances start at once.
    pub async fn schedules_sync(
        &self,
        group: &str,
        defs: Vec<ScheduleDef>,
    ) -> Result<ScheduleSyncReport> {
        let options = ApplyOptions {
            group: Some(group.to_string()),
            prune: true,
            dry_run: false,
        };
        self.schedules_apply(defs, options).await
    }

    /// One schedule, with its next fire time and last run.
    pub async fn schedule(&self, name: &str) -> Result<Schedule> {
        Ok(self.inner.store.schedule_get(name).await?)
    }

    /// A page of schedules by name (at most [`LIST_LIMIT_MAX`] and about
    /// [`sked_store::page::LIST_BYTES_MAX`] bytes); payloads only when asked for.
    pub async fn schedule_page(&self, mut params: ScheduleListParams) -> Result<Page<Schedule>> {
        params.limit = params.limit.clamp(1, LIST_LIMIT_MAX);
        Ok(self.inner.store.schedule_list(params).await?)
    }

    /// How many schedules the filter takes, counted up to `limit` + 1 (more than `limit`
    /// means at least that many).
    pub async fn schedule_count(
        &self,
        filter: sked_store::ScheduleFilter,
        limit: u64,
    ) -> Result<u64> {
        Ok(self.inner.store.schedule_count(filter, limit).await?)
    }

    /// Every schedule with its payload, read page by page: for callers that want them all,
    /// at their own cost.
    pub async fn schedules(&self) -> Result<Vec<Schedule>> {
        self.schedules_with(true).await
    }

    /// Every schedule, read page by page, its template's payload null unless `payloads`.
    pub async fn schedules_with(&self, payloads: bool) -> Result<Vec<Schedule>> {
        every_page(async |after| {
            self.schedule_page(ScheduleListParams {
                after,
                limit: LIST_LIMIT_MAX,
                with_payloads: payloads,
                filter: Default::default(),
            })
            .await
        })
        .await
    }

    /// Deletes a schedule and its ledger; its tasks stay.
    pub async fn schedule_delete(&self, name: &str) -> Result<()> {
        if self.inner.store.schedule_delete(name, self.now()).await? {
            Ok(())
        } else {
            Err(StoreError::schedule_not_found(name).into())
        }
    }

    /// Creates or replaces a calendar: dates on which the schedules that skip it do not
    /// fire, from their next plan on.
    pub async fn calendar_put(&self, def: sked_core::CalendarDef) -> Result<CalendarInfo> {
        let now = self.now();
        let c = (self.inner.store)
            .calendar_put(CalendarPutParams { def, now })
            .await?;
        Ok(c)
    }

    /// One calendar.
    pub async fn calendar(&self, name: &str) -> Result<CalendarInfo> {
        Ok(self.inner.store.calendar_get(name).await?)
    }

    /// Every calendar, by name.
    pub async fn calendars(&self) -> Result<Vec<CalendarInfo>> {
        Ok(self.inner.store.calendar_list().await?)
    }

    /// Deletes a calendar no schedule skips (one that a schedule skips is a conflict).
    pub async fn calendar_delete(&self, name: &str) -> Result<()> {
        if self.inner.store.calendar_delete(name).await? {
            Ok(())
        } else {
            Err(StoreError::calendar_not_found(name).into())
        }
    }

    /// Pauses a schedule: no occurrence fires until it is resumed.
    pub async fn schedule_pause(&self, name: &str) -> Result<Schedule> {
        self.set_paused(name, true).await
    }

    /// Resumes a paused schedule from now: the paused time is not caught up.
    pub async fn schedule_resume(&self, name: &str) -> Result<Schedule> {
        self.set_paused(name, false).await
    }

    async fn set_paused(&self, name: &str, paused: bool) -> Result<Schedule> {
        let now = self.now();
        let next_fire_at = if paused {
            None
        } else {
            // Resuming does not catch up the paused time: the next occurrence from now, if it
            // has runs left.
            let s = self.inner.store.schedule_get(name).await?;
            let (spec, tz) = s.timing()?;
            (s.bounds().next_after(&spec, now, &tz, s.anchor_at))
                .filter(|_| s.runs_left() != Some(0))
        };
        let s = self
            .inner
            .store
            .schedule_set_paused(SchedulePauseParams {
                name: name.into(),
                paused,
                reason: None,
                next_fire_at,
                now,
            })
            .await?;
        self.inner.schedules_changed.notify_waiters();
        Ok(s)
    }

    /// Enqueues a run of the schedule now, outside its spec (recorded in its ledger): its task,
    /// or its workflow. Answers the run's task (a workflow's first). A run by hand does not
    /// wait for the schedule's own firing: when a node plans the schedule between the read and
    /// the write (a schedule firing every second is planned every second), it is read again.
    pub async fn schedule_trigger(&self, name: &str) -> Result<TaskId> {
        again_on_conflict(TRIGGER_TRIES, || self.trigger_once(name)).await
    }

    /// One try of [`Engine::schedule_trigger`]: refused as a conflict, changing nothing, when
    /// the schedule was planned since it was read.
    async fn trigger_once(&self, name: &str) -> Result<TaskId> {
        let s = self.inner.store.schedule_get(name).await?;
        let now = self.now();
        let plan = sked_core::Plan {
            occurrences: vec![sked_core::PlannedOccurrence::new(
                now,
                sked_core::OccurrenceOutcome::Enqueued,
                Some("triggered by hand".into()),
            )],
            cancel: vec![],
            buffered: s.buffered_at,
            next_fire_at: s.unplanned_from,
            // A run by hand is not one of its occurrences': max_runs does not count it.
            runs: 0,
        };
        let runs = self
            .inner
            .store
            .schedule_apply(ScheduleApplyParams {
                name: name.into(),
                expected_next_fire_at: s.unplanned_from,
                plan,
                template: s.template()?,
                now,
            })
            .await?;
        let run = (runs.into_iter().next())
            .ok_or_else(|| Error::Invalid("nothing was enqueued".into()))?;
        for (queue, _) in &run.tasks {
            self.inner.metrics.enqueued(queue, 1);
        }
        self.wake_workers();
        Ok(run.first)
    }

    /// Enqueues every occurrence of the schedule from `from` to `to` (both included, both
    /// past) that has no run yet: each occurrence still gets at most one task, so a range
    /// that overlaps occurrences that ran enqueues only the others. At most
    /// [`MAX_BACKFILL`] occurrences at once.
    pub async fn schedule_backfill(
        &self,
        name: &str,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<BackfillReport> {
        if from > to {
            return Err(Error::Invalid(format!(
                "a backfill's start ({from}) is later than its end ({to})"
            )));
        }
        let now = self.now();
        if to > now {
            return Err(Error::Invalid(format!(
                "a backfill covers past occurrences: its end ({to}) is later than now ({now})"
            )));
        }
        let s = self.inner.store.schedule_get(name).await?;
        if s.from != IntervalFrom::Fixed {
            return Err(Error::Invalid(format!(
                "schedule {name} counts its interval from its last run (from {}): it has no fixed occurrences to backfill",
                s.from
            )));
        }
        let (spec, tz) = s.timing()?;
        let mut nominals = Vec::new();
        let mut after = from
            .checked_sub(SignedDuration::from_nanos(1))
            .unwrap_or(from);
        while let Some(t) = s.bounds().next_after(&spec, after, &tz, s.anchor_at) {
            if t > to {
                break;
            }
            if nominals.len() == MAX_BACKFILL {
                return Err(Error::Invalid(format!(
                    "from {from} to {to} schedule {name} has more than {MAX_BACKFILL} occurrences: backfill a shorter range"
                )));
            }
            nominals.push(t);
            after = t;
        }
        let report = self
            .inner
            .store
            .schedule_backfill(ScheduleBackfillParams {
                name: name.into(),
                nominals,
                now,
            })
            .await?;
        if !report.enqueued.is_empty() {
            for (queue, n) in s.template()?.tasks_per_queue() {
                self.inner
                    .metrics
                    .enqueued(queue, n * report.enqueued.len());
            }
            self.wake_workers();
        }
        Ok(report)
    }

    /// A schedule's ledger, newest first: every occurrence enqueued, skipped, buffered or
    /// missed.
    pub async fn occurrences(&self, name: &str, limit: u32) -> Result<Vec<Occurrence>> {
        self.inner.store.schedule_get(name).await?;
        Ok(self
            .inner
            .store
            .occurrence_list(OccurrenceListParams {
                schedule: name.into(),
                limit,
            })
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict() -> Error {
        Error::Store(sked_store::StoreError::Conflict("advanced".into()))
    }

    #[tokio::test]
    async fn a_conflict_is_tried_again_up_to_the_tries_given() {
        let calls = std::cell::Cell::new(0);
        let answer = again_on_conflict(5, || {
            calls.set(calls.get() + 1);
            async {
                if calls.get() < 3 {
                    Err(conflict())
                } else {
                    Ok(7)
                }
            }
        })
        .await;
        assert_eq!((answer.unwrap(), calls.get()), (7, 3));
        calls.set(0);
        let answer: Result<i32> = again_on_conflict(5, || {
            calls.set(calls.get() + 1);
            async { Err(conflict()) }
        })
        .await;
        assert!(matches!(
            answer,
            Err(Error::Store(sked_store::StoreError::Conflict(_)))
        ));
        assert_eq!(calls.get(), 5);
        // Any other error is answered at once.
        calls.set(0);
        let answer: Result<i32> = again_on_conflict(5, || {
            calls.set(calls.get() + 1);
            async { Err(Error::Invalid("no".into())) }
        })
        .await;
        assert!(matches!(answer, Err(Error::Invalid(_))));
        assert_eq!(calls.get(), 1);
    }
}
