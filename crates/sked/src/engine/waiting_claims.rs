//! Handing a task enqueued on this node straight to a worker that waits here for work.
//!
//! A claim that found nothing and waits (long-poll) registers here. A single task enqueued on
//! this node, due now and without a unique key, that such a waiter would take (queue, kind,
//! priority) is inserted already leased to it, in the insert's own statement, and passed over
//! a channel: enqueue-to-start is then one commit instead of an insert, a wake-up and a claim.
//! The store inserts it available instead when its queue is paused or limited; the waiter
//! then claims as usual. A waiter that has gone by the time its task arrives (its claim was
//! dropped) gets nothing: the task is given back at once (its attempt released), so it is
//! never stranded until its lease expires.
//!
//! Waiters only ever wait because their last claim found nothing they could take, so a task
//! handed over skips no task that was claimable for them then; a task made claimable elsewhere
//! in the moment before may be claimed just after the one handed over.

use std::collections::VecDeque;

use jiff::{SignedDuration, Timestamp};
use sked_core::{NewTask, Task};
use tokio::sync::oneshot;

/// A worker waiting for work, as its claim asked.
#[derive(Debug)]
pub(crate) struct Waiter {
    id: u64,
    queues: Vec<String>,
    kinds: Vec<String>,
    min_priority: Option<i32>,
    pub(crate) worker: String,
    pub(crate) lease_ttl: SignedDuration,
    pub(crate) send: oneshot::Sender<Task>,
}

impl Waiter {
    /// Whether this worker's claim would take `task`.
    fn takes(&self, task: &NewTask) -> bool {
        (self.queues.is_empty() || self.queues.contains(&task.queue))
            && (self.kinds.is_empty() || self.kinds.contains(&task.kind))
            && self.min_priority.is_none_or(|min| task.priority >= min)
    }
}

/// What a waiting claim asks for.
#[derive(Debug, Clone)]
pub(crate) struct Wanted {
    pub(crate) queues: Vec<String>,
    pub(crate) kinds: Vec<String>,
    pub(crate) min_priority: Option<i32>,
    pub(crate) worker: String,
    pub(crate) lease_ttl: SignedDuration,
}

/// The workers waiting on this node, longest-waiting first.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    next_id: u64,
    waiting: VecDeque<Waiter>,
}

impl Waiters {
    /// Registers a waiting claim; its ticket and where a task handed to it arrives.
    pub(crate) fn wait(&mut self, wanted: Wanted) -> (u64, oneshot::Receiver<Task>) {
        // Claims dropped while they waited (a client that went away) leave here.
        self.waiting.retain(|w| !w.send.is_closed());
        let (send, receive) = oneshot::channel();
        self.next_id += 1;
        self.waiting.push_back(Waiter {
            id: self.next_id,
            queues: wanted.queues,
            kinds: wanted.kinds,
            min_priority: wanted.min_priority,
            worker: wanted.worker,
            lease_ttl: wanted.lease_ttl,
            send,
        });
        (self.next_id, receive)
    }

    /// How many claims wait (those whose caller is still there).
    pub(crate) fn count(&self) -> usize {
        self.waiting.iter().filter(|w| !w.send.is_closed()).count()
    }

    /// Removes a waiting claim; false when a task is already on its way to it.
    pub(crate) fn leave(&mut self, id: u64) -> bool {
        let before = self.waiting.len();
        self.waiting.retain(|w| w.id != id);
        self.waiting.len() < before
    }

    /// Takes the longest-waiting claim that would take `task`, if `task` can be handed over at
    /// `now` at all (due, no unique key, no parents). Claims whose receiver is gone are dropped
    /// on the way.
    pub(crate) fn take_for(&mut self, task: &NewTask, now: Timestamp) -> Option<Waiter> {
        if task.unique_key.is_some()
            || task.run_at.is_some_and(|at| at > now)
            || !task.depends_on.is_empty()
            || task.batch.is_some()
        {
            return None;
        }
        self.waiting.retain(|w| !w.send.is_closed());
        let i = self.waiting.iter().position(|w| w.takes(task))?;
        self.waiting.remove(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(queues: &[&str], kinds: &[&str], min_priority: Option<i32>) -> Wanted {
        Wanted {
            queues: queues.iter().map(|q| q.to_string()).collect(),
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            min_priority,
            worker: "w".into(),
            lease_ttl: SignedDuration::from_secs(30),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    #[test]
    fn a_task_goes_to_the_longest_waiting_claim_that_takes_it() {
        let mut w = Waiters::default();
        let (mail, _r1) = w.wait(wanted(&["mail"], &[], None));
        let (any, _r2) = w.wait(wanted(&[], &[], None));
        let (any_later, _r3) = w.wait(wanted(&[], &[], None));
        let task = NewTask::new("report");
        assert_eq!(w.take_for(&task, now()).map(|w| w.id), Some(any));
        assert_eq!(w.take_for(&task, now()).map(|w| w.id), Some(any_later));
        assert!(
            w.take_for(&task, now()).is_none(),
            "mail takes no default task"
        );
        let mut mail_task = NewTask::new("send");
        mail_task.queue = "mail".into();
        assert_eq!(w.take_for(&mail_task, now()).map(|w| w.id), Some(mail));
    }

    #[test]
    fn kinds_priorities_due_times_keys_parents_and_gone_claims() {
        let mut w = Waiters::default();
        let (_, r) = w.wait(wanted(&[], &["a"], Some(5)));
        let mut t = NewTask::new("b");
        t.priority = 9;
        assert!(w.take_for(&t, now()).is_none(), "another kind");
        let mut t = NewTask::new("a");
        t.priority = 4;
        assert!(
            w.take_for(&t, now()).is_none(),
            "below the claim's priority"
        );
        t.priority = 5;
        t.run_at = Some(now() + SignedDuration::from_secs(1));
        assert!(w.take_for(&t, now()).is_none(), "due later");
        t.run_at = Some(now());
        t.unique_key = Some("k".into());
        assert!(w.take_for(&t, now()).is_none(), "a unique key");
        t.unique_key = None;
        t.depends_on = vec![7];
        assert!(w.take_for(&t, now()).is_none(), "parents to wait for");
        t.depends_on = vec![];
        drop(r);
        assert!(w.take_for(&t, now()).is_none(), "the claim is gone");
        let (id, _r) = w.wait(wanted(&[], &[], None));
        assert!(w.leave(id));
        assert!(!w.leave(id), "left already");
    }
}
