//! Materialisation plans for the schedule policies: bounded overlap, jitter, and intervals
//! counted from the previous run.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use sked_core::schedule::plan::plan;
use sked_core::{
    CatchupPolicy, IntervalFrom, LastRun, OccurrenceOutcome, OverlapPolicy, Plan, PlanInput, Spec,
    jitter_offset,
};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

/// A plan for schedule "s" with `spec`, its first unhandled occurrence at `next`, these
/// unfinished tasks, and `set` applied to the input.
fn plan_at(
    spec: &str,
    next: i64,
    active: &[i64],
    now: i64,
    set: impl FnOnce(&mut PlanInput<'_>),
) -> Plan {
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
        catchup: CatchupPolicy::All,
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
    plan(&input, t(now))
}

fn outcomes(p: &Plan) -> Vec<OccurrenceOutcome> {
    p.occurrences.iter().map(|o| o.outcome).collect()
}

#[test]
fn allow_n_runs_up_to_n_at_once_and_skips_the_rest() {
    use OccurrenceOutcome::{Enqueued, Skipped};
    // One unfinished, five due: one more may run, the other four are skipped and say why.
    let p = plan_at("every 1s", 1, &[7], 5, |i| {
        i.overlap = OverlapPolicy::AllowUpTo(2)
    });
    assert_eq!(outcomes(&p), [Enqueued, Skipped, Skipped, Skipped, Skipped]);
    assert!(
        p.occurrences[1]
            .detail
            .as_deref()
            .unwrap()
            .contains("allow:2")
    );
    // Two unfinished already: nothing more runs.
    let p = plan_at("every 1s", 1, &[7, 8], 1, |i| {
        i.overlap = OverlapPolicy::AllowUpTo(2)
    });
    assert_eq!(outcomes(&p), [Skipped]);
    assert_eq!(
        p.occurrences[0].detail.as_deref(),
        Some(
            "skipped: 2 runs were unfinished (tasks 7 running, 8 running), the most overlap allow:2 lets run at once"
        )
    );
    // `skip` names the run it waited for.
    let p = plan_at("every 1s", 1, &[7], 1, |_| {});
    assert_eq!(
        p.occurrences[0].detail.as_deref(),
        Some("skipped: the previous run had not finished (task 7, running)")
    );
    // Plain allow has no bound.
    let p = plan_at("every 1s", 1, &[7, 8], 3, |i| {
        i.overlap = OverlapPolicy::Allow
    });
    assert_eq!(outcomes(&p), [Enqueued, Enqueued, Enqueued]);
}

#[test]
fn jitter_moves_each_run_by_its_stable_offset() {
    let jitter = SignedDuration::from_secs(30);
    let p = plan_at("every 60s", 60, &[], 180, |i| {
        i.overlap = OverlapPolicy::Allow;
        i.jitter = Some(jitter);
    });
    assert_eq!(p.occurrences.len(), 3);
    for o in &p.occurrences {
        let run_at = o.run_at.expect("a jittered run time");
        assert_eq!(
            run_at,
            o.nominal_at + jitter_offset("s", o.nominal_at, jitter)
        );
        assert!(run_at >= o.nominal_at && run_at < o.nominal_at + jitter);
    }
    // Planned again later (another node, or a retry), the same run times.
    let again = plan_at("every 60s", 60, &[], 190, |i| {
        i.overlap = OverlapPolicy::Allow;
        i.jitter = Some(jitter);
    });
    assert_eq!(again.occurrences, p.occurrences);
    // Without jitter, runs are due at once.
    let plain = plan_at("every 60s", 60, &[], 60, |_| {});
    assert_eq!(plain.occurrences[0].run_at, None);
}

#[test]
fn from_last_finish_waits_for_the_run_then_counts_from_its_end() {
    let from = |i: &mut PlanInput<'_>| i.from = IntervalFrom::LastFinish;
    // Due by the grid at 3 s, but the run is unfinished: look again an interval on.
    let p = plan_at("every 3s", 3, &[1], 3, from);
    assert!(p.occurrences.is_empty());
    assert_eq!(p.next_fire_at, Some(t(6)));
    // It ended at 5 s: the next is due at 8 s, not before.
    let p = plan_at("every 3s", 6, &[], 6, |i| {
        from(i);
        i.last_run.finished_at = Some(t(5));
    });
    assert!(p.occurrences.is_empty());
    assert_eq!(p.next_fire_at, Some(t(8)));
    // At 8 s it runs, nominally at 8 s, and the next look is an interval on.
    let p = plan_at("every 3s", 8, &[], 8, |i| {
        from(i);
        i.last_run.finished_at = Some(t(5));
    });
    assert_eq!(outcomes(&p), [OccurrenceOutcome::Enqueued]);
    assert_eq!(p.occurrences[0].nominal_at, t(8));
    assert_eq!(p.next_fire_at, Some(t(11)));
    // Looked at late (a scheduler was down), it runs once, at once.
    let p = plan_at("every 3s", 8, &[], 100, |i| {
        from(i);
        i.last_run.finished_at = Some(t(5));
    });
    assert_eq!(outcomes(&p), [OccurrenceOutcome::Enqueued]);
    assert_eq!(p.next_fire_at, Some(t(103)));
}

#[test]
fn from_last_start_counts_from_the_start_and_overlaps_by_policy() {
    let from = |i: &mut PlanInput<'_>| i.from = IntervalFrom::LastStart;
    // The run is pending (not started): look again an interval on.
    let p = plan_at("every 10s", 10, &[1], 10, from);
    assert!(p.occurrences.is_empty());
    assert_eq!(p.next_fire_at, Some(t(20)));
    // It started at 14 s: due at 24 s.
    let p = plan_at("every 10s", 20, &[1], 20, |i| {
        from(i);
        i.last_run = LastRun {
            started_at: Some(t(14)),
            finished_at: None,
            running: true,
        };
    });
    assert!(p.occurrences.is_empty());
    assert_eq!(p.next_fire_at, Some(t(24)));
    // Still running at 24 s: the overlap policy skips it, and the next is an interval on.
    let p = plan_at("every 10s", 24, &[1], 24, |i| {
        from(i);
        i.last_run = LastRun {
            started_at: Some(t(14)),
            finished_at: None,
            running: true,
        };
    });
    assert_eq!(outcomes(&p), [OccurrenceOutcome::Skipped]);
    assert_eq!(p.next_fire_at, Some(t(34)));
    // At 34 s (still the same start) the stored time rules: due now, and with the run ended it
    // is enqueued.
    let p = plan_at("every 10s", 34, &[], 34, |i| {
        from(i);
        i.last_run.started_at = Some(t(14));
    });
    assert_eq!(outcomes(&p), [OccurrenceOutcome::Enqueued]);
    assert_eq!(p.occurrences[0].nominal_at, t(34));
}

#[test]
fn a_run_released_from_the_buffer_counts_for_an_interval_from_the_last_run() {
    // Nothing unfinished, one occurrence buffered: it is released, and the interval waits
    // for it instead of planning another run beside it.
    let p = plan_at("every 3s", 3, &[], 3, |i| {
        i.from = IntervalFrom::LastFinish;
        i.overlap = OverlapPolicy::BufferOne;
        i.buffered = Some(t(1));
    });
    assert_eq!(outcomes(&p), [OccurrenceOutcome::Enqueued]);
    assert_eq!(p.occurrences[0].nominal_at, t(1));
    assert_eq!(p.buffered, None);
    assert_eq!(p.next_fire_at, Some(t(6)));
}

/// A definition is written without its default fields and read back the same.
#[test]
fn a_schedule_definition_leaves_out_its_defaults() {
    use sked_core::{ScheduleDef, TaskTemplate};
    let plain = ScheduleDef::new("d", "0 9 * * *", TaskTemplate::new("digest"));
    let v = serde_json::to_value(&plain).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["name", "spec", "task"]);
    assert_eq!(serde_json::from_value::<ScheduleDef>(v).unwrap(), plain);
    let full = plain
        .tz("Europe/Berlin")
        .overlap(OverlapPolicy::Allow)
        .catchup(CatchupPolicy::None, SignedDuration::from_mins(5))
        .jitter(SignedDuration::from_secs(30))
        .pause_after_failures(3)
        .keep_retrying()
        .paused();
    let v = serde_json::to_value(&full).unwrap();
    assert_eq!(v.as_object().unwrap().len(), 11, "{v}");
    assert_eq!(serde_json::from_value::<ScheduleDef>(v).unwrap(), full);
}
