//! A recorded history of what clients did and what they were told, and a checker of sked's
//! promises over it. Clients (the test's enqueuers, protocol worker processes) append one JSON
//! line per operation as soon as they hear the answer, so a client killed with `kill -9`
//! leaves at most a torn last line, which the reader skips. After the faults, the test adds
//! what the store finally says of each task, and [`check`] looks for:
//!
//! - `lost`: an acknowledged task that is not finished (or is gone);
//! - `never_ran`: an acknowledged task that succeeded but that no worker ever claimed;
//! - `not_succeeded`: an acknowledged task that ended otherwise than succeeded (the workers
//!   here always succeed, so it means a rescue ran it out of attempts or it was cancelled);
//! - `double_completion`: two accepted completions of the same task and attempt;
//! - `stale_completion`: a completion accepted from an attempt after a later attempt of the
//!   same task had been claimed (the fencing token failed);
//! - `succeeded_twice`: accepted successes from two attempts of one task;
//! - `duplicate_occurrence`: two tasks for one schedule and nominal time;
//! - `missed_second`: a second of an every-second schedule's span, outside the outages the
//!   test measured, with no task;
//! - `missed_occurrence`: an occurrence of one of many periodic schedules ([`Event::Periodic`])
//!   within its span, with no task (the report also gives how late their tasks became
//!   claimable: [`Report::made_late_p99_ns`]);
//! - `early_start`: a task reached its worker before its run time by more than
//!   [`CLOCK_TOLERANCE_NS`] (the run time as the client or the enqueuing node gave it, by the
//!   database's clock; the answer's arrival by this machine's, which is the database's);
//! - `start_outside_claim`: an attempt's recorded start outside its claim, from the request
//!   sent to the answer received, by more than [`CLOCK_TOLERANCE_NS`] (the start is the
//!   claim's time, by the database's clock as the claiming node estimates it, read when the
//!   claim is asked; the claim's statement may run later, under load long enough for another
//!   node to make tasks available that were not due at that time, so the start is not
//!   compared with the run time);
//! - `server_error`: a request answered with a 5xx other than 503 (a fault must give
//!   `unavailable`, never an internal error);
//! - `started_before_parent`: a task that waits for others ([`Event::Waits`]) reached a
//!   worker before one of them had succeeded: its claim answered before the parent's accepted
//!   completion was sent, or its start earlier than the parent's end (both by the database's
//!   clock, within [`CLOCK_TOLERANCE_NS`]), or a parent that did not end succeeded.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Nanoseconds since the Unix epoch by this machine's clock.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Event {
    /// An enqueue acknowledged with this id.
    Enqueued { id: i64, at_ns: i64 },
    /// An enqueue without an acknowledgement (refused, unavailable, connection lost): the task
    /// may or may not exist, and nothing is promised of it.
    EnqueueFailed { status: u16, at_ns: i64 },
    /// A claim sent at `sent_ns` and answered at `at_ns` with this attempt of a task. The run
    /// time, start and nominal time are the server's.
    Claimed {
        id: i64,
        attempt: i32,
        worker: String,
        /// The server that answered.
        #[serde(default)]
        server: String,
        run_at_ns: i64,
        started_at_ns: i64,
        schedule: Option<String>,
        nominal_ns: Option<i64>,
        sent_ns: i64,
        at_ns: i64,
    },
    /// A completion sent at `sent_ns` and answered at `at_ns`: accepted or not.
    Completed {
        id: i64,
        attempt: i32,
        worker: String,
        /// The server that answered.
        #[serde(default)]
        server: String,
        accepted: bool,
        sent_ns: i64,
        at_ns: i64,
    },
    /// A worker's request (`claim`, `heartbeat`, `finish`) answered otherwise than 200;
    /// `status` 0 when there was no answer.
    Failed {
        request: String,
        status: u16,
        at_ns: i64,
    },
    /// A fault the test injected.
    Fault { kind: String, at_ns: i64 },
    /// An interval the test measured in which schedules could not fire.
    Outage { from_ns: i64, to_ns: i64 },
    /// What the store says of a task at the end.
    Final {
        id: i64,
        state: String,
        schedule: Option<String>,
        nominal_ns: Option<i64>,
        /// When it became claimable: the later of its creation and its run time.
        #[serde(default)]
        made_ns: Option<i64>,
        /// When it ended, by the database's clock.
        #[serde(default)]
        finished_ns: Option<i64>,
        /// Its deadline to start, if it has one.
        #[serde(default)]
        expires_ns: Option<i64>,
    },
    /// A task that must not start before each of `parents` has succeeded.
    Waits { child: i64, parents: Vec<i64> },
    /// Schedules `{prefix}0` to `{prefix}{count - 1}`, each due every `period_ns` (at the
    /// multiples of it), expected to have one task for each occurrence from `from_ns` to
    /// `to_ns`.
    Periodic {
        prefix: String,
        count: usize,
        period_ns: i64,
        from_ns: i64,
        to_ns: i64,
    },
    /// The span an every-second schedule was expected to cover, by nominal time.
    EverySecond {
        schedule: String,
        from_ns: i64,
        to_ns: i64,
    },
}

/// A JSON-lines file that events are appended to, one `write` per line.
pub struct Recorder {
    file: Mutex<std::fs::File>,
}

impl Recorder {
    pub fn create(path: &Path) -> Recorder {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        Recorder {
            file: Mutex::new(file),
        }
    }

    pub fn record(&self, event: &Event) {
        let mut line = serde_json::to_string(event).unwrap();
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(line.as_bytes()).unwrap();
    }
}

/// The events of every `*.jsonl` file in `dir`; a torn line (its writer was killed) is skipped.
pub fn read_dir(dir: &Path) -> Vec<Event> {
    let mut events = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            let text = std::fs::read_to_string(&path).unwrap();
            events.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
        }
    }
    events
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    pub operations: usize,
    pub enqueued: usize,
    pub enqueue_failed: usize,
    pub claimed: usize,
    pub accepted: usize,
    /// Tasks that ended expired: not started by their deadline.
    pub expired: usize,
    pub rejected: usize,
    pub occurrences: usize,
    /// How late the tasks of [`Event::Periodic`] schedules became claimable after their
    /// nominal times, at the 99th percentile and at most (0 when made ahead).
    pub made_late_p99_ns: i64,
    pub made_late_max_ns: i64,
    /// Requests answered 503 `unavailable`, enqueues and workers' requests together.
    pub unavailable: usize,
    pub faults: BTreeMap<String, usize>,
    pub anomalies: BTreeMap<&'static str, Vec<String>>,
}

impl Report {
    fn anomaly(&mut self, kind: &'static str, what: String) {
        self.anomalies.entry(kind).or_default().push(what);
    }

    /// Counts a 503, and takes any other 5xx for an anomaly.
    fn answered(&mut self, op: &str, status: u16, at_ns: i64) {
        match status {
            503 => self.unavailable += 1,
            500..=599 => self.anomaly(
                "server_error",
                format!("{op} answered {status} at {at_ns} ns"),
            ),
            _ => {}
        }
    }

    pub fn count(&self, kind: &str) -> usize {
        self.anomalies.get(kind).map_or(0, Vec::len)
    }

    /// One line of figures.
    pub fn line(&self) -> String {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        let anomalies: Vec<String> = self
            .anomalies
            .iter()
            .map(|(k, v)| format!("{k}={}", v.len()))
            .collect();
        format!(
            "history: {} operations (enqueued {}, unacknowledged {}, answered 503 {}, claimed {}, completions accepted {} rejected {}, expired {}, occurrences {}, made late p99 {} ms max {} ms); faults {} [{}]; anomalies {} [{}]",
            self.operations,
            self.enqueued,
            self.enqueue_failed,
            self.unavailable,
            self.claimed,
            self.accepted,
            self.rejected,
            self.expired,
            self.occurrences,
            self.made_late_p99_ns / 1_000_000,
            self.made_late_max_ns / 1_000_000,
            self.faults.values().sum::<usize>(),
            faults.join(" "),
            self.anomalies.values().map(Vec::len).sum::<usize>(),
            anomalies.join(" "),
        )
    }

    /// Panics with the first few of each kind when there is any anomaly.
    pub fn assert_clean(&self) {
        if self.anomalies.is_empty() {
            return;
        }
        let mut text = self.line();
        for (kind, list) in &self.anomalies {
            text.push_str(&format!("\n{kind}: {:?}", &list[..list.len().min(10)]));
        }
        panic!("{text}");
    }
}

const SECOND: i64 = 1_000_000_000;

/// How far apart two nodes' estimates of the database's clock may be: a task enqueued "now" on
/// one node and claimed at once on another may show a start a few milliseconds before its run
/// time under load. An early start beyond this is an anomaly.
pub const CLOCK_TOLERANCE_NS: i64 = 50_000_000;

/// Checks a history (see the module's documentation).
pub fn check(events: &[Event]) -> Report {
    let mut r = Report {
        operations: events.len(),
        ..Report::default()
    };
    let mut acknowledged = BTreeSet::new();
    let mut claims: BTreeMap<i64, Vec<(i32, i64)>> = BTreeMap::new();
    let mut accepted: BTreeMap<(i64, i32), usize> = BTreeMap::new();
    let mut completions = Vec::new();
    let mut finals = BTreeMap::new();
    let mut outages = Vec::new();
    let mut spans = Vec::new();
    let mut periodic = Vec::new();
    // Each task's claims: when it started (the database's clock) and when the answer came.
    let mut starts: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    // Each task's first start (attempt 1): when it started and when its claim was sent.
    let mut first_starts: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut waits = Vec::new();
    for e in events {
        match e {
            Event::Enqueued { id, .. } => {
                r.enqueued += 1;
                acknowledged.insert(*id);
            }
            Event::EnqueueFailed { status, at_ns } => {
                r.enqueue_failed += 1;
                r.answered("enqueue", *status, *at_ns);
            }
            Event::Failed {
                request,
                status,
                at_ns,
            } => r.answered(request, *status, *at_ns),
            Event::Claimed {
                id,
                attempt,
                run_at_ns,
                started_at_ns,
                sent_ns,
                at_ns,
                ..
            } => {
                r.claimed += 1;
                claims.entry(*id).or_default().push((*attempt, *at_ns));
                starts
                    .entry(*id)
                    .or_default()
                    .push((*started_at_ns, *at_ns));
                if *attempt == 1 {
                    first_starts.insert(*id, (*started_at_ns, *sent_ns));
                }
                if *at_ns < run_at_ns - CLOCK_TOLERANCE_NS {
                    r.anomaly(
                        "early_start",
                        format!(
                            "task {id} attempt {attempt} reached its worker {} µs before its run time",
                            (run_at_ns - at_ns) / 1000
                        ),
                    );
                }
                if *started_at_ns < sent_ns - CLOCK_TOLERANCE_NS
                    || *started_at_ns > at_ns + CLOCK_TOLERANCE_NS
                {
                    r.anomaly(
                        "start_outside_claim",
                        format!(
                            "task {id} attempt {attempt} started {} µs after its claim was sent, \
                             answered {} µs after it",
                            (started_at_ns - sent_ns) / 1000,
                            (at_ns - sent_ns) / 1000
                        ),
                    );
                }
            }
            Event::Completed {
                id,
                attempt,
                accepted: true,
                sent_ns,
                ..
            } => {
                r.accepted += 1;
                *accepted.entry((*id, *attempt)).or_default() += 1;
                completions.push((*id, *attempt, *sent_ns));
            }
            Event::Completed { .. } => r.rejected += 1,
            Event::Fault { kind, .. } => *r.faults.entry(kind.clone()).or_default() += 1,
            Event::Outage { from_ns, to_ns } => outages.push((*from_ns, *to_ns)),
            Event::Final { id, .. } => {
                finals.insert(*id, e);
            }
            Event::EverySecond {
                schedule,
                from_ns,
                to_ns,
            } => spans.push((schedule.clone(), *from_ns, *to_ns)),
            Event::Periodic { .. } => periodic.push(e),
            Event::Waits { child, parents } => waits.push((*child, parents)),
        }
    }
    // Each parent's accepted completions, by when they were sent.
    let mut completed_at: BTreeMap<i64, i64> = BTreeMap::new();
    for (id, _, sent_ns) in &completions {
        let first = completed_at.entry(*id).or_insert(*sent_ns);
        *first = (*first).min(*sent_ns);
    }
    for (child, parents) in waits {
        for parent in parents {
            let (state, finished) = match finals.get(parent) {
                Some(Event::Final {
                    state, finished_ns, ..
                }) => (state.as_str(), *finished_ns),
                _ => ("gone", None),
            };
            for &(started_ns, at_ns) in starts.get(&child).into_iter().flatten() {
                let why = match (state, finished, completed_at.get(parent)) {
                    ("succeeded", Some(_), Some(&sent)) if at_ns < sent => format!(
                        "task {child} was claimed {} µs before its parent {parent}'s completion was sent",
                        (sent - at_ns) / 1000
                    ),
                    ("succeeded", Some(f), _) if started_ns < f - CLOCK_TOLERANCE_NS => format!(
                        "task {child} started {} µs before its parent {parent} ended",
                        (f - started_ns) / 1000
                    ),
                    ("succeeded", Some(_), _) => continue,
                    (state, ..) => format!("task {child} started; its parent {parent} is {state}"),
                };
                r.anomaly("started_before_parent", why);
            }
        }
    }
    // A task with a deadline starts before it, or never (and then it has expired).
    for e in finals.values() {
        let Event::Final {
            id,
            state,
            expires_ns,
            ..
        } = e
        else {
            continue;
        };
        match (expires_ns, first_starts.get(id)) {
            (Some(deadline), Some(&(started_ns, sent_ns))) => {
                if started_ns >= *deadline || sent_ns >= deadline + CLOCK_TOLERANCE_NS {
                    r.anomaly(
                        "started_after_deadline",
                        format!(
                            "task {id} started {} µs after its deadline, claimed by a request \
                             sent {} µs after it",
                            (started_ns - deadline) / 1000,
                            (sent_ns - deadline) / 1000
                        ),
                    );
                }
                if state == "expired" {
                    r.anomaly(
                        "expired_after_a_start",
                        format!("task {id} started, then expired"),
                    );
                }
            }
            (None, _) if state == "expired" => {
                r.anomaly("expired_without_a_deadline", format!("task {id}"));
            }
            _ => {}
        }
    }
    for id in &acknowledged {
        match finals.get(id) {
            Some(Event::Final {
                state,
                expires_ns: Some(_),
                ..
            }) if state == "expired" => r.expired += 1,
            Some(Event::Final { state, .. }) => match state.as_str() {
                "succeeded" if !claims.contains_key(id) => {
                    r.anomaly("never_ran", format!("task {id} succeeded unclaimed"));
                }
                "succeeded" => {}
                "dead" | "cancelled" => r.anomaly("not_succeeded", format!("task {id}: {state}")),
                _ => r.anomaly("lost", format!("task {id} is still {state}")),
            },
            _ => r.anomaly("lost", format!("task {id} is gone")),
        }
    }
    for ((id, attempt), n) in &accepted {
        if *n > 1 {
            r.anomaly(
                "double_completion",
                format!("task {id} attempt {attempt} completed {n} times"),
            );
        }
    }
    let mut successes: BTreeMap<i64, BTreeSet<i32>> = BTreeMap::new();
    for (id, attempt, sent_ns) in completions {
        successes.entry(id).or_default().insert(attempt);
        let later = claims
            .get(&id)
            .into_iter()
            .flatten()
            .find(|(a, claimed_ns)| *a > attempt && *claimed_ns < sent_ns);
        if let Some((a, _)) = later {
            r.anomaly(
                "stale_completion",
                format!("task {id}: attempt {attempt} completed after attempt {a} was claimed"),
            );
        }
    }
    for (id, attempts) in successes {
        if attempts.len() > 1 {
            r.anomaly(
                "succeeded_twice",
                format!("task {id} succeeded as attempts {attempts:?}"),
            );
        }
    }
    // Occurrences: by the store's final list, one task each.
    let mut occurrences: BTreeMap<(String, i64), BTreeSet<i64>> = BTreeMap::new();
    for e in finals.values() {
        if let Event::Final {
            id,
            schedule: Some(s),
            nominal_ns: Some(n),
            ..
        } = e
        {
            occurrences.entry((s.clone(), *n)).or_default().insert(*id);
        }
    }
    r.occurrences = occurrences.len();
    for ((s, n), ids) in &occurrences {
        if ids.len() > 1 {
            r.anomaly(
                "duplicate_occurrence",
                format!("{s} at {n} ns ran as tasks {ids:?}"),
            );
        }
    }
    for e in periodic {
        let Event::Periodic {
            prefix,
            count,
            period_ns,
            from_ns,
            to_ns,
        } = e
        else {
            continue;
        };
        let mut late = Vec::new();
        for i in 0..*count {
            let schedule = format!("{prefix}{i}");
            let mut t = from_ns.div_euclid(*period_ns) * period_ns;
            if t < *from_ns {
                t += period_ns;
            }
            while t <= *to_ns {
                match occurrences.get(&(schedule.clone(), t)) {
                    None => r.anomaly("missed_occurrence", format!("{schedule} at {t} ns")),
                    Some(ids) => {
                        for id in ids {
                            if let Some(Event::Final {
                                made_ns: Some(m), ..
                            }) = finals.get(id)
                            {
                                late.push((m - t).max(0));
                            }
                        }
                    }
                }
                t += period_ns;
            }
        }
        late.sort_unstable();
        if let Some(&max) = late.last() {
            r.made_late_max_ns = r.made_late_max_ns.max(max);
            let p99 = late[(late.len() * 99).div_ceil(100).saturating_sub(1)];
            r.made_late_p99_ns = r.made_late_p99_ns.max(p99);
        }
    }
    for (schedule, from_ns, to_ns) in spans {
        let mut second = from_ns.div_euclid(SECOND) * SECOND;
        while second <= to_ns {
            let down = outages.iter().any(|(a, b)| *a <= second && second <= *b);
            if !down && !occurrences.contains_key(&(schedule.clone(), second)) {
                r.anomaly("missed_second", format!("{schedule} at {second} ns"));
            }
            second += SECOND;
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed(id: i64, attempt: i32, at_ns: i64) -> Event {
        Event::Claimed {
            id,
            attempt,
            worker: "w".into(),
            server: String::new(),
            run_at_ns: 0,
            started_at_ns: at_ns,
            schedule: None,
            nominal_ns: None,
            sent_ns: at_ns,
            at_ns,
        }
    }

    /// Task 1's third attempt, claimed with a request sent at `sent_ns` and answered at `at_ns`.
    fn timed_claim(run_at_ns: i64, started_at_ns: i64, sent_ns: i64, at_ns: i64) -> Event {
        Event::Claimed {
            id: 1,
            attempt: 3,
            worker: "w".into(),
            server: String::new(),
            run_at_ns,
            started_at_ns,
            schedule: None,
            nominal_ns: None,
            sent_ns,
            at_ns,
        }
    }

    fn completed(id: i64, attempt: i32, accepted: bool, sent_ns: i64) -> Event {
        Event::Completed {
            id,
            attempt,
            worker: "w".into(),
            server: String::new(),
            accepted,
            sent_ns,
            at_ns: sent_ns + 1,
        }
    }

    fn fin(id: i64, state: &str) -> Event {
        Event::Final {
            id,
            state: state.into(),
            schedule: None,
            nominal_ns: None,
            made_ns: None,
            finished_ns: None,
            expires_ns: None,
        }
    }

    fn tick(id: i64, second: i64) -> Event {
        Event::Final {
            id,
            state: "succeeded".into(),
            schedule: Some("tick".into()),
            nominal_ns: Some(second * SECOND),
            made_ns: None,
            finished_ns: None,
            expires_ns: None,
        }
    }

    /// Two schedules every 10 s over 30 s: each occurrence has a task but one, and the
    /// lateness of those made after their time is measured.
    #[test]
    fn periodic_schedules_miss_nothing_and_are_made_on_time() {
        let task = |id: i64, name: &str, at_s: i64, made_s: i64| Event::Final {
            id,
            state: "available".into(),
            schedule: Some(name.into()),
            nominal_ns: Some(at_s * SECOND),
            made_ns: Some(made_s * SECOND),
            finished_ns: None,
            expires_ns: None,
        };
        let mut events = vec![Event::Periodic {
            prefix: "p".into(),
            count: 2,
            period_ns: 10 * SECOND,
            from_ns: 5 * SECOND,
            to_ns: 30 * SECOND,
        }];
        let mut id = 0;
        for name in ["p0", "p1"] {
            for at in [10, 20, 30] {
                id += 1;
                let made = if (name, at) == ("p1", 20) { 23 } else { at - 1 };
                events.push(task(id, name, at, made));
            }
        }
        let r = check(&events);
        assert!(r.anomalies.is_empty(), "{}", r.line());
        assert_eq!(
            (r.made_late_p99_ns, r.made_late_max_ns),
            (3 * SECOND, 3 * SECOND)
        );
        events.retain(|e| !matches!(e, Event::Final { id: 2, .. }));
        let r = check(&events);
        assert_eq!(r.anomalies["missed_occurrence"], ["p0 at 20000000000 ns"]);
    }

    /// A child claimed after its parent succeeded is clean; claimed before the parent's
    /// completion was sent, or started before the parent ended, or run while a parent failed,
    /// it is an anomaly.
    /// A task with a deadline starts before it or expires unstarted: a first start at or after
    /// it, or an expired task that started, is an anomaly; a retry after it is not.
    #[test]
    fn a_start_after_the_deadline_is_found() {
        let fin = |id: i64, state: &str, deadline_s: Option<i64>| Event::Final {
            id,
            state: state.into(),
            schedule: None,
            nominal_ns: None,
            made_ns: None,
            finished_ns: None,
            expires_ns: deadline_s.map(|s| s * SECOND),
        };
        let start = |id: i64, attempt: i32, s: i64| Event::Claimed {
            id,
            attempt,
            worker: "w".into(),
            server: String::new(),
            run_at_ns: 0,
            started_at_ns: s * SECOND,
            schedule: None,
            nominal_ns: None,
            sent_ns: s * SECOND - 1,
            at_ns: s * SECOND + 1,
        };
        let clean = vec![
            Event::Enqueued { id: 1, at_ns: 0 },
            Event::Enqueued { id: 2, at_ns: 0 },
            start(1, 1, 4),
            completed(1, 1, false, 5 * SECOND),
            start(1, 2, 9),
            completed(1, 2, true, 10 * SECOND),
            fin(1, "succeeded", Some(5)),
            fin(2, "expired", Some(5)),
        ];
        let r = check(&clean);
        assert!(r.anomalies.is_empty(), "{:?}", r.anomalies);
        assert_eq!(r.expired, 1);
        let mut late = clean.clone();
        late[2] = start(1, 1, 5);
        assert_eq!(check(&late).count("started_after_deadline"), 1);
        let mut ran = clean.clone();
        ran.push(start(2, 1, 3));
        assert_eq!(check(&ran).count("expired_after_a_start"), 1);
        let mut without = clean;
        without[7] = fin(2, "expired", None);
        assert_eq!(check(&without).count("expired_without_a_deadline"), 1);
    }

    #[test]
    fn a_child_that_starts_before_its_parent_succeeded_is_found() {
        let ended = |id: i64, state: &str, at_s: i64| Event::Final {
            id,
            state: state.into(),
            schedule: None,
            nominal_ns: None,
            made_ns: None,
            finished_ns: Some(at_s * SECOND),
            expires_ns: None,
        };
        let start = |id: i64, started_s: i64, answered_s: i64| Event::Claimed {
            id,
            attempt: 1,
            worker: "w".into(),
            server: String::new(),
            run_at_ns: 0,
            started_at_ns: started_s * SECOND,
            schedule: None,
            nominal_ns: None,
            sent_ns: started_s * SECOND,
            at_ns: answered_s * SECOND,
        };
        let waits = Event::Waits {
            child: 2,
            parents: vec![1],
        };
        let base = vec![
            waits.clone(),
            start(1, 1, 1),
            completed(1, 1, true, 2 * SECOND),
            ended(1, "succeeded", 2),
            ended(2, "succeeded", 4),
        ];
        let with = |extra: Vec<Event>, parent: Event| {
            let mut events = base.clone();
            events.retain(|e| !matches!(e, Event::Final { id: 1, .. }));
            events.push(parent);
            events.extend(extra);
            check(&events)
        };
        let r = with(vec![start(2, 3, 3)], ended(1, "succeeded", 2));
        assert!(r.anomalies.is_empty(), "{}", r.line());
        let r = with(vec![start(2, 1, 1)], ended(1, "succeeded", 2));
        assert_eq!(r.count("started_before_parent"), 1, "{}", r.line());
        assert!(r.anomalies["started_before_parent"][0].contains("completion was sent"));
        let r = with(vec![start(2, 2, 3)], ended(1, "succeeded", 3));
        assert!(r.anomalies["started_before_parent"][0].contains("before its parent 1 ended"));
        let r = with(vec![start(2, 3, 3)], ended(1, "dead", 2));
        assert!(r.anomalies["started_before_parent"][0].contains("its parent 1 is dead"));
    }

    /// A clean history, then each kind of anomaly added to it on its own.
    #[test]
    fn each_anomaly_is_found_and_a_clean_history_passes() {
        let clean = vec![
            Event::Enqueued { id: 1, at_ns: 1 },
            Event::EnqueueFailed {
                status: 503,
                at_ns: 2,
            },
            claimed(1, 1, 10),
            Event::Failed {
                request: "finish".into(),
                status: 503,
                at_ns: 10,
            },
            Event::Failed {
                request: "claim".into(),
                status: 0,
                at_ns: 10,
            },
            Event::Fault {
                kind: "kill".into(),
                at_ns: 11,
            },
            claimed(1, 2, 20),
            completed(1, 1, false, 21),
            completed(1, 2, true, 22),
            fin(1, "succeeded"),
            tick(5, 100),
            tick(6, 101),
            tick(7, 103),
            Event::Outage {
                from_ns: 102 * SECOND - 1,
                to_ns: 102 * SECOND + 1,
            },
            Event::EverySecond {
                schedule: "tick".into(),
                from_ns: 100 * SECOND,
                to_ns: 103 * SECOND,
            },
        ];
        let report = check(&clean);
        report.assert_clean();
        assert_eq!(
            (
                report.enqueued,
                report.claimed,
                report.accepted,
                report.rejected
            ),
            (1, 2, 1, 1)
        );
        assert_eq!(report.occurrences, 3);
        assert_eq!(report.unavailable, 2, "503s are counted, not anomalies");
        assert!(
            report.line().contains("faults 1 [kill=1]"),
            "{}",
            report.line()
        );

        let with = |extra: Vec<Event>, drop_final: Option<i64>| {
            let mut events: Vec<Event> = clean
                .iter()
                .filter(|e| !matches!(e, Event::Final { id, .. } if Some(*id) == drop_final))
                .cloned()
                .collect();
            events.extend(extra);
            check(&events)
        };
        let cases: Vec<(&str, Report)> = vec![
            (
                "lost",
                with(
                    vec![Event::Enqueued { id: 2, at_ns: 3 }, fin(2, "available")],
                    None,
                ),
            ),
            ("lost", with(vec![], Some(1))),
            (
                "never_ran",
                with(
                    vec![Event::Enqueued { id: 3, at_ns: 3 }, fin(3, "succeeded")],
                    None,
                ),
            ),
            (
                "not_succeeded",
                with(
                    vec![
                        Event::Enqueued { id: 4, at_ns: 3 },
                        claimed(4, 1, 4),
                        fin(4, "dead"),
                    ],
                    None,
                ),
            ),
            (
                "double_completion",
                with(vec![completed(1, 2, true, 30)], None),
            ),
            (
                "stale_completion",
                with(vec![completed(1, 1, true, 25)], None),
            ),
            (
                "succeeded_twice",
                with(vec![completed(1, 1, true, 15)], None),
            ),
            ("duplicate_occurrence", with(vec![tick(8, 101)], None)),
            ("missed_second", with(vec![], Some(6))),
            (
                "early_start",
                with(
                    vec![timed_claim(
                        2 * CLOCK_TOLERANCE_NS,
                        CLOCK_TOLERANCE_NS - 1,
                        CLOCK_TOLERANCE_NS - 2,
                        CLOCK_TOLERANCE_NS - 1,
                    )],
                    None,
                ),
            ),
            (
                "start_outside_claim",
                with(
                    vec![timed_claim(
                        0,
                        10 * CLOCK_TOLERANCE_NS,
                        12 * CLOCK_TOLERANCE_NS,
                        13 * CLOCK_TOLERANCE_NS,
                    )],
                    None,
                ),
            ),
            (
                "start_outside_claim",
                with(
                    vec![timed_claim(
                        0,
                        14 * CLOCK_TOLERANCE_NS,
                        11 * CLOCK_TOLERANCE_NS,
                        12 * CLOCK_TOLERANCE_NS,
                    )],
                    None,
                ),
            ),
            (
                "server_error",
                with(
                    vec![Event::EnqueueFailed {
                        status: 500,
                        at_ns: 41,
                    }],
                    None,
                ),
            ),
            (
                "server_error",
                with(
                    vec![Event::Failed {
                        request: "heartbeat".into(),
                        status: 502,
                        at_ns: 41,
                    }],
                    None,
                ),
            ),
        ];
        for (kind, report) in cases {
            assert!(
                report.count(kind) >= 1,
                "{kind} not found: {}",
                report.line()
            );
        }
    }

    #[test]
    fn a_torn_last_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::create(&dir.path().join("a.jsonl"));
        rec.record(&Event::Enqueued { id: 1, at_ns: 1 });
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("a.jsonl"))
            .unwrap()
            .write_all(b"{\"op\":\"enq")
            .unwrap();
        assert_eq!(
            read_dir(dir.path()),
            vec![Event::Enqueued { id: 1, at_ns: 1 }]
        );
    }
}
