//! Strict decoding of untrusted JSON with every problem named by its place.
//!
//! serde's own errors quote the value they were sent (`invalid type: string "hunter2"`), and a
//! refusal must never echo what a caller sent: a secret may sit in any field. So requests are
//! parsed into a [`serde_json::Value`] and decoded here, by hand, collecting every problem as
//! `<place> <what was expected>` (`spec.limits.cpuMillicores must be an integer between 10 and
//! 256000`).

use std::collections::BTreeSet;

use regex::Regex;
use serde_json::{Map, Value};

/// The largest integer a JSON number carries exactly (JavaScript's `Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// The most problems one refusal lists; a body with thousands of bad fields still gets a short
/// answer.
const MAX_LISTED: usize = 20;

/// Every problem found while decoding one value, in the order they were found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Problems(Vec<String>);

impl Problems {
    /// Records that `place` is not what was expected.
    pub fn push(&mut self, place: &str, expected: &str) {
        self.0.push(format!("{place} {expected}"));
    }

    /// True when nothing was wrong.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems, each a sentence naming its place.
    pub fn into_vec(self) -> Vec<String> {
        self.0
    }

    /// All problems joined into one sentence-list.
    pub fn joined(&self) -> String {
        if self.0.len() <= MAX_LISTED {
            return self.0.join("; ");
        }
        format!(
            "{}; and {} more problems",
            self.0[..MAX_LISTED].join("; "),
            self.0.len() - MAX_LISTED
        )
    }

    /// Ends a decode: the value when nothing was wrong, the problems otherwise.
    pub fn finish<T>(self, value: Option<T>) -> Result<T, Problems> {
        match value {
            Some(value) if self.is_empty() => Ok(value),
            _ => Err(self),
        }
    }

    /// Expects an object at `place` and opens it for field-by-field decoding.
    pub fn object<'a>(&mut self, value: &'a Value, place: &str) -> Option<Fields<'a>> {
        match value.as_object() {
            Some(map) => Some(Fields {
                map,
                place: place.to_owned(),
                known: BTreeSet::new(),
            }),
            None => {
                self.push(place, "must be an object");
                None
            }
        }
    }

    /// Expects a string at `place`.
    pub fn string<'a>(&mut self, value: &'a Value, place: &str) -> Option<&'a str> {
        match value.as_str() {
            Some(s) => Some(s),
            None => {
                self.push(place, "must be a string");
                None
            }
        }
    }

    /// Expects a string at `place` that matches `pattern`, else reports `expected`.
    pub fn matching(
        &mut self,
        value: &Value,
        place: &str,
        pattern: &Regex,
        expected: &str,
    ) -> Option<String> {
        let s = self.string(value, place)?;
        if pattern.is_match(s) {
            Some(s.to_owned())
        } else {
            self.push(place, expected);
            None
        }
    }

    /// Expects a string of `min..=max` UTF-16 code units (as JavaScript counts a length).
    pub fn bounded_string(
        &mut self,
        value: &Value,
        place: &str,
        min: usize,
        max: usize,
    ) -> Option<String> {
        let s = self.string(value, place)?;
        let len = s.encode_utf16().count();
        if len < min || len > max {
            self.push(
                place,
                &format!("must be a string of {min} to {max} characters"),
            );
            return None;
        }
        Some(s.to_owned())
    }

    /// Expects a string without a NUL byte.
    pub fn argument(&mut self, value: &Value, place: &str) -> Option<String> {
        let s = self.string(value, place)?;
        if s.contains('\0') {
            self.push(place, "must not contain a NUL byte");
            return None;
        }
        Some(s.to_owned())
    }

    /// Expects a safe integer between `min` and `max` inclusive. A number written with a zero
    /// fraction (`10.0`) is the same integer, as it is in JavaScript.
    pub fn integer(&mut self, value: &Value, place: &str, min: i64, max: i64) -> Option<i64> {
        let n = match value {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64)
                    .map(|f| f as i64)
            }),
            _ => None,
        };
        match n {
            Some(n) if (min..=max).contains(&n) && n.abs() <= MAX_SAFE_INTEGER => Some(n),
            _ => {
                self.push(
                    place,
                    &format!("must be an integer between {min} and {max}"),
                );
                None
            }
        }
    }

    /// Expects an array at `place`.
    pub fn array<'a>(&mut self, value: &'a Value, place: &str) -> Option<&'a Vec<Value>> {
        match value.as_array() {
            Some(items) => Some(items),
            None => {
                self.push(place, "must be an array");
                None
            }
        }
    }

    /// Expects one of the `literals`.
    pub fn literal(&mut self, value: &Value, place: &str, literals: &[&str]) -> Option<String> {
        match value.as_str() {
            Some(s) if literals.contains(&s) => Some(s.to_owned()),
            _ => {
                let quoted: Vec<String> = literals.iter().map(|l| format!("\"{l}\"")).collect();
                self.push(place, &format!("must be one of {}", quoted.join(", ")));
                None
            }
        }
    }
}

/// An object being decoded: each field asked for is marked known, and [`Fields::finish`]
/// refuses every other key.
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    place: String,
    known: BTreeSet<&'static str>,
}

impl<'a> Fields<'a> {
    /// The place of `name` inside this object (`spec.limits`).
    pub fn place_of(&self, name: &str) -> String {
        if self.place.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.place)
        }
    }

    /// A field that must be present.
    pub fn required(&mut self, problems: &mut Problems, name: &'static str) -> Option<&'a Value> {
        self.known.insert(name);
        let value = self.map.get(name);
        if value.is_none() {
            problems.push(&self.place_of(name), "is missing");
        }
        value
    }

    /// A field that may be absent.
    pub fn optional(&mut self, name: &'static str) -> Option<&'a Value> {
        self.known.insert(name);
        self.map.get(name)
    }

    /// The raw map, for records whose keys are data.
    pub fn map(&self) -> &'a Map<String, Value> {
        self.map
    }

    /// Refuses every key that was not asked for.
    pub fn finish(self, problems: &mut Problems) {
        for key in self.map.keys() {
            if !self.known.contains(key.as_str()) {
                problems.push(&self.place_of(&display_key(key)), "is not an allowed key");
            }
        }
    }
}

/// A key as it may be shown in a place: keys are names the caller chose, so only tame ones are
/// echoed; anything else is described rather than quoted.
pub fn display_key(key: &str) -> String {
    let tame = !key.is_empty()
        && key.len() <= 64
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@' | ':'));
    if tame {
        key.to_owned()
    } else {
        "<a key that is not a plain name>".to_owned()
    }
}

/// Compiles a pattern from this crate's constants.
pub(crate) fn pattern(source: &str) -> Regex {
    Regex::new(source).expect("berth's own patterns compile")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_written_with_a_zero_fraction_are_integers() {
        let mut p = Problems::default();
        assert_eq!(p.integer(&json!(10.0), "x", 1, 20), Some(10));
        assert_eq!(p.integer(&json!(10.5), "x", 1, 20), None);
        assert_eq!(p.integer(&json!("10"), "x", 1, 20), None);
        assert_eq!(
            p.into_vec(),
            vec![
                "x must be an integer between 1 and 20",
                "x must be an integer between 1 and 20"
            ]
        );
    }

    #[test]
    fn a_refusal_lists_at_most_twenty_problems() {
        let mut p = Problems::default();
        for i in 0..25 {
            p.push(&format!("x{i}"), "is wrong");
        }
        let text = p.joined();
        assert!(text.contains("x19 is wrong") && !text.contains("x20 is wrong"));
        assert!(text.ends_with("and 5 more problems"), "{text}");
    }

    #[test]
    fn excess_keys_are_named_but_wild_keys_are_not_echoed() {
        let mut p = Problems::default();
        let value = json!({"a": 1, "extra": 2, "pass word=hunter2": 3});
        let mut fields = p.object(&value, "body").unwrap();
        fields.required(&mut p, "a");
        fields.finish(&mut p);
        let text = p.joined();
        assert!(text.contains("body.extra is not an allowed key"));
        assert!(!text.contains("hunter2"));
    }
}
