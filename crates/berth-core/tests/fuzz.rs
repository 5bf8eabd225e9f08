//! Hostile input for the decoders that read what callers send: the resource-instance spec and the
//! exec frame. Arbitrary JSON values, arbitrary bytes, and valid inputs with random parts
//! replaced, removed or added. Whatever arrives, the decoders must not panic; a refusal names the
//! place of every problem and never quotes a value; what they accept round-trips.
//!
//! Case counts are bounded so the whole file runs in a few seconds.

use std::collections::BTreeSet;

use berth_core::exec::{MAX_TIMEOUT_MS, decode_frame};
use berth_core::spec::{FORBIDDEN_SPEC_FIELDS, Refusal, decode_spec};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Number, Value, json};

const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The names a spec is made of, the forbidden ones, and the frame's: random objects use them as
/// keys often, so decoding goes deep instead of stopping at the first unknown key.
const KNOWN_KEYS: &[&str] = &[
    "alias",
    "worktreeKey",
    "image",
    "command",
    "env",
    "volumes",
    "name",
    "mountPath",
    "limits",
    "cpuMillicores",
    "memoryBytes",
    "ready",
    "kind",
    "port",
    "argv",
    "user",
    "idleStopAfterSeconds",
    "timeoutMs",
    "privileged",
    "binds",
    "capAdd",
    "securityOpt",
    "network_mode",
];

fn valid_spec() -> Value {
    json!({
        "alias": "db",
        "worktreeKey": null,
        "image": format!("127.0.0.1:5000/fixtures/busybox:1.36@sha256:{HEX}"),
        "command": ["httpd", "-f", "-p", "8080"],
        "env": {"POSTGRES_PASSWORD": "dev", "_X": ""},
        "volumes": [{"name": "data", "mountPath": "/var/lib/data"}],
        "limits": {"cpuMillicores": 500, "memoryBytes": 268435456},
        "ready": {"kind": "exec", "argv": ["pg_isready", "-q"], "user": "postgres"},
        "idleStopAfterSeconds": 1800
    })
}

fn valid_frame() -> Value {
    json!({"argv": ["psql", "-c", "select 1"], "user": "postgres", "timeoutMs": 60000})
}

/// Strings a hostile caller sends: any unicode, control characters and NUL, path tricks,
/// near-misses of valid values, and very long ones.
fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<String>(),
        2 => "[\\x00-\\x1f\\x7f]{0,12}",
        2 => "[a-z0-9._@:/-]{0,24}",
        1 => "\\PC{0,64}",
        1 => Just("\0".to_owned()),
        1 => Just("../../etc/passwd".to_owned()),
        1 => Just("/var/run/docker.sock".to_owned()),
        1 => Just("tcp".to_owned()),
        1 => Just("exec".to_owned()),
        1 => prop::sample::select(KNOWN_KEYS).prop_map(str::to_owned),
        1 => (1usize..100_000).prop_map(|n| "\u{10FFFF}a".repeat(n / 2 + 1)),
        1 => (1usize..100_000).prop_map(|n| "x".repeat(n)),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (-2i64..70_000).prop_map(|n| json!(n)),
        prop::sample::select(vec![
            0.5,
            -0.0,
            1e300,
            -1e300,
            9_007_199_254_740_993.0,
            4.9e-324
        ])
        .prop_map(|f| json!(f)),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(KNOWN_KEYS).prop_map(str::to_owned),
        2 => hostile_string(),
    ]
}

/// Any JSON value, up to a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        hostile_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// One change to a JSON value at a place chosen by `path` (indices taken modulo the size of
/// each object or array met on the way).
#[derive(Debug, Clone)]
enum Mutation {
    Replace(Vec<usize>, Value),
    Remove(Vec<usize>),
    Insert(Vec<usize>, String, Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let path = prop::collection::vec(any::<usize>(), 0..4);
    prop_oneof![
        4 => (path.clone(), json_value()).prop_map(|(p, v)| Mutation::Replace(p, v)),
        1 => path.clone().prop_map(Mutation::Remove),
        2 => (path, key(), json_value()).prop_map(|(p, k, v)| Mutation::Insert(p, k, v)),
    ]
}

fn apply(value: &mut Value, mutation: &Mutation) {
    fn walk<'a>(value: &'a mut Value, path: &[usize]) -> (&'a mut Value, Option<usize>) {
        let Some((&first, rest)) = path.split_first() else {
            return (value, None);
        };
        let len = match &*value {
            Value::Object(map) => map.len(),
            Value::Array(items) => items.len(),
            _ => 0,
        };
        if len == 0 {
            return (value, None);
        }
        let i = first % len;
        let descend = match &*value {
            Value::Object(map) => map
                .values()
                .nth(i)
                .is_some_and(|v| v.is_object() || v.is_array()),
            Value::Array(items) => items[i].is_object() || items[i].is_array(),
            _ => false,
        };
        if rest.is_empty() || !descend {
            return (value, Some(i));
        }
        match value {
            Value::Object(map) => walk(map.values_mut().nth(i).expect("in range"), rest),
            Value::Array(items) => walk(&mut items[i], rest),
            _ => unreachable!(),
        }
    }
    match mutation {
        Mutation::Replace(path, new) => match walk(value, path) {
            (Value::Object(map), Some(i)) => {
                *map.values_mut().nth(i).expect("in range") = new.clone();
            }
            (Value::Array(items), Some(i)) => items[i] = new.clone(),
            (target, _) => *target = new.clone(),
        },
        Mutation::Remove(path) => match walk(value, path) {
            (Value::Object(map), Some(i)) => {
                let k = map.keys().nth(i).expect("in range").clone();
                map.remove(&k);
            }
            (Value::Array(items), Some(i)) => {
                items.remove(i);
            }
            _ => {}
        },
        Mutation::Insert(path, k, new) => match walk(value, path) {
            (Value::Object(map), _) => {
                map.insert(k.clone(), new.clone());
            }
            (Value::Array(items), _) => items.push(new.clone()),
            _ => {}
        },
    }
}

/// Every string value in `value` (not keys), and every key that is not a plain name.
fn strings_in(value: &Value, values: &mut BTreeSet<String>, wild_keys: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            values.insert(s.clone());
        }
        Value::Array(items) => items.iter().for_each(|v| strings_in(v, values, wild_keys)),
        Value::Object(map) => {
            for (k, v) in map {
                let tame = !k.is_empty()
                    && k.len() <= 64
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.@:".contains(c));
                if !tame {
                    wild_keys.insert(k.clone());
                }
                strings_in(v, values, wild_keys);
            }
        }
        _ => {}
    }
}

/// Asserts that `text` quotes none of the input's strings long enough to be told apart from
/// berth's own words (the field names a place is made of are berth's words).
fn quotes_nothing(text: &str, input: &Value) -> Result<(), TestCaseError> {
    let (mut values, mut wild_keys) = (BTreeSet::new(), BTreeSet::new());
    strings_in(input, &mut values, &mut wild_keys);
    for s in values.iter().chain(&wild_keys) {
        if s.chars().count() >= 10 && !KNOWN_KEYS.contains(&s.as_str()) {
            prop_assert!(!text.contains(s.as_str()), "{text:?} quotes {s:?}");
        }
    }
    Ok(())
}

/// What a spec decode must be, whatever the input.
fn check_spec(input: &Value) -> Result<(), TestCaseError> {
    match decode_spec(input) {
        Ok(spec) => {
            // Accepted: its canonical form decodes to the same spec and the same digest.
            let canonical: Value = serde_json::from_str(&spec.canonical_json())
                .map_err(|e| TestCaseError::fail(format!("canonical JSON: {e}")))?;
            let again = decode_spec(&canonical)
                .map_err(|r| TestCaseError::fail(format!("canonical form refused: {r:?}")))?;
            prop_assert_eq!(&again, &spec);
            prop_assert_eq!(again.digest(), spec.digest());
        }
        Err(refusals) => check_refusals(input, &refusals)?,
    }
    Ok(())
}

fn check_refusals(input: &Value, refusals: &[Refusal]) -> Result<(), TestCaseError> {
    prop_assert!(!refusals.is_empty());
    let forbidden = refusals.iter().any(|r| r.field != "spec");
    for r in refusals {
        prop_assert!(!r.reason.is_empty());
        if r.field == "spec" {
            prop_assert!(
                !forbidden,
                "forbidden fields are refused alone: {refusals:?}"
            );
            // A long list ends with a count of the problems left out, which names none.
            let listed = r
                .reason
                .split("; ")
                .filter(|p| !(p.starts_with("and ") && p.ends_with(" more problems")));
            for problem in listed {
                prop_assert!(
                    problem.starts_with("spec ") || problem.starts_with("spec."),
                    "a problem that names no place: {problem:?}"
                );
            }
        } else {
            prop_assert!(
                FORBIDDEN_SPEC_FIELDS
                    .iter()
                    .any(|(name, _)| *name == r.field),
                "{:?} is not a forbidden field",
                r.field
            );
            prop_assert!(
                input
                    .as_object()
                    .is_some_and(|m| m.contains_key(r.field.as_str()))
            );
        }
        quotes_nothing(&r.reason, input)?;
    }
    Ok(())
}

/// What a frame decode must be, whatever the bytes.
fn check_frame(bytes: &[u8]) -> Result<(), TestCaseError> {
    match decode_frame(bytes) {
        Ok(frame) => {
            prop_assert!(!frame.argv.is_empty() && frame.argv.len() <= 4096);
            prop_assert!(frame.argv.iter().all(|a| !a.contains('\0')));
            prop_assert!((1000..=MAX_TIMEOUT_MS).contains(&frame.timeout_ms));
        }
        Err(problems) => {
            let problems = problems.into_vec();
            prop_assert!(!problems.is_empty());
            for problem in &problems {
                prop_assert!(
                    problem.starts_with("frame ") || problem.starts_with("frame."),
                    "a problem that names no place: {problem:?}"
                );
            }
            if let Ok(input) = serde_json::from_slice::<Value>(bytes) {
                quotes_nothing(&problems.join("; "), &input)?;
            }
        }
    }
    Ok(())
}

/// Bytes that are mostly JSON's own characters, so that some of them parse.
fn jsonish_bytes() -> impl Strategy<Value = Vec<u8>> {
    let alphabet: Vec<u8> = br#"{}[]":,. 0123456789-+eEtrufalsn\u0000abcdx"#.to_vec();
    prop::collection::vec(prop::sample::select(alphabet), 0..200)
}

proptest! {
    #![proptest_config(Config::with_cases(384))]

    #[test]
    fn a_spec_made_of_arbitrary_json_never_panics_and_every_refusal_names_its_place(input in json_value()) {
        check_spec(&input)?;
    }

    #[test]
    fn a_valid_spec_with_random_parts_replaced_never_panics(mutations in prop::collection::vec(mutation(), 1..5)) {
        let mut input = valid_spec();
        for m in &mutations {
            apply(&mut input, m);
        }
        check_spec(&input)?;
    }

    #[test]
    fn a_spec_from_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(input) = serde_json::from_slice::<Value>(&bytes) {
            check_spec(&input)?;
        }
    }

    #[test]
    fn a_spec_from_json_like_bytes_never_panics(bytes in jsonish_bytes()) {
        if let Ok(input) = serde_json::from_slice::<Value>(&bytes) {
            check_spec(&input)?;
        }
    }

    #[test]
    fn a_spec_text_with_bytes_flipped_never_panics(flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let mut text = valid_spec().to_string().into_bytes();
        for (at, byte) in flips {
            let i = at % text.len();
            text[i] = byte;
        }
        if let Ok(input) = serde_json::from_slice::<Value>(&text) {
            check_spec(&input)?;
        }
    }

    #[test]
    fn a_frame_of_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check_frame(&bytes)?;
    }

    #[test]
    fn a_frame_of_json_like_bytes_never_panics(bytes in jsonish_bytes()) {
        check_frame(&bytes)?;
    }

    #[test]
    fn a_frame_of_arbitrary_json_never_panics(input in json_value()) {
        check_frame(input.to_string().as_bytes())?;
    }

    #[test]
    fn a_valid_frame_with_random_parts_replaced_never_panics(mutations in prop::collection::vec(mutation(), 1..4)) {
        let mut input = valid_frame();
        for m in &mutations {
            apply(&mut input, m);
        }
        check_frame(input.to_string().as_bytes())?;
    }
}

#[test]
fn deeply_nested_input_is_refused_not_a_stack_overflow() {
    for open in ["[", "{\"argv\":"] {
        let text = open.repeat(200_000);
        assert!(decode_frame(text.as_bytes()).is_err());
        assert!(serde_json::from_str::<Value>(&text).is_err());
    }
    // The deepest value JSON parsing lets through is still decoded, and refused by place.
    let mut deep = json!(1);
    for _ in 0..120 {
        deep = json!({"env": deep});
    }
    let refusals = decode_spec(&deep).unwrap_err();
    assert_eq!(refusals[0].field, "spec");
}

#[test]
fn huge_inputs_are_refused_with_bounded_work() {
    let started = std::time::Instant::now();
    // Many problems at once: each is named, none is quoted.
    let env: Map<String, Value> = (0..20_000)
        .map(|i| (format!("bad name {i}"), json!("v")))
        .collect();
    let mut spec = valid_spec();
    spec["env"] = Value::Object(env);
    let refusals = decode_spec(&spec).unwrap_err();
    assert!(!refusals[0].reason.contains("bad name"));
    // A frame of the most arguments, each long.
    let argv: Vec<String> = (0..4096).map(|i| format!("{i:0>64}")).collect();
    let frame = json!({"argv": argv, "user": null, "timeoutMs": 1000}).to_string();
    assert_eq!(decode_frame(frame.as_bytes()).unwrap().argv.len(), 4096);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
