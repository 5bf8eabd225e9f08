//! The OpenAPI schema of a resource-instance spec, built from the same constants the decoder in
//! [`crate::spec`] checks against (patterns, bounds, limits), so the document and the
//! decoder cannot drift apart on them. The example is a spec the decoder accepts (a test here
//! says so); `scripts/schemathesis` replaces its image with the fixture image it can pull.

use crate::decode::MAX_SAFE_INTEGER;
use crate::exec::MAX_ARGS;
use crate::image::PINNED_IMAGE_PATTERN;
use crate::spec::{
    ALIAS_PATTERN, CPU_MILLICORES, ENV_NAME_PATTERN, Limits, MAX_ENV_VALUE, MAX_IDLE_SECONDS,
    MAX_VOLUMES, MIN_MEMORY_BYTES, READY_USER_PATTERN, Ready, SpecRequest, VOLUME_NAME_PATTERN,
    VolumeSpec, WORKTREE_KEY_PATTERN,
};
use serde_json::{Value, json};

/// The image in the document's example spec: a digest-pinned reference on a local registry.
pub const EXAMPLE_IMAGE: &str = "127.0.0.1:5000/berth-fixtures/busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// A string that holds no NUL byte (command arguments, env values).
const NO_NUL: &str = "^[^\\u0000]*$";

/// A normalized absolute path's shape: segments of `A-Za-z0-9._@+-`, none `.` or `..` (the
/// decoder also refuses `/` alone and paths under `/proc`, `/sys` and `/dev`).
const MOUNT_PATH_PATTERN: &str = "^(/[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*)+$";

/// An example spec the decoder accepts: a [`SpecRequest`], so its fields are the spec's own.
pub fn example_spec() -> Value {
    let example = SpecRequest {
        alias: "web".to_owned(),
        worktree_key: None,
        image: EXAMPLE_IMAGE.to_owned(),
        command: None,
        env: [("GREETING".to_owned(), "hello".to_owned())].into(),
        volumes: vec![VolumeSpec {
            name: "data".to_owned(),
            mount_path: "/srv/data".to_owned(),
        }],
        limits: Limits {
            cpu_millicores: 250,
            memory_bytes: 67_108_864,
        },
        ready: Ready::Tcp { port: 8080 },
        idle_stop_after_seconds: 3600,
        idle_freeze_after_seconds: None,
    };
    // A spec holds strings, numbers and maps of strings only: it always encodes.
    serde_json::to_value(example).unwrap_or(Value::Null)
}

fn arguments(min: usize, description: &str) -> Value {
    json!({
        "type": "array",
        "description": description,
        "minItems": min,
        "maxItems": MAX_ARGS,
        "items": {"type": "string", "pattern": NO_NUL}
    })
}

/// The spec's JSON Schema.
///
/// Built by hand, kept on purpose: utoipa's `ToSchema` derive on [`crate::spec::SpecOf`] cannot
/// write this document byte for byte: `propertyNames` for the env's names, `worktreeKey` as
/// `["string", "null"]` with its pattern, `command` as a `oneOf` with `null`, and each field's
/// description, bounds and pattern taken from the decoder's own constants.
pub fn spec_schema() -> Value {
    json!({
        "type": "object",
        "description": "What an instance runs. Every field is required but berth's own \
            idleFreezeAfterSeconds; no other key is allowed. \
            Fields that would weaken isolation (privileged, capAdd, binds, hostNetwork, devices, \
            pid, securityOpt and the like) are refused by name with ResourceInstanceSpecRefusedError.",
        "additionalProperties": false,
        "required": ["alias", "worktreeKey", "image", "command", "env", "volumes", "limits", "ready", "idleStopAfterSeconds"],
        "properties": {
            "alias": {
                "type": "string",
                "description": "The DNS label linked workspaces resolve the instance by.",
                "pattern": ALIAS_PATTERN,
                "maxLength": 63
            },
            "worktreeKey": {
                "type": ["string", "null"],
                "description": "Null: every workspace linked to the domain reaches it. Set: only links with this key.",
                "pattern": WORKTREE_KEY_PATTERN,
                "maxLength": 128
            },
            "image": {
                "type": "string",
                "description": "`[registry/]repository[:tag]@sha256:<64 hex>`: the image, pinned by digest. \
                    The registry host is localhost or a DNS name with an optional port; the repository is \
                    lower-case components joined by '.', '_', '-' and '/'.",
                "pattern": PINNED_IMAGE_PATTERN
            },
            "command": {
                "oneOf": [
                    {"type": "null"},
                    arguments(0, "Replaces the image's CMD; its ENTRYPOINT always runs. No argument holds a NUL byte.")
                ]
            },
            "env": {
                "type": "object",
                "description": "Environment variables: names as the shell has them, values without a NUL byte.",
                "propertyNames": {"type": "string", "pattern": ENV_NAME_PATTERN},
                "additionalProperties": {"type": "string", "pattern": NO_NUL, "maxLength": MAX_ENV_VALUE}
            },
            "volumes": {
                "type": "array",
                "description": "Named volumes, with distinct names and distinct mount paths; every image VOLUME \
                    these do not cover gets one too. berth never deletes one.",
                "maxItems": MAX_VOLUMES,
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["name", "mountPath"],
                    "properties": {
                        "name": {"type": "string", "pattern": VOLUME_NAME_PATTERN},
                        "mountPath": {
                            "type": "string",
                            "description": "A normalized absolute path other than `/`, not under /proc, /sys or /dev.",
                            "pattern": MOUNT_PATH_PATTERN
                        }
                    }
                }
            },
            "limits": {
                "type": "object",
                "additionalProperties": false,
                "required": ["cpuMillicores", "memoryBytes"],
                "properties": {
                    "cpuMillicores": {
                        "type": "integer",
                        "description": "Thousandths of a core.",
                        "minimum": CPU_MILLICORES.0,
                        "maximum": CPU_MILLICORES.1
                    },
                    "memoryBytes": {
                        "type": "integer",
                        "description": "The memory limit, at least 16 MiB.",
                        "minimum": MIN_MEMORY_BYTES,
                        "maximum": MAX_SAFE_INTEGER
                    }
                }
            },
            "ready": {
                "description": "How berth knows the instance is ready: a TCP port of the container accepts a \
                    connection, or a command run in it exits 0.",
                "oneOf": [
                    {
                        "type": "object",
                        "title": "tcp",
                        "additionalProperties": false,
                        "required": ["kind", "port"],
                        "properties": {
                            "kind": {"type": "string", "enum": ["tcp"]},
                            "port": {"type": "integer", "minimum": 1, "maximum": 65535}
                        }
                    },
                    {
                        "type": "object",
                        "title": "exec",
                        "additionalProperties": false,
                        "required": ["kind", "argv", "user"],
                        "properties": {
                            "kind": {"type": "string", "enum": ["exec"]},
                            "argv": arguments(1, "The command; it is ready when this exits 0."),
                            "user": {
                                "type": ["string", "null"],
                                "description": "The user to run it as, or null for the image's user.",
                                "pattern": READY_USER_PATTERN
                            }
                        }
                    }
                ]
            },
            "idleStopAfterSeconds": {
                "type": "integer",
                "description": "Seconds with no live linked executor reaching it before it is stopped.",
                "minimum": 1,
                "maximum": MAX_IDLE_SECONDS
            },
            "idleFreezeAfterSeconds": {
                "type": ["integer", "null"],
                "description": "berth's own field, optional: seconds unreached before the instance's processes are frozen (the cgroup freezer); a connection to its host endpoint, an exec or a use up thaws it. Absent or null: never frozen. Left out of the canonical JSON when absent.",
                "minimum": 1,
                "maximum": MAX_IDLE_SECONDS
            }
        },
        "example": example_spec()
    })
}

/// The spec in the OpenAPI document (`ResourceInstanceSpec`).
#[cfg(feature = "openapi")]
pub struct SpecSchema;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for SpecSchema {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::Schema> {
        serde_json::from_value(spec_schema()).expect("the spec schema is a valid schema")
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for SpecSchema {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("ResourceInstanceSpec")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::decode_spec;

    #[test]
    fn the_example_is_a_spec_the_decoder_accepts() {
        let spec = decode_spec(&example_spec()).expect("the example decodes");
        assert_eq!(spec.alias, "web");
        let mut exec = example_spec();
        exec["ready"] = json!({"kind": "exec", "argv": ["true"], "user": null});
        decode_spec(&exec).expect("the exec ready check decodes");
    }

    #[test]
    fn the_schema_names_every_field_the_decoder_asks_for_and_nothing_else() {
        let schema = spec_schema();
        let properties: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        // Every property is required but berth's own optional one.
        assert_eq!(properties.len(), required.len() + 1);
        assert!(!required.contains(&"idleFreezeAfterSeconds"));
        let mut optional = example_spec();
        optional["idleFreezeAfterSeconds"] = json!(60);
        decode_spec(&optional).expect("the optional field decodes");
        for field in &required {
            // Without the field, the decoder says it is missing.
            let mut spec = example_spec();
            spec.as_object_mut().unwrap().remove(*field);
            let refusal = decode_spec(&spec).unwrap_err();
            assert!(
                refusal[0]
                    .reason
                    .contains(&format!("spec.{field} is missing")),
                "{field}: {refusal:?}"
            );
        }
        let mut spec = example_spec();
        spec["extra"] = json!(1);
        assert!(decode_spec(&spec).is_err(), "no other key");
    }

    #[test]
    fn the_bounds_in_the_schema_are_the_decoders() {
        let schema = spec_schema();
        let limits = &schema["properties"]["limits"]["properties"];
        for (field, bound, ok) in [
            ("cpuMillicores", "minimum", true),
            ("cpuMillicores", "maximum", true),
            ("memoryBytes", "minimum", true),
        ] {
            let n = limits[field][bound].as_i64().unwrap();
            let mut spec = example_spec();
            spec["limits"][field] = json!(n);
            assert_eq!(decode_spec(&spec).is_ok(), ok, "{field} {bound}");
            spec["limits"][field] = json!(if bound == "minimum" { n - 1 } else { n + 1 });
            assert!(decode_spec(&spec).is_err(), "{field} past its {bound}");
        }
        let idle = &schema["properties"]["idleStopAfterSeconds"];
        let mut spec = example_spec();
        spec["idleStopAfterSeconds"] = json!(idle["maximum"].as_i64().unwrap() + 1);
        assert!(decode_spec(&spec).is_err());
        let mut spec = example_spec();
        let max = schema["properties"]["volumes"]["maxItems"]
            .as_u64()
            .unwrap() as usize;
        let volumes = |n: usize| -> Value {
            (0..n)
                .map(|i| json!({"name": "v".repeat(i + 1), "mountPath": format!("/v{i}")}))
                .collect()
        };
        spec["volumes"] = volumes(max);
        assert!(decode_spec(&spec).is_ok(), "maxItems volumes");
        spec["volumes"] = volumes(max + 1);
        assert!(decode_spec(&spec).is_err(), "more volumes than maxItems");
    }
}
