//! What the CLI says before it does anything: every command's help lists the global options
//! once, under their own heading, with value names meant for users; usage lines in errors
//! show what is required, not what the environment gave; a negative number reaches the check
//! that names the rule; and a server that is not there is named with the cause and what to do.

use std::process::{Command, Output};

use crate::common::{SKED, free_port};

const GLOBAL: [&str; 4] = [
    "--server <URL>",
    "--token <TOKEN>",
    "--token-file <PATH>",
    "--json",
];

fn sked(args: &[&str]) -> Output {
    Command::new(SKED)
        .args(args)
        .env_remove("SKED_URL")
        .env_remove("SKED_TOKEN")
        .env_remove("SKED_TOKEN_FILE")
        .output()
        .unwrap()
}

/// The names in a help's `Commands:` section.
fn subcommands(help: &str) -> Vec<String> {
    let Some(start) = help.find("\nCommands:\n") else {
        return Vec::new();
    };
    help[start + "\nCommands:\n".len()..]
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_help_lists_the_global_options_once_under_their_own_heading() {
    let mut pending = vec![Vec::<String>::new()];
    let mut checked = 0;
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = sked(&args);
        assert!(out.status.success(), "sked {args:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        let command = format!("sked {}", path.join(" "));
        // Built-in helpers that take no server: no global options at all is fine too.
        if ["completions", "man", "cron"].contains(&path.first().map_or("", String::as_str)) {
            assert!(!help.contains("_>"), "{command}: {help}");
        } else {
            assert_eq!(
                help.matches("\nGlobal options:\n").count(),
                1,
                "{command}: {help}"
            );
            let global = &help[help.find("\nGlobal options:\n").unwrap()..];
            for option in GLOBAL {
                assert_eq!(
                    help.matches(option).count(),
                    1,
                    "{command}: {option}\n{help}"
                );
                assert!(
                    global.contains(option),
                    "{command}: {option} under its heading"
                );
            }
        }
        // Value names are for users: `<DUR>`, `<N>`, never a field's name like `<in_>`.
        let names = help
            .split('<')
            .skip(1)
            .filter_map(|s| s.split_once('>').map(|(name, _)| name))
            .filter(|n| {
                n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
            });
        for name in names {
            assert!(
                !name.contains('_') && name == name.to_uppercase(),
                "{command}: value name <{name}>\n{help}"
            );
        }
        for sub in subcommands(&help) {
            let mut next = path.clone();
            next.push(sub);
            pending.push(next);
        }
        checked += 1;
    }
    assert!(checked > 30, "only {checked} commands' help read");
}

#[test]
fn an_error_s_usage_line_does_not_list_options_from_the_environment() {
    let out = Command::new(SKED)
        .args(["task", "add"])
        .env("SKED_URL", "http://127.0.0.1:7070")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    let usage = said.lines().find(|l| l.starts_with("Usage: ")).unwrap();
    assert_eq!(
        usage, "Usage: sked task add [OPTIONS] --kind <KIND>",
        "{said}"
    );
}

#[test]
fn a_negative_max_attempts_is_refused_by_the_rule_it_breaks() {
    for command in [
        &["task", "add", "--kind", "x", "--max-attempts", "-1"][..],
        &[
            "schedule",
            "add",
            "s",
            "--every",
            "1m",
            "--kind",
            "x",
            "--max-attempts",
            "-1",
        ],
    ] {
        let out = sked(command);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {said}");
        assert!(said.contains("at least 1") && said.contains("-1"), "{said}");
        assert!(!said.contains("unexpected argument"), "{said}");
    }
}

#[test]
fn no_server_there_is_named_with_the_cause_and_what_to_do() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = sked(&["task", "ls", "--server", &url]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("cannot reach the sked server at {url}")),
        "{said}"
    );
    assert!(said.to_lowercase().contains("connection refused"), "{said}");
    assert!(
        said.contains("sked server") && said.contains("--server") && said.contains("SKED_URL"),
        "{said}"
    );
}
