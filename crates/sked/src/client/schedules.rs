//! [`Client`]'s schedule calls: create, declare, read, pause, resume, trigger and backfill
//! schedules, and read their ledgers.

use sked_core::{ScheduleDef, TaskId};
use sked_store::{Occurrence, ScheduleSyncReport};

#[cfg(feature = "remote")]
use super::remote::{path_segment, schedule_path};
use super::{Client, Inner};
use crate::Result;
use crate::api::{self, ScheduleView};

impl Client {
    /// Creates or replaces a schedule (made at run time: no declaring group).
    pub async fn schedule_put(&self, def: ScheduleDef) -> Result<ScheduleView> {
        match &self.inner {
            Inner::Embedded(e) => Ok(e.schedule_put(def).await?.into()),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.post("/v1/schedules", &def).await,
        }
    }

    /// One schedule.
    pub async fn schedule(&self, name: &str) -> Result<ScheduleView> {
        match &self.inner {
            Inner::Embedded(e) => Ok(e.schedule(name).await?.into()),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.get(&schedule_path(name, ""), &[]).await,
        }
    }

    /// Every schedule with its payload, read page by page.
    pub async fn schedules(&self) -> Result<Vec<ScheduleView>> {
        self.schedules_with(true).await
    }

    /// Every schedule, read page by page, its template's payload left out (null) unless
    /// `payloads`: what an overview needs, without moving every payload.
    pub async fn schedules_with(&self, payloads: bool) -> Result<Vec<ScheduleView>> {
        match &self.inner {
            Inner::Embedded(e) => Ok(e
                .schedules_with(payloads)
                .await?
                .into_iter()
                .map(Into::into)
                .collect()),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let include = if payloads { "payload" } else { "" };
                let query = [("include", include.to_string())];
                r.every_page("/v1/schedules", &query, |l: api::ScheduleList| {
                    (l.schedules, l.next_after)
                })
                .await
            }
        }
    }

    /// One page of schedules by name: those `filter` takes after `after` (at most `limit`,
    /// up to 1,000), their templates' payloads null unless `payloads`, with how many the
    /// filter takes in all when `count` (up to [`api::SCHEDULE_COUNT_LIMIT`]).
    pub async fn schedule_page(
        &self,
        filter: &sked_store::ScheduleFilter,
        after: Option<&str>,
        limit: u32,
        payloads: bool,
        count: bool,
    ) -> Result<api::ScheduleList> {
        match &self.inner {
            Inner::Embedded(e) => {
                let cap = api::SCHEDULE_COUNT_LIMIT;
                let total = match count {
                    true => Some(e.schedule_count(filter.clone(), cap).await?),
                    false => None,
                };
                let page = e
                    .schedule_page(sked_store::ScheduleListParams {
                        after: after.map(str::to_string),
                        limit,
                        with_payloads: payloads,
                        filter: filter.clone(),
                    })
                    .await?;
                let next_after = page.next_after();
                Ok(api::ScheduleList {
                    schedules: page.items.into_iter().map(Into::into).collect(),
                    next_after,
                    count: total.map(|n| n.min(cap)),
                    count_at_least: total.is_some_and(|n| n > cap),
                })
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let mut query = vec![("limit", limit.to_string())];
                if let Some(a) = after {
                    query.push(("after", a.to_string()));
                }
                if let Some(p) = &filter.prefix {
                    query.push(("prefix", p.clone()));
                }
                if let Some(p) = filter.paused {
                    query.push(("paused", p.to_string()));
                }
                if filter.failing {
                    query.push(("failing", "true".into()));
                }
                let include: Vec<&str> = [(payloads, "payload"), (count, "count")]
                    .into_iter()
                    .filter_map(|(on, what)| on.then_some(what))
                    .collect();
                if !include.is_empty() {
                    query.push(("include", include.join(",")));
                }
                r.get("/v1/schedules", &query).await
            }
        }
    }

    /// Creates or replaces calendar `name`: dates on which the schedules that skip it do not
    /// fire (in `tz`, or each schedule's zone).
    pub async fn calendar_put(
        &self,
        name: &str,
        dates: api::CalendarDates,
    ) -> Result<sked_store::CalendarInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.calendar_put(dates.named(name)).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let path = format!("/v1/calendars/{}", path_segment(name));
                r.put(&path, &dates).await
            }
        }
    }

    /// One calendar.
    pub async fn calendar(&self, name: &str) -> Result<sked_store::CalendarInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.calendar(name).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let path = format!("/v1/calendars/{}", path_segment(name));
                r.get(&path, &[]).await
            }
        }
    }

    /// Every calendar, by name.
    pub async fn calendars(&self) -> Result<api::CalendarList> {
        match &self.inner {
            Inner::Embedded(e) => Ok(api::CalendarList {
                calendars: e.calendars().await?,
            }),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.get("/v1/calendars", &[]).await,
        }
    }

    /// Deletes a calendar no schedule skips.
    pub async fn calendar_delete(&self, name: &str) -> Result<()> {
        match &self.inner {
            Inner::Embedded(e) => e.calendar_delete(name).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                r.delete(&format!("/v1/calendars/{}", path_segment(name)))
                    .await
            }
        }
    }

    /// Deletes a schedule; its tasks stay.
    pub async fn schedule_delete(&self, name: &str) -> Result<()> {
        match &self.inner {
            Inner::Embedded(e) => e.schedule_delete(name).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.delete(&schedule_path(name, "")).await,
        }
    }

    /// Pauses a schedule.
    pub async fn schedule_pause(&self, name: &str) -> Result<ScheduleView> {
        match &self.inner {
            Inner::Embedded(e) => Ok(e.schedule_pause(name).await?.into()),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.post(&schedule_path(name, "/pause"), &()).await,
        }
    }

    /// Resumes a paused schedule from now.
    pub async fn schedule_resume(&self, name: &str) -> Result<ScheduleView> {
        match &self.inner {
            Inner::Embedded(e) => Ok(e.schedule_resume(name).await?.into()),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.post(&schedule_path(name, "/resume"), &()).await,
        }
    }

    /// Enqueues a run of the schedule now; returns the task's id.
    pub async fn schedule_trigger(&self, name: &str) -> Result<TaskId> {
        match &self.inner {
            Inner::Embedded(e) => e.schedule_trigger(name).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let t: api::Triggered = r.post(&schedule_path(name, "/trigger"), &()).await?;
                Ok(t.id)
            }
        }
    }

    /// Enqueues the schedule's past occurrences from `from` to `to` that have no run yet
    /// (see [`Engine::schedule_backfill`]).
    pub async fn schedule_backfill(
        &self,
        name: &str,
        from: jiff::Timestamp,
        to: jiff::Timestamp,
    ) -> Result<sked_store::BackfillReport> {
        match &self.inner {
            Inner::Embedded(e) => e.schedule_backfill(name, from, to).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                r.post(
                    &schedule_path(name, "/backfill"),
                    &api::BackfillRequest { from, to },
                )
                .await
            }
        }
    }

    /// A schedule's ledger, newest first (at most `limit` lines, at most 1,000).
    pub async fn occurrences(&self, name: &str, limit: u32) -> Result<Vec<Occurrence>> {
        match &self.inner {
            Inner::Embedded(e) => e.occurrences(name, limit).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let query = [("limit", limit.to_string())];
                let reply: api::OccurrenceList =
                    r.get(&schedule_path(name, "/occurrences"), &query).await?;
                Ok(reply.occurrences)
            }
        }
    }

    /// Declares the schedules of `group` (see [`Engine::schedules_sync`]).
    pub async fn schedules_sync(
        &self,
        group: &str,
        defs: Vec<ScheduleDef>,
    ) -> Result<ScheduleSyncReport> {
        match &self.inner {
            Inner::Embedded(e) => e.schedules_sync(group, defs).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                r.put(
                    &format!("/v1/declared/{}", path_segment(group)),
                    &api::Declared { schedules: defs },
                )
                .await
            }
        }
    }

    /// Writes a set of schedules in one transaction, all or none (see
    /// [`crate::Engine::schedules_apply`]).
    pub async fn schedules_apply(
        &self,
        defs: Vec<ScheduleDef>,
        options: crate::ApplyOptions,
    ) -> Result<ScheduleSyncReport> {
        match &self.inner {
            Inner::Embedded(e) => e.schedules_apply(defs, options).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let body = api::SchedulesApply {
                    schedules: defs,
                    group: options.group,
                    prune: options.prune,
                    dry_run: options.dry_run,
                };
                r.put("/v1/schedules", &body).await
            }
        }
    }
}
