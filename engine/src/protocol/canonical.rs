//! Canonical JSON and strict JSON parsing.
//!
//! Canonical JSON is the one byte-exact rendering of a JSON value that request fingerprints and
//! payload size limits are computed over:
//!
//! - no whitespace outside strings;
//! - object members sorted by key, comparing keys as sequences of Unicode code points (the same
//!   order as comparing their UTF-8 bytes);
//! - strings escape only `"` as `\"`, `\` as `\\`, U+0008 as `\b`, U+000C as `\f`, U+000A as
//!   `\n`, U+000D as `\r`, U+0009 as `\t`, and every other code point below U+0020 as `\u00xx`
//!   with lower-case hex; everything else, including non-ASCII, is written as raw UTF-8;
//! - a number written without fraction or exponent that fits a 64-bit integer (unsigned, or
//!   signed when negative) in plain decimal; every other number as a 64-bit float in exponent
//!   form with the fewest significant digits that read back as the same float: `1.5e0`,
//!   `1e0`, `-2.5e-7`, `1e300` (mantissa digits with a `.` only when there is more than one, `e`,
//!   and the exponent in decimal with a `-` only when negative). So `1` renders as `1` and
//!   `1.0` as `1e0`;
//! - `true`, `false`, `null` as themselves.
//!
//! The renderer sorts keys itself rather than relying on the map type, so the result does not
//! depend on whether `serde_json` was built with `preserve_order`.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Renders `value` as canonical JSON (see the module documentation).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

/// The length of `value` as JSON (0 when it cannot be serialized, which a store record can
/// always be).
pub fn json_len(value: &impl serde::Serialize) -> usize {
    /// Counts what would be written, keeping nothing: no allocation for a status read.
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value).map_or(0, |()| counter.0)
}

/// The byte length of [`canonical_json`]`(value)`, computed without building the string.
pub fn canonical_json_len(value: &Value) -> usize {
    let mut counter = LengthCounter(0);
    write_value(value, &mut counter);
    counter.0
}

/// Where canonical JSON goes: a string, or just a byte count.
trait Sink {
    fn push_str(&mut self, s: &str);
    fn push_char(&mut self, c: char);
}

impl Sink for String {
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }
    fn push_char(&mut self, c: char) {
        self.push(c);
    }
}

struct LengthCounter(usize);

impl Sink for LengthCounter {
    fn push_str(&mut self, s: &str) {
        self.0 = self.0.saturating_add(s.len());
    }
    fn push_char(&mut self, c: char) {
        self.0 = self.0.saturating_add(c.len_utf8());
    }
}

fn write_value(value: &Value, out: &mut impl Sink) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => write_number(number, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push_char('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push_char(',');
                }
                write_value(item, out);
            }
            out.push_char(']');
        }
        Value::Object(map) => write_object(map, out),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut impl Sink) {
    let mut members: Vec<(&String, &Value)> = map.iter().collect();
    members.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push_char('{');
    for (index, (key, value)) in members.into_iter().enumerate() {
        if index > 0 {
            out.push_char(',');
        }
        write_string(key, out);
        out.push_char(':');
        write_value(value, out);
    }
    out.push_char('}');
}

fn write_number(number: &Number, out: &mut impl Sink) {
    // Integers and floats are told apart by how they were written (`1` versus `1.0`), as
    // `serde_json` parses them. Floats use Rust's `{:e}` rendering (shortest round-trip digits,
    // always in exponent form) rather than serde_json's own, so fingerprints do not change when
    // a serde_json upgrade changes its float printer.
    let text = if let Some(unsigned) = number.as_u64() {
        unsigned.to_string()
    } else if let Some(signed) = number.as_i64() {
        signed.to_string()
    } else if let Some(float) = number.as_f64() {
        format!("{float:e}")
    } else {
        // Unreachable without serde_json's `arbitrary_precision`; fall back to its rendering.
        number.to_string()
    };
    out.push_str(&text);
}

fn write_string(s: &str, out: &mut impl Sink) {
    out.push_char('"');
    let mut plain_from = 0;
    for (index, c) in s.char_indices() {
        let escape: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            c if c < '\u{20}' => None,
            _ => continue,
        };
        // Flush the run of characters that need no escaping, then the escape itself.
        out.push_str(s.get(plain_from..index).unwrap_or_default());
        match escape {
            Some(escape) => out.push_str(escape),
            None => out.push_str(&format!("\\u{:04x}", u32::from(c))),
        }
        plain_from = index + c.len_utf8();
    }
    out.push_str(s.get(plain_from..).unwrap_or_default());
    out.push_char('"');
}

/// The first integer literal in the JSON `text` that no 64-bit integer holds (below
/// `i64::MIN` or above `u64::MAX`), if any. JSON parsers, this one included, read such a
/// literal as a floating-point number and silently change its value
/// (`123456789012345678901234567890` becomes `1.2345678901234568e29`): a request carrying one
/// is refused instead, so a stored input is always what was sent. Literals with a fraction or
/// an exponent are floating-point numbers by their own spelling and pass. String contents are
/// skipped.
pub fn integer_out_of_range(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < bytes.len()
                    && matches!(bytes[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let literal = text.get(start..i).unwrap_or_default();
                let integer = !literal.contains(['.', 'e', 'E']);
                // 20 digits at most fit (u64::MAX has 20); fewer always do.
                if integer
                    && literal.trim_start_matches('-').len() >= 19
                    && literal.parse::<i64>().is_err()
                    && literal.parse::<u64>().is_err()
                {
                    return Some(literal);
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// A JSON value parsed strictly: an object that repeats a key is an error instead of silently
/// keeping one of the values. Used for everything a peer sends, so that two readers of the same
/// frame can never disagree about what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StrictValue(pub(crate) Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(StrictValueVisitor)
            .map(StrictValue)
    }
}

struct StrictValueVisitor;

impl<'de> Visitor<'de> for StrictValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // JSON text cannot express NaN or infinity, but be explicit rather than map to null.
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(deserializer).map(|v| v.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if map.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate key `{}`",
                    super::rejection::bounded_message(&key, 64)
                )));
            }
            let StrictValue(value) = access.next_value()?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn integers_no_64_bit_integer_holds_are_found_outside_strings() {
        assert_eq!(
            integer_out_of_range(r#"{"n": 123456789012345678901234567890}"#),
            Some("123456789012345678901234567890")
        );
        assert_eq!(
            integer_out_of_range(r#"[-9223372036854775809]"#),
            Some("-9223372036854775809")
        );
        for fine in [
            r#"{"n": 18446744073709551615, "m": -9223372036854775808}"#,
            r#"{"n": 1.5e300, "m": 123456789012345678901234567890.0}"#,
            r#"{"s": "123456789012345678901234567890", "t": "a\"1234567890123456789012"}"#,
        ] {
            assert_eq!(integer_out_of_range(fine), None, "{fine}");
        }
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_keys_recursively_and_drops_whitespace() {
        let value = json!({"b": [1, {"z": null, "a": true}], "a": "x"});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":"x","b":[1,{"a":true,"z":null}]}"#
        );
    }

    #[test]
    fn escapes_only_what_json_requires() {
        let value = json!("q\"b\\\u{8}\u{c}\n\r\t\u{1}\u{7f}é/");
        assert_eq!(
            canonical_json(&value),
            "\"q\\\"b\\\\\\b\\f\\n\\r\\t\\u0001\u{7f}é/\""
        );
    }

    #[test]
    fn numbers_keep_their_kind() {
        let value: Value = serde_json::from_str(
            "[1, -2, 1.0, 1.5, 1e300, -0.00000025, 100.0, 18446744073709551615, -9223372036854775808]",
        )
        .unwrap();
        assert_eq!(
            canonical_json(&value),
            "[1,-2,1e0,1.5e0,1e300,-2.5e-7,1e2,18446744073709551615,-9223372036854775808]"
        );
    }

    #[test]
    fn length_matches_rendering() {
        let value = json!({"ü": ["\u{1}", 2.5, {"k": "v"}]});
        assert_eq!(canonical_json_len(&value), canonical_json(&value).len());
    }

    #[test]
    fn strict_value_refuses_duplicate_keys_at_any_depth() {
        let err = serde_json::from_str::<StrictValue>(r#"{"a":{"b":1,"b":2}}"#).unwrap_err();
        assert!(err.to_string().contains("duplicate key `b`"), "{err}");
        let ok = serde_json::from_str::<StrictValue>(r#"{"a":{"b":1},"b":[{"b":2}]}"#).unwrap();
        assert_eq!(ok.0, json!({"a": {"b": 1}, "b": [{"b": 2}]}));
    }
}
