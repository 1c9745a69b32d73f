//! `sked server --tokens FILE`: tokens with names and scopes. A `read` token reads and cannot
//! enqueue, an `enqueue` token cannot cancel, a `work` token claims and cannot pause queues, a
//! wrong token gets 401; changes are logged with the token's name and no secret is logged.

use std::process::Command;

use serde_json::Value;

use crate::common::{SKED, Server, http_call};

const READ: &str = "read-0123456789abcdef";
const ENQUEUE: &str = "enqueue-0123456789abcdef";
const WORK: &str = "work-0123456789abcdef";
const ADMIN: &str = "admin:0123456789abcdef";

/// One request with `token` as its bearer: the status and the body as JSON (null if none).
fn call(server: &Server, method: &str, path: &str, token: &str, body: &str) -> (u16, Value) {
    let bearer = format!("Bearer {token}");
    http_call(
        &server.url,
        method,
        path,
        &[("Authorization", &bearer)],
        body,
    )
}

#[test]
fn each_token_does_what_its_scopes_allow_and_changes_are_logged_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(
        &file,
        format!(
            "# the team's tokens\nreader:read:{READ}\nci:enqueue:{ENQUEUE}\n\
             runner:work:{WORK}\nops:admin:{ADMIN}\n"
        ),
    )
    .unwrap();
    let server = Server::start(dir.path(), &["--tokens", file.to_str().unwrap()]);
    let task = r#"{"kind": "noop", "run_at": "2099-01-01T00:00:00Z"}"#;

    assert_eq!(call(&server, "GET", "/v1/tasks", READ, "").0, 200);
    let (status, refused) = call(&server, "POST", "/v1/tasks", READ, task);
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["error"]["code"], "forbidden", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("reader") && message.contains("enqueue"),
        "{message}"
    );

    let (status, added) = call(&server, "POST", "/v1/tasks", ENQUEUE, task);
    assert!(status == 200 || status == 201, "{status} {added}");
    let id = added["id"].as_i64().unwrap();
    let cancel = format!("/v1/tasks/{id}/cancel");
    let (status, refused) = call(&server, "POST", &cancel, ENQUEUE, "{}");
    assert_eq!(status, 403, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("admin")
    );

    let claim = r#"{"worker": "w1", "max": 1}"#;
    let (status, claimed) = call(&server, "POST", "/v1/claim", WORK, claim);
    assert_eq!(status, 200, "{claimed}");
    let pause = "/v1/queues/default/pause";
    assert_eq!(call(&server, "POST", pause, WORK, "{}").0, 403);
    assert_eq!(
        call(&server, "GET", "/v1/tasks", WORK, "").0,
        403,
        "work does not read"
    );

    for wrong in ["read-0123456789abcdeX", "", "ops"] {
        assert_eq!(
            call(&server, "GET", "/v1/tasks", wrong, "").0,
            401,
            "{wrong:?}"
        );
    }

    let (status, cancelled) = call(&server, "POST", &cancel, ADMIN, "{}");
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(call(&server, "POST", pause, ADMIN, "{}").0, 200);
    // The CLI sends its --token the same way.
    let out = server.sked(&["--token", READ, "task", "get", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = server.sked(&["--token", READ, "queue", "resume", "default"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "refused by the server, as a 4xx is"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("admin"));

    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    let audit: Vec<&str> = log.lines().filter(|l| l.contains("sked::audit")).collect();
    assert!(
        audit
            .iter()
            .any(|l| l.contains("ops") && l.contains(&cancel)),
        "no audit line for the cancel:\n{log}"
    );
    assert!(audit.iter().any(|l| l.contains("ops") && l.contains(pause)));
    for secret in [READ, ENQUEUE, WORK, ADMIN, "0123456789abcdef"] {
        assert!(!log.contains(secret), "the log holds a secret:\n{log}");
    }
}

#[test]
fn bad_tokens_files_are_refused_before_the_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("sked.db").display());
    let file = dir.path().join("tokens");
    for (text, says) in [
        ("ci:deploy:0123456789abcdef\n", "line 1: unknown scope"),
        ("# none\n", "no token"),
        ("ci:read:short\n", "at least 16"),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = Command::new(SKED)
            .args(["server", "--db", &db, "--tokens", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--tokens") && err.contains(says),
            "{text:?}: {err}"
        );
    }
    std::fs::write(&file, format!("ops:admin:{ADMIN}\n")).unwrap();
    let out = Command::new(SKED)
        .args(["server", "--db", &db, "--tokens", file.to_str().unwrap()])
        .args(["--token", "another-secret-0123456789"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("both given"));
    assert!(!dir.path().join("sked.db").exists(), "nothing was created");
}
