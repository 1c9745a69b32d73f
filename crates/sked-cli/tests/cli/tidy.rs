//! Tidy checks over the workspace's sources, run as an ordinary test.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "node_modules") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_file_starts_with_a_doc_line_and_has_no_dbg() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    rust_files(crates, &mut files);
    assert!(files.len() > 20, "found only {} files", files.len());
    let dbg = ["dbg", "!("].concat();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.starts_with("//!"),
            "{} must start with a `//!` line saying what it is",
            f.display()
        );
        assert!(
            !text.contains(&dbg),
            "{} contains a stray {dbg}",
            f.display()
        );
    }
}

/// Each workspace crate's layer: a crate may depend (in its normal dependencies) only on crates
/// of lower layers. The backends are one layer and must not know each other.
const LAYERS: &[(&str, u32)] = &[
    ("sked-core", 0),
    ("sked-store", 1),
    ("sked-sqlite", 2),
    ("sked-postgres", 2),
    ("sked", 3),
    ("sked-server", 4),
    ("sked-cli", 5),
];

/// Crates and features that only tests use: no normal dependency may bring them in.
const TEST_ONLY: &[&str] = &["tempfile"];
const TEST_ONLY_FEATURES: &[&str] = &["testing", "conformance"];

fn workspace_metadata() -> serde_json::Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

fn layer(name: &str) -> Option<u32> {
    LAYERS.iter().find(|(n, _)| *n == name).map(|(_, l)| *l)
}

#[test]
fn crates_depend_only_downward_and_ship_no_test_support() {
    let meta = workspace_metadata();
    let packages = meta["packages"].as_array().expect("packages");
    assert_eq!(
        packages.len(),
        LAYERS.len(),
        "a crate was added or removed: give it a layer in LAYERS"
    );
    for p in packages {
        let name = p["name"].as_str().unwrap();
        let own = layer(name).unwrap_or_else(|| panic!("crate {name} has no layer in LAYERS"));
        for d in p["dependencies"].as_array().unwrap() {
            if !d["kind"].is_null() {
                continue; // dev- and build-dependencies
            }
            let dep = d["name"].as_str().unwrap();
            assert!(
                !TEST_ONLY.contains(&dep),
                "{name} depends on {dep}, which only tests use: make it a dev-dependency"
            );
            for f in d["features"].as_array().unwrap() {
                let f = f.as_str().unwrap();
                assert!(
                    !TEST_ONLY_FEATURES.contains(&f),
                    "{name} enables {dep}'s test-only feature {f} in a normal dependency"
                );
            }
            if let Some(theirs) = layer(dep) {
                assert!(
                    theirs < own,
                    "{name} (layer {own}) depends on {dep} (layer {theirs}): dependencies point down"
                );
            }
        }
        if name == "sked" {
            for d in p["dependencies"].as_array().unwrap() {
                let dep = d["name"].as_str().unwrap();
                if dep == "sked-sqlite" || dep == "sked-postgres" {
                    assert!(
                        !d["kind"].is_null() || d["optional"] == true,
                        "sked must build {dep} only behind its cargo feature"
                    );
                }
            }
        }
    }
}

/// Whether `text` (just after a string literal's opening quote) starts with an SQL keyword
/// followed by a space or a line break.
fn starts_with_sql(text: &str) -> Option<&'static str> {
    const KEYWORDS: &[&str] = &["SELECT", "INSERT", "UPDATE", "DELETE", "VACUUM", "WITH"];
    let text = text.trim_start_matches([' ', '\n', '\\']);
    KEYWORDS.iter().copied().find(|k| {
        text.strip_prefix(k)
            .is_some_and(|rest| rest.starts_with([' ', '\n', '\\', '(']))
    })
}

#[test]
fn no_sql_outside_the_store_crates() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for krate in ["sked", "sked-server", "sked-cli"] {
        rust_files(&crates.join(krate), &mut files);
    }
    assert!(files.len() > 30, "found only {} files", files.len());
    // This file holds examples of what it looks for; pg_secrets.rs sets up and inspects a
    // private PostgreSQL cluster (its roles, its TLS sessions) through psql, and the fault
    // tests' formation.rs configures its pg_auto_failover monitor, not sked's tables;
    // sql_enqueue.rs is about SQL: programs in other languages calling `sked_enqueue`.
    files.retain(|f| {
        !f.ends_with("tidy.rs")
            && !f.ends_with("pg_secrets.rs")
            && !f.ends_with("formation.rs")
            && !f.ends_with("tests/sql_enqueue.rs")
    });
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, _) in text.match_indices('"') {
            if let Some(k) = starts_with_sql(&text[i + 1..]) {
                let line = text[..i].lines().count();
                panic!(
                    "{}:{line}: a string literal starts with {k}: SQL belongs in the store crates",
                    f.display()
                );
            }
        }
    }
}

/// State groups in SQL come from `sked_store::states`, so that every statement spells them the
/// same way (SQLite matches a partial index's predicate only word for word).
#[test]
fn backends_spell_no_state_list_of_their_own() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for krate in ["sked-store", "sked-sqlite", "sked-postgres"] {
        rust_files(&crates.join(krate).join("src"), &mut files);
    }
    assert!(files.len() > 20, "found only {} files", files.len());
    // Where the lists are defined, and the count predicates tested against them.
    files.retain(|f| !f.ends_with("states.rs") && !f.ends_with("counts.rs"));
    let list = ["IN (", "'"].concat();
    let disjunction = ["OR state = ", "'"].concat();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            assert!(
                !line.contains(&list) && !line.contains(&disjunction),
                "{}:{}: a state list spelled out; use sked_store::states",
                f.display(),
                n + 1
            );
        }
    }
}

#[test]
fn the_sql_check_sees_sql_and_not_http_methods() {
    assert_eq!(starts_with_sql("SELECT 1\""), Some("SELECT"));
    assert_eq!(
        starts_with_sql("\\\n  UPDATE sked_tasks SET"),
        Some("UPDATE")
    );
    assert_eq!(starts_with_sql("WITH x AS (…)"), Some("WITH"));
    assert_eq!(starts_with_sql("DELETE\", \"/v1/schedules\""), None);
    assert_eq!(starts_with_sql("With a note"), None);
}

/// The CLI reads the API through typed values (`sked::api`), never JSON by key. (The
/// benchmarks build their result lines as JSON; they read none.)
#[test]
fn the_cli_reads_no_json_by_key() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.retain(|f| !f.components().any(|c| c.as_os_str() == "bench"));
    assert!(files.len() >= 5, "found only {} files", files.len());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let indexed = line.match_indices("[\"").any(|(i, _)| {
                line[..i]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ']' || c == ')')
            });
            assert!(
                !indexed && !line.contains("as_object") && !line.contains(".as_array()"),
                "{}:{}: JSON read by key; use the typed values of sked::api",
                f.display(),
                n + 1
            );
        }
    }
}

/// Benchmark code (ceilings, the database's counters, held snapshots) lives in modules named
/// `bench`, each declared behind the `bench` feature, so that a build without the feature
/// links none of it; no other source file names it.
#[test]
fn benchmark_code_is_behind_the_bench_feature() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(crates).unwrap() {
        rust_files(&entry.unwrap().path().join("src"), &mut files);
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut gated = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let mut previous = "";
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line == "mod bench;" || line == "pub mod bench;" {
                assert_eq!(
                    previous,
                    "#[cfg(feature = \"bench\")]",
                    "{}:{}: `mod bench` without the feature gate",
                    f.display(),
                    i + 1
                );
                gated += 1;
            }
            if !line.is_empty() {
                previous = line;
            }
        }
        let in_bench = f
            .components()
            .any(|c| c.as_os_str() == "bench" || c.as_os_str() == "bench.rs");
        if !in_bench {
            for name in ["Ceiling", "ceiling(", "hold_snapshot", "Diagnostics"] {
                assert!(
                    !text.contains(name),
                    "{}: names `{name}` outside a `bench` module",
                    f.display()
                );
            }
        }
    }
    // sked-store, sked-sqlite, sked-postgres and the CLI.
    assert_eq!(gated, 4, "`mod bench` declarations found");
}

/// The scripts drive sked and its benchmarks. They may ask the database server about itself
/// (its statement statistics, its databases, its extensions); the SQL of sked's tables, and of
/// experiments with them, lives in the store crates.
#[test]
fn the_scripts_hold_no_sql_of_skeds_tables() {
    const KEYWORDS: &[&str] = &[
        "SELECT ",
        "INSERT INTO",
        "UPDATE ",
        "DELETE FROM",
        "CREATE ",
    ];
    const ABOUT_THE_SERVER: &[&str] = &["pg_stat_statements", "pg_database", "EXTENSION"];
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let mut seen = 0;
    for entry in std::fs::read_dir(scripts).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        seen += 1;
        for (i, line) in text.lines().enumerate() {
            let sql = KEYWORDS.iter().any(|k| line.contains(k));
            assert!(
                !sql || ABOUT_THE_SERVER.iter().any(|s| line.contains(s)),
                "{}:{}: SQL in a script (it belongs in a store crate): {line}",
                path.display(),
                i + 1
            );
        }
    }
    assert!(seen >= 2, "found {seen} scripts");
}

/// The README can be followed to embed sked: its `Cargo.toml` line, from a project beside the
/// checkout, names the `sked` crate and features it has; its feature table lists features the
/// crate has; and no manifest carries a placeholder address.
#[test]
fn the_readme_can_be_followed_to_embed_sked() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let block = readme
        .split("```toml\n")
        .nth(1)
        .expect("the README shows the Cargo.toml lines that depend on sked");
    let block = &block[..block.find("```").unwrap()];
    assert!(block.starts_with("[dependencies]\n"), "{block}");
    let line = block
        .lines()
        .find(|l| l.starts_with("sked = "))
        .expect("a `sked = …` dependency line");
    let path = line
        .split("path = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the dependency names a path");
    let beside = path
        .strip_prefix("../sked/")
        .expect("a path from a project beside the checkout");
    let crate_dir = root.join(beside);
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml"))
        .unwrap_or_else(|_| panic!("{path} is not a crate of this checkout"));
    assert!(
        manifest.contains("\nname = \"sked\"\n"),
        "{path} is not the sked crate"
    );
    let features = &manifest[manifest.find("\n[features]\n").unwrap()..];
    let has = |feature: &str| features.contains(&format!("\n{feature} = ["));
    let named = line
        .split("features = [")
        .nth(1)
        .map(|rest| rest[..rest.find(']').unwrap()].to_owned())
        .unwrap_or_default();
    for feature in named.split(',').map(|f| f.trim().trim_matches('"')) {
        assert!(
            feature.is_empty() || has(feature),
            "no feature `{feature}` in {path}"
        );
    }
    let table = &readme[readme
        .find("| Feature | What it adds |")
        .expect("a feature table")..];
    let rows: Vec<&str> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(rows.len() >= 4, "{rows:?}");
    for row in rows {
        let feature = row.split('`').nth(1).expect("a feature in backticks");
        assert!(
            has(feature),
            "the README's table lists `{feature}`, which sked lacks"
        );
    }
    for manifest in std::iter::once(root.join("Cargo.toml")).chain(
        std::fs::read_dir(root.join("crates"))
            .unwrap()
            .map(|e| e.unwrap().path().join("Cargo.toml")),
    ) {
        let text = std::fs::read_to_string(&manifest).unwrap();
        assert!(
            !text.contains(".invalid") && !text.contains("example.com"),
            "{} names a placeholder address",
            manifest.display()
        );
    }
}
