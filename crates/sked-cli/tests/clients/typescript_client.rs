//! The TypeScript client package (`clients/typescript`) against a real server: its own tests
//! under `node --test`, and its README's quick start from a project that installed it.

use std::process::Command;

use crate::client_packages::{
    checkout_copy, left_clean, node_project, quick_start, quick_start_ran, sh_block, succeeded,
};
use crate::common::Server;

const PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/typescript");

/// Whether `node` runs here; CI needs it (it drives the dashboard's browser test too).
pub(crate) fn node() -> bool {
    let ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "node is needed in CI");
        eprintln!("skipping: no node");
    }
    ok
}

#[test]
#[ignore = "slow tier"]
fn the_typescript_clients_tests_pass_against_a_real_server() {
    if !node() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let out = Command::new("node")
        .args(["--test", "test/"])
        .current_dir(PACKAGE)
        .env("SKED_URL", &server.url)
        .output()
        .unwrap();
    succeeded(&out);
}

#[test]
#[ignore = "slow tier"]
fn the_readme_quick_start_runs_from_a_project_that_installed_it() {
    if !node() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let checkout = checkout_copy(dir.path());
    let project = node_project(dir.path(), "my-app");
    let install = &sh_block(&checkout.join("clients/typescript/README.md"), 0)[0];
    assert!(install.starts_with("npm install "), "{install}");
    let npm = Command::new("sh")
        .args(["-c", install])
        .env("npm_config_audit", "false")
        .env("npm_config_fund", "false")
        .env("npm_config_offline", "true")
        .current_dir(&project)
        .output()
        .unwrap();
    succeeded(&npm);
    left_clean(&checkout);
    let run = (
        "await worker.run();",
        "await worker.run({ exitWhenIdle: 1 });",
    );
    let script = quick_start(PACKAGE, "js", &server, run);
    std::fs::write(project.join("quick.mjs"), script).unwrap();
    let run = Command::new("node")
        .arg("quick.mjs")
        .current_dir(&project)
        .output()
        .unwrap();
    succeeded(&run);
    quick_start_ran(&server);
    // The package is an ES module only, as its README says; CommonJS code loads it the way
    // the README shows.
    let readme = std::fs::read_to_string(format!("{PACKAGE}/README.md")).unwrap();
    let from_cjs = r#"const { Client } = await import("sked-client")"#;
    assert!(readme.contains("ES module only") && readme.contains(from_cjs));
    let cjs = format!("(async () => {{ {from_cjs}; console.log(typeof Client); }})();\n");
    std::fs::write(project.join("loads.cjs"), cjs).unwrap();
    let loaded = Command::new("node")
        .arg("loads.cjs")
        .current_dir(&project)
        .output()
        .unwrap();
    succeeded(&loaded);
    assert_eq!(String::from_utf8_lossy(&loaded.stdout).trim(), "function");
}

/// The hand-written declarations (`src/index.d.ts`) describe the module as a TypeScript user
/// calls it: `test/types.ts` compiles under `tsc --strict` (installed by `.ci/run` with
/// `npm ci --prefix clients/typescript`).
#[test]
fn the_declarations_type_check_under_strict_tsc() {
    let tsc = format!("{PACKAGE}/node_modules/.bin/tsc");
    if !std::path::Path::new(&tsc).exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "tsc is needed in CI (.ci/run installs it)"
        );
        eprintln!("skipping: no {tsc}; npm ci --prefix clients/typescript installs it");
        return;
    }
    let out = Command::new(&tsc)
        .args([
            "--noEmit",
            "--strict",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            "--target",
            "es2022",
            "--lib",
            "es2022,dom",
            "test/types.ts",
        ])
        .current_dir(PACKAGE)
        .output()
        .unwrap();
    succeeded(&out);
}
