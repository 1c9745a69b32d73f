//! Files of definitions in JSON or YAML. Schedules (`sked schedule apply -f FILE` and
//! `sked worker --schedules FILE`): a list of definitions, as `POST /v1/schedules` takes one,
//! or an object whose `schedules` field is that list. Workflows (`sked workflow add -f FILE`)
//! read the same way, as `POST /v1/workflows` takes one.

use std::path::Path;

use serde_json::Value;
use sked_core::ScheduleDef;

use crate::{CliError, CliResult};

/// Reads and checks the schedules of `path` (`-`: standard input); `flag` names where the path
/// came from in errors. Every bad definition is named, and the CLI exits 2.
pub(crate) fn read(flag: &str, path: &Path) -> CliResult<Vec<ScheduleDef>> {
    let shown = path.display();
    let list = match read_value(flag, path)? {
        Value::Array(list) => list,
        Value::Object(mut o) if o.len() == 1 && o.contains_key("schedules") => {
            match o.remove("schedules") {
                Some(Value::Array(list)) => list,
                _ => return Err(shape(flag, path)),
            }
        }
        _ => return Err(shape(flag, path)),
    };
    sked::api::schedule_defs(list).map_err(|e| CliError::usage(format!("{flag} {shown}: {e}")))
}

/// The JSON or YAML of `path` (`-`: standard input) as a JSON value; `flag` names where the
/// path came from in errors (exit 2).
pub(crate) fn read_value(flag: &str, path: &Path) -> CliResult<Value> {
    let shown = path.display();
    let text = match path.as_os_str() == "-" {
        true => std::io::read_to_string(std::io::stdin()),
        false => std::fs::read_to_string(path),
    }
    .map_err(|e| CliError::usage(format!("cannot read {flag} {shown}: {e}")))?;
    parse(path, &text).map_err(|e| CliError::usage(format!("invalid {flag} {shown}: {e}")))
}

/// The text as a JSON value: JSON for `.json`, YAML for `.yaml` and `.yml`; otherwise JSON if
/// it reads as JSON, else YAML.
fn parse(path: &Path, text: &str) -> Result<Value, String> {
    let yaml =
        |t: &str| yaml_serde::from_str::<Value>(t).map_err(|e| format!("not valid YAML: {e}"));
    let json =
        |t: &str| serde_json::from_str::<Value>(t).map_err(|e| format!("not valid JSON: {e}"));
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => json(text),
        Some("yaml" | "yml") => yaml(text),
        _ => json(text).or_else(|_| yaml(text)),
    }
}

fn shape(flag: &str, path: &Path) -> CliError {
    CliError::usage(format!(
        "invalid {flag} {}: expected a list of schedules, or an object with a `schedules` list",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn yaml_and_json_read_the_same() {
        let yaml = "schedules:\n  - name: digest\n    spec: '0 9 * * *'\n    tz: Europe/Berlin\n    task:\n      kind: digest\n      payload: {user: 42}\n";
        let json = r#"[{"name": "digest", "spec": "0 9 * * *", "tz": "Europe/Berlin",
                       "task": {"kind": "digest", "payload": {"user": 42}}}]"#;
        let (_a, y) = file("s.yaml", yaml);
        let (_b, j) = file("s.json", json);
        let (_c, bare) = file("schedules", json);
        let from_yaml = read("-f", &y).unwrap();
        assert_eq!(from_yaml, read("-f", &j).unwrap());
        assert_eq!(from_yaml, read("-f", &bare).unwrap());
        assert_eq!(
            from_yaml[0].task.as_ref().unwrap().payload,
            serde_json::json!({"user": 42})
        );
    }

    fn usage(r: CliResult<Vec<ScheduleDef>>) -> String {
        match r {
            Err(CliError::Usage(m)) => m,
            other => panic!("not a usage error: {other:?}"),
        }
    }

    #[test]
    fn each_bad_definition_is_named() {
        let yaml = "- name: a\n  spec: every 10s\n  task: {kind: k}\n- name: b\n  spec: '61 * * * *'\n  task: {kind: k}\n- name: a\n  spec: every 10s\n  task: {kind: k}\n";
        let (_d, path) = file("s.yml", yaml);
        let e = usage(read("-f", &path));
        assert!(e.contains("schedule \"b\""), "{e}");
        assert!(e.contains("schedule \"a\" is given twice"), "{e}");
        let (_d, path) = file("s.yml", "name: a\n");
        let e = usage(read("-f", &path));
        assert!(e.contains("expected a list of schedules"), "{e}");
        let (_d, path) = file("s.json", "[{");
        let e = usage(read("-f", &path));
        assert!(e.contains("not valid JSON"), "{e}");
    }
}
