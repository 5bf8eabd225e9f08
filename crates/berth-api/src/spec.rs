//! The resource-instance spec: what an instance runs, decoded strictly from untrusted JSON.
//!
//! [`decode_spec`] first refuses, by name and with its sentence, every field that would weaken
//! isolation ([`FORBIDDEN_SPEC_FIELDS`]); only then does it decode the spec, reporting every
//! problem with its place and never the value. [`Spec::digest`] is the `specDigest`: the sha256
//! of the decoded spec's canonical JSON (keys sorted, no whitespace).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decode::{MAX_SAFE_INTEGER, Problems, display_key, pattern};
use crate::image::{Digest, PinnedImage, ReferenceError};

/// Ten days: the longest an instance may wait unreached before it is stopped.
pub const MAX_IDLE_SECONDS: i64 = 864_000;
/// The most volumes one spec may name.
pub const MAX_VOLUMES: usize = 16;
/// The longest environment value, in characters (Unicode scalar values), as every other length
/// berth checks is counted.
pub const MAX_ENV_VALUE: usize = 32_768;

const NAMESPACE: &str = "an instance shares no namespace with the host or another container";
const MOUNTS: &str =
    "an instance mounts named volumes only, never a host path or the Docker socket";
const CAPABILITIES: &str = "berth adds no capability to an instance";
const NETWORK: &str = "an instance joins only the networks berth gives it, never the host's";
const SECURITY: &str = "an instance's security options are berth's";

/// What a spec may never ask for, by the names a caller might send it under, each with the
/// sentence its refusal carries. None of them is a field of the spec.
pub const FORBIDDEN_SPEC_FIELDS: [(&str, &str); 21] = [
    ("privileged", "berth never runs an instance privileged"),
    ("capAdd", CAPABILITIES),
    ("cap_add", CAPABILITIES),
    ("capabilities", CAPABILITIES),
    ("network", NETWORK),
    ("networkMode", NETWORK),
    ("network_mode", NETWORK),
    ("hostNetwork", NETWORK),
    ("binds", MOUNTS),
    ("bind", MOUNTS),
    ("mounts", MOUNTS),
    ("hostPath", MOUNTS),
    ("dockerSocket", MOUNTS),
    ("devices", "an instance gets no device"),
    ("pid", NAMESPACE),
    ("ipc", NAMESPACE),
    ("uts", NAMESPACE),
    ("userns", NAMESPACE),
    ("usernsMode", NAMESPACE),
    ("securityOpt", SECURITY),
    ("security_opt", SECURITY),
];

/// The contract's pattern and sentence for an instance key.
pub const KEY_PATTERN: &str = r"^[a-z0-9][a-z0-9._@-]{0,127}$";
/// What a malformed instance key is refused with.
pub const KEY_EXPECTED: &str = "must be 1 to 128 lower-case letters, digits, '.', '_', '@' or '-', starting with a letter or digit";
/// The contract's pattern for an alias: one DNS label.
pub const ALIAS_PATTERN: &str = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$";
/// What a malformed alias is refused with.
pub const ALIAS_EXPECTED: &str =
    "must be a DNS label: lower-case letters, digits and '-', starting with a letter";
/// The contract's pattern for a worktree key.
pub const WORKTREE_KEY_PATTERN: &str = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$";
/// What a malformed worktree key is refused with.
pub const WORKTREE_KEY_EXPECTED: &str =
    "must be 1 to 128 letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit";

/// The contract's pattern for a volume name.
pub const VOLUME_NAME_PATTERN: &str = r"^[a-z][a-z0-9-]{0,30}$";
/// The pattern of one segment of a mount path.
pub const PATH_SEGMENT_PATTERN: &str = r"^[A-Za-z0-9._@+-]+$";
/// The pattern of an environment variable's name.
pub const ENV_NAME_PATTERN: &str = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$";
/// The pattern of the user an exec ready check runs as.
pub const READY_USER_PATTERN: &str = r"^[A-Za-z0-9._-]{1,64}$";
/// The range of `limits.cpuMillicores`.
pub const CPU_MILLICORES: (i64, i64) = (10, 256_000);
/// The least `limits.memoryBytes`: 16 MiB.
pub const MIN_MEMORY_BYTES: i64 = 16 * 1024 * 1024;

pub(crate) static KEY: LazyLock<Regex> = LazyLock::new(|| pattern(KEY_PATTERN));
static ALIAS: LazyLock<Regex> = LazyLock::new(|| pattern(ALIAS_PATTERN));
pub(crate) static WORKTREE_KEY: LazyLock<Regex> = LazyLock::new(|| pattern(WORKTREE_KEY_PATTERN));
static VOLUME_NAME: LazyLock<Regex> = LazyLock::new(|| pattern(VOLUME_NAME_PATTERN));
static PATH_SEGMENT: LazyLock<Regex> = LazyLock::new(|| pattern(PATH_SEGMENT_PATTERN));
static ENV_NAME: LazyLock<Regex> = LazyLock::new(|| pattern(ENV_NAME_PATTERN));
static READY_USER: LazyLock<Regex> = LazyLock::new(|| pattern(READY_USER_PATTERN));

/// True when `key` is a valid instance key.
pub fn is_instance_key(key: &str) -> bool {
    KEY.is_match(key)
}

/// True when `key` is a valid worktree key.
pub fn is_worktree_key(key: &str) -> bool {
    WORKTREE_KEY.is_match(key)
}

/// A named volume and where it is mounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSpec {
    /// 1 to 31 lower-case letters, digits or `-`, starting with a letter.
    pub name: String,
    /// A normalized absolute path other than `/`, not under `/proc`, `/sys` or `/dev`.
    pub mount_path: String,
}

/// CPU and memory limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Thousandths of a core, 10 to 256000.
    pub cpu_millicores: i64,
    /// At least 16 MiB.
    pub memory_bytes: i64,
}

/// How berth knows an instance is ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Ready {
    /// A TCP connection to this port of the container is accepted.
    Tcp {
        /// 1 to 65535.
        port: u16,
    },
    /// This command, run in the container, exits 0.
    Exec {
        /// At least one argument, none with a NUL byte.
        argv: Vec<String>,
        /// The user to run it as, or the image's user.
        user: Option<String>,
    },
}

/// What an instance runs: the spec's fields, defined once. `I` is how the image is held: pinned
/// and checked once decoded ([`Spec`]), or as the text a client sends ([`SpecRequest`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecOf<I> {
    /// The DNS label linked workspaces resolve it by.
    pub alias: String,
    /// Null: every workspace linked to the domain reaches it. Set: only links with this key.
    pub worktree_key: Option<String>,
    /// The image, pinned by digest.
    pub image: I,
    /// Replaces the image's CMD; its ENTRYPOINT always runs.
    pub command: Option<Vec<String>>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// Named volumes; every image `VOLUME` these do not cover gets one too.
    pub volumes: Vec<VolumeSpec>,
    /// CPU and memory limits.
    pub limits: Limits,
    /// The ready check.
    pub ready: Ready,
    /// Seconds with no live linked executor reaching it before it is stopped.
    pub idle_stop_after_seconds: i64,
    /// Seconds unreached before its processes are frozen (the cgroup freezer): berth's own
    /// field, beside the contract's. Absent: never frozen. Left out of the canonical JSON when
    /// absent, so a spec without it keeps the `specDigest` it had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_freeze_after_seconds: Option<i64>,
}

/// What an instance runs, as decoded from a request (by [`decode_spec`], never by serde: see
/// there).
pub type Spec = SpecOf<PinnedImage>;

/// A spec as a client builds it to send (the CLI from berth.toml): the same fields, the image
/// as written. The daemon decodes what it receives with [`decode_spec`], which checks every
/// field this type cannot (patterns, bounds, the image pinned by digest).
pub type SpecRequest = SpecOf<String>;

/// One reason a spec was refused: the field, and the sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Refusal {
    /// The forbidden field's name, or `spec` for a spec that does not decode.
    pub field: String,
    /// Why, as a sentence.
    pub reason: String,
}

impl Spec {
    /// The `specDigest`: `sha256:<hex>` of the canonical JSON of this spec.
    pub fn digest(&self) -> Digest {
        Digest::of(self.canonical_json().as_bytes())
    }

    /// True when `other` gives the container the same things (image, command, env, volumes,
    /// limits): a change of anything else (alias, idle time, ready check) never replaces it.
    pub fn same_container(&self, other: &Spec) -> bool {
        self.image == other.image
            && self.command == other.command
            && self.env == other.env
            && self.volumes == other.volumes
            && self.limits == other.limits
    }

    /// The spec as JSON with every object's keys sorted and no whitespace.
    pub fn canonical_json(&self) -> String {
        let value = serde_json::to_value(self).expect("a spec always serialises");
        canonical_json(&value)
    }
}

/// JSON text with every object's keys sorted, whatever map type serde_json was built with.
pub fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let sorted: BTreeMap<&String, &Value> = map.iter().collect();
                out.push('{');
                for (i, (k, v)) in sorted.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(v, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Decodes a spec from outside: each forbidden field refused by name with its sentence, then a
/// strict decode (no excess key) whose problems are all reported under `spec`.
pub fn decode_spec(input: &Value) -> Result<Spec, Vec<Refusal>> {
    decode_spec_problems(input).map_err(|refused| match refused {
        SpecRefused::Forbidden(fields) => fields
            .into_iter()
            .map(|(name, reason)| Refusal {
                field: name.to_owned(),
                reason: reason.to_owned(),
            })
            .collect(),
        SpecRefused::Problems(problems) => vec![Refusal {
            field: "spec".to_owned(),
            reason: problems.joined(),
        }],
    })
}

/// Why a spec was refused, as values: the forbidden fields it names (each with the sentence
/// why), or else every problem of its decode. [`decode_spec`] renders these into the contract's
/// refusals; the CLI maps each problem's place onto berth.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecRefused {
    /// Fields that would weaken isolation, refused by name before anything is decoded.
    Forbidden(Vec<(&'static str, &'static str)>),
    /// What the strict decode found wrong, each at its place.
    Problems(Problems),
}

/// [`decode_spec`], answering its refusal as values.
pub fn decode_spec_problems(input: &Value) -> Result<Spec, SpecRefused> {
    if let Some(map) = input.as_object() {
        let forbidden: Vec<(&'static str, &'static str)> = map
            .keys()
            .filter_map(|field| {
                FORBIDDEN_SPEC_FIELDS
                    .iter()
                    .find(|(name, _)| name == field)
                    .copied()
            })
            .collect();
        if !forbidden.is_empty() {
            return Err(SpecRefused::Forbidden(forbidden));
        }
    }
    let mut problems = Problems::default();
    let spec = decode_fields(input, &mut problems);
    problems.finish(spec).map_err(SpecRefused::Problems)
}

/// Hand decoding, kept on purpose: the contract refuses a spec with every problem at once, each
/// at its place and never with the value sent (`spec.limits.memoryBytes must be ...`), and
/// serde's derived `Deserialize` stops at the first error and may quote the value. The field
/// names here are [`SpecOf`]'s serde names; the unit tests decode what `SpecOf` encodes.
fn decode_fields(input: &Value, p: &mut Problems) -> Option<Spec> {
    let mut fields = p.object(input, "spec")?;
    let alias = fields
        .required(p, "alias")
        .and_then(|v| p.matching(v, "spec.alias", &ALIAS, ALIAS_EXPECTED));
    let worktree_key = fields.required(p, "worktreeKey").and_then(|v| match v {
        Value::Null => Some(None),
        v => p
            .matching(
                v,
                "spec.worktreeKey",
                &WORKTREE_KEY,
                &format!("{WORKTREE_KEY_EXPECTED}, or null"),
            )
            .map(Some),
    });
    let image = fields.required(p, "image").and_then(|v| decode_image(v, p));
    let command = fields.required(p, "command").and_then(|v| match v {
        Value::Null => Some(None),
        v => decode_arguments(v, "spec.command", 0, p).map(Some),
    });
    let env = fields.required(p, "env").and_then(|v| decode_env(v, p));
    let volumes = fields
        .required(p, "volumes")
        .and_then(|v| decode_volumes(v, p));
    let limits = fields
        .required(p, "limits")
        .and_then(|v| decode_limits(v, p));
    let ready = fields.required(p, "ready").and_then(|v| decode_ready(v, p));
    let idle = fields
        .required(p, "idleStopAfterSeconds")
        .and_then(|v| p.integer(v, "spec.idleStopAfterSeconds", 1, MAX_IDLE_SECONDS));
    let freeze = match fields.optional("idleFreezeAfterSeconds") {
        None | Some(Value::Null) => Some(None),
        Some(v) => p
            .integer(v, "spec.idleFreezeAfterSeconds", 1, MAX_IDLE_SECONDS)
            .map(Some),
    };
    fields.finish(p);
    Some(Spec {
        alias: alias?,
        worktree_key: worktree_key?,
        image: image?,
        command: command?,
        env: env?,
        volumes: volumes?,
        limits: limits?,
        ready: ready?,
        idle_stop_after_seconds: idle?,
        idle_freeze_after_seconds: freeze?,
    })
}

fn decode_image(value: &Value, p: &mut Problems) -> Option<PinnedImage> {
    let text = p.string(value, "spec.image")?;
    match PinnedImage::parse(text) {
        Ok(image) => Some(image),
        Err(ReferenceError::NotPinned) => {
            p.push("spec.image", &ReferenceError::NotPinned.to_string());
            None
        }
        Err(other) => {
            p.push("spec.image", &other.to_string());
            None
        }
    }
}

fn decode_arguments(
    value: &Value,
    place: &str,
    min: usize,
    p: &mut Problems,
) -> Option<Vec<String>> {
    let items = p.array(value, place)?;
    if items.len() < min {
        p.push(place, &format!("must have at least {min} item(s)"));
        return None;
    }
    let decoded: Vec<Option<String>> = items
        .iter()
        .enumerate()
        .map(|(i, item)| p.argument(item, &format!("{place}[{i}]")))
        .collect();
    decoded.into_iter().collect()
}

fn decode_env(value: &Value, p: &mut Problems) -> Option<BTreeMap<String, String>> {
    let map = match value.as_object() {
        Some(map) => map,
        None => {
            p.push("spec.env", "must be an object");
            return None;
        }
    };
    let mut env = BTreeMap::new();
    let mut ok = true;
    for (name, value) in map {
        if !ENV_NAME.is_match(name) {
            p.push(
                &format!("spec.env.{}", display_key(name)),
                "must be named as an environment variable (a letter or '_', then letters, digits or '_', at most 128)",
            );
            ok = false;
            continue;
        }
        let place = format!("spec.env.{name}");
        match p.argument(value, &place) {
            Some(v) if v.chars().count() <= MAX_ENV_VALUE => {
                env.insert(name.clone(), v);
            }
            Some(_) => {
                p.push(
                    &place,
                    &format!("must be at most {MAX_ENV_VALUE} characters"),
                );
                ok = false;
            }
            None => ok = false,
        }
    }
    ok.then_some(env)
}

/// Checks a container mount path as the contract defines it.
pub fn mount_path_problem(path: &str) -> Option<&'static str> {
    if !path.starts_with('/') || path == "/" {
        return Some("must be an absolute path other than '/'");
    }
    let normalized = path[1..]
        .split('/')
        .all(|segment| segment != "." && segment != ".." && PATH_SEGMENT.is_match(segment));
    if !normalized {
        return Some("must be a normalized absolute path");
    }
    let under = |root: &str| path == root || path.starts_with(&format!("{root}/"));
    if ["/proc", "/sys", "/dev"].into_iter().any(under) {
        return Some("must not be under /proc, /sys or /dev");
    }
    None
}

fn decode_volumes(value: &Value, p: &mut Problems) -> Option<Vec<VolumeSpec>> {
    let items = p.array(value, "spec.volumes")?;
    let mut ok = true;
    if items.len() > MAX_VOLUMES {
        p.push(
            "spec.volumes",
            &format!("must have at most {MAX_VOLUMES} items"),
        );
        ok = false;
    }
    let mut volumes = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let place = format!("spec.volumes[{i}]");
        let Some(mut fields) = p.object(item, &place) else {
            ok = false;
            continue;
        };
        let name = fields.required(p, "name").and_then(|v| {
            p.matching(
                v,
                &format!("{place}.name"),
                &VOLUME_NAME,
                "must be 1 to 31 lower-case letters, digits or '-', starting with a letter",
            )
        });
        let mount_path = fields.required(p, "mountPath").and_then(|v| {
            let path_place = format!("{place}.mountPath");
            let path = p.string(v, &path_place)?;
            match mount_path_problem(path) {
                Some(problem) => {
                    p.push(&path_place, problem);
                    None
                }
                None => Some(path.to_owned()),
            }
        });
        fields.finish(p);
        match (name, mount_path) {
            (Some(name), Some(mount_path)) => volumes.push(VolumeSpec { name, mount_path }),
            _ => ok = false,
        }
    }
    if ok {
        let names: BTreeSet<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
        if names.len() != volumes.len() {
            p.push(
                "spec.volumes",
                "must have distinct names (volume names must be distinct)",
            );
            ok = false;
        }
        let paths: BTreeSet<&str> = volumes.iter().map(|v| v.mount_path.as_str()).collect();
        if paths.len() != volumes.len() {
            p.push(
                "spec.volumes",
                "must have distinct mount paths (mount paths must be distinct)",
            );
            ok = false;
        }
    }
    ok.then_some(volumes)
}

fn decode_limits(value: &Value, p: &mut Problems) -> Option<Limits> {
    let mut fields = p.object(value, "spec.limits")?;
    let cpu = fields.required(p, "cpuMillicores").and_then(|v| {
        p.integer(
            v,
            "spec.limits.cpuMillicores",
            CPU_MILLICORES.0,
            CPU_MILLICORES.1,
        )
    });
    let memory = fields.required(p, "memoryBytes").and_then(|v| {
        p.integer(
            v,
            "spec.limits.memoryBytes",
            MIN_MEMORY_BYTES,
            MAX_SAFE_INTEGER,
        )
    });
    fields.finish(p);
    Some(Limits {
        cpu_millicores: cpu?,
        memory_bytes: memory?,
    })
}

fn decode_ready(value: &Value, p: &mut Problems) -> Option<Ready> {
    let mut fields = p.object(value, "spec.ready")?;
    let kind = fields
        .required(p, "kind")
        .and_then(|v| p.literal(v, "spec.ready.kind", &["tcp", "exec"]));
    let ready = match kind.as_deref() {
        Some("tcp") => fields
            .required(p, "port")
            .and_then(|v| p.integer(v, "spec.ready.port", 1, 65_535))
            .map(|port| Ready::Tcp { port: port as u16 }),
        Some("exec") => {
            let argv = fields
                .required(p, "argv")
                .and_then(|v| decode_arguments(v, "spec.ready.argv", 1, p));
            let user = fields.required(p, "user").and_then(|v| match v {
                Value::Null => Some(None),
                v => p
                    .matching(v, "spec.ready.user", &READY_USER, "must be a user, or null")
                    .map(Some),
            });
            match (argv, user) {
                (Some(argv), Some(user)) => Some(Ready::Exec { argv, user }),
                _ => None,
            }
        }
        _ => None,
    };
    if kind.is_some() {
        fields.finish(p);
    }
    ready
}

#[cfg(test)]
mod tests;
