//! Schedules in words, for people reading the dashboard: `0 3 * * 1-5` is "at 03:00, Monday
//! through Friday".
//!
//! Written here rather than taken from a crate because the words must follow this dialect:
//! seconds fields, `L`/`LW`/`nW`, `5L`, `1#2`, and the Vixie rule that a restricted
//! day-of-month *or* day-of-week matches (the crates found describe only five plain fields, or
//! say "and" where cron means "or"). The input has already been parsed and validated; anything
//! this does not recognise is described by its field text, never wrongly.

use super::Spec;

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const NTH: [&str; 6] = ["", "first", "second", "third", "fourth", "fifth"];

/// The schedule in words; `None` when `spec` does not parse.
pub fn describe(spec: &str) -> Option<String> {
    match Spec::parse(spec).ok()? {
        Spec::Every(d) => Some(format!("every {}", crate::format_duration(d))),
        Spec::Once(t) => Some(format!("once, at {t}")),
        Spec::Cron(_) => Some(describe_cron(spec.trim())),
    }
}

fn describe_cron(expr: &str) -> String {
    let expanded = match expr.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
        "@monthly" => "0 0 1 * *".to_string(),
        "@weekly" => "0 0 * * 0".to_string(),
        "@daily" | "@midnight" => "0 0 * * *".to_string(),
        "@hourly" => "0 * * * *".to_string(),
        _ => expr.to_string(),
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    let (sec, rest) = match fields.len() {
        6 => (Some(fields[0]), &fields[1..]),
        _ => (None, &fields[..]),
    };
    let [min, hour, dom, mon, dow] = rest else {
        return expr.to_string();
    };
    let mut out = time_words(sec, min, hour);
    let days = day_words(dom, dow);
    if !days.is_empty() {
        out.push_str(", ");
        out.push_str(&days);
    }
    if *mon != "*" {
        out.push_str(", in ");
        out.push_str(&list(mon, month_name));
    }
    out
}

fn number(s: &str) -> Option<u32> {
    s.parse().ok()
}

fn time_words(sec: Option<&str>, min: &str, hour: &str) -> String {
    let sec_fixed = sec.is_none_or(|s| number(s).is_some());
    let secs = sec.and_then(number).unwrap_or(0);
    let hours: Option<Vec<u32>> = hour.split(',').map(number).collect();
    match (number(min), hours) {
        (Some(m), Some(hs)) if sec_fixed => {
            let times: Vec<String> = hs
                .iter()
                .map(|h| {
                    if secs > 0 {
                        format!("{h:02}:{m:02}:{secs:02}")
                    } else {
                        format!("{h:02}:{m:02}")
                    }
                })
                .collect();
            format!("at {}", join(&times))
        }
        _ => {
            let mut parts = Vec::new();
            if let Some(s) = sec {
                parts.push(unit_words(s, "second", "minute"));
            }
            if sec.is_none() || min != "*" {
                parts.push(unit_words(min, "minute", "hour"));
            }
            if hour != "*" {
                parts.push(match hour.strip_prefix("*/") {
                    Some(n) => format!("every {n} hours"),
                    None => format!("during hour {}", list(hour, |h| Some(h.to_string()))),
                });
            }
            parts.join(", ")
        }
    }
}

/// One time field: `*` is every unit, `*/n` every n units, else the listed values.
fn unit_words(field: &str, unit: &str, of: &str) -> String {
    if field == "*" {
        return format!("every {unit}");
    }
    if let Some(n) = field.strip_prefix("*/") {
        return format!("every {n} {unit}s");
    }
    if let Some((range, step)) = field.split_once('/') {
        return format!("every {step} {unit}s from {range}");
    }
    format!(
        "at {unit} {} of every {of}",
        list(field, |v| Some(v.to_string()))
    )
}

fn day_words(dom: &str, dow: &str) -> String {
    let dom_words = match dom {
        "*" | "?" => None,
        "L" => Some("on the last day of the month".to_string()),
        "LW" => Some("on the last weekday of the month".to_string()),
        d if d.ends_with('W') => Some(format!(
            "on the weekday nearest day {} of the month",
            &d[..d.len() - 1]
        )),
        d => Some(format!(
            "on day {} of the month",
            list(d, |v| Some(v.to_string()))
        )),
    };
    let dow_words = match dow {
        "*" | "?" => None,
        d => Some(format!("on {}", list(d, weekday_words))),
    };
    match (dom_words, dow_words) {
        (None, None) => "every day".to_string(),
        (Some(d), None) | (None, Some(d)) => d,
        // Vixie cron: both restricted, either may match.
        (Some(a), Some(b)) => format!("{a} or {b}"),
    }
}

fn weekday_words(v: &str) -> Option<String> {
    if let Some(d) = v.strip_suffix('L') {
        return Some(format!("the last {}", day_name(d)?));
    }
    if let Some((d, n)) = v.split_once('#') {
        return Some(format!(
            "the {} {}",
            NTH.get(number(n)? as usize)?,
            day_name(d)?
        ));
    }
    day_name(v)
}

fn day_name(v: &str) -> Option<String> {
    if let Some(n) = number(v) {
        return DAYS.get(n as usize % 7).map(|d| d.to_string());
    }
    let v = v.to_ascii_lowercase();
    DAYS.iter()
        .find(|d| d[..3].eq_ignore_ascii_case(&v))
        .map(|d| d.to_string())
}

fn month_name(v: &str) -> Option<String> {
    if let Some(n) = number(v) {
        return MONTHS
            .get((n as usize).checked_sub(1)?)
            .map(|m| m.to_string());
    }
    MONTHS
        .iter()
        .find(|m| m[..3].eq_ignore_ascii_case(v))
        .map(|m| m.to_string())
}

/// A list field (`a,b`, `a-b`, `a-b/n`) with each value named by `name` (the raw text when it
/// has no name).
fn list(field: &str, name: impl Fn(&str) -> Option<String>) -> String {
    let named = |v: &str| name(v).unwrap_or_else(|| v.to_string());
    let items: Vec<String> = field
        .split(',')
        .map(|item| {
            let (range, step) = match item.split_once('/') {
                Some((r, s)) => (r, Some(s)),
                None => (item, None),
            };
            let base = match range.split_once('-') {
                Some((a, b)) => format!("{} through {}", named(a), named(b)),
                None => named(range),
            };
            match step {
                Some(s) => format!("every {s}th of {base}"),
                None => base,
            }
        })
        .collect();
    join(&items)
}

fn join(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[track_caller]
    fn says(spec: &str, words: &str) {
        assert_eq!(describe(spec).as_deref(), Some(words), "{spec}");
    }

    #[test]
    fn common_expressions() {
        says("0 3 * * *", "at 03:00, every day");
        says("30 9 * * 1-5", "at 09:30, on Monday through Friday");
        says(
            "0 9,17 * * MON,FRI",
            "at 09:00 and 17:00, on Monday and Friday",
        );
        says("*/15 * * * *", "every 15 minutes, every day");
        says("* * * * *", "every minute, every day");
        says("5 * * * *", "at minute 5 of every hour, every day");
        says(
            "0 */2 * * *",
            "at minute 0 of every hour, every 2 hours, every day",
        );
        says("0 0 1 1 *", "at 00:00, on day 1 of the month, in January");
        says(
            "0 12 * 6-8 *",
            "at 12:00, every day, in June through August",
        );
    }

    #[test]
    fn this_dialect() {
        says("30 0 3 * * *", "at 03:00:30, every day");
        says("*/10 * * * * *", "every 10 seconds, every day");
        says("0 0 L * *", "at 00:00, on the last day of the month");
        says("0 0 LW * *", "at 00:00, on the last weekday of the month");
        says(
            "0 0 15W * *",
            "at 00:00, on the weekday nearest day 15 of the month",
        );
        says("0 22 * * 5L", "at 22:00, on the last Friday");
        says("0 8 * * 1#2", "at 08:00, on the second Monday");
        says("0 0 7 * 0", "at 00:00, on day 7 of the month or on Sunday");
        says("0 0 * * 7", "at 00:00, on Sunday");
        says("@daily", "at 00:00, every day");
        says("@hourly", "at minute 0 of every hour, every day");
        says("@weekly", "at 00:00, on Sunday");
    }

    #[test]
    fn intervals_and_once() {
        says("every 90s", "every 1m30s");
        says("at 2026-12-24T18:00:00Z", "once, at 2026-12-24T18:00:00Z");
        assert_eq!(describe("not a spec"), None);
    }
}
