//! A schedule's policies: what happens when runs overlap or were missed, where intervals count
//! from, how fixed wall times behave across DST changes, and the stable jitter of a run.

use std::fmt;
use std::str::FromStr;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::error::SpecError;

/// A policy named by one word. Parsing accepts `-` for `_` (`last-finish`, `buffer-one`), the
/// way command lines spell them.
macro_rules! str_enum {
    ($(#[$m:meta])* $name:ident ($what:literal) { $($(#[$vm:meta])* $variant:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),+ }
            }
        }

        impl FromStr for $name {
            type Err = SpecError;
            fn from_str(s: &str) -> Result<Self, SpecError> {
                match s.replace('-', "_").as_str() {
                    $($s => Ok($name::$variant),)+
                    _ => Err(SpecError::new(format!(
                        concat!("invalid ", $what, " {:?}: expected one of {}"),
                        s,
                        [$($s),+].join(", ")
                    ))),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// What to do when an occurrence is due while earlier runs are still pending or running.
/// Written `skip`, `allow`, `allow:N`, `buffer_one` or `replace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum OverlapPolicy {
    /// Do not run it (recorded as skipped). The default.
    #[default]
    Skip,
    /// Run it alongside, however many run already.
    Allow,
    /// Run it alongside while fewer than this many (at least 1) are unfinished; skip it
    /// (recorded) otherwise.
    AllowUpTo(u32),
    /// Run it once after the current run ends; further occurrences meanwhile are skipped.
    BufferOne,
    /// Cancel the current run and start this one.
    Replace,
}

/// The most runs `allow:N` lets run at once.
pub const MAX_OVERLAP_RUNS: u32 = 10_000;

impl fmt::Display for OverlapPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverlapPolicy::Skip => f.write_str("skip"),
            OverlapPolicy::Allow => f.write_str("allow"),
            OverlapPolicy::AllowUpTo(n) => write!(f, "allow:{n}"),
            OverlapPolicy::BufferOne => f.write_str("buffer_one"),
            OverlapPolicy::Replace => f.write_str("replace"),
        }
    }
}

impl FromStr for OverlapPolicy {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<OverlapPolicy, SpecError> {
        if let Some(n) = s.strip_prefix("allow:") {
            let n: u32 = n.trim().parse().map_err(|_| {
                SpecError::new(format!(
                    "invalid overlap policy {s:?}: allow:N takes a whole number of runs from 1 to {MAX_OVERLAP_RUNS}"
                ))
            })?;
            if n == 0 || n > MAX_OVERLAP_RUNS {
                return Err(SpecError::new(format!(
                    "invalid overlap policy {s:?}: allow:N lets 1 to {MAX_OVERLAP_RUNS} runs run at once, not {n}"
                )));
            }
            return Ok(OverlapPolicy::AllowUpTo(n));
        }
        match s.replace('-', "_").as_str() {
            "skip" => Ok(OverlapPolicy::Skip),
            "allow" => Ok(OverlapPolicy::Allow),
            "buffer_one" => Ok(OverlapPolicy::BufferOne),
            "replace" => Ok(OverlapPolicy::Replace),
            _ => Err(SpecError::new(format!(
                "invalid overlap policy {s:?}: expected one of skip, allow, allow:N, buffer_one, replace"
            ))),
        }
    }
}

impl TryFrom<String> for OverlapPolicy {
    type Error = SpecError;
    fn try_from(s: String) -> Result<OverlapPolicy, SpecError> {
        s.parse()
    }
}

impl From<OverlapPolicy> for String {
    fn from(p: OverlapPolicy) -> String {
        p.to_string()
    }
}

str_enum! {
    /// What to do with occurrences missed while no scheduler ran.
    CatchupPolicy ("catch-up policy") {
        /// One run for the most recent missed occurrence. The default.
        #[default]
        Latest = "latest",
        /// A run for every missed occurrence within the catch-up window.
        All = "all",
        /// No runs for missed occurrences.
        None = "none",
    }
}

str_enum! {
    /// Where an interval (`every DUR`) counts from.
    IntervalFrom ("interval start") {
        /// A fixed grid from the schedule's anchor (its creation or last change of spec). The
        /// default.
        #[default]
        Fixed = "fixed",
        /// The start of the previous run: the next is due an interval after it started.
        LastStart = "last_start",
        /// The end of the previous run: the next is due an interval after it finished, and
        /// never while it is unfinished.
        LastFinish = "last_finish",
    }
}

str_enum! {
    /// How a cron job whose minute and hour are fixed meets a DST change. Jobs with `*` in the
    /// minute or hour fire at every real instant whose wall time matches, whatever the policy.
    DstPolicy ("DST policy") {
        /// Debian cron's rules: a wall time skipped by a spring-forward fires at the first
        /// instant after the gap; one repeated by a fall-back fires once, the first time. The
        /// default.
        #[default]
        Debian = "debian",
        /// A wall time that does not exist does not fire; a repeated one fires once.
        Skip = "skip",
        /// A repeated wall time fires at both instants; a skipped one as `debian`.
        Twice = "twice",
    }
}

/// The most consecutive dead runs `pause_after_failures` may wait for.
pub const MAX_PAUSE_AFTER_FAILURES: u32 = 1_000;

/// The stable offset by which jitter moves the run of occurrence `nominal_at` of schedule
/// `name`: whole milliseconds in `[0, jitter)`, a function of the name and the occurrence
/// alone, so that every node computes the same one. (FNV-1a over both, a hash that is
/// defined, not one that may change between Rust releases.)
pub fn jitter_offset(name: &str, nominal_at: Timestamp, jitter: SignedDuration) -> SignedDuration {
    let span = jitter.as_millis();
    if span <= 0 {
        return SignedDuration::ZERO;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let nominal = nominal_at.as_nanosecond().to_le_bytes();
    for b in name.bytes().chain([0]).chain(nominal) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Spread the low bits, which FNV leaves weak for short inputs.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    SignedDuration::from_millis((i128::from(h) % span) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_policies_read_back_as_written() {
        for s in ["skip", "allow", "allow:2", "buffer_one", "replace"] {
            let p: OverlapPolicy = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<OverlapPolicy>(&json).unwrap(), p);
        }
        assert_eq!(
            "buffer-one".parse::<OverlapPolicy>().unwrap(),
            OverlapPolicy::BufferOne
        );
        for bad in [
            "allow:0",
            "allow:-1",
            "allow:x",
            "allow:",
            "allow:10001",
            "sometimes",
        ] {
            let e = bad.parse::<OverlapPolicy>().unwrap_err().to_string();
            assert!(e.contains("overlap policy"), "{bad}: {e}");
        }
        assert!(serde_json::from_str::<OverlapPolicy>("\"allow:0\"").is_err());
    }

    #[test]
    fn policies_take_dashes_for_underscores() {
        assert_eq!(
            "last-finish".parse::<IntervalFrom>().unwrap(),
            IntervalFrom::LastFinish
        );
        assert_eq!("twice".parse::<DstPolicy>().unwrap(), DstPolicy::Twice);
        assert!("sometimes".parse::<DstPolicy>().is_err());
    }

    #[test]
    fn jitter_is_stable_spread_and_below_its_bound() {
        let jitter = SignedDuration::from_secs(30);
        let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        // The same on every call (and so on every node): fixed values pin the function down,
        // so a change to it, which would move every jittered run, shows here.
        assert_eq!(jitter_offset("nightly", t(0), jitter).as_millis(), 22_855);
        let offsets: Vec<SignedDuration> = (0..1000)
            .map(|i| jitter_offset("nightly", t(i * 60), jitter))
            .collect();
        assert!(offsets.iter().all(|o| !o.is_negative() && *o < jitter));
        // Spread over the range: each tenth of it gets some of 1,000 occurrences.
        for tenth in 0..10 {
            let lo = jitter / 10 * tenth;
            let hi = jitter / 10 * (tenth + 1);
            let n = offsets.iter().filter(|o| **o >= lo && **o < hi).count();
            assert!((50..=150).contains(&n), "tenth {tenth}: {n}");
        }
        assert_ne!(
            jitter_offset("a", t(0), jitter),
            jitter_offset("b", t(0), jitter)
        );
        assert_eq!(
            jitter_offset("a", t(0), SignedDuration::ZERO),
            SignedDuration::ZERO
        );
    }
}
