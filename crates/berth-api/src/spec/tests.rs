use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn valid() -> Value {
    json!({
        "alias": "db",
        "worktreeKey": null,
        "image": format!("127.0.0.1:5000/fixtures/busybox:1.36@sha256:{HEX}"),
        "command": ["httpd", "-f", "-p", "8080"],
        "env": {"POSTGRES_PASSWORD": "secret", "_X": ""},
        "volumes": [{"name": "data", "mountPath": "/var/lib/data"}],
        "limits": {"cpuMillicores": 500, "memoryBytes": 268435456},
        "ready": {"kind": "tcp", "port": 8080},
        "idleStopAfterSeconds": 1800
    })
}

/// `valid()` with the value at the JSON pointer `path` replaced (or removed when `None`).
fn with(path: &str, value: Option<Value>) -> Value {
    let mut spec = valid();
    let (parent, last) = path.rsplit_once('/').unwrap();
    let target = spec.pointer_mut(parent).unwrap();
    match (target, value) {
        (Value::Object(map), Some(v)) => {
            map.insert(last.to_owned(), v);
        }
        (Value::Object(map), None) => {
            map.remove(last);
        }
        (Value::Array(items), Some(v)) => items[last.parse::<usize>().unwrap()] = v,
        _ => unreachable!(),
    }
    spec
}

fn refusal_reason(input: &Value) -> String {
    let refusals = decode_spec(input).expect_err("refused");
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0].field, "spec");
    refusals[0].reason.clone()
}

#[test]
fn a_valid_spec_is_accepted() {
    let spec = decode_spec(&valid()).unwrap();
    assert_eq!(spec.alias, "db");
    assert_eq!(spec.limits.cpu_millicores, 500);
    assert_eq!(spec.ready, Ready::Tcp { port: 8080 });
    let exec = with(
        "/ready",
        Some(json!({"kind": "exec", "argv": ["pg_isready"], "user": "postgres"})),
    );
    assert!(matches!(
        decode_spec(&exec).unwrap().ready,
        Ready::Exec { .. }
    ));
}

#[test]
fn every_forbidden_field_is_refused_by_name_with_its_sentence() {
    assert_eq!(FORBIDDEN_SPEC_FIELDS.len(), 21);
    for (field, sentence) in FORBIDDEN_SPEC_FIELDS {
        let input = with(&format!("/{field}"), Some(json!(true)));
        let refusals = decode_spec(&input).expect_err(field);
        assert_eq!(
            refusals,
            vec![Refusal {
                field: field.to_owned(),
                reason: sentence.to_owned()
            }]
        );
    }
    // Each forbidden field is named even when the rest of the spec is broken.
    let refusals = decode_spec(&json!({"privileged": true, "pid": "host"})).unwrap_err();
    let fields: Vec<&str> = refusals.iter().map(|r| r.field.as_str()).collect();
    assert_eq!(fields, vec!["pid", "privileged"]);
}

#[test]
fn every_bound_and_pattern_is_refused_with_its_place() {
    let long = "a".repeat(129);
    let cases: Vec<(&str, Option<Value>, &str)> = vec![
        (
            "/limits/cpuMillicores",
            Some(json!(9)),
            "spec.limits.cpuMillicores must be an integer between 10 and 256000",
        ),
        (
            "/limits/cpuMillicores",
            Some(json!(256001)),
            "spec.limits.cpuMillicores must be an integer between 10 and 256000",
        ),
        (
            "/limits/cpuMillicores",
            Some(json!(1.5)),
            "spec.limits.cpuMillicores must be an integer",
        ),
        (
            "/limits/memoryBytes",
            Some(json!(16 * 1024 * 1024 - 1)),
            "spec.limits.memoryBytes must be an integer between 16777216 and 9007199254740991",
        ),
        (
            "/limits/memoryBytes",
            Some(json!(9007199254740992_i64)),
            "spec.limits.memoryBytes must be an integer",
        ),
        (
            "/limits/extra",
            Some(json!(1)),
            "spec.limits.extra is not an allowed key",
        ),
        (
            "/volumes",
            Some(json!(
                (0..17)
                    .map(|i| json!({"name": format!("v{i}"), "mountPath": format!("/v{i}")}))
                    .collect::<Vec<_>>()
            )),
            "spec.volumes must have at most 16 items",
        ),
        (
            "/volumes",
            Some(json!([{"name": "a", "mountPath": "/a"}, {"name": "a", "mountPath": "/b"}])),
            "spec.volumes must have distinct names",
        ),
        (
            "/volumes",
            Some(json!([{"name": "a", "mountPath": "/a"}, {"name": "b", "mountPath": "/a"}])),
            "spec.volumes must have distinct mount paths",
        ),
        (
            "/volumes/0/mountPath",
            Some(json!("relative/path")),
            "spec.volumes[0].mountPath must be an absolute path other than '/'",
        ),
        (
            "/volumes/0/mountPath",
            Some(json!("/")),
            "spec.volumes[0].mountPath must be an absolute path other than '/'",
        ),
        (
            "/volumes/0/mountPath",
            Some(json!("/a/../b")),
            "spec.volumes[0].mountPath must be a normalized absolute path",
        ),
        (
            "/volumes/0/mountPath",
            Some(json!("/a//b")),
            "spec.volumes[0].mountPath must be a normalized absolute path",
        ),
        (
            "/volumes/0/mountPath",
            Some(json!("/a/./b")),
            "spec.volumes[0].mountPath must be a normalized absolute path",
        ),
        (
            "/volumes/0/mountPath",
            Some(json!("/a b")),
            "spec.volumes[0].mountPath must be a normalized absolute path",
        ),
        (
            "/volumes/0/mountPath",
            Some(json!("/proc")),
            "spec.volumes[0].mountPath must not be under /proc, /sys or /dev",
        ),
        (
            "/volumes/0/mountPath",
            Some(json!("/sys/fs")),
            "spec.volumes[0].mountPath must not be under /proc, /sys or /dev",
        ),
        (
            "/volumes/0/mountPath",
            Some(json!("/dev/shm")),
            "spec.volumes[0].mountPath must not be under /proc, /sys or /dev",
        ),
        (
            "/volumes/0/name",
            Some(json!("Data")),
            "spec.volumes[0].name must be 1 to 31 lower-case letters",
        ),
        (
            "/volumes/0/name",
            Some(json!("1data")),
            "spec.volumes[0].name must be 1 to 31 lower-case letters",
        ),
        (
            "/volumes/0/name",
            Some(json!("a".repeat(32))),
            "spec.volumes[0].name must be 1 to 31 lower-case letters",
        ),
        (
            "/volumes/0/host",
            Some(json!("/")),
            "spec.volumes[0].host is not an allowed key",
        ),
        (
            "/env/1BAD",
            Some(json!("x")),
            "spec.env.1BAD must be named as an environment variable",
        ),
        (
            "/env/A-B",
            Some(json!("x")),
            "spec.env.A-B must be named as an environment variable",
        ),
        (
            "/env/BIG",
            Some(json!("x".repeat(32_769))),
            "spec.env.BIG must be at most 32768 characters",
        ),
        (
            "/env/BIG",
            Some(json!("\u{e9}".repeat(32_769))),
            "spec.env.BIG must be at most 32768 characters",
        ),
        (
            "/env/NUL",
            Some(json!("a\u{0}b")),
            "spec.env.NUL must not contain a NUL byte",
        ),
        ("/env/NUM", Some(json!(5)), "spec.env.NUM must be a string"),
        (
            "/ready",
            Some(json!({"kind": "tcp", "port": 0})),
            "spec.ready.port must be an integer between 1 and 65535",
        ),
        (
            "/ready",
            Some(json!({"kind": "tcp", "port": 65536})),
            "spec.ready.port must be an integer between 1 and 65535",
        ),
        (
            "/ready",
            Some(json!({"kind": "exec", "argv": [], "user": null})),
            "spec.ready.argv must have at least 1 item(s)",
        ),
        (
            "/ready",
            Some(json!({"kind": "exec", "argv": ["a\u{0}"], "user": null})),
            "spec.ready.argv[0] must not contain a NUL byte",
        ),
        (
            "/ready",
            Some(json!({"kind": "exec", "argv": ["true"], "user": "no body"})),
            "spec.ready.user must be a user",
        ),
        (
            "/ready",
            Some(json!({"kind": "exec", "argv": ["true"]})),
            "spec.ready.user is missing",
        ),
        (
            "/ready",
            Some(json!({"kind": "http", "port": 80})),
            "spec.ready.kind must be one of \"tcp\", \"exec\"",
        ),
        (
            "/ready",
            Some(json!({"kind": "tcp", "port": 80, "argv": ["x"]})),
            "spec.ready.argv is not an allowed key",
        ),
        (
            "/alias",
            Some(json!("Db")),
            "spec.alias must be a DNS label",
        ),
        (
            "/alias",
            Some(json!("1db")),
            "spec.alias must be a DNS label",
        ),
        (
            "/alias",
            Some(json!("db-")),
            "spec.alias must be a DNS label",
        ),
        (
            "/alias",
            Some(json!("a".repeat(64))),
            "spec.alias must be a DNS label",
        ),
        (
            "/worktreeKey",
            Some(json!("-wt")),
            "spec.worktreeKey must be 1 to 128 letters",
        ),
        (
            "/worktreeKey",
            Some(json!(long)),
            "spec.worktreeKey must be 1 to 128 letters",
        ),
        (
            "/worktreeKey",
            Some(json!("wt/1")),
            "spec.worktreeKey must be 1 to 128 letters",
        ),
        (
            "/image",
            Some(json!("busybox:latest")),
            "spec.image must be an image pinned by digest (<repository>[:tag]@sha256:<64 hex>)",
        ),
        (
            "/image",
            Some(json!(format!("busybox@sha256:{}", &HEX[..10]))),
            "spec.image must be an image pinned by digest",
        ),
        (
            "/image",
            Some(json!(format!("a//b@sha256:{HEX}"))),
            "spec.image must name a repository",
        ),
        (
            "/command",
            Some(json!("sh -c x")),
            "spec.command must be an array",
        ),
        (
            "/command",
            Some(json!(["ok", "bad\u{0}"])),
            "spec.command[1] must not contain a NUL byte",
        ),
        (
            "/idleStopAfterSeconds",
            Some(json!(0)),
            "spec.idleStopAfterSeconds must be an integer between 1 and 864000",
        ),
        (
            "/idleStopAfterSeconds",
            Some(json!(864001)),
            "spec.idleStopAfterSeconds must be an integer between 1 and 864000",
        ),
        ("/alias", None, "spec.alias is missing"),
        ("/worktreeKey", None, "spec.worktreeKey is missing"),
        (
            "/extraField",
            Some(json!(1)),
            "spec.extraField is not an allowed key",
        ),
    ];
    for (path, value, expected) in cases {
        let input = with(path, value.clone());
        let reason = refusal_reason(&input);
        assert!(
            reason.contains(expected),
            "{path} = {value:?}: expected {expected:?} in {reason:?}"
        );
    }
}

#[test]
fn boundary_values_are_accepted() {
    let cases: Vec<(&str, Value)> = vec![
        ("/limits/cpuMillicores", json!(10)),
        ("/limits/cpuMillicores", json!(256000)),
        ("/limits/memoryBytes", json!(16 * 1024 * 1024)),
        ("/limits/memoryBytes", json!(9007199254740991_i64)),
        ("/idleStopAfterSeconds", json!(1)),
        ("/idleStopAfterSeconds", json!(864000)),
        ("/env/BIG", json!("x".repeat(32_768))),
        // A value's length is in characters: 32768 emoji are 65536 UTF-16 units.
        ("/env/BIG", json!("\u{1F6A2}".repeat(32_768))),
        ("/worktreeKey", json!("feature/x".replace('/', ":"))),
        ("/alias", json!("a".repeat(63))),
        (
            "/volumes",
            json!(
                (0..16)
                    .map(|i| json!({"name": format!("v{i}"), "mountPath": format!("/v{i}")}))
                    .collect::<Vec<_>>()
            ),
        ),
        ("/ready", json!({"kind": "tcp", "port": 65535})),
        ("/command", json!(null)),
    ];
    for (path, value) in cases {
        let input = with(path, Some(value.clone()));
        assert!(
            decode_spec(&input).is_ok(),
            "{path} = {value:?} should be accepted"
        );
    }
}

#[test]
fn every_problem_is_reported_and_no_value_is_echoed() {
    let input = json!({
        "alias": "NOT-VALID-hunter2",
        "worktreeKey": null,
        "image": "hunter2:latest",
        "command": null,
        "env": {},
        "volumes": [],
        "limits": {"cpuMillicores": 1, "memoryBytes": 1},
        "ready": {"kind": "tcp", "port": 1},
        "idleStopAfterSeconds": 1
    });
    let reason = refusal_reason(&input);
    for place in [
        "spec.alias",
        "spec.image",
        "spec.limits.cpuMillicores",
        "spec.limits.memoryBytes",
    ] {
        assert!(reason.contains(place), "{place} in {reason}");
    }
    assert!(!reason.contains("hunter2"), "{reason}");
}

#[test]
fn a_spec_that_is_not_an_object_is_refused_as_spec() {
    for input in [json!(null), json!([]), json!("spec"), json!(1)] {
        assert_eq!(refusal_reason(&input), "spec must be an object");
    }
}

#[test]
fn idle_freeze_is_optional_and_leaves_the_digest_of_a_spec_without_it() {
    let without = decode_spec(&valid()).unwrap();
    assert_eq!(without.idle_freeze_after_seconds, None);
    assert!(!without.canonical_json().contains("idleFreezeAfterSeconds"));
    let null = decode_spec(&with("/idleFreezeAfterSeconds", Some(Value::Null))).unwrap();
    assert_eq!(null.digest(), without.digest());
    let with_freeze = decode_spec(&with("/idleFreezeAfterSeconds", Some(json!(30)))).unwrap();
    assert_eq!(with_freeze.idle_freeze_after_seconds, Some(30));
    assert_ne!(with_freeze.digest(), without.digest());
    assert!(with_freeze.same_container(&without));
    for bad in [
        json!(0),
        json!(-1),
        json!(MAX_IDLE_SECONDS + 1),
        json!("30"),
        json!(1.5),
    ] {
        let reason = refusal_reason(&with("/idleFreezeAfterSeconds", Some(bad)));
        assert!(reason.contains("spec.idleFreezeAfterSeconds"), "{reason}");
    }
}

#[test]
fn canonical_json_sorts_keys_at_every_depth() {
    let value = json!({"b": {"z": 1, "a": [{"y": 1, "x": 2}]}, "a": "\"q\""});
    assert_eq!(
        canonical_json(&value),
        r#"{"a":"\"q\"","b":{"a":[{"x":2,"y":1}],"z":1}}"#
    );
}

/// Re-serialises `value` with object keys in a shuffled order and arbitrary whitespace.
fn reorder(value: &Value, seed: &mut u64, pad: &str) -> String {
    let mut next = || {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    };
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            for i in (1..entries.len()).rev() {
                let j = (next() as usize) % (i + 1);
                entries.swap(i, j);
            }
            let parts: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| {
                    format!(
                        "{pad}{}{pad}:{pad}{}",
                        Value::String(k.clone()),
                        reorder(v, seed, pad)
                    )
                })
                .collect();
            format!("{{{}{pad}}}", parts.join(","))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|v| format!("{pad}{}", reorder(v, seed, pad)))
                .collect();
            format!("[{}{pad}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

proptest! {
    #[test]
    fn spec_digest_ignores_key_order_and_whitespace(seed in any::<u64>(), pad in "[ \t\n\r]{0,3}") {
        let expected = decode_spec(&valid()).unwrap().digest();
        let mut s = seed;
        let text = reorder(&valid(), &mut s, &pad);
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(decode_spec(&reparsed).unwrap().digest(), expected);
    }

    #[test]
    fn spec_digest_changes_when_any_value_changes(
        which in 0usize..8,
        n in 11i64..255_000,
        text in "[a-z][a-z0-9]{0,20}",
    ) {
        let base = decode_spec(&valid()).unwrap();
        let mut changed = base.clone();
        match which {
            0 => changed.limits.cpu_millicores = if n == 500 { 501 } else { n },
            1 => changed.limits.memory_bytes += n,
            2 => changed.alias = format!("x{text}"),
            3 => { changed.env.insert("POSTGRES_PASSWORD".into(), format!("{text}!")); }
            4 => changed.worktree_key = Some(text.clone()),
            5 => changed.idle_stop_after_seconds = if n == 1800 { 1801 } else { n },
            6 => changed.volumes[0].mount_path = format!("/m/{text}"),
            _ => changed.command = Some(vec![text.clone()]),
        }
        prop_assert_ne!(changed.digest(), base.digest());
    }
}
