//! W3C trace context (`traceparent`) as a task carries it: the form is checked here, once, so a
//! stored value is always one the `traceparent` header, `TRACEPARENT` and the clients accept.

use crate::error::SpecError;

/// A `traceparent` value is `version-trace_id-parent_id-flags`, 55 characters in version `00`.
const LEN: usize = 55;

/// Checks a `traceparent` value as the W3C Trace Context recommendation gives it: version
/// `00`, a 32-hex-digit trace id and a 16-hex-digit parent id, neither all zeros, and two hex
/// digits of flags, all lower case.
pub fn check_traceparent(value: &str) -> Result<(), SpecError> {
    if parse(value).is_none() {
        return Err(SpecError::new(format!(
            "traceparent must look like 00-<32 hex digits>-<16 hex digits>-<2 hex digits> \
             (W3C Trace Context), got {:?}",
            value.chars().take(80).collect::<String>()
        )));
    }
    Ok(())
}

/// The trace id, parent (span) id and flags of a valid `traceparent`.
pub fn parse_traceparent(value: &str) -> Option<(u128, u64, u8)> {
    parse(value)
}

/// The `traceparent` value of these ids and flags.
pub fn format_traceparent(trace_id: u128, span_id: u64, flags: u8) -> String {
    format!("00-{trace_id:032x}-{span_id:016x}-{flags:02x}")
}

fn parse(value: &str) -> Option<(u128, u64, u8)> {
    if value.len() != LEN || !value.is_ascii() {
        return None;
    }
    let lower_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let mut parts = value.split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || version != "00"
        || trace.len() != 32
        || parent.len() != 16
        || flags.len() != 2
        || ![trace, parent, flags].into_iter().all(lower_hex)
    {
        return None;
    }
    let trace = u128::from_str_radix(trace, 16).ok()?;
    let parent = u64::from_str_radix(parent, 16).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    (trace != 0 && parent != 0).then_some((trace, parent, flags))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_recommendations_example_reads_back_as_written() {
        let (trace, span, flags) = parse_traceparent(EXAMPLE).unwrap();
        assert_eq!(trace, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(span, 0x00f067aa0ba902b7);
        assert_eq!(flags, 1);
        assert_eq!(format_traceparent(trace, span, flags), EXAMPLE);
        assert!(check_traceparent(EXAMPLE).is_ok());
    }

    #[test]
    fn malformed_values_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e47360-0f067aa0ba902b7-01",
        ] {
            assert!(check_traceparent(bad).is_err(), "{bad:?}");
        }
    }
}
