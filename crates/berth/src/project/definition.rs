//! The definition: a project's instances as berth.toml describes them, their defaults, and
//! what each becomes: the contract's spec (and, back from it, which field a decoder problem
//! names), and its `connect` variables once it has endpoints.

use std::collections::BTreeMap;

use berth_api::spec::{Limits, Ready, SpecRequest, VolumeSpec};
use serde_json::Value;

use super::template::{Wanted, expand, placeholder};

/// The default CPU limit: one core.
pub const DEFAULT_CPU_MILLICORES: i64 = 1000;
/// The default memory limit: 512 MiB.
pub const DEFAULT_MEMORY_BYTES: i64 = 512 * 1024 * 1024;
/// The default idle stop: one hour.
pub const DEFAULT_IDLE_STOP_SECONDS: i64 = 3600;

/// Every field an instance table may have.
/// The most before-restore snapshots `[retention]` (and `berth prune`) may keep per instance.
pub const MAX_KEEP_BEFORE_RESTORE: u32 = 1000;
/// The most days `[retention]` (and `berth prune`) may keep an archived instance's data.
pub const MAX_KEEP_ARCHIVED_DAYS: u32 = 36500;

/// berth.toml's `[retention]`: what `berth prune` keeps when its flags do not say (and the
/// daemon's own retention where the file does not say either).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// `keep-before-restore`: the before-restore snapshots kept per instance. At 0 `berth
    /// restore` keeps none: it deletes what it replaced once the restore is done.
    pub keep_before_restore: Option<u32>,
    /// `keep-archived-days`: how long an archived instance's data is kept.
    pub keep_archived_days: Option<u32>,
}

pub const FIELDS: [&str; 16] = [
    "image",
    "scope",
    "alias",
    "command",
    "env",
    "env_file",
    "volumes",
    "ready",
    "cpu",
    "memory",
    "idle-stop",
    "idle-freeze",
    "connect",
    "branch-from",
    "template",
    "pool",
];

/// Whether an instance is one per worktree or one for the whole repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// One per worktree: its key and its volumes carry the worktree key.
    Worktree,
    /// One for every worktree of the repository.
    Shared,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Worktree => "worktree",
            Scope::Shared => "shared",
        }
    }
}

/// The ready check, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyDef {
    /// `{ tcp = PORT }`.
    Tcp(u16),
    /// `{ exec = [...], user = "..." }`.
    Exec {
        argv: Vec<String>,
        user: Option<String>,
    },
}

/// One `[instances.NAME]` table, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceDef {
    pub name: String,
    pub scope: Scope,
    pub alias: String,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub env: BTreeMap<String, String>,
    /// Env files (relative to berth.toml's folder) whose variables the instance gets under
    /// `env`'s, read by the CLI at `berth up` (see `file`); never sent as such.
    pub env_file: Vec<String>,
    /// Volume name to mount path.
    pub volumes: BTreeMap<String, String>,
    pub ready: ReadyDef,
    pub cpu_millicores: i64,
    pub memory_bytes: i64,
    pub idle_stop_seconds: i64,
    /// `idle-freeze`: unreached this long, the instance is frozen (the cgroup freezer) until a
    /// connection, an exec or an up; `None`: never frozen.
    pub idle_freeze_seconds: Option<i64>,
    /// Variable name to template, in file order.
    pub connect: Vec<(String, String)>,
    /// Where a new worktree's instance takes its data from: the git branch of another worktree,
    /// or `shared` (the shared instance of that name); `None`: it starts empty.
    pub branch_from: Option<String>,
    /// `template = true`: a new instance starts on a template of its image, command, env and
    /// volume paths (made once) instead of on empty volumes.
    pub template: bool,
    /// `pool = N`: `berth lease NAME` takes a lease on a pool of N instances of it, each made
    /// from its template and kept ready (see docs/pools.md).
    pub pool: Option<i64>,
}

impl InstanceDef {
    /// The contract's spec for this instance, with `worktree_key` for a worktree-scoped one:
    /// berth-api's typed request, so each field is spelled there only.
    pub fn spec(&self, worktree_key: Option<&str>) -> SpecRequest {
        SpecRequest {
            alias: self.alias.clone(),
            worktree_key: match self.scope {
                Scope::Worktree => worktree_key.map(str::to_owned),
                Scope::Shared => None,
            },
            image: self.image.clone(),
            command: self.command.clone(),
            env: self.env.clone(),
            volumes: self
                .volumes
                .iter()
                .map(|(name, path)| VolumeSpec {
                    name: name.clone(),
                    mount_path: path.clone(),
                })
                .collect(),
            limits: Limits {
                cpu_millicores: self.cpu_millicores,
                memory_bytes: self.memory_bytes,
            },
            ready: match &self.ready {
                ReadyDef::Tcp(port) => Ready::Tcp { port: *port },
                ReadyDef::Exec { argv, user } => Ready::Exec {
                    argv: argv.clone(),
                    user: user.clone(),
                },
            },
            idle_stop_after_seconds: self.idle_stop_seconds,
            // Sent only when asked for: a spec without it keeps its specDigest.
            idle_freeze_after_seconds: self.idle_freeze_seconds,
        }
    }

    /// [`InstanceDef::spec`] as JSON, for a request that carries the spec as a value
    /// (`UpRequest`) and for the decoder.
    pub fn spec_json(&self, worktree_key: Option<&str>) -> Value {
        // A spec holds strings, numbers and maps of strings only: it always encodes.
        serde_json::to_value(self.spec(worktree_key)).unwrap_or(Value::Null)
    }

    /// The tcp port of the ready check, if it is one.
    pub fn port(&self) -> Option<u16> {
        match self.ready {
            ReadyDef::Tcp(port) => Some(port),
            ReadyDef::Exec { .. } => None,
        }
    }

    /// The `connect` variables, filled in from the instance's host endpoints, given as
    /// `(container port, host, host port)`: `{host}` is the endpoints' host, `{port}` the host
    /// port that reaches the tcp ready port, `{port:N}` the one that reaches container port N.
    pub fn connect_values(
        &self,
        endpoints: &[(u16, String, u16)],
    ) -> Result<Vec<(String, String)>, String> {
        let host_port = |port: u16| {
            endpoints
                .iter()
                .find(|(p, _, _)| *p == port)
                .map(|(_, _, h)| h.to_string())
        };
        let mut missing = None;
        let values = self
            .connect
            .iter()
            .map(|(name, template)| {
                let value = expand(template, |p| {
                    let found = match placeholder(p)? {
                        Wanted::Host => endpoints.first().map(|(_, h, _)| h.clone()),
                        Wanted::ReadyPort => host_port(self.port()?),
                        Wanted::Port(n) => host_port(n),
                    };
                    if found.is_none() {
                        missing.get_or_insert_with(|| p.to_owned());
                    }
                    Some(found.unwrap_or_default())
                })
                .unwrap_or_default();
                (name.clone(), value)
            })
            .collect();
        match missing {
            None => Ok(values),
            Some(p) => {
                let known: Vec<String> = endpoints.iter().map(|(p, _, _)| p.to_string()).collect();
                Err(format!(
                    "{} has no host endpoint for {{{p}}} (it has them for port(s) {}): a host endpoint exists for the tcp ready port and each port the image exposes, once the instance has started and while berth listens on its port",
                    self.name,
                    if known.is_empty() {
                        "none yet".to_owned()
                    } else {
                        known.join(", ")
                    }
                ))
            }
        }
    }
}

/// The project file's field a place of the contract's decoder stands for
/// (`spec.limits.cpuMillicores` is `cpu`): the way back from [`InstanceDef::spec`]. `None` for a
/// place no field of the file writes (`spec.worktreeKey`, the spec itself).
pub(super) fn field_of_place(place: &str) -> Option<String> {
    let place = place.strip_prefix("spec.")?;
    if let Some(var) = place.strip_prefix("env.") {
        return Some(format!("env.{var}"));
    }
    let field = [
        ("alias", "alias"),
        ("image", "image"),
        ("command", "command"),
        ("volumes", "volumes"),
        ("limits.cpuMillicores", "cpu"),
        ("limits.memoryBytes", "memory"),
        ("ready", "ready"),
        ("idleStopAfterSeconds", "idle-stop"),
        ("idleFreezeAfterSeconds", "idle-freeze"),
    ]
    .iter()
    .find(|(spec, _)| {
        place == *spec
            || place
                .strip_prefix(spec)
                .is_some_and(|rest| rest.starts_with(['.', '[']))
    })?
    .1;
    Some(field.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(ready: ReadyDef, connect: &[(&str, &str)]) -> InstanceDef {
        InstanceDef {
            name: "db".into(),
            scope: Scope::Worktree,
            alias: "db".into(),
            image: "img".into(),
            command: None,
            env: BTreeMap::new(),
            env_file: Vec::new(),
            volumes: BTreeMap::new(),
            ready,
            cpu_millicores: DEFAULT_CPU_MILLICORES,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            idle_stop_seconds: DEFAULT_IDLE_STOP_SECONDS,
            idle_freeze_seconds: None,
            connect: connect
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect(),
            branch_from: None,
            template: false,
            pool: None,
        }
    }

    #[test]
    fn the_port_is_the_tcp_ready_port() {
        assert_eq!(def(ReadyDef::Tcp(5432), &[]).port(), Some(5432));
        let exec = ReadyDef::Exec {
            argv: vec!["true".into()],
            user: None,
        };
        assert_eq!(def(exec, &[]).port(), None);
        assert_eq!(Scope::Worktree.as_str(), "worktree");
        assert_eq!(Scope::Shared.as_str(), "shared");
    }

    #[test]
    fn connect_values_fill_host_and_ports() {
        let d = def(
            ReadyDef::Tcp(5432),
            &[("URL", "{host}:{port}"), ("ADMIN", "{host}:{port:8080}")],
        );
        let endpoints = [
            (5432, "127.0.0.1".to_owned(), 40001),
            (8080, "127.0.0.1".to_owned(), 40002),
        ];
        assert_eq!(
            d.connect_values(&endpoints),
            Ok(vec![
                ("URL".to_owned(), "127.0.0.1:40001".to_owned()),
                ("ADMIN".to_owned(), "127.0.0.1:40002".to_owned()),
            ])
        );
        let err = d.connect_values(&endpoints[..1]).unwrap_err();
        assert!(
            err.starts_with(
                "db has no host endpoint for {port:8080} (it has them for port(s) 5432)"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_shared_spec_has_no_worktree_key() {
        let mut d = def(ReadyDef::Tcp(1), &[]);
        assert_eq!(d.spec(Some("k")).worktree_key.as_deref(), Some("k"));
        assert_eq!(d.spec_json(Some("k"))["worktreeKey"], "k");
        assert_eq!(d.spec_json(None)["worktreeKey"], Value::Null);
        d.scope = Scope::Shared;
        assert_eq!(d.spec_json(Some("k"))["worktreeKey"], Value::Null);
        assert_eq!(
            d.spec_json(None)["ready"],
            serde_json::json!({"kind": "tcp", "port": 1})
        );
    }

    #[test]
    fn the_spec_decodes_with_the_daemons_decoder_to_the_same_fields() {
        let mut d = def(
            ReadyDef::Exec {
                argv: vec!["pg_isready".into()],
                user: Some("postgres".into()),
            },
            &[],
        );
        d.image = format!("127.0.0.1:5000/x/pg@sha256:{}", "a".repeat(64));
        d.command = Some(vec!["postgres".into()]);
        d.env.insert("A".into(), "b".into());
        d.volumes.insert("data".into(), "/var/lib/data".into());
        let sent = d.spec(Some("main-0a1b2c3d"));
        let decoded = berth_api::spec::decode_spec(&d.spec_json(Some("main-0a1b2c3d")))
            .expect("the daemon's decoder takes it");
        assert_eq!(decoded.image.as_str(), sent.image);
        assert_eq!(
            serde_json::to_value(&decoded).unwrap(),
            serde_json::to_value(&sent).unwrap()
        );
    }

    #[test]
    fn decoder_places_map_to_the_file_field() {
        let field = field_of_place;
        assert_eq!(field("spec.limits.cpuMillicores"), Some("cpu".into()));
        assert_eq!(field("spec.limits.memoryBytes"), Some("memory".into()));
        assert_eq!(field("spec.env.A"), Some("env.A".into()));
        assert_eq!(field("spec.idleStopAfterSeconds"), Some("idle-stop".into()));
        assert_eq!(field("spec.volumes[0].name"), Some("volumes".into()));
        assert_eq!(field("spec.ready.port"), Some("ready".into()));
        assert_eq!(field("spec.imageX"), None);
        assert_eq!(field("spec.worktreeKey"), None);
        assert_eq!(field("spec"), None);
    }
}
