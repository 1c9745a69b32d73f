//! Output for people: aligned tables and short times, from typed values. (`--json` bypasses
//! all of this.)

/// Prints a line to stdout. A closed pipe (`sked … | head`) ends the program quietly, as
/// command-line tools do, instead of panicking like `println!`.
macro_rules! out {
    () => {
        $crate::output::print_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::print_line(format_args!($($arg)*))
    };
}

pub(crate) fn print_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|_| stdout.write_all(b"\n"));
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

use jiff::Timestamp;
use jiff::tz::TimeZone;
use sked::{QueueInfo, TaskState};

/// RFC 3339 with the zone's offset, whole seconds: `2026-03-29T03:00:00+02:00`, for JSON.
pub(crate) fn rfc3339_in(t: Timestamp, tz: &TimeZone) -> String {
    t.to_zoned(tz.clone())
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string()
}

/// The one way times are shown to people, everywhere in the CLI: date, time to the second, and
/// the offset of the zone it is shown in (`2026-11-29 03:00:00+01:00`; in UTC,
/// `2026-11-29 02:00:00Z`).
pub(crate) fn human_in(t: Timestamp, tz: &TimeZone) -> String {
    if tz.iana_name() == Some("UTC") {
        t.strftime("%Y-%m-%d %H:%M:%SZ").to_string()
    } else {
        t.to_zoned(tz.clone())
            .strftime("%Y-%m-%d %H:%M:%S%:z")
            .to_string()
    }
}

/// A time in UTC, as [`human_in`] shows it, or `-`.
pub(crate) fn time(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "-".into(), |t| human_in(t, &TimeZone::UTC))
}

/// A time in an IANA zone (a schedule's), as [`human_in`] shows it, or `-`.
pub(crate) fn time_in(t: Option<Timestamp>, tz: &str) -> String {
    match (t, TimeZone::get(tz).ok()) {
        (Some(t), Some(zone)) => human_in(t, &zone),
        _ => time(t),
    }
}

/// An optional value as table text, `-` when there is none.
pub(crate) fn opt(v: Option<&impl std::fmt::Display>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// A queue's count of tasks in `state`, with `+` when counting stopped at the limit (the
/// state is in `counts_at_least`).
pub(crate) fn queue_count(q: &QueueInfo, state: TaskState) -> String {
    let n = q.counts.get(&state).copied().unwrap_or(0);
    if q.counts_at_least.contains(&state) {
        format!("{n}+")
    } else {
        n.to_string()
    }
}

/// Prints rows under headers, each column as wide as its widest cell.
pub(crate) fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    out!("{}", table_string(headers, rows).trim_end_matches('\n'));
}

/// [`table`] as a string, one line per row.
pub(crate) fn table_string(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut text = line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        text.push_str(&line(row));
    }
    text
}

/// Prints `key  value` lines, the keys aligned, for `get` commands.
pub(crate) fn fields(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in fields {
        out!("{k:<width$}  {v}");
    }
}
