//! Durations in JSON as human strings (`"30s"`, `"1h30m"`), read by [`crate::parse_duration`].

use jiff::SignedDuration;
use serde::{Deserialize, Deserializer, Serializer};

pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Option<SignedDuration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&crate::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<SignedDuration>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| crate::parse_duration(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

pub fn serialize<S: Serializer>(d: &SignedDuration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::format_duration(*d))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SignedDuration, D::Error> {
    let s = String::deserialize(d)?;
    crate::parse_duration(&s).map_err(serde::de::Error::custom)
}
