//! A workflow: tasks made together, all or nothing, that wait for one another by names of
//! their own. Checking one (names, references, cycles) and the order to insert it in.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::SpecError;
use crate::new_task::{MAX_PARENTS, NewTask, validate_name};

/// A workflow's id.
pub type WorkflowId = i64;

/// The most tasks one workflow may have.
pub const MAX_WORKFLOW_TASKS: usize = 100_000;

/// The most dependencies (`after` names and `depends_on` ids together) one workflow may have.
pub const MAX_WORKFLOW_EDGES: usize = 1_000_000;

/// A workflow to create. Read from a JSON object only (serde would read a struct from an
/// array too).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(try_from = "serde_json::Map<String, serde_json::Value>")]
pub struct NewWorkflow {
    /// A label for people (not unique), like a kind: 1 to 128 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Name>))]
    pub name: Option<String>,
    /// Its tasks, 1 to 100,000, each with a name of its own in the workflow.
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 100000))]
    pub tasks: Vec<WorkflowTask>,
}

/// One task of a workflow: a task as `POST /v1/tasks` takes it, a name, and the names of the
/// tasks of the same workflow it waits for.
/// Its OpenAPI schema is [`NewTask`]'s with `name` and `after` among its properties
/// (`crate::openapi`): an `allOf` of the two would admit no object, each refusing the other's
/// fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "serde_json::Map<String, serde_json::Value>")]
pub struct WorkflowTask {
    /// Its name in the workflow: 1 to 128 characters, no whitespace or '/'.
    pub name: String,
    /// Tasks of this workflow, by name, that must succeed before this one starts (as its
    /// `depends_on` does with ids, which it may have too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    #[serde(flatten)]
    pub task: NewTask,
}

/// [`NewWorkflow`]'s fields as an object holds them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkflowFields {
    #[serde(default)]
    name: Option<String>,
    tasks: Vec<WorkflowTask>,
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for NewWorkflow {
    type Error = serde_json::Error;

    fn try_from(m: serde_json::Map<String, serde_json::Value>) -> Result<Self, Self::Error> {
        let f: WorkflowFields = serde_json::from_value(serde_json::Value::Object(m))?;
        Ok(NewWorkflow {
            name: f.name,
            tasks: f.tasks,
        })
    }
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for WorkflowTask {
    type Error = String;

    /// `name` and `after` taken out, the rest read as a [`NewTask`], unknown fields refused.
    fn try_from(mut m: serde_json::Map<String, serde_json::Value>) -> Result<Self, String> {
        let name = match m.remove("name") {
            Some(serde_json::Value::String(s)) => s,
            Some(_) => return Err("a workflow task's name must be a string".into()),
            None => return Err("a workflow task has no name".into()),
        };
        let after = match m.remove("after") {
            None => Vec::new(),
            Some(v) => serde_json::from_value(v)
                .map_err(|_| format!("task {name:?}: after must be a list of task names"))?,
        };
        let task = serde_json::from_value(serde_json::Value::Object(m))
            .map_err(|e| format!("task {name:?}: {e}"))?;
        Ok(WorkflowTask { name, after, task })
    }
}

impl WorkflowTask {
    /// A task of a workflow named `name`, waiting for the tasks named in `after`.
    pub fn new(
        name: impl Into<String>,
        task: NewTask,
        after: impl IntoIterator<Item = impl Into<String>>,
    ) -> WorkflowTask {
        WorkflowTask {
            name: name.into(),
            after: after.into_iter().map(Into::into).collect(),
            task,
        }
    }
}

/// Lists of indexes into a workflow's tasks: one per layer, or one per task.
pub type IndexLists = Vec<Vec<usize>>;

impl NewWorkflow {
    /// A workflow of these tasks, without a label.
    pub fn new(tasks: Vec<WorkflowTask>) -> NewWorkflow {
        NewWorkflow { name: None, tasks }
    }

    /// With this label.
    pub fn name(mut self, name: impl Into<String>) -> NewWorkflow {
        self.name = Some(name.into());
        self
    }

    /// Checks the workflow and answers its tasks in layers: the tasks of each layer wait only
    /// for tasks of the layers before it (the first waits for none in the workflow), each
    /// layer in the order given. Every task is checked as an enqueue checks it; a workflow's
    /// tasks may have neither a unique key nor a debounce (they are made together, whatever
    /// other tasks hold). A name given twice, an unknown name in `after` and a cycle are
    /// errors naming them.
    pub fn layers(&self) -> Result<Vec<Vec<usize>>, SpecError> {
        self.layers_and_parents().map(|(layers, _)| layers)
    }

    /// [`layers`](Self::layers), and each task's parents in the workflow as indexes into
    /// `tasks`, in the order its `after` names them.
    pub fn layers_and_parents(&self) -> Result<(IndexLists, IndexLists), SpecError> {
        if let Some(name) = &self.name {
            validate_name("workflow name", name)?;
        }
        let n = self.tasks.len();
        if n == 0 {
            return Err(SpecError::new("a workflow needs at least one task"));
        }
        if n > MAX_WORKFLOW_TASKS {
            return Err(SpecError::new(format!(
                "a workflow has at most {MAX_WORKFLOW_TASKS} tasks, not {n}"
            )));
        }
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(n);
        let mut edges = 0usize;
        for (i, t) in self.tasks.iter().enumerate() {
            validate_name("task name", &t.name)?;
            if index.insert(&t.name, i).is_some() {
                return Err(SpecError::new(format!(
                    "the workflow names two tasks {:?}",
                    t.name
                )));
            }
            let named =
                |e: SpecError| SpecError::new(format!("task {:?}: {}", t.name, e.message()));
            t.task.validate().map_err(named)?;
            if t.task.unique_key.is_some() {
                return Err(named(SpecError::new(
                    "a workflow's task cannot have a unique key: its tasks are made together",
                )));
            }
            edges += t.after.len() + t.task.depends_on.len();
            if t.after.len() + t.task.depends_on.len() > MAX_PARENTS {
                return Err(named(SpecError::new(format!(
                    "it waits for more than {MAX_PARENTS} tasks"
                ))));
            }
        }
        if edges > MAX_WORKFLOW_EDGES {
            return Err(SpecError::new(format!(
                "a workflow has at most {MAX_WORKFLOW_EDGES} dependencies, not {edges}"
            )));
        }
        let mut parents: Vec<Vec<usize>> = Vec::with_capacity(n);
        // Which task last named each task in its `after`: a name given twice is found at once,
        // however many a fan-in names.
        let mut named_by = vec![usize::MAX; n];
        for (i, t) in self.tasks.iter().enumerate() {
            let mut mine = Vec::with_capacity(t.after.len());
            for a in &t.after {
                let Some(&p) = index.get(a.as_str()) else {
                    return Err(SpecError::new(format!(
                        "task {:?} waits for {a:?}, which the workflow does not name",
                        t.name
                    )));
                };
                if std::mem::replace(&mut named_by[p], i) == i {
                    return Err(SpecError::new(format!(
                        "task {:?} names {a:?} twice in after",
                        t.name
                    )));
                }
                mine.push(p);
            }
            parents.push(mine);
        }
        let layers = layer(&parents);
        let placed: usize = layers.iter().map(Vec::len).sum();
        if placed < n {
            let cycle = find_cycle(&parents, &layers);
            let names: Vec<&str> = cycle.iter().map(|&i| self.tasks[i].name.as_str()).collect();
            return Err(SpecError::new(format!(
                "the workflow has a cycle: {}",
                names.join(" → ")
            )));
        }
        Ok((layers, parents))
    }
}

/// The tasks in layers by their parents (Kahn's algorithm, a layer at a time); tasks on or
/// behind a cycle are in none.
fn layer(parents: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = parents.len();
    let mut left: Vec<usize> = parents.iter().map(Vec::len).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (c, ps) in parents.iter().enumerate() {
        for &p in ps {
            children[p].push(c);
        }
    }
    let mut layers = Vec::new();
    let mut ready: Vec<usize> = (0..n).filter(|&i| left[i] == 0).collect();
    while !ready.is_empty() {
        let mut next = Vec::new();
        for &i in &ready {
            for &c in &children[i] {
                left[c] -= 1;
                if left[c] == 0 {
                    next.push(c);
                }
            }
        }
        next.sort_unstable();
        layers.push(std::mem::replace(&mut ready, next));
    }
    layers
}

/// A cycle among the tasks `layers` left out, first task repeated at the end: from any of
/// them, parents left out too lead back into a cycle.
fn find_cycle(parents: &[Vec<usize>], layers: &[Vec<usize>]) -> Vec<usize> {
    let mut placed = vec![false; parents.len()];
    for &i in layers.iter().flatten() {
        placed[i] = true;
    }
    let start = (0..parents.len())
        .find(|&i| !placed[i])
        .expect("a task is left out");
    let mut seen_at: HashMap<usize, usize> = HashMap::new();
    let mut path = Vec::new();
    let mut at = start;
    loop {
        if let Some(&k) = seen_at.get(&at) {
            let mut cycle: Vec<usize> = path[k..].to_vec();
            // Walked child to parent: turn it round to read in the order tasks run, from the
            // task given first.
            cycle.reverse();
            let first = (0..cycle.len()).min_by_key(|&k| cycle[k]).unwrap_or(0);
            cycle.rotate_left(first);
            cycle.push(cycle[0]);
            return cycle;
        }
        seen_at.insert(at, path.len());
        path.push(at);
        at = *parents[at]
            .iter()
            .find(|&&p| !placed[p])
            .expect("a task left out waits for another left out");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wf(tasks: &[(&str, &[&str])]) -> NewWorkflow {
        NewWorkflow::new(
            tasks
                .iter()
                .map(|(name, after)| {
                    WorkflowTask::new(*name, NewTask::new("k"), after.iter().copied())
                })
                .collect(),
        )
    }

    fn err(w: &NewWorkflow) -> String {
        w.layers().unwrap_err().message().to_string()
    }

    #[test]
    fn layers_follow_the_dependencies_in_the_order_given() {
        let w = wf(&[
            ("load", &["t2", "t1"]),
            ("t1", &["extract"]),
            ("extract", &[]),
            ("t2", &["extract"]),
            ("alone", &[]),
        ]);
        assert_eq!(w.layers().unwrap(), vec![vec![2, 4], vec![1, 3], vec![0]]);
    }

    #[test]
    fn a_cycle_is_named_in_the_order_it_runs() {
        let w = wf(&[("a", &["c"]), ("b", &["a"]), ("c", &["b"]), ("d", &["a"])]);
        assert_eq!(err(&w), "the workflow has a cycle: a → b → c → a");
        let w = wf(&[("a", &["a"])]);
        assert_eq!(err(&w), "the workflow has a cycle: a → a");
    }

    #[test]
    fn unknown_twice_named_and_bad_tasks_are_named() {
        assert_eq!(
            err(&wf(&[("a", &["nope"])])),
            "task \"a\" waits for \"nope\", which the workflow does not name"
        );
        assert_eq!(
            err(&wf(&[("a", &[]), ("a", &[])])),
            "the workflow names two tasks \"a\""
        );
        assert_eq!(
            err(&wf(&[("a", &[]), ("b", &["a", "a"])])),
            "task \"b\" names \"a\" twice in after"
        );
        assert_eq!(err(&wf(&[])), "a workflow needs at least one task");
        let mut w = wf(&[("a", &[])]);
        w.tasks[0].task.max_attempts = 0;
        assert_eq!(
            err(&w),
            "task \"a\": max_attempts must be at least 1, got 0"
        );
        w.tasks[0].task.max_attempts = 1;
        w.tasks[0].task.unique_key = Some("k".into());
        assert!(err(&w).starts_with("task \"a\": a workflow's task cannot have a unique key"));
        assert!(err(&wf(&[("has space", &[])])).contains("whitespace"));
    }

    #[test]
    fn json_takes_name_and_after_beside_the_task_fields_and_refuses_unknown_ones() {
        let w: NewWorkflow = serde_json::from_value(serde_json::json!({
            "name": "nightly",
            "tasks": [
                {"name": "extract", "kind": "e", "payload": {"x": 1}},
                {"name": "load", "kind": "l", "after": ["extract"], "depends_on": [7]}
            ]
        }))
        .unwrap();
        assert_eq!(w.name.as_deref(), Some("nightly"));
        assert_eq!(w.tasks[1].after, vec!["extract"]);
        assert_eq!(w.tasks[1].task.depends_on, vec![7]);
        assert_eq!(w.tasks[0].task.payload, serde_json::json!({"x": 1}));
        // Written back as read.
        let again: NewWorkflow = serde_json::from_value(serde_json::to_value(&w).unwrap()).unwrap();
        assert_eq!(again, w);
        let bad = serde_json::from_value::<NewWorkflow>(serde_json::json!({
            "tasks": [{"name": "a", "kind": "k", "paylod": 1}]
        }));
        let e = bad.unwrap_err().to_string();
        assert!(e.contains("task \"a\"") && e.contains("paylod"), "{e}");
        let bad = serde_json::from_value::<NewWorkflow>(serde_json::json!([
            null,
            [{"name": "a", "kind": "k"}]
        ]));
        assert!(bad.is_err(), "an array is no workflow");
        let bad = serde_json::from_value::<NewWorkflow>(serde_json::json!({
            "tasks": [{"name": "a", "kind": "k"}], "colour": 1
        }));
        assert!(bad.unwrap_err().to_string().contains("colour"));
        let bad = serde_json::from_value::<NewWorkflow>(serde_json::json!({
            "tasks": [{"name": "a", "kind": "k", "after": null}]
        }));
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("after must be a list")
        );
        let bad =
            serde_json::from_value::<NewWorkflow>(serde_json::json!({"tasks": [{"kind": "k"}]}));
        assert!(bad.unwrap_err().to_string().contains("has no name"));
    }
}
