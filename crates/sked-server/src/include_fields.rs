//! Lists whose items leave out the fields a request did not ask for (`include=…`).
//!
//! Each item goes through a JSON value on its own, and is written to the answer before the
//! next one is made: a page (up to about 8 MiB of payloads and results) is held once, with one
//! item again beside it, never the whole page twice.

use serde::ser::{Error as _, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

/// `items` as a JSON array; `trim` removes from each item's object what is not shown.
pub(crate) struct Trimmed<'a, T> {
    pub(crate) items: &'a [T],
    pub(crate) trim: &'a (dyn Fn(&mut Map<String, Value>) + Sync),
}

impl<T: Serialize> Serialize for Trimmed<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.items.len()))?;
        for item in self.items {
            let mut value = serde_json::to_value(item).map_err(S::Error::custom)?;
            if let Some(fields) = value.as_object_mut() {
                (self.trim)(fields);
            }
            seq.serialize_element(&value)?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_item_loses_only_the_fields_trimmed() {
        let items = vec![
            json!({"id": 1, "payload": {"a": 1}, "result": null}),
            json!({"id": 2, "payload": null, "result": 7}),
            json!(3),
        ];
        let trim = |f: &mut Map<String, Value>| {
            f.remove("payload");
        };
        let out = serde_json::to_value(Trimmed {
            items: &items,
            trim: &trim,
        })
        .unwrap();
        assert_eq!(
            out,
            json!([{"id": 1, "result": null}, {"id": 2, "result": 7}, 3])
        );
    }
}
