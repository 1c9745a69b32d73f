//! Plans made ahead of time: which occurrences to come become tasks before their time, which
//! wait for their time, and when the schedule is planned again.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use sked_core::schedule::plan::plan;
use sked_core::{
    Ahead, CatchupPolicy, IntervalFrom, LastRun, OccurrenceOutcome, OverlapPolicy, PlanInput, Spec,
    jitter_offset, plan_ahead,
};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

/// A plan at `now` looking `ahead` seconds on, for schedule "s" with `spec`, its first
/// unplanned occurrence at `next`, these unfinished tasks, and `set` applied to the input.
fn ahead_at(
    spec: &str,
    next: i64,
    active: &[i64],
    now: i64,
    ahead: i64,
    set: impl FnOnce(&mut PlanInput<'_>),
) -> Ahead {
    let spec = Spec::parse(spec).unwrap();
    let tz = TimeZone::UTC;
    let active: Vec<sked_core::ActiveTask> = active
        .iter()
        .map(|&id| sked_core::ActiveTask::new(id, sked_core::TaskState::Running))
        .collect();
    let mut input = PlanInput {
        name: "s",
        spec: &spec,
        tz: &tz,
        anchor: t(0),
        next_fire_at: Some(t(next)),
        overlap: OverlapPolicy::Skip,
        catchup: CatchupPolicy::Latest,
        catchup_window: SignedDuration::from_hours(1),
        misfire_grace: SignedDuration::from_secs(10),
        active_tasks: &active,
        buffered: None,
        catchup_limit: 1000,
        from: IntervalFrom::Fixed,
        jitter: None,
        last_run: LastRun::default(),
        bounds: sked_core::Bounds::default(),
        runs_left: None,
        calendars: &[],
    };
    set(&mut input);
    let a = plan_ahead(&input, t(now), t(now + ahead));
    if ahead == 0 {
        assert_eq!(
            a.plan,
            plan(&input, t(now)),
            "no look-ahead is the plain plan"
        );
    }
    a
}

/// (nominal second, outcome, run second) of each line.
fn lines(a: &Ahead) -> Vec<(i64, OccurrenceOutcome, Option<i64>)> {
    let s = |t: Timestamp| t.as_second() - 1_800_000_000;
    a.plan
        .occurrences
        .iter()
        .map(|o| (s(o.nominal_at), o.outcome, o.run_at.map(s)))
        .collect()
}

use OccurrenceOutcome::{Enqueued, Skipped};

#[test]
fn the_next_run_is_made_ahead_due_at_its_time_one_at_a_time() {
    let a = ahead_at("every 10s", 10, &[], 5, 60, |i| {
        i.overlap = OverlapPolicy::Allow
    });
    assert_eq!(lines(&a), [(10, Enqueued, Some(10))]);
    assert_eq!(a.plan.next_fire_at, Some(t(20)));
    // 20 s is within the horizon already: it is made once 10 s is due, half-way to 20 s.
    assert_eq!(a.look_at, Some(t(15)));
    assert!(!a.awaits_run);
    let a = ahead_at("every 10s", 20, &[3], 15, 60, |i| {
        i.overlap = OverlapPolicy::Allow
    });
    assert_eq!(lines(&a), [(20, Enqueued, Some(20))]);
    assert_eq!(a.look_at, Some(t(25)));
    // A schedule firing less often than the horizon: looked at when the next comes within it.
    let a = ahead_at("every 100s", 100, &[], 50, 60, |_| {});
    assert_eq!(lines(&a), [(100, Enqueued, Some(100))]);
    assert_eq!(
        a.look_at,
        Some(t(150)),
        "half-way to 200 s, later than 140 s"
    );
    let a = ahead_at("every 1000s", 1000, &[], 950, 60, |_| {});
    assert_eq!(a.look_at, Some(t(1940)), "when 2000 s comes within 60 s");
}

#[test]
fn skip_makes_the_next_run_ahead_only_while_no_run_is_unfinished() {
    // Nothing unfinished: 10 s is made ahead, and 20 s looked at once 10 s is due.
    let a = ahead_at("every 10s", 10, &[], 5, 60, |_| {});
    assert_eq!(lines(&a), [(10, Enqueued, Some(10))]);
    assert_eq!((a.plan.next_fire_at, a.look_at), (Some(t(20)), Some(t(15))));
    // Then 20 s depends on whether that run ends in time: decided at 20 s at the latest, or
    // when a run ends.
    let a = ahead_at("every 10s", 20, &[7], 15, 60, |_| {});
    assert!(a.plan.occurrences.is_empty());
    assert_eq!(a.look_at, Some(t(20)));
    assert!(a.awaits_run);
    // A run unfinished: nothing is made ahead.
    for overlap in [
        OverlapPolicy::Skip,
        OverlapPolicy::BufferOne,
        OverlapPolicy::Replace,
    ] {
        let a = ahead_at("every 10s", 10, &[7], 5, 60, |i| i.overlap = overlap);
        assert!(a.plan.occurrences.is_empty(), "{overlap}");
        assert!(a.plan.cancel.is_empty(), "{overlap}");
        assert_eq!((a.plan.next_fire_at, a.look_at), (Some(t(10)), Some(t(10))));
        assert!(a.awaits_run);
    }
    // At its time it is decided as without look-ahead: skipped while the run is unfinished.
    let a = ahead_at("every 10s", 10, &[7], 10, 60, |_| {});
    assert_eq!(lines(&a)[0].1, Skipped);
}

#[test]
fn allow_n_makes_runs_ahead_while_there_is_room() {
    let a = ahead_at("every 10s", 10, &[7], 5, 60, |i| {
        i.overlap = OverlapPolicy::AllowUpTo(2)
    });
    assert_eq!(lines(&a), [(10, Enqueued, Some(10))]);
    assert_eq!((a.plan.next_fire_at, a.look_at), (Some(t(20)), Some(t(15))));
    // No room: decided at its time.
    let a = ahead_at("every 10s", 10, &[7, 8], 5, 60, |i| {
        i.overlap = OverlapPolicy::AllowUpTo(2)
    });
    assert!(a.plan.occurrences.is_empty());
    assert_eq!((a.plan.next_fire_at, a.look_at), (Some(t(10)), Some(t(10))));
    assert!(a.awaits_run);
}

#[test]
fn due_occurrences_are_planned_first_then_the_ones_to_come() {
    // 10 s is due now (and on time), 20 s and 30 s are to come.
    let a = ahead_at("every 10s", 10, &[], 12, 20, |i| {
        i.overlap = OverlapPolicy::Allow
    });
    assert_eq!(lines(&a), [(10, Enqueued, None), (20, Enqueued, Some(20))]);
    // With skip, the due run makes the next undecidable.
    let a = ahead_at("every 10s", 10, &[], 12, 20, |_| {});
    assert_eq!(lines(&a), [(10, Enqueued, None)]);
    assert_eq!(a.look_at, Some(t(20)));
}

#[test]
fn jitter_moves_runs_made_ahead_by_the_same_offset() {
    let jitter = SignedDuration::from_secs(5);
    let a = ahead_at("every 10s", 10, &[], 0, 30, |i| {
        i.overlap = OverlapPolicy::Allow;
        i.jitter = Some(jitter);
    });
    assert_eq!(a.plan.occurrences.len(), 1);
    let o = &a.plan.occurrences[0];
    assert_eq!(
        o.run_at,
        Some(o.nominal_at + jitter_offset("s", o.nominal_at, jitter))
    );
}

#[test]
fn a_buffered_run_is_released_and_the_next_waits_for_it() {
    let a = ahead_at("every 10s", 20, &[], 15, 60, |i| {
        i.overlap = OverlapPolicy::BufferOne;
        i.buffered = Some(t(10));
    });
    assert_eq!(lines(&a), [(10, Enqueued, None)]);
    assert_eq!(a.plan.buffered, None);
    assert_eq!(a.look_at, Some(t(20)));
    assert!(a.awaits_run);
}

#[test]
fn the_horizon_bounds_how_far_ahead_and_a_single_time_ends() {
    // Nothing within 30 s: look again when 100 s is 30 s away.
    let a = ahead_at("every 100s", 100, &[], 0, 30, |_| {});
    assert!(a.plan.occurrences.is_empty());
    assert_eq!(a.look_at, Some(t(70)));
    // A single time made ahead: nothing is left to plan.
    let once = format!("at {}", t(20));
    let a = ahead_at(&once, 20, &[], 0, 30, |_| {});
    assert_eq!(lines(&a), [(20, Enqueued, Some(20))]);
    assert_eq!((a.plan.next_fire_at, a.look_at), (None, None));
}

#[test]
fn intervals_from_the_last_run_are_made_ahead_once_it_ended() {
    let from = |i: &mut PlanInput<'_>| {
        i.from = IntervalFrom::LastFinish;
        i.last_run.finished_at = Some(t(5));
    };
    // Ended at 5 s: 8 s is made ahead; the one after counts from that run's end, 11 s at the
    // earliest.
    let a = ahead_at("every 3s", 6, &[], 6, 60, from);
    assert_eq!(lines(&a), [(8, Enqueued, Some(8))]);
    assert_eq!(a.look_at, Some(t(11)));
    assert!(a.awaits_run);
    // That run unfinished: look again an interval on, as without look-ahead.
    let a = ahead_at("every 3s", 11, &[9], 9, 60, from);
    assert!(a.plan.occurrences.is_empty());
    assert_eq!((a.plan.next_fire_at, a.look_at), (Some(t(12)), Some(t(12))));
}

#[test]
fn without_look_ahead_the_plan_is_the_plain_one() {
    for (spec, next, active, now, overlap) in [
        ("every 10s", 10, &[][..], 35, OverlapPolicy::Allow),
        ("every 10s", 10, &[3][..], 35, OverlapPolicy::Skip),
        ("* * * * *", 60, &[][..], 200, OverlapPolicy::BufferOne),
        ("every 7s", 1, &[1, 2][..], 40, OverlapPolicy::AllowUpTo(3)),
    ] {
        // `ahead_at` checks the plans agree when the horizon is 0.
        ahead_at(spec, next, active, now, 0, |i| i.overlap = overlap);
    }
}

#[test]
fn max_runs_ends_the_schedule_after_its_last_run() {
    // Two runs left, three due: two run, the third is not an occurrence of it any more, and
    // nothing comes after.
    let a = ahead_at("every 10s", 10, &[], 30, 60, |i| {
        i.overlap = OverlapPolicy::Allow;
        i.catchup = CatchupPolicy::All;
        i.runs_left = Some(2);
    });
    assert_eq!(lines(&a), [(10, Enqueued, None), (20, Enqueued, None)]);
    assert_eq!(a.plan.runs, 2);
    assert_eq!((a.plan.next_fire_at, a.look_at), (None, None));
    // One left: the run made ahead is the last.
    let a = ahead_at("every 10s", 10, &[], 5, 60, |i| i.runs_left = Some(1));
    assert_eq!(lines(&a), [(10, Enqueued, Some(10))]);
    assert_eq!(
        (a.plan.runs, a.plan.next_fire_at, a.look_at),
        (1, None, None)
    );
    // None left: nothing, not even a missed line.
    let a = ahead_at("every 10s", 10, &[], 5000, 60, |i| i.runs_left = Some(0));
    assert_eq!(lines(&a), []);
    assert_eq!(
        (a.plan.runs, a.plan.next_fire_at, a.look_at),
        (0, None, None)
    );
    // Skipped occurrences are not runs: with a run unfinished, the schedule goes on.
    let a = ahead_at("every 10s", 10, &[7], 10, 0, |i| i.runs_left = Some(1));
    assert_eq!(lines(&a), [(10, Skipped, None)]);
    assert_eq!((a.plan.runs, a.plan.next_fire_at), (0, Some(t(20))));
}

#[test]
fn a_run_replaced_in_the_same_plan_is_not_counted() {
    // Three due under `replace`: the last replaces the two before it, one run made.
    let a = ahead_at("every 10s", 10, &[], 30, 0, |i| {
        i.overlap = OverlapPolicy::Replace;
        i.catchup = CatchupPolicy::All;
        i.runs_left = Some(2);
    });
    assert_eq!(
        lines(&a),
        [
            (10, Skipped, None),
            (20, Skipped, None),
            (30, Enqueued, None)
        ]
    );
    assert_eq!((a.plan.runs, a.plan.next_fire_at), (1, Some(t(40))));
}

#[test]
fn bounds_keep_occurrences_between_start_and_end() {
    let bounds = |start: Option<i64>, end: Option<i64>| sked_core::Bounds {
        start_at: start.map(t),
        end_at: end.map(t),
    };
    // The stored first occurrence is before the start: the first is the start's.
    let a = ahead_at("every 10s", 10, &[], 5, 100, |i| {
        i.bounds = bounds(Some(35), None)
    });
    assert_eq!(lines(&a), [(35, Enqueued, Some(35))]);
    assert_eq!(a.plan.next_fire_at, Some(t(45)));
    // The last occurrence at the end itself runs; none after it.
    let a = ahead_at("every 10s", 40, &[], 41, 100, |i| {
        i.overlap = OverlapPolicy::Allow;
        i.bounds = bounds(None, Some(50))
    });
    assert_eq!(lines(&a), [(40, Enqueued, None), (50, Enqueued, Some(50))]);
    assert_eq!((a.plan.next_fire_at, a.look_at), (None, None));
    // Past the end when planned: nothing at all.
    let a = ahead_at("every 10s", 60, &[], 100, 100, |i| {
        i.bounds = bounds(None, Some(50))
    });
    assert_eq!(lines(&a), []);
    assert_eq!((a.plan.next_fire_at, a.look_at), (None, None));
}

#[test]
fn an_interval_from_the_last_run_stops_at_the_end() {
    let end = sked_core::Bounds {
        start_at: None,
        end_at: Some(t(25)),
    };
    // The run counted from ends at 20: the next would be at 30, after the end.
    let a = ahead_at("every 10s", 20, &[], 22, 0, |i| {
        i.from = IntervalFrom::LastFinish;
        i.last_run = LastRun {
            started_at: Some(t(18)),
            finished_at: Some(t(20)),
            running: false,
        };
        i.bounds = end;
    });
    assert_eq!(lines(&a), []);
    assert_eq!((a.plan.next_fire_at, a.look_at), (None, None));
}
