//! Human durations (`90s`, `5m`, `1h30m`, `2d`, `500ms`) and times (`RFC 3339`, `+5m`).

use jiff::{SignedDuration, Timestamp};

use crate::error::SpecError;

/// The longest duration sked accepts anywhere: 3650 days, about ten years. Every duration it
/// stores (timeouts, backoffs, catch-up windows, intervals) then fits its columns in
/// milliseconds and can be added to any time sked handles.
pub const MAX_DURATION: SignedDuration = SignedDuration::from_hours(24 * 3650);

/// Checks a duration given to sked as `what`: not negative and at most [`MAX_DURATION`].
pub fn check_duration(what: &str, d: SignedDuration) -> Result<(), SpecError> {
    if d.is_negative() {
        return Err(SpecError::new(format!("{what} must not be negative")));
    }
    if d > MAX_DURATION {
        return Err(SpecError::new(format!(
            "{what} is longer than the limit of {}",
            format_duration(MAX_DURATION)
        )));
    }
    Ok(())
}

/// Parses a non-negative duration such as `90s`, `5m`, `1h30m`, `2d`, `250ms` or ISO 8601
/// `PT1H`. Days are 24 hours. At most [`MAX_DURATION`].
pub fn parse_duration(input: &str) -> Result<SignedDuration, SpecError> {
    let s = input.trim();
    let invalid = || {
        SpecError::new(format!(
            "invalid duration {input:?}: expected a number with a unit, like 90s, 5m, 1h30m, 2d or 250ms"
        ))
    };
    if s.is_empty() {
        return Err(invalid());
    }
    let d = if s.starts_with(['P', 'p']) {
        s.parse::<SignedDuration>().map_err(|_| invalid())?
    } else {
        let mut total = SignedDuration::ZERO;
        let mut rest = s;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if digits == 0 {
                return Err(invalid());
            }
            let n: i64 = rest[..digits].parse().map_err(|_| invalid())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let unit = rest[..unit_len].trim();
            rest = &rest[unit_len..];
            // Seconds are multiplied with a check: jiff's from_mins and from_hours panic
            // on overflow.
            let secs = |per: i64| n.checked_mul(per).map(SignedDuration::from_secs);
            let part = match unit {
                "ms" => Some(SignedDuration::from_millis(n)),
                "s" | "sec" | "secs" => secs(1),
                "m" | "min" | "mins" => secs(60),
                "h" | "hr" | "hrs" => secs(3600),
                "d" | "day" | "days" => secs(86_400),
                _ => return Err(invalid()),
            }
            .ok_or_else(invalid)?;
            total = total.checked_add(part).ok_or_else(invalid)?;
        }
        total
    };
    if d.is_negative() {
        return Err(invalid());
    }
    check_duration(&format!("duration {input:?}"), d)?;
    Ok(d)
}

/// Formats a duration the way [`parse_duration`] reads it (`1h30m`, `90ms`).
pub fn format_duration(d: SignedDuration) -> String {
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    if ms < 0 {
        out.push('-');
        ms = -ms;
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    out
}

/// Parses a point in time: RFC 3339 (`2026-03-29T03:00:00+02:00`, `…Z`) or relative to `now`
/// (`+5m`, `-2h`, `now`).
pub fn parse_time(input: &str, now: Timestamp) -> Result<Timestamp, SpecError> {
    let s = input.trim();
    if s.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Some(rel) = s.strip_prefix('+') {
        let d = parse_duration(rel)?;
        return now
            .checked_add(d)
            .map_err(|_| SpecError::new(format!("time {input:?} is out of range")));
    }
    if let Some(rel) = s.strip_prefix('-') {
        let d = parse_duration(rel)?;
        return now
            .checked_sub(d)
            .map_err(|_| SpecError::new(format!("time {input:?} is out of range")));
    }
    s.parse::<Timestamp>().map_err(|_| {
        SpecError::new(format!(
            "invalid time {input:?}: expected RFC 3339 like 2026-03-29T03:00:00+02:00 or 2026-03-29T01:00:00Z, or +DURATION or -DURATION from now"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_round_trip() {
        for (input, ms) in [
            ("90s", 90_000),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("2d", 172_800_000),
            ("250ms", 250),
            ("1m 30s", 90_000),
            ("PT1H", 3_600_000),
        ] {
            let d = parse_duration(input).unwrap();
            assert_eq!(d.as_millis(), ms, "{input}");
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
        for bad in ["", "5", "m", "5x", "-5s", "1h-", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    /// Counts whose seconds overflow are refused, not a panic (schemathesis sent
    /// `"200000000000000000m"` and the request's task panicked inside jiff).
    #[test]
    fn counts_whose_seconds_overflow_are_refused() {
        for bad in [
            "200000000000000000m",
            "2600000000000000h",
            "200000000000000d",
            "9223372036854775807s1s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn times_parse() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(
            parse_time("+5m", now).unwrap().to_string(),
            "2026-01-01T00:05:00Z"
        );
        assert_eq!(
            parse_time("-2h", now).unwrap().to_string(),
            "2025-12-31T22:00:00Z"
        );
        assert_eq!(
            parse_time("2026-03-29T03:00:00+02:00", now)
                .unwrap()
                .to_string(),
            "2026-03-29T01:00:00Z"
        );
        assert!(parse_time("tomorrow", now).is_err());
    }
}
