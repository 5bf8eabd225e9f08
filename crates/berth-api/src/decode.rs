//! Strict decoding of untrusted JSON with every problem named by its place.
//!
//! serde's own errors quote the value they were sent (`invalid type: string "hunter2"`), and a
//! refusal must never echo what a caller sent: a secret may sit in any field. So requests are
//! parsed into a [`serde_json::Value`] and decoded here, by hand, collecting every problem as
//! `<place> <what was expected>` (`spec.limits.cpuMillicores must be an integer between 10 and
//! 256000`).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;

use regex::Regex;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The largest integer a JSON number carries exactly (JavaScript's `Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// The most problems one refusal lists; a body with thousands of bad fields still gets a short
/// answer.
const MAX_LISTED: usize = 20;

/// One thing wrong with a decoded value: where (`spec.limits.cpuMillicores`, a path of field
/// names and `[index]`es from the value's root) and what was expected there. Never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The place, from the value's root (`spec`, `body`, ...).
    pub place: String,
    /// What was expected there (`must be an integer between 10 and 256000`).
    pub expected: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.place, self.expected)
    }
}

/// Every problem found while decoding one value, in the order they were found. They are values
/// until an edge renders them: the daemon into its error bodies' sentences, the CLI onto the
/// lines of berth.toml.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Problems(Vec<Problem>);

impl Problems {
    /// Records that `place` is not what was expected.
    pub fn push(&mut self, place: &str, expected: &str) {
        self.0.push(Problem {
            place: place.to_owned(),
            expected: expected.to_owned(),
        });
    }

    /// True when nothing was wrong.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems, as found.
    pub fn list(&self) -> &[Problem] {
        &self.0
    }

    /// The problems, each a sentence naming its place.
    pub fn into_vec(self) -> Vec<String> {
        self.0.iter().map(Problem::to_string).collect()
    }

    /// All problems joined into one sentence-list.
    pub fn joined(&self) -> String {
        let listed: Vec<String> = self
            .0
            .iter()
            .take(MAX_LISTED)
            .map(Problem::to_string)
            .collect();
        if self.0.len() <= MAX_LISTED {
            return listed.join("; ");
        }
        format!(
            "{}; and {} more problems",
            listed.join("; "),
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

    /// Expects a string of `min..=max` characters, each a Unicode scalar value: an emoji is one,
    /// as is `é` (whatever its bytes or UTF-16 units).
    pub fn bounded_string(
        &mut self,
        value: &Value,
        place: &str,
        min: usize,
        max: usize,
    ) -> Option<String> {
        let s = self.string(value, place)?;
        let len = s.chars().count();
        if len < min || len > max {
            self.push(
                place,
                &format!("must be a string of {min} to {max} characters"),
            );
            return None;
        }
        Some(s.to_owned())
    }

    /// Expects a name of `min..=max` characters with none of the [`NAME_REFUSES`] classes:
    /// control characters, bidirectional controls, zero-width characters. A name is shown in
    /// logs, tables and terminals, where a control would do harm and the others make one name
    /// look like another (or reorder what is printed after it). Each class found is one problem.
    pub fn name(&mut self, value: &Value, place: &str, min: usize, max: usize) -> Option<String> {
        let s = self.bounded_string(value, place, min, max)?;
        let mut ok = true;
        for (refused, expected) in NAME_REFUSES {
            if s.chars().any(refused) {
                self.push(place, expected);
                ok = false;
            }
        }
        ok.then_some(s)
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

/// A class of characters a name refuses, and the sentence that names it.
pub type Refused = (fn(char) -> bool, &'static str);

/// What a name refuses: each class of characters, with the sentence that names it.
pub const NAME_REFUSES: [Refused; 3] = [
    (
        is_control,
        "must not contain control characters (U+0000 to U+001F, U+007F to U+009F)",
    ),
    (
        is_bidi_control,
        "must not contain bidirectional controls (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069)",
    ),
    (
        is_zero_width,
        "must not contain zero-width characters (U+200B to U+200D, U+2060, U+FEFF)",
    ),
];

/// A control character berth refuses in its own names: C0 controls, DEL and C1 controls.
pub fn is_control(c: char) -> bool {
    c <= '\u{1f}' || ('\u{7f}'..='\u{9f}').contains(&c)
}

/// A character that changes the direction text is shown in: the Arabic letter mark, the
/// left-to-right and right-to-left marks, the embeddings and overrides and their pop, and the
/// isolates.
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// A character that takes no width: zero-width space, non-joiner and joiner, word joiner, and
/// the zero-width no-break space (a byte order mark).
pub fn is_zero_width(c: char) -> bool {
    matches!(
        c,
        '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' | '\u{feff}'
    )
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

/// Why a body is not a JSON value berth reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON, at this line and column.
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// An object at `place` has one key twice. serde_json would keep the last one silently, and
    /// two readers of one body could then disagree on what it says.
    DuplicateKey {
        /// The object's place (`body.spec.env`, `frame`).
        place: String,
    },
}

impl ParseError {
    /// The refusal's sentence, naming the place and never the key or a value.
    pub fn sentence(&self, root: &str) -> String {
        match self {
            ParseError::Syntax { line, column } => {
                format!("{root} is not valid JSON (line {line}, column {column})")
            }
            ParseError::DuplicateKey { place } => format!("{place} has a duplicate key"),
        }
    }
}

/// Parses JSON into a [`Value`] like `serde_json::from_slice`, but refuses an object that has a
/// key twice, at any depth, naming the object by its place under `root` (`body`, `frame`).
pub fn parse_json(bytes: &[u8], root: &str) -> Result<Value, ParseError> {
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let seed = UniqueValue {
        place: root.to_owned(),
        duplicate: &duplicate,
    };
    let parsed = seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    match parsed {
        Ok(value) => Ok(value),
        Err(e) => match duplicate.into_inner() {
            Some(place) => Err(ParseError::DuplicateKey { place }),
            None => Err(ParseError::Syntax {
                line: e.line(),
                column: e.column(),
            }),
        },
    }
}

/// A [`Value`] whose objects must have unique keys; the place of the first object that does not
/// is left in `duplicate`.
struct UniqueValue<'a> {
    place: String,
    duplicate: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for UniqueValue<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
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

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let seed = UniqueValue {
                place: format!("{}[{}]", self.place, items.len()),
                duplicate: self.duplicate,
            };
            match seq.next_element_seed(seed)? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some(self.place.clone());
                return Err(de::Error::custom("duplicate key"));
            }
            let seed = UniqueValue {
                place: format!("{}.{}", self.place, display_key(&key)),
                duplicate: self.duplicate,
            };
            let value = map.next_value_seed(seed)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// Compiles one of berth's own patterns (a constant of this crate or of the daemon's); panics on
/// a pattern that does not compile, which a test of each constant catches.
pub fn pattern(source: &str) -> Regex {
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
    fn a_key_twice_is_refused_at_any_depth_naming_the_object_and_never_the_key() {
        let cases: [(&str, &str); 6] = [
            (r#"{"a":1,"a":2}"#, "body"),
            (
                r#"{"spec":{"env":{"X":"1","Y":"2","X":"3"}}}"#,
                "body.spec.env",
            ),
            (r#"{"v":[{"n":1},{"n":1,"n":2}]}"#, "body.v[1]"),
            (
                r#"{"s3cr3t key":{"k":1,"k":1}}"#,
                "body.<a key that is not a plain name>",
            ),
            (r#"[[{"":0,"":0}]]"#, "body[0][0]"),
            (r#"{"a":{"b":{"c":{"d":null,"d":null}}}}"#, "body.a.b.c"),
        ];
        for (text, place) in cases {
            let e = parse_json(text.as_bytes(), "body").unwrap_err();
            assert_eq!(
                e,
                ParseError::DuplicateKey {
                    place: place.to_owned()
                },
                "{text}"
            );
            assert_eq!(e.sentence("body"), format!("{place} has a duplicate key"));
            assert!(!e.sentence("body").contains("s3cr3t"));
        }
    }

    #[test]
    fn unique_keys_parse_as_serde_json_parses_them() {
        for text in [
            r#"{"a":1,"b":[1,2.5,-3,"x",null,true,{"a":1}],"c":{"a":{}}}"#,
            "[]",
            "18446744073709551615",
            "-9223372036854775808",
            "1e300",
            r#""\u0000""#,
        ] {
            let ours = parse_json(text.as_bytes(), "body").unwrap();
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{text}");
        }
        for text in ["", "{", r#"{"a":1}x"#, "[1,]", "{\"a\" 1}"] {
            assert!(
                matches!(
                    parse_json(text.as_bytes(), "body"),
                    Err(ParseError::Syntax { .. })
                ),
                "{text}"
            );
        }
        // Nesting deeper than serde_json allows is refused, not a stack overflow.
        let deep = "[".repeat(100_000);
        assert!(matches!(
            parse_json(deep.as_bytes(), "body"),
            Err(ParseError::Syntax { .. })
        ));
    }

    #[test]
    fn lengths_count_characters_not_bytes_or_utf16_units() {
        let emoji = "\u{1F6A2}";
        // (text, min, max, accepted)
        let cases: Vec<(String, usize, usize, bool)> = vec![
            (emoji.repeat(51), 1, 100, true),
            (emoji.repeat(100), 1, 100, true),
            (emoji.repeat(101), 1, 100, false),
            ("\u{e9}".repeat(100), 1, 100, true),
            ("\u{e9}".repeat(101), 1, 100, false),
            // `e` and a combining accent are two characters.
            ("e\u{301}".repeat(50), 1, 100, true),
            ("e\u{301}".repeat(51), 1, 100, false),
            ("\u{4e2d}".repeat(200), 1, 200, true),
            ("a".repeat(100), 1, 100, true),
            ("a".repeat(101), 1, 100, false),
            (String::new(), 1, 100, false),
            (emoji.to_owned(), 1, 1, true),
        ];
        for (text, min, max, accepted) in cases {
            for decode in [Problems::bounded_string, Problems::name] {
                let mut p = Problems::default();
                let got = decode(&mut p, &json!(text), "body.name", min, max);
                assert_eq!(
                    got.is_some(),
                    accepted,
                    "{} chars at {min}..={max}",
                    text.chars().count()
                );
                if accepted {
                    assert_eq!(got.as_deref(), Some(text.as_str()));
                    assert!(p.is_empty());
                } else {
                    assert_eq!(
                        p.joined(),
                        format!("body.name must be a string of {min} to {max} characters")
                    );
                }
            }
        }
    }

    #[test]
    fn names_refuse_controls_bidi_controls_and_zero_width_characters_naming_the_place() {
        const CONTROL: &str =
            "must not contain control characters (U+0000 to U+001F, U+007F to U+009F)";
        const BIDI: &str = "must not contain bidirectional controls (U+061C, U+200E, U+200F, \
                            U+202A to U+202E, U+2066 to U+2069)";
        const ZERO_WIDTH: &str =
            "must not contain zero-width characters (U+200B to U+200D, U+2060, U+FEFF)";
        let control = [
            '\u{0}', '\n', '\t', '\u{1f}', '\u{7f}', '\u{80}', '\u{85}', '\u{9f}',
        ];
        let bidi = [
            '\u{61c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
            '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
        ];
        let zero_width = ['\u{200b}', '\u{200c}', '\u{200d}', '\u{2060}', '\u{feff}'];
        for (chars, expected) in [
            (&control[..], CONTROL),
            (&bidi, BIDI),
            (&zero_width, ZERO_WIDTH),
        ] {
            for &c in chars {
                for text in [format!("{c}"), format!("shop{c}"), format!("{c}secret{c}x")] {
                    let mut p = Problems::default();
                    assert_eq!(
                        p.name(&json!(text), "body.by", 1, 200),
                        None,
                        "U+{:04X}",
                        c as u32
                    );
                    let said = p.joined();
                    assert_eq!(said, format!("body.by {expected}"), "U+{:04X}", c as u32);
                    assert!(!said.contains("secret") && !said.contains("shop"));
                }
            }
        }
        // Every class found is named, once each.
        let mut p = Problems::default();
        assert_eq!(
            p.name(
                &json!("a\u{85}b\u{202e}c\u{200b}d\u{1}"),
                "body.name",
                1,
                200
            ),
            None
        );
        assert_eq!(
            p.into_vec(),
            vec![
                format!("body.name {CONTROL}"),
                format!("body.name {BIDI}"),
                format!("body.name {ZERO_WIDTH}"),
            ]
        );
        // What is near them but neither control nor invisible passes.
        for text in [
            "caf\u{e9} \u{1F6A2}",
            "\u{a0}nbsp",
            "\u{a1}\u{ff}",
            "\u{5e9}\u{5dc}\u{5d5}\u{5dd}",
            "\u{627}\u{644}\u{639}\u{631}\u{628}\u{64a}\u{629}",
            "\u{2010}x",
            "\u{200a}",
            "\u{2070}",
        ] {
            let mut p = Problems::default();
            assert_eq!(
                p.name(&json!(text), "body.name", 1, 200).as_deref(),
                Some(text)
            );
            assert!(p.is_empty(), "{text:?}: {}", p.joined());
        }
    }

    #[test]
    fn free_text_counts_characters_but_keeps_its_characters() {
        // `bounded_string` is for text that is not a name: only its length is checked.
        let mut p = Problems::default();
        let text = "\u{202e}\u{200b}\u{85}";
        assert_eq!(
            p.bounded_string(&json!(text), "body.code", 1, 3).as_deref(),
            Some(text)
        );
        assert!(p.is_empty());
        assert_eq!(p.bounded_string(&json!(7), "body.code", 1, 3), None);
        assert_eq!(p.joined(), "body.code must be a string");
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
