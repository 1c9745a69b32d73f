//! Limited queues and concurrency keys, as both backends claim them: which queues take the
//! limited path, and the order in which a claim takes the tasks of a queue with a per-key
//! limit (keys in turn within a priority).

use std::collections::HashMap;

use jiff::Timestamp;
use sked_core::TaskId;

/// The condition, on a queue row `q`, of a queue whose claims take the limited path: a
/// concurrency, rate or per-key limit.
pub const LIMITED: &str = "(q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL \
    OR q.per_key_limit IS NOT NULL OR q.per_key_rate_limit IS NOT NULL)";

/// [`LIMITED`], or paused: claims do not take such a queue's tasks as they come.
pub const LIMITED_OR_PAUSED: &str = "(q.paused OR q.concurrency_limit IS NOT NULL \
    OR q.rate_limit IS NOT NULL OR q.per_key_limit IS NOT NULL \
    OR q.per_key_rate_limit IS NOT NULL)";

/// A queue's limits on each key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyLimits {
    /// Tasks of one key running at once.
    pub running: Option<u32>,
    /// Starts of one key in any window of the period.
    pub rate: Option<sked_core::RateLimit>,
    /// A key's tasks start one after another, a task that started keeping the key until it
    /// ends well ([`crate::KeyOrder::Strict`]; with `running` 1).
    pub strict: bool,
}

impl KeyLimits {
    /// Whether the queue's claims take keys in turn.
    pub fn any(&self) -> bool {
        self.running.is_some() || self.rate.is_some()
    }

    /// How many more tasks of a key may start: its running tasks and its starts in the rate's
    /// window counted; also when a key held by its rate may start again.
    pub fn room(
        &self,
        running: i64,
        starts: &[(Timestamp, u32)],
        now: Timestamp,
    ) -> (i64, Option<Timestamp>) {
        let cap = self.running.map(|n| i64::from(n) - running);
        let rate = self.rate.map(|r| r.room(starts, None, now));
        let frees_at = rate.and_then(|r| r.frees_at);
        (crate::rate::quota(cap, rate).unwrap_or(i64::MAX), frees_at)
    }
}

/// What a claim of a keyed queue counts per key: its running tasks and its starts in the
/// rate's window as read, and what this claim has taken so far (counted at lower priorities).
#[derive(Debug, Default)]
pub struct Tally {
    pub running: HashMap<String, i64>,
    pub starts: HashMap<String, Vec<(Timestamp, u32)>>,
    /// This claim's starts per key.
    pub started: HashMap<String, u32>,
    /// When the first key a rate held back may start again.
    pub held_until: Option<Timestamp>,
}

impl Tally {
    /// How many more tasks `key` may start under `limits` (a key held back notes when it
    /// frees).
    pub fn room(&mut self, limits: &KeyLimits, key: &str, now: Timestamp) -> i64 {
        let mut starts = self.starts.get(key).cloned().unwrap_or_default();
        if let Some(n) = self.started.get(key) {
            starts.push((now, *n));
        }
        let running = self.running.get(key).copied().unwrap_or(0);
        let (room, frees) = limits.room(running, &starts, now);
        if room <= 0 {
            self.held_until = crate::rate::sooner(self.held_until, frees);
        }
        room
    }

    /// Notes that the claim took a task of `key`.
    pub fn took(&mut self, key: &str) {
        *self.running.entry(key.to_owned()).or_default() += 1;
        *self.started.entry(key.to_owned()).or_default() += 1;
    }
}

/// One key's use of its queue: for why its tasks wait.
#[derive(Debug, Clone)]
pub struct KeyUsageParams {
    pub queue: String,
    pub key: String,
    /// Count the key's starts after this instant (the start of its rate's window).
    pub since: Timestamp,
    /// Also read the task that holds the key in strict order ([`KeyUsage::holder`]).
    pub strict: bool,
}

/// What [`KeyUsageParams`] asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyUsage {
    /// Its tasks running now.
    pub running: i64,
    /// Its starts since then, as logged per claim.
    pub starts: Vec<(Timestamp, u32)>,
    /// When asked ([`KeyUsageParams::strict`]): the task that holds the key in strict order,
    /// if one does (see [`KeyHolder`]), the one task of the key that may start.
    pub holder: Option<crate::Behind>,
}

/// The task that holds a key in strict order: the key's first task by id that has started
/// and not ended well, and is not running (waiting to retry or due again, or dead). While one
/// does, it is the only task of its key that may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHolder {
    pub id: TaskId,
    pub state: sked_core::TaskState,
    pub priority: i32,
    pub kind: String,
    pub run_at: Timestamp,
}

impl KeyHolder {
    /// Whether a claim at priority `level` with the filters of `p` takes it: it is available
    /// (its deadline, if any, was for its first start).
    pub fn claimable(&self, level: i64, p: &crate::TaskClaimParams) -> bool {
        self.state == sked_core::TaskState::Available
            && i64::from(self.priority) == level
            && (p.kinds.is_empty() || p.kinds.contains(&self.kind))
            && p.min_priority.is_none_or(|m| self.priority >= m)
    }

    /// It, as a held task names the task it waits for.
    pub fn behind(&self) -> crate::Behind {
        crate::Behind {
            id: self.id,
            state: self.state,
        }
    }
}

/// The condition on a task row "it holds its key in strict order" ([`KeyHolder`]), as the
/// predicate of the index that finds such tasks spells it: tasks that never started, or that
/// succeeded, are not in it, so work that does not fail costs it nothing.
pub fn holds_its_key(spelling: crate::states::Spelling) -> String {
    let states = match spelling {
        crate::states::Spelling::InList => format!("state IN {}", crate::states::KEY_HOLDING),
        crate::states::Spelling::AnyOf => crate::states::KEY_HOLDING_ANY.to_string(),
    };
    format!("concurrency_key IS NOT NULL AND attempt > 0 AND {states}")
}

/// Strict order per key needs a per-key limit of 1: a key's next task starts once the one
/// before it has ended well, so no two of a key's tasks run at once.
pub fn check_order(per_key: Option<u32>, order: crate::KeyOrder) -> crate::Result<()> {
    if order == crate::KeyOrder::Strict && per_key != Some(1) {
        let now = match per_key {
            Some(n) => format!("it is {n}"),
            None => "it has none".to_string(),
        };
        return Err(crate::StoreError::Invalid(format!(
            "strict order per key needs a per-key limit of 1 ({now}): set --per-key 1 with \
             --order strict, or --order priority first"
        )));
    }
    Ok(())
}

/// How many of a priority's first tasks a claim of a keyed queue looks through for tasks
/// without a key (they have no index of their own).
pub const UNKEYED_LOOK: i64 = 1_000;

/// The most keys one claim of a keyed queue looks at in one priority.
pub const KEYS_PER_CLAIM: usize = 1_000;

/// One key's first available tasks at one priority, in claim order (run time, then id), at
/// most what the key may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHeads {
    /// The key; `None` for the queue's tasks without one (no per-key limit applies to them).
    pub key: Option<String>,
    pub tasks: Vec<(Timestamp, TaskId)>,
}

/// The tasks a claim takes from keys at one priority, at most `take`: round by round, one task
/// of each key in turn, in the order the keys are given (the turn starting after the key the
/// previous claim served last). Returns the ids in that order and the last key served.
pub fn round_robin(heads: &[KeyHeads], take: usize) -> (Vec<TaskId>, Option<Option<String>>) {
    let mut chosen = Vec::new();
    let mut last = None;
    let rounds = heads.iter().map(|h| h.tasks.len()).max().unwrap_or(0);
    'rounds: for round in 0..rounds {
        for h in heads {
            if chosen.len() >= take {
                break 'rounds;
            }
            if let Some((_, id)) = h.tasks.get(round) {
                chosen.push(*id);
                last = Some(h.key.clone());
            }
        }
    }
    (chosen, last)
}

/// The keys in turn order: those after `cursor` (the last key served), then from the first.
pub fn in_turn(mut keys: Vec<String>, cursor: Option<&str>) -> Vec<String> {
    keys.sort_unstable();
    keys.dedup();
    let split = cursor.map_or(0, |c| keys.partition_point(|k| k.as_str() <= c));
    keys.rotate_left(split);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heads(key: &str, ids: &[i64]) -> KeyHeads {
        KeyHeads {
            key: Some(key.into()),
            tasks: ids.iter().map(|id| (Timestamp::UNIX_EPOCH, *id)).collect(),
        }
    }

    #[test]
    fn keys_take_turns_round_by_round() {
        // A has a long backlog, B two tasks, C one.
        let h = [
            heads("a", &[1, 2, 3, 4]),
            heads("b", &[10, 11]),
            heads("c", &[20]),
        ];
        assert_eq!(
            round_robin(&h, 5),
            (vec![1, 10, 20, 2, 11], Some(Some("b".to_string())))
        );
        assert_eq!(round_robin(&h, 100).0, vec![1, 10, 20, 2, 11, 3, 4]);
        assert_eq!(round_robin(&h, 0), (vec![], None));
    }

    #[test]
    fn the_turn_starts_after_the_last_key_served() {
        let keys = vec!["c".to_string(), "a".into(), "b".into(), "d".into()];
        assert_eq!(in_turn(keys.clone(), Some("b")), ["c", "d", "a", "b"]);
        assert_eq!(in_turn(keys.clone(), None), ["a", "b", "c", "d"]);
        assert_eq!(in_turn(keys.clone(), Some("bb")), ["c", "d", "a", "b"]);
        assert_eq!(in_turn(keys, Some("z")), ["a", "b", "c", "d"]);
    }
}
