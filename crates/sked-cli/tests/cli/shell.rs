//! The shell's and the system's view of the command: bash completes from `sked completions
//! bash`, `man -l` reads the page `sked man` prints, and the unit file under `deploy/` passes
//! `systemd-analyze verify` where it runs.

use std::process::Command;

use crate::common::SKED;

/// Runs `sked` with `args`; its standard output, after checking it succeeded.
fn sked_out(args: &[&str]) -> String {
    let out = Command::new(SKED).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "sked {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What bash offers for `line` (the cursor at its end) with the completion script sourced.
fn bash_completes(script: &std::path::Path, line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split(' ').collect();
    let program = format!(
        "source {script}\n\
         COMP_WORDS=({words})\n\
         COMP_CWORD={cword}\n\
         COMP_LINE='{line}'\n\
         COMP_POINT={point}\n\
         _sked sked '{current}' '{previous}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script = script.display(),
        words = words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        cword = words.len() - 1,
        point = line.len(),
        current = words[words.len() - 1],
        previous = words[words.len() - 2],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_completes_subcommands_and_their_options() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sked.bash");
    std::fs::write(&script, sked_out(&["completions", "bash"])).unwrap();
    assert_eq!(bash_completes(&script, "sked sch"), ["schedule"]);
    let task = bash_completes(&script, "sked task re");
    assert!(
        task.contains(&"retry".to_string()) && task.contains(&"reschedule".to_string()),
        "{task:?}"
    );
    let flags = bash_completes(&script, "sked queue limit --per");
    assert!(flags.contains(&"--per-key".to_string()), "{flags:?}");
    // A reader that stops early is no failure (nor a panic).
    let head = Command::new("bash")
        .args([
            "-c",
            &format!("set -o pipefail; {SKED} completions bash | head -1"),
        ])
        .output()
        .unwrap();
    assert!(
        head.status.success(),
        "{}",
        String::from_utf8_lossy(&head.stderr)
    );
    for shell in ["zsh", "fish"] {
        assert!(
            sked_out(&["completions", shell]).contains("schedule"),
            "{shell}"
        );
    }
    let bad = Command::new(SKED)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("tcsh"));
}

#[test]
fn man_reads_the_generated_page() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("sked.1");
    std::fs::write(&page, sked_out(&["man"])).unwrap();
    let Ok(out) = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    else {
        assert!(std::env::var_os("CI").is_none(), "man is needed in CI");
        eprintln!("skipping: no man");
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("A durable, distributed task scheduler"),
        "{text}"
    );
    for sub in [
        "server",
        "worker",
        "task",
        "schedule",
        "queue",
        "completions",
    ] {
        assert!(text.contains(sub), "{sub} missing from:\n{text}");
    }
    // Every page the first one refers to, with --out.
    let pages = dir.path().join("pages");
    sked_out(&["man", "--out", pages.to_str().unwrap()]);
    for page in [
        "sked.1",
        "sked-server.1",
        "sked-task-add.1",
        "sked-queue-limit.1",
    ] {
        assert!(pages.join(page).exists(), "{page}");
    }
    let limit = Command::new("man")
        .arg("-l")
        .arg(pages.join("sked-queue-limit.1"))
        .env("MANPAGER", "cat")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&limit.stdout).contains("--per-key"));
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");
    let unit = std::fs::read_to_string(format!("{deploy}/sked.service")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The unit as installed, but with this build's binary and the example environment file;
    // its Documentation= names the manual page, which `man` must find.
    let env_file = dir.path().join("sked.env");
    std::fs::copy(format!("{deploy}/sked.env"), &env_file).unwrap();
    let unit = unit
        .replace("/usr/local/bin/sked", SKED)
        .replace("/etc/sked/sked.env", env_file.to_str().unwrap());
    assert!(unit.contains(SKED), "the unit runs /usr/local/bin/sked");
    let path = dir.path().join("sked.service");
    std::fs::write(&path, unit).unwrap();
    let man1 = dir.path().join("man/man1");
    std::fs::create_dir_all(&man1).unwrap();
    std::fs::write(man1.join("sked.1"), sked_out(&["man"])).unwrap();
    let Ok(out) = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .env("MANPATH", dir.path().join("man"))
        .output()
    else {
        eprintln!("skipping: no systemd-analyze");
        return;
    };
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Every variable the unit and the example use is one sked reads.
    let env = std::fs::read_to_string(&env_file).unwrap();
    for line in env.lines().map(|l| l.trim_start_matches("# ")) {
        if let Some((name, _)) = line.split_once('=')
            && name.starts_with("SKED_")
        {
            assert!(
                name == "SKED_LISTEN" || sked_out(&["server", "--help"]).contains(name),
                "{name} is not an environment variable of sked server"
            );
        }
    }
}
