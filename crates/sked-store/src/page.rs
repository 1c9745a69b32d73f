//! Pages of lists, bounded in rows and in bytes: a list of 1,000 tasks (or schedules) with
//! 1 MiB payloads would otherwise hold a gigabyte. Backends read rows one at a time into a
//! [`PageBuilder`] and stop when it is full, so that no more than a page's worth is ever in
//! memory.

use sked_core::Task;

use crate::{QueueInfo, Schedule, WorkerInfo};

/// Roughly the most bytes of items (as JSON) one page holds; a page always holds at least one
/// item, so one page may exceed this by one item.
pub const LIST_BYTES_MAX: usize = 8 << 20;

/// In lists without payloads, an error message is cut to this many characters.
pub const LEAN_ERROR_CHARS: usize = 1024;

/// One page of a list: tasks newest first, queues and schedules by name, workers most
/// recently seen first.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Whether more items match (the next page starts after the last one here).
    pub more: bool,
}

impl<T> Default for Page<T> {
    fn default() -> Page<T> {
        Page {
            items: Vec::new(),
            more: false,
        }
    }
}

/// One page of a task list.
pub type TaskPage = Page<Task>;

impl TaskPage {
    /// The `before` that asks for the next page, when more tasks match.
    pub fn next_before(&self) -> Option<sked_core::TaskId> {
        self.items.last().filter(|_| self.more).map(|t| t.id)
    }
}

impl<T: Named> Page<T> {
    /// The `after` that asks for the next page of a list by name, when more items match.
    pub fn next_after(&self) -> Option<String> {
        self.items
            .last()
            .filter(|_| self.more)
            .map(|i| i.name().to_string())
    }
}

/// What a page holds: it knows its size as JSON, about.
pub trait Listed {
    /// About how many bytes the item takes as JSON: its variable-sized parts exactly enough,
    /// plus a fixed allowance for the rest.
    fn listed_bytes(&self) -> usize;
}

/// What lists ordered by name hold: the name the next page starts after.
pub trait Named {
    /// The item's name.
    fn name(&self) -> &str;
}

/// The fixed allowance per item, for fields of bounded size.
const FIXED: usize = 512;

impl Listed for Task {
    fn listed_bytes(&self) -> usize {
        FIXED
            + json_bytes(&self.payload)
            + self.result.as_ref().map_or(0, json_bytes)
            + self.last_error.as_ref().map_or(0, String::len)
            + self.unique_key.as_ref().map_or(0, String::len)
    }
}

impl Listed for Schedule {
    fn listed_bytes(&self) -> usize {
        FIXED
            + self.name.len()
            + self.spec.len()
            + self.tz.len()
            + self.task.as_ref().map_or(0, |t| json_bytes(&t.payload))
            + self.workflow.as_ref().map_or(0, |w| {
                (w.tasks.iter())
                    .map(|t| FIXED + t.name.len() + json_bytes(&t.task.payload))
                    .sum()
            })
            + self.declared_by.as_ref().map_or(0, String::len)
    }
}

impl Named for Schedule {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Listed for QueueInfo {
    fn listed_bytes(&self) -> usize {
        FIXED + self.name.len()
    }
}

impl Named for QueueInfo {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Listed for WorkerInfo {
    fn listed_bytes(&self) -> usize {
        FIXED + self.id.len() + self.queues.iter().map(|q| q.len() + 3).sum::<usize>()
    }
}

/// Collects a page from rows read one by one: a backend asks for `limit + 1` rows and pushes
/// them until [`PageBuilder::push`] says the page is full.
#[derive(Debug)]
pub struct PageBuilder<T> {
    page: Page<T>,
    bytes: usize,
    limit: usize,
}

impl<T: Listed> PageBuilder<T> {
    /// A page of at most `limit` items (and [`LIST_BYTES_MAX`] bytes).
    pub fn new(limit: u32) -> PageBuilder<T> {
        PageBuilder {
            page: Page::default(),
            bytes: 0,
            limit: limit.max(1) as usize,
        }
    }

    /// Adds an item if the page has room; `false` when it is full (the item is then the
    /// proof that more follow, and is not kept).
    pub fn push(&mut self, item: T) -> bool {
        if self.page.items.len() >= self.limit
            || (!self.page.items.is_empty() && self.bytes >= LIST_BYTES_MAX)
        {
            self.page.more = true;
            return false;
        }
        self.bytes += item.listed_bytes();
        self.page.items.push(item);
        true
    }

    /// The page.
    pub fn finish(self) -> Page<T> {
        self.page
    }
}

fn json_bytes(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 20,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|i| json_bytes(i) + 1).sum::<usize>(),
        Value::Object(fields) => {
            2 + fields
                .iter()
                .map(|(k, v)| k.len() + 4 + json_bytes(v))
                .sum::<usize>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: i64, payload: serde_json::Value) -> Task {
        let mut t: Task = serde_json::from_value(serde_json::json!({
            "id": id, "queue": "q", "kind": "k", "payload": null, "priority": 0,
            "state": "available", "run_at": "2026-01-01T00:00:00Z", "attempt": 0,
            "max_attempts": 1, "timeout": null, "unique_key": null, "backoff": null,
            "schedule": null, "nominal_at": null, "created_at": "2026-01-01T00:00:00Z",
            "started_at": null, "finished_at": null, "lease_expires_at": null, "worker": null,
            "cancel_requested": false, "last_error": null, "result": null
        }))
        .unwrap();
        t.payload = payload;
        t
    }

    #[test]
    fn a_page_stops_at_its_limit_or_its_bytes() {
        let mut p = PageBuilder::new(2);
        assert!(p.push(task(3, serde_json::Value::Null)));
        assert!(p.push(task(2, serde_json::Value::Null)));
        assert!(!p.push(task(1, serde_json::Value::Null)));
        let page = p.finish();
        assert_eq!((page.items.len(), page.more), (2, true));

        let big = serde_json::Value::String("x".repeat(3 << 20));
        let mut p = PageBuilder::new(1000);
        let mut kept = 0;
        for id in (1..100).rev() {
            if !p.push(task(id, big.clone())) {
                break;
            }
            kept += 1;
        }
        let page = p.finish();
        assert_eq!(
            (kept, page.more),
            (3, true),
            "3 MiB each: 8 MiB is passed at the third"
        );

        // One task larger than a page still makes a page.
        let mut p = PageBuilder::new(10);
        assert!(p.push(task(1, serde_json::Value::String("x".repeat(9 << 20)))));
        let page = p.finish();
        assert_eq!((page.items.len(), page.more), (1, false));
    }
}
