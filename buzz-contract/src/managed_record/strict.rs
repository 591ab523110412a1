//! JSON with no duplicate member names, anywhere: `{"a":1,"a":2}` means
//! one thing to one reader and another to the next, so a record that says
//! it is refused (`shared/spec/private-managed-agent.md`).

use super::RecordError;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::fmt;

/// Parses `bytes` as one JSON value, refusing a repeated member name in any
/// object. The error names the member, never a value.
pub fn strict_json(bytes: &[u8]) -> Result<Value, RecordError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Unique
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| RecordError::Payload(message(&e)))?;
    Ok(value)
}

fn message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.starts_with("duplicate member") {
        return text;
    }
    format!("not JSON at line {} column {}", e.line(), e.column())
}

/// A [`Value`] built by hand, checking each object's names.
struct Unique;

impl<'de> DeserializeSeed<'de> for Unique {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON whose objects name each member once")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number out of range"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(Unique)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut names = HashSet::new();
        let mut out = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if !names.insert(name.clone()) {
                return Err(A::Error::custom(format!("duplicate member {name:?}")));
            }
            out.insert(name, map.next_value_seed(Unique)?);
        }
        Ok(Value::Object(out))
    }
}
