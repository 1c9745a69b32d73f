//! A task's own retry backoff: how long it waits after each failed attempt, in one of four
//! shapes, written as a short spec (`exp:10s..6h`, `fixed:30s`, `linear:10s..5m`,
//! `10s,1m,10m,1h`).

use std::fmt;
use std::str::FromStr;

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};

use crate::{RetryPolicy, SpecError, check_duration, format_duration, parse_duration};

/// The most delays a list of steps may give.
pub const MAX_BACKOFF_STEPS: usize = 32;

/// How long a failed task waits before its next attempt, by the number of the attempt that
/// failed (1 for the first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backoff {
    /// `exp:BASE..MAX` (or `BASE..MAX`): `BASE` after the first failure, doubling after each
    /// one up to `MAX`, each delay spread by ±20 % and never above `MAX`. The default is
    /// `exp:10s..6h`.
    Exponential {
        base: SignedDuration,
        max: SignedDuration,
    },
    /// `fixed:D`: `D` after every failure, exactly.
    Fixed(SignedDuration),
    /// `linear:STEP..MAX`: `STEP` times the failed attempt's number, up to `MAX`, exactly.
    Linear {
        step: SignedDuration,
        max: SignedDuration,
    },
    /// `D1,D2,…`: the nth delay after the nth failure, exactly; the last after any later one.
    Steps(Vec<SignedDuration>),
}

impl Backoff {
    /// The delay after failed attempt number `attempt` (1-based). `unit` is a random number in
    /// `[0, 1)` for the exponential shape's jitter; the other shapes give their delays exactly.
    pub fn delay(&self, attempt: i32, unit: f64) -> SignedDuration {
        let nth = attempt.max(1);
        match self {
            Backoff::Exponential { base, max } => RetryPolicy {
                base: *base,
                max: *max,
                ..RetryPolicy::default()
            }
            .delay(attempt, unit),
            Backoff::Fixed(d) => *d,
            Backoff::Linear { step, max } => step.checked_mul(nth).map_or(*max, |d| d.min(*max)),
            Backoff::Steps(steps) => {
                let at = (nth as usize).min(steps.len()).saturating_sub(1);
                steps.get(at).copied().unwrap_or(SignedDuration::ZERO)
            }
        }
    }

    /// Checks the shape: every delay above zero and at most [`crate::MAX_DURATION`], a cap no
    /// shorter than the first delay, at most [`MAX_BACKOFF_STEPS`] steps.
    pub fn validate(&self) -> Result<(), SpecError> {
        let positive = |d: SignedDuration| -> Result<(), SpecError> {
            check_duration("backoff", d)?;
            match d.is_positive() {
                true => Ok(()),
                false => Err(SpecError::new("backoff delays must be above zero")),
            }
        };
        match self {
            // As SQL's `sked_enqueue` says it too.
            Backoff::Exponential { base, max } => {
                if *base <= SignedDuration::ZERO || max < base {
                    return Err(SpecError::new("backoff needs base > 0 and max >= base"));
                }
                check_duration("backoff max", *max)?;
            }
            Backoff::Linear { step: first, max } => {
                positive(*first)?;
                positive(*max)?;
                if max < first {
                    return Err(SpecError::new(format!(
                        "backoff {self}: the cap must not be shorter than the first delay"
                    )));
                }
            }
            Backoff::Fixed(d) => positive(*d)?,
            Backoff::Steps(steps) => {
                if steps.is_empty() || steps.len() > MAX_BACKOFF_STEPS {
                    return Err(SpecError::new(format!(
                        "a backoff list gives 1 to {MAX_BACKOFF_STEPS} delays"
                    )));
                }
                for d in steps {
                    positive(*d)?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Backoff {
    /// The spec it parses from, each duration as [`format_duration`] writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |d: &SignedDuration| format_duration(*d);
        match self {
            Backoff::Exponential { base, max } => write!(f, "exp:{}..{}", d(base), d(max)),
            Backoff::Fixed(delay) => write!(f, "fixed:{}", d(delay)),
            Backoff::Linear { step, max } => write!(f, "linear:{}..{}", d(step), d(max)),
            Backoff::Steps(steps) => {
                let all: Vec<String> = steps.iter().map(d).collect();
                f.write_str(&all.join(","))
            }
        }
    }
}

impl FromStr for Backoff {
    type Err = SpecError;

    /// `exp:BASE..MAX` (or `BASE..MAX`), `fixed:D`, `linear:STEP..MAX` or `D1,D2,…`, checked
    /// ([`Backoff::validate`]).
    fn from_str(spec: &str) -> Result<Backoff, SpecError> {
        let spec = spec.trim();
        let invalid = || {
            SpecError::new(format!(
                "invalid backoff {spec:?}: expected exp:BASE..MAX, fixed:D, linear:STEP..MAX \
                 or a list of delays like 10s,1m,10m"
            ))
        };
        let range = |s: &str| -> Result<(SignedDuration, SignedDuration), SpecError> {
            let (a, b) = s.split_once("..").ok_or_else(invalid)?;
            Ok((parse_duration(a)?, parse_duration(b)?))
        };
        let backoff = if let Some(rest) = spec.strip_prefix("exp:") {
            let (base, max) = range(rest)?;
            Backoff::Exponential { base, max }
        } else if let Some(rest) = spec.strip_prefix("fixed:") {
            Backoff::Fixed(parse_duration(rest)?)
        } else if let Some(rest) = spec.strip_prefix("linear:") {
            let (step, max) = range(rest)?;
            Backoff::Linear { step, max }
        } else if spec.contains(':') || spec.is_empty() {
            return Err(invalid());
        } else if spec.contains("..") {
            let (base, max) = range(spec)?;
            Backoff::Exponential { base, max }
        } else {
            let steps = spec
                .split(',')
                .map(parse_duration)
                .collect::<Result<_, _>>()?;
            Backoff::Steps(steps)
        };
        backoff.validate()?;
        Ok(backoff)
    }
}

impl Serialize for Backoff {
    /// As its spec: `"exp:10s..6h"`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Backoff {
    /// A spec, or (the exponential shape as it was first written) `{"base": "10s", "max": "6h"}`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Backoff, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Range {
            #[serde(with = "crate::serde_duration")]
            base: SignedDuration,
            #[serde(with = "crate::serde_duration")]
            max: SignedDuration,
        }
        struct Given;
        impl<'de> serde::de::Visitor<'de> for Given {
            type Value = Backoff;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a backoff like \"exp:10s..6h\", or {\"base\": \"10s\", \"max\": \"6h\"}",
                )
            }

            fn visit_str<E: serde::de::Error>(self, spec: &str) -> Result<Backoff, E> {
                spec.parse().map_err(E::custom)
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Backoff, A::Error> {
                let r = Range::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                let backoff = Backoff::Exponential {
                    base: r.base,
                    max: r.max,
                };
                backoff.validate().map_err(serde::de::Error::custom)?;
                Ok(backoff)
            }
        }
        d.deserialize_any(Given)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: i64) -> SignedDuration {
        SignedDuration::from_secs(secs)
    }

    /// The delays after failed attempts 1, 2, … of `spec`, with the jitter's middle draw.
    fn plan(spec: &str, attempts: i32) -> Vec<SignedDuration> {
        let b: Backoff = spec.parse().unwrap();
        (1..=attempts).map(|a| b.delay(a, 0.5)).collect()
    }

    #[test]
    fn each_shape_gives_its_documented_delays() {
        // exp: doubling from the base, capped (the middle of the jitter).
        assert_eq!(plan("exp:10s..1m", 5), [s(10), s(20), s(40), s(60), s(60)]);
        assert_eq!(plan("10s..1m", 5), plan("exp:10s..1m", 5));
        // fixed: the same every time, exactly whatever the draw.
        let fixed: Backoff = "fixed:30s".parse().unwrap();
        for a in [1, 2, 25, i32::MAX] {
            for unit in [0.0, 0.5, 0.999] {
                assert_eq!(fixed.delay(a, unit), s(30));
            }
        }
        // linear: the step times the attempt, up to the cap.
        assert_eq!(
            plan("linear:10s..35s", 5),
            [s(10), s(20), s(30), s(35), s(35)]
        );
        assert_eq!(plan("linear:10s..5m", 1_000)[999], s(300));
        let linear: Backoff = "linear:1h..10h".parse().unwrap();
        assert_eq!(linear.delay(i32::MAX, 0.0), SignedDuration::from_hours(10));
        // a list: one after another, then the last again.
        assert_eq!(
            plan("10s,1m,10m,1h", 6),
            [s(10), s(60), s(600), s(3600), s(3600), s(3600)]
        );
        assert_eq!(plan("45s", 3), [s(45), s(45), s(45)]);
        // The exponential shape keeps its jitter; the others have none.
        let exp: Backoff = "exp:10s..6h".parse().unwrap();
        assert_eq!(exp.delay(1, 0.0), s(8));
        assert_eq!(exp.delay(1, 0.999_999), s(12));
    }

    #[test]
    fn a_spec_reads_back_as_it_is_written() {
        for spec in [
            "exp:10s..6h",
            "fixed:30s",
            "linear:10s..5m",
            "10s,1m,10m,1h",
            "250ms",
        ] {
            let b: Backoff = spec.parse().unwrap();
            assert_eq!(b.to_string(), spec);
            assert_eq!(b.to_string().parse::<Backoff>().unwrap(), b);
            let json = serde_json::to_value(&b).unwrap();
            assert_eq!(json, serde_json::json!(spec));
            assert_eq!(serde_json::from_value::<Backoff>(json).unwrap(), b);
        }
        assert_eq!(
            "10s..6h".parse::<Backoff>().unwrap().to_string(),
            "exp:10s..6h"
        );
        // The object form of the exponential shape is still read.
        let old: Backoff =
            serde_json::from_value(serde_json::json!({"base": "2s", "max": "1m"})).unwrap();
        assert_eq!(
            old,
            Backoff::Exponential {
                base: s(2),
                max: s(60)
            }
        );
    }

    #[test]
    fn a_malformed_spec_says_what_is_wrong() {
        for (spec, said) in [
            ("", "invalid backoff"),
            ("cubic:1s..2s", "invalid backoff"),
            ("exp:10s", "invalid backoff"),
            ("linear:10s", "invalid backoff"),
            ("fixed:soon", "soon"),
            ("fixed:0s", "above zero"),
            ("exp:1m..10s", "max >= base"),
            ("linear:1m..10s", "not be shorter"),
            ("linear:-1s..10s", "invalid duration \"-1s\""),
            ("10s,,1m", "invalid duration"),
            ("1s,-2s", "invalid duration"),
        ] {
            let e = spec.parse::<Backoff>().unwrap_err().to_string();
            assert!(e.contains(said), "{spec:?}: {e}");
        }
        let many = vec!["1s"; MAX_BACKOFF_STEPS + 1].join(",");
        assert!(many.parse::<Backoff>().is_err());
        let object = serde_json::json!({"base": "1m", "max": "1s"});
        assert!(serde_json::from_value::<Backoff>(object).is_err());
    }
}
