//! Strict, borrowing JSON object access for the validator (collector-design.md §10
//! "Validate").
//!
//! [`Object::parse`] reads one JSON object into its members in document order, each
//! value kept as the exact text it had in the payload (`serde_json`'s `RawValue`), and
//! refuses an object that names a member twice — a payload that two readers could
//! read two ways is malformed. Values are typed on demand ([`Object::text`],
//! [`Object::whole_number`], [`Object::is_object`]), so a record is checked without
//! copying it. [`span`] finds where a borrowed slice lies in the payload, which is how
//! the store keeps each record once (see [`crate::validate`]).

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::reject::Reject;

/// One JSON object's members, in order.
#[derive(Debug)]
pub struct Object<'a> {
    members: Vec<(String, &'a RawValue)>,
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Vec<(String, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = HashSet::new();
        let mut members = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let value: &'de RawValue = map.next_value()?;
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom("duplicate member"));
            }
            members.push((key, value));
        }
        Ok(members)
    }
}

impl<'a> Object<'a> {
    /// Parse `text` (one JSON value) as an object: [`Reject::NotJson`] if it is not
    /// JSON, `not_object` if it is another value, [`Reject::DuplicateMember`] if a
    /// member repeats.
    pub fn parse(text: &'a str, not_object: Reject) -> Result<Self, Reject> {
        let value: &'a RawValue = serde_json::from_str(text).map_err(|_| Reject::NotJson)?;
        Self::of(value, not_object)
    }

    /// The object `value` is (see [`Object::parse`]).
    pub fn of(value: &'a RawValue, not_object: Reject) -> Result<Self, Reject> {
        if !value.get().starts_with('{') {
            return Err(not_object);
        }
        let mut de = serde_json::Deserializer::from_str(value.get());
        let members = de
            .deserialize_map(MembersVisitor)
            .map_err(|_| Reject::DuplicateMember)?;
        Ok(Self { members })
    }

    /// The raw value of `name`.
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.members.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// A non-empty string member, or [`Reject::KeyField`].
    pub fn text(&self, name: &'static str) -> Result<String, Reject> {
        self.get(name)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .filter(|s| !s.is_empty())
            .ok_or(Reject::KeyField { field: name })
    }

    /// A whole-number member (0 ≤ n < 2^64), or [`Reject::KeyField`].
    pub fn whole_number(&self, name: &'static str) -> Result<u64, Reject> {
        self.get(name)
            .and_then(|v| serde_json::from_str::<u64>(v.get()).ok())
            .ok_or(Reject::KeyField { field: name })
    }

    /// Whether `name` is present and an object.
    pub fn is_object(&self, name: &str) -> bool {
        self.get(name).is_some_and(|v| v.get().starts_with('{'))
    }
}

/// The byte range `inner` occupies inside `outer`, when `inner` borrows from it.
pub fn span(outer: &str, inner: &str) -> Option<std::ops::Range<usize>> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len() && outer.get(start..end).is_some_and(|s| std::ptr::eq(s, inner)))
        .then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_in_order_with_their_text_and_no_duplicates() {
        let text = r#"{"b": [1, 2], "a":"x\"y", "n": 18446744073709551615, "o": {}}"#;
        let o = Object::parse(text, Reject::NotObject).unwrap();
        assert_eq!(o.get("b").unwrap().get(), "[1, 2]");
        assert_eq!(o.text("a"), Ok("x\"y".to_owned()));
        assert_eq!(o.whole_number("n"), Ok(u64::MAX));
        assert!(o.is_object("o") && !o.is_object("b") && !o.is_object("zz"));
        assert_eq!(o.text("b"), Err(Reject::KeyField { field: "b" }));
        assert_eq!(o.whole_number("a"), Err(Reject::KeyField { field: "a" }));
        let range = span(text, o.get("b").unwrap().get()).unwrap();
        assert_eq!(&text[range], "[1, 2]");
        assert_eq!(span(text, "[1, 2]"), None, "not borrowed from the text");
        for (bad, reject) in [
            ("{", Reject::NotJson),
            ("[]", Reject::NotObject),
            ("\"{\"", Reject::NotObject),
            (r#"{"a":1,"a":1}"#, Reject::DuplicateMember),
            (r#"{"a":1} x"#, Reject::NotJson),
        ] {
            assert_eq!(
                Object::parse(bad, Reject::NotObject).unwrap_err(),
                reject,
                "{bad}"
            );
        }
        let empty = Object::parse(r#"{"e":""}"#, Reject::NotObject).unwrap();
        assert_eq!(empty.text("e"), Err(Reject::KeyField { field: "e" }));
    }
}
