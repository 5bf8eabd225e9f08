//! A Compose file read as berth.toml instances, for `berth init --from compose.yaml`: each
//! service with an image becomes an instance (its environment and env files, named volumes,
//! command, healthcheck as an exec ready check, the ports it publishes as connect variables),
//! and everything the contract refuses or berth.toml has no place for is left out, named with
//! why. Pure: the caller reads the files and pins the images.
//!
//! The file is parsed with `docker-compose-types` (the Compose specification's types) after
//! Compose's own first steps on the raw YAML: `${VAR}` interpolation from the environment and
//! the `.env` file beside it, and the service keys berth does not map set aside (so a key the
//! types do not know yet is named as left out, not an error).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use berth_core::spec::{ENV_NAME_PATTERN, mount_path_problem};
use docker_compose_types as dct;
use serde_norway::{Mapping, Value};

use interpolate::interpolate_value;
use reasons::{CONTRACT_MOUNTS, contract, why_left_out};

use super::presets;

mod interpolate;
mod reasons;
mod table;

/// The file names Compose looks for, in its order.
pub const COMPOSE_FILES: [&str; 4] = [
    "compose.yaml",
    "compose.yml",
    "docker-compose.yaml",
    "docker-compose.yml",
];

/// What one service becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    /// Its name in berth.toml.
    pub name: String,
    /// Its name in the Compose file.
    pub service: String,
    /// The image as the Compose file names it (a tag, or already pinned).
    pub image: String,
    pub command: Option<Vec<String>>,
    pub env: Vec<(String, String)>,
    pub volumes: Vec<(String, String)>,
    pub ready: Ready,
    pub connect: Vec<(String, String)>,
}

/// A ready check as berth.toml writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    Tcp(u16),
    Exec(Vec<String>),
    /// A known image's own check, as `berth add` writes it (berth.toml's inline table).
    Preset(&'static str),
}

/// Something left out: where in the Compose file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub place: String,
    pub why: String,
}

/// The whole conversion.
#[derive(Debug, Clone, Default)]
pub struct Conversion {
    pub instances: Vec<Converted>,
    pub left_out: Vec<LeftOut>,
}

/// What the conversion reads besides the file.
pub struct Inputs<'a> {
    /// The Compose file's directory: env files and `.env` are read from it.
    pub dir: &'a Path,
    /// The active profiles (`--profile`, or COMPOSE_PROFILES); `*` activates all.
    pub profiles: &'a [String],
    /// The environment `${VAR}` and `environment: [VAR]` read first (the process's).
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// Reads `text` (the Compose file `file_name` in `inputs.dir`) into instances and what was left
/// out. An error means nothing can be written: the file does not parse, a variable marked
/// required is unset, an env file is missing.
pub fn convert(text: &str, file_name: &str, inputs: &Inputs) -> anyhow::Result<Conversion> {
    let mut out = Conversion::default();
    let dotenv = read_env_file(&inputs.dir.join(".env"), false)?;
    let lookup = |name: &str| -> Option<String> {
        (inputs.env)(name).or_else(|| {
            dotenv
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    };
    let mut raw: Value =
        serde_norway::from_str(text).with_context(|| format!("{file_name} is not YAML"))?;
    // `<<: *anchor` merge keys, as Compose applies them.
    raw.apply_merge()
        .with_context(|| format!("{file_name}: a `<<` merge key"))?;
    let mut unset = BTreeSet::new();
    let raw = interpolate_value(raw, &lookup, &mut unset)
        .with_context(|| format!("{file_name}: a variable it requires is not set"))?;
    for name in unset {
        out.left_out.push(LeftOut {
            place: format!("${{{name}}}"),
            why: format!(
                "{name} is set neither here nor in {}: it became an empty string",
                inputs.dir.join(".env").display()
            ),
        });
    }
    let Value::Mapping(top) = raw else {
        bail!("{file_name} is not a Compose file: expected a mapping with `services`");
    };
    // The first file format had its services at the top level: a mapping with an image or a
    // build in it.
    let first_format = top.values().any(|v| {
        matches!(v, Value::Mapping(m) if m.keys().any(|k| matches!(key_text(k).as_str(), "image" | "build")))
    });
    let mut services = None;
    for (key, value) in top {
        let key = key_text(&key);
        match key.as_str() {
            "services" => services = Some(value),
            "volumes" => {
                if let Value::Mapping(volumes) = &value {
                    for (name, config) in volumes {
                        if !matches!(config, Value::Null)
                            && !matches!(&config, Value::Mapping(m) if m.is_empty())
                        {
                            out.left_out.push(LeftOut {
                                place: format!("volumes.{}", key_text(name)),
                                why: "berth makes an instance's volumes itself: their driver, \
                                      options and external names are not kept"
                                    .to_owned(),
                            });
                        }
                    }
                }
            }
            "version" => out.left_out.push(LeftOut {
                place: key,
                why: "obsolete in Compose, and nothing in berth.toml".to_owned(),
            }),
            "name" => out.left_out.push(LeftOut {
                place: key,
                why: "the repository is berth's project (its domain)".to_owned(),
            }),
            "networks" => out.left_out.push(LeftOut {
                place: key,
                why: contract("network"),
            }),
            other => out.left_out.push(LeftOut {
                place: other.to_owned(),
                why: if other == "include" {
                    "berth reads this one file: included files are not read".to_owned()
                } else {
                    why_left_out(other)
                },
            }),
        }
    }
    let Some(Value::Mapping(services)) = services else {
        if first_format {
            bail!(
                "{file_name} is in Compose's first file format (its services at the top level, \
                 with no `services:`), which Compose itself no longer reads: put them under \
                 `services:` and run this again"
            );
        }
        bail!("{file_name} has no services: expected `services:` with one entry per service");
    };
    let mut taken = BTreeSet::new();
    for (name, service) in services {
        let service_name = key_text(&name);
        let place = format!("services.{service_name}");
        let Value::Mapping(service) = service else {
            bail!("{file_name}: {place} must be a mapping of the service's keys");
        };
        if let Some(converted) = convert_service(
            &service_name,
            service,
            inputs,
            &mut taken,
            &mut out.left_out,
        )
        .with_context(|| format!("{file_name}: {place}"))?
        {
            out.instances.push(converted);
        }
    }
    Ok(out)
}

/// The keys `convert_service` reads through docker-compose-types; every other key is named as
/// left out.
const MAPPED: [&str; 9] = [
    "image",
    "environment",
    "command",
    "healthcheck",
    "ports",
    "volumes",
    "profiles",
    "build",
    "entrypoint",
];

fn convert_service(
    service_name: &str,
    raw: Mapping,
    inputs: &Inputs,
    taken: &mut BTreeSet<String>,
    left_out: &mut Vec<LeftOut>,
) -> anyhow::Result<Option<Converted>> {
    let place = format!("services.{service_name}");
    let mut typed = Mapping::new();
    let mut env_file = None;
    let mut ignored = Vec::new();
    for (key, value) in raw {
        let k = key_text(&key);
        if k == "env_file" {
            env_file = Some(value);
        } else if MAPPED.contains(&k.as_str()) || k == "expose" {
            // A port may be written as a number; the types take text.
            let value = match (k.as_str(), value) {
                ("ports" | "expose", Value::Sequence(items)) => Value::Sequence(
                    items
                        .into_iter()
                        .map(|v| match v {
                            Value::Number(n) => Value::String(n.to_string()),
                            other => other,
                        })
                        .collect(),
                ),
                (_, value) => value,
            };
            typed.insert(key, value);
        } else {
            ignored.push(k);
        }
    }
    let service: dct::Service =
        serde_norway::from_value(Value::Mapping(typed)).map_err(|e| anyhow::anyhow!("{e}"))?;

    // Profiles first: a service no active profile names is not converted at all.
    if !service.profiles.is_empty()
        && !inputs.profiles.iter().any(|p| p == "*")
        && !service.profiles.iter().any(|p| inputs.profiles.contains(p))
    {
        left_out.push(LeftOut {
            place: format!("{place}.profiles"),
            why: format!(
                "the service is in profile {} only, and none of them was asked for: `--profile {}` converts it",
                service.profiles.join(", "),
                service.profiles[0]
            ),
        });
        return Ok(None);
    }
    let Some(image) = service.image.clone().filter(|i| !i.trim().is_empty()) else {
        left_out.push(LeftOut {
            place: place.clone(),
            why: if service.build_.is_some() {
                "it is built from a Dockerfile and names no image: berth runs images from a \
                 registry, pinned by digest (push it, give it `image:`, and `berth add` it)"
                    .to_owned()
            } else {
                "it names no image".to_owned()
            },
        });
        return Ok(None);
    };
    let mut here = Vec::new();
    let mut leave = |key: &str, why: String| {
        here.push(LeftOut {
            place: format!("{place}.{key}"),
            why,
        })
    };
    if service.build_.is_some() {
        leave(
            "build",
            "berth runs the image by its pinned digest and builds nothing".to_owned(),
        );
    }
    for key in &ignored {
        leave(key, why_left_out(key));
    }
    if service.entrypoint.is_some() {
        leave(
            "entrypoint",
            "berth.toml has no entrypoint: the image's ENTRYPOINT always runs, and `command` \
             replaces only its CMD"
                .to_owned(),
        );
    }

    // The environment: env files first, then `environment` over them, as Compose does.
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| match env
        .iter_mut()
        .find(|(name, _)| *name == k)
    {
        Some(slot) => slot.1 = v,
        None => env.push((k, v)),
    };
    for (path, required) in env_files(env_file)? {
        let full = inputs.dir.join(&path);
        for (k, v) in read_env_file(&full, required)? {
            set(&mut env, k, v);
        }
    }
    let pairs: Vec<(String, Option<String>)> = match &service.environment {
        dct::Environment::List(items) => items
            .iter()
            .map(|item| match item.split_once('=') {
                Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
                None => (item.clone(), None),
            })
            .collect(),
        dct::Environment::KvPair(map) => map
            .iter()
            .map(|(k, v)| (k.clone(), v.as_ref().map(|v| v.to_string())))
            .collect(),
    };
    let env_name = regex::Regex::new(ENV_NAME_PATTERN).expect("the contract's pattern");
    for (k, v) in pairs {
        let Some(v) = v.or_else(|| (inputs.env)(&k)) else {
            if env.iter().any(|(name, _)| *name == k) {
                // An env file gave it a value, which stands.
                continue;
            }
            leave(
                &format!("environment.{k}"),
                format!("it passes the host's {k} through, and {k} is not set here"),
            );
            continue;
        };
        set(&mut env, k, v);
    }
    env.retain(|(k, _)| {
        let ok = env_name.is_match(k);
        if !ok {
            here.push(LeftOut {
                place: format!("{place}.environment.{k}"),
                why: format!("an instance's variable names are {ENV_NAME_PATTERN}"),
            });
        }
        ok
    });
    let mut leave = |key: &str, why: String| {
        here.push(LeftOut {
            place: format!("{place}.{key}"),
            why,
        })
    };

    let command = match &service.command {
        None => None,
        Some(dct::Command::Args(args)) => Some(args.clone()),
        Some(dct::Command::Simple(text)) => Some(shlex::split(text).with_context(|| {
            format!("command {text:?} does not split into words as a shell would")
        })?),
    };

    // Named volumes; a host path or the Docker socket is the contract's refusal.
    let mut volumes: Vec<(String, String)> = Vec::new();
    for (i, volume) in service.volumes.iter().enumerate() {
        let at = format!("volumes[{i}]");
        let (kind, source, target) = match volume {
            dct::Volumes::Simple(text) => {
                let parts: Vec<&str> = text.split(':').collect();
                match parts.as_slice() {
                    [target] => ("volume", None, (*target).to_owned()),
                    [source, target, ..] => {
                        let bind = source.starts_with(['/', '.', '~']);
                        (
                            if bind { "bind" } else { "volume" },
                            Some((*source).to_owned()),
                            (*target).to_owned(),
                        )
                    }
                    [] => continue,
                }
            }
            dct::Volumes::Advanced(v) => (v._type.as_str(), v.source.clone(), v.target.clone()),
        };
        match kind {
            "volume" => {}
            "bind" | "npipe" => {
                let socket = source.as_deref().is_some_and(|s| s.contains("docker.sock"));
                leave(
                    &at,
                    format!(
                        "{} {}",
                        if socket {
                            "the Docker socket:"
                        } else {
                            "a host path:"
                        },
                        contract(if socket {
                            "dockerSocket"
                        } else {
                            CONTRACT_MOUNTS
                        })
                    ),
                );
                continue;
            }
            other => {
                leave(
                    &at,
                    format!("a {other} mount: berth.toml has named volumes only"),
                );
                continue;
            }
        }
        if let Some(problem) = mount_path_problem(&target) {
            leave(&at, format!("its path {target:?} {problem}"));
            continue;
        }
        let base = source.unwrap_or_else(|| {
            target
                .rsplit('/')
                .find(|s| !s.is_empty())
                .unwrap_or("data")
                .to_owned()
        });
        let name = unique(volume_name(&base), |n| {
            volumes.iter().any(|(taken, _)| taken == n)
        });
        volumes.push((name, target));
    }

    // The ports it publishes: their container ports get connect variables; the host ports are
    // berth's to pick.
    let mut ports: Vec<u16> = Vec::new();
    let mut host_ports = Vec::new();
    let mut port = |container: &str, host: Option<String>, protocol: Option<&str>| {
        if protocol.is_some_and(|p| p != "tcp") {
            here.push(LeftOut {
                place: format!("{place}.ports"),
                why: format!(
                    "{container}/{}: berth's host endpoints are tcp",
                    protocol.unwrap_or_default()
                ),
            });
            return;
        }
        for p in port_range(container) {
            if !ports.contains(&p) {
                ports.push(p);
            }
        }
        if let Some(h) = host {
            host_ports.push(format!("{h}->{container}"));
        }
    };
    match &service.ports {
        dct::Ports::Short(items) => {
            for item in items {
                let (spec, protocol) = match item.split_once('/') {
                    Some((s, p)) => (s, Some(p)),
                    None => (item.as_str(), None),
                };
                let (host, container) = match spec.rsplit_once(':') {
                    Some((h, c)) => (Some(h.to_owned()), c),
                    None => (None, spec),
                };
                port(container, host, protocol);
            }
        }
        dct::Ports::Long(items) => {
            for p in items {
                let host = p.published.as_ref().map(|h| match h {
                    dct::PublishedPort::Single(n) => n.to_string(),
                    dct::PublishedPort::Range(r) => r.clone(),
                });
                port(&p.target.to_string(), host, p.protocol.as_deref());
            }
        }
    }
    let mut leave = |key: &str, why: String| {
        here.push(LeftOut {
            place: format!("{place}.{key}"),
            why,
        })
    };
    if !host_ports.is_empty() {
        leave(
            "ports",
            format!(
                "the host ports ({}) are not kept: berth gives each container port a loopback \
                 port of its own, kept for the instance's life (`berth ps` and `berth env` show it)",
                host_ports.join(", ")
            ),
        );
    }
    let exposed: Vec<u16> = service
        .expose
        .iter()
        .flat_map(|e| port_range(e.split('/').next().unwrap_or(e)))
        .collect();

    let ready = match &service.healthcheck {
        Some(h) if !h.disable => match &h.test {
            Some(dct::HealthcheckTest::Single(text)) => {
                Some(Ready::Exec(vec!["sh".into(), "-c".into(), text.clone()]))
            }
            Some(dct::HealthcheckTest::Multiple(test)) => match test.first().map(String::as_str) {
                Some("CMD") if test.len() > 1 => Some(Ready::Exec(test[1..].to_vec())),
                Some("CMD-SHELL") if test.len() > 1 => Some(Ready::Exec(vec![
                    "sh".into(),
                    "-c".into(),
                    test[1..].join(" "),
                ])),
                _ => {
                    leave("healthcheck", why_left_out("healthcheck"));
                    None
                }
            },
            None => None,
        },
        _ => None,
    };
    if let Some(h) = &service.healthcheck {
        let timing: Vec<&str> = [
            ("interval", h.interval.is_some()),
            ("timeout", h.timeout.is_some()),
            ("retries", h.retries != 0),
            ("start_period", h.start_period.is_some()),
            ("start_interval", h.start_interval.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        if !timing.is_empty() && ready.is_some() {
            leave(
                &format!("healthcheck.{}", timing.join("/")),
                "berth asks its ready check until it answers, within the daemon's \
                 --ready-timeout"
                    .to_owned(),
            );
        }
    }
    let from_expose = ready.is_none() && ports.is_empty() && !exposed.is_empty();
    if !service.expose.is_empty() && !from_expose {
        leave("expose", why_left_out("expose"));
    }
    // Without a healthcheck, an image berth knows (postgres, redis, ...) gets the check `berth
    // add` gives it, which means ready; a port that accepts a connection may not.
    let known =
        presets::preset_for_repository(repository_of(&image)).map(|p| Ready::Preset(p.ready));
    let ready = match ready
        .or(known)
        .or_else(|| ports.first().map(|p| Ready::Tcp(*p)))
        .or_else(|| exposed.first().map(|p| Ready::Tcp(*p)))
    {
        Some(ready) => ready,
        None => {
            left_out.push(LeftOut {
                place,
                why: "berth needs a ready check, and the service has no healthcheck and no port: \
                      give it a healthcheck, or `berth add` its image with --port"
                    .to_owned(),
            });
            return Ok(None);
        }
    };

    let name = unique(instance_name(service_name), |n| taken.contains(n));
    taken.insert(name.clone());
    if name != service_name {
        here.push(LeftOut {
            place: place.clone(),
            why: format!(
                "its name is not an instance name (a-z 0-9 _ -, starting with a letter or \
                 digit): it is instances.{name}"
            ),
        });
    }
    let var = env_prefix(&name);
    let connect = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                if i == 0 {
                    format!("{var}_ADDR")
                } else {
                    format!("{var}_ADDR_{p}")
                },
                format!("{{host}}:{{port:{p}}}"),
            )
        })
        .collect();
    left_out.extend(here);
    Ok(Some(Converted {
        name,
        service: service_name.to_owned(),
        image,
        command,
        env,
        volumes,
        ready,
        connect,
    }))
}

/// A YAML key as text.
fn key_text(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        other => serde_norway::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_owned(),
    }
}

/// `env_file`: one path, a list of paths, or a list of `{path, required}`.
fn env_files(value: Option<Value>) -> anyhow::Result<Vec<(PathBuf, bool)>> {
    let one = |v: &Value| -> anyhow::Result<(PathBuf, bool)> {
        match v {
            Value::String(s) => Ok((PathBuf::from(s), true)),
            Value::Mapping(m) => {
                let path = m
                    .get("path")
                    .and_then(Value::as_str)
                    .context("env_file: an entry needs a path")?;
                let required = m.get("required").and_then(Value::as_bool).unwrap_or(true);
                Ok((PathBuf::from(path), required))
            }
            _ => bail!("env_file must be a path, or a list of paths or of {{path, required}}"),
        }
    };
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Sequence(items)) => items.iter().map(one).collect(),
        Some(v) => Ok(vec![one(&v)?]),
    }
}

/// A dotenv file's variables, in order; a missing file is an error only when `required`.
fn read_env_file(path: &Path, required: bool) -> anyhow::Result<Vec<(String, String)>> {
    match dotenvy::from_path_iter(path) {
        Ok(iter) => iter
            .map(|item| item.with_context(|| format!("could not read {}", path.display())))
            .collect(),
        Err(e) if e.not_found() && !required => Ok(Vec::new()),
        Err(e) => Err(anyhow::anyhow!("could not read {}: {e}", path.display())),
    }
}

/// The ports of `3000` or `3000-3002` (at most 16 from a range).
fn port_range(text: &str) -> Vec<u16> {
    let text = text.trim();
    match text.split_once('-') {
        Some((a, b)) => match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) if a <= b => (a..=b).take(16).collect(),
            _ => Vec::new(),
        },
        None => text.parse::<u16>().ok().into_iter().collect(),
    }
}

/// A service name as an instance name: lower-case, `a-z 0-9 _ -`, starting with a letter or
/// digit, at most 63.
fn instance_name(service: &str) -> String {
    let mapped: String = service
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_start_matches(['_', '-']);
    let name: String = trimmed.chars().take(63).collect();
    if name.is_empty() {
        "service".to_owned()
    } else {
        name
    }
}

/// A Compose volume name as berth's: `[a-z][a-z0-9-]{0,30}`.
fn volume_name(source: &str) -> String {
    let mapped: String = source
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_start_matches(|c: char| !c.is_ascii_lowercase());
    let name: String = trimmed.chars().take(31).collect();
    let name = name.trim_end_matches('-').to_owned();
    if name.is_empty() {
        "data".to_owned()
    } else {
        name
    }
}

/// `base`, or `base-2`, `base-3`, ... when `taken` says it is.
fn unique(base: String, taken: impl Fn(&str) -> bool) -> String {
    if !taken(&base) {
        return base;
    }
    (2..)
        .map(|i| {
            let suffix = format!("-{i}");
            let keep = base.len().min(31 - suffix.len());
            format!("{}{suffix}", &base[..keep])
        })
        .find(|n| !taken(n))
        .expect("a free name")
}

/// An instance name as the start of a variable's name: `cache-2` is `CACHE_2`.
fn env_prefix(name: &str) -> String {
    let upper: String = name
        .to_uppercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if upper.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{upper}")
    } else {
        upper
    }
}

/// An image reference's repository, without its tag or digest (`postgres:16` is `postgres`,
/// `127.0.0.1:5000/pg:1@sha256:...` is `127.0.0.1:5000/pg`).
fn repository_of(image: &str) -> &str {
    let name = image.split('@').next().unwrap_or(image);
    match name.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => repository,
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_berths() {
        assert_eq!(instance_name("My.Service"), "my-service");
        assert_eq!(instance_name("_db"), "db");
        assert_eq!(volume_name("postgres_data"), "postgres-data");
        assert_eq!(volume_name("1st.Volume"), "st-volume");
        assert_eq!(volume_name("___"), "data");
        assert_eq!(env_prefix("cache-2"), "CACHE_2");
        assert_eq!(port_range("3000-3002"), [3000, 3001, 3002]);
        assert_eq!(unique("data".into(), |n| n == "data"), "data-2");
    }

    fn convert_text(text: &str) -> anyhow::Result<Conversion> {
        let dir = tempfile::tempdir().unwrap();
        let env = |_: &str| None;
        convert(
            text,
            "compose.yaml",
            &Inputs {
                dir: dir.path(),
                profiles: &[],
                env: &env,
            },
        )
    }

    #[test]
    fn a_known_image_without_healthcheck_or_port_gets_the_check_berth_add_gives_it() {
        let out = convert_text(
            "services:\n  db:\n    image: postgres:latest\n  cache:\n    image: docker.io/library/redis:7\n  app:\n    image: example/app:1\n",
        )
        .unwrap();
        let ready = |name: &str| {
            out.instances
                .iter()
                .find(|i| i.name == name)
                .map(|i| i.ready.clone())
        };
        assert!(matches!(ready("db"), Some(Ready::Preset(r)) if r.contains("pg_isready")));
        assert!(matches!(ready("cache"), Some(Ready::Preset(r)) if r.contains("redis-cli")));
        assert_eq!(
            ready("app"),
            None,
            "an unknown image with no port is left out"
        );
        assert_eq!(
            repository_of("127.0.0.1:5000/pg:1@sha256:ab"),
            "127.0.0.1:5000/pg"
        );
        assert_eq!(repository_of("127.0.0.1:5000/pg"), "127.0.0.1:5000/pg");
    }

    #[test]
    fn a_file_in_the_first_format_is_named_as_such() {
        let err = convert_text("db:\n  image: postgres:10.3\nweb:\n  build: .\n").unwrap_err();
        assert!(
            format!("{err:#}").contains("Compose's first file format"),
            "{err:#}"
        );
        let err = convert_text("x-note: 1\n").unwrap_err();
        assert!(format!("{err:#}").contains("has no services"), "{err:#}");
    }
}
