//! One Compose service as an instance: its image, environment (see `environment`), named
//! volumes, command, a ready check (its healthcheck, a known image's check, or its first
//! port), its published ports as connect variables and a known database's connection URL; and
//! every key of it berth.toml has no place for or the contract refuses, named with why.

use berth_core::spec::mount_path_problem;
use docker_compose_types as dct;
use serde_norway::{Mapping, Value};

use super::super::interpolate::{Form, Part, Var, for_berth, names, parse, render, substitute};
use super::super::presets;
use super::environment::{Context, Env, service_env};
use super::model::{Converted, LeftOut, Ready, key_text};
use super::names::{repository_of, unique, volume_name};
use super::reasons::{CONTRACT_MOUNTS, contract, why_left_out};

/// The keys read through docker-compose-types; every other key is named as left out.
const MAPPED: [&str; 9] = [
    "image",
    "command",
    "healthcheck",
    "ports",
    "volumes",
    "profiles",
    "build",
    "entrypoint",
    "expose",
];

/// The keys read here from the raw YAML.
const RAW: [&str; 3] = ["environment", "env_file", "secrets"];

/// `"10"` as 10, where Compose takes a number after interpolation.
fn number_like(v: Value) -> Value {
    match &v {
        Value::String(s) => match s.trim().parse::<i64>() {
            Ok(n) => Value::Number(n.into()),
            Err(_) => v,
        },
        _ => v,
    }
}

/// `"true"` as true, where Compose takes a boolean.
fn bool_like(v: Value) -> Value {
    match &v {
        Value::String(s) if s == "true" || s == "false" => Value::Bool(s == "true"),
        _ => v,
    }
}

/// A key's value as the types read it: ports as text, numbers and booleans from strings.
fn coerce(key: &str, value: Value) -> Value {
    match (key, value) {
        ("ports" | "expose", Value::Sequence(items)) => Value::Sequence(
            items
                .into_iter()
                .map(|v| match v {
                    Value::Number(n) => Value::String(n.to_string()),
                    Value::Mapping(m) => Value::Mapping(
                        m.into_iter()
                            .map(|(k, v)| {
                                let v = if key_text(&k) == "target" {
                                    number_like(v)
                                } else {
                                    v
                                };
                                (k, v)
                            })
                            .collect(),
                    ),
                    other => other,
                })
                .collect(),
        ),
        ("healthcheck", Value::Mapping(m)) => Value::Mapping(
            m.into_iter()
                .map(|(k, v)| {
                    let v = match key_text(&k).as_str() {
                        "retries" => number_like(v),
                        "disable" => bool_like(v),
                        _ => v,
                    };
                    (k, v)
                })
                .collect(),
        ),
        (_, v) => v,
    }
}

/// The service read through the types, a problem named by its key.
fn typed(map: Mapping) -> Result<dct::Service, String> {
    match serde_norway::from_value::<dct::Service>(Value::Mapping(map.clone())) {
        Ok(s) => Ok(s),
        Err(whole) => {
            for (k, v) in map {
                let mut one = Mapping::new();
                let key = key_text(&k);
                one.insert(k, v);
                if let Err(e) = serde_norway::from_value::<dct::Service>(Value::Mapping(one)) {
                    return Err(format!("{key}: {}", strip_location(&e.to_string())));
                }
            }
            Err(strip_location(&whole.to_string()))
        }
    }
}

fn strip_location(message: &str) -> String {
    message
        .split(" at line ")
        .next()
        .unwrap_or(message)
        .to_owned()
}

/// A healthcheck test with variables in it: the reference left for the container's shell,
/// whose environment has it (`needs` gains each variable the instance must then have).
fn shell_text(parts: &[Part], needs: &mut Vec<String>) -> String {
    let mut out = String::new();
    for p in parts {
        match p {
            Part::Text(t) => out.push_str(t),
            Part::Var(Var { name, .. }) => {
                if !needs.contains(name) {
                    needs.push(name.clone());
                }
                let mut one = render(std::slice::from_ref(p));
                // render writes a `$` of a word as `$$`; the shell takes it as it is.
                one = one.replace("$$", "$");
                out.push_str(&one);
            }
        }
    }
    out
}

/// A healthcheck's test, with no value of the shell or .env in it: where a variable it names
/// is set, the reference is left for the container's shell; where none is, the file's own
/// defaults are its text.
fn ready_of(
    test: &dct::HealthcheckTest,
    lookup: &dyn Fn(&str) -> Option<String>,
    needs: &mut Vec<String>,
) -> Result<Option<Ready>, String> {
    let set = |parts: &[Part]| names(parts).iter().any(|n| lookup(n).is_some());
    let shell = |text: &str, needs: &mut Vec<String>| -> Result<String, String> {
        let parts = parse(text, Form::Compose)?;
        if set(&parts) {
            Ok(shell_text(&parts, needs))
        } else {
            substitute(&parts, lookup, &mut Vec::new())
        }
    };
    Ok(match test {
        dct::HealthcheckTest::Single(text) => Some(Ready::Exec(vec![
            "sh".into(),
            "-c".into(),
            shell(text, needs)?,
        ])),
        dct::HealthcheckTest::Multiple(test) => match test.first().map(String::as_str) {
            Some("CMD") if test.len() > 1 => {
                let mut plain = Vec::new();
                let mut any = false;
                for arg in &test[1..] {
                    let parts = parse(arg, Form::Compose)?;
                    any |= set(&parts);
                    plain.push(parts);
                }
                if any {
                    // Through a shell, so that the container's environment fills them in.
                    let words: Vec<String> = plain
                        .iter()
                        .map(|parts| {
                            let text = shell_text(parts, needs);
                            format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
                        })
                        .collect();
                    Some(Ready::Exec(vec!["sh".into(), "-c".into(), words.join(" ")]))
                } else {
                    Some(Ready::Exec(
                        plain
                            .iter()
                            .map(|p| substitute(p, lookup, &mut Vec::new()))
                            .collect::<Result<_, _>>()?,
                    ))
                }
            }
            Some("CMD-SHELL") if test.len() > 1 => Some(Ready::Exec(vec![
                "sh".into(),
                "-c".into(),
                shell(&test[1..].join(" "), needs)?,
            ])),
            _ => None,
        },
    })
}

/// What one service becomes; `None` when it is left out (the reason pushed to `left_out`).
/// The instance's name is given later (`names::assign`), once every service is read.
pub fn convert_service(
    service_name: &str,
    raw: Mapping,
    profiles: &[String],
    cx: &Context,
    left_out: &mut Vec<LeftOut>,
) -> Option<Converted> {
    let place = format!("services.{service_name}");
    let mut map = Mapping::new();
    let mut kept = Mapping::new();
    let mut ignored = Vec::new();
    for (key, value) in raw {
        let k = key_text(&key);
        if RAW.contains(&k.as_str()) {
            kept.insert(Value::String(k), value);
        } else if MAPPED.contains(&k.as_str()) {
            let value = coerce(&k, value);
            map.insert(key, value);
        } else {
            ignored.push(k);
        }
    }
    let mut here: Vec<LeftOut> = Vec::new();
    let leave_service = |here: Vec<LeftOut>, left_out: &mut Vec<LeftOut>, why: String| {
        left_out.push(LeftOut {
            place: place.clone(),
            why,
        });
        left_out.extend(here);
        None
    };
    for key in &ignored {
        here.push(LeftOut {
            place: format!("{place}.{key}"),
            why: why_left_out(key),
        });
    }
    let refused: Vec<&str> = ignored
        .iter()
        .filter(|k| why_left_out(k).starts_with("refused by berth's contract"))
        .map(String::as_str)
        .collect();
    let service = match typed(map) {
        Ok(s) => s,
        Err(e) => return leave_service(here, left_out, e),
    };

    // Profiles first: a service no active profile names is not converted at all.
    if !service.profiles.is_empty()
        && !profiles.iter().any(|p| p == "*")
        && !service.profiles.iter().any(|p| profiles.contains(p))
    {
        left_out.push(LeftOut {
            place: format!("{place}.profiles"),
            why: format!(
                "the service is in profile {} only, and none of them was asked for: `--profile {}` converts it",
                service.profiles.join(", "),
                service.profiles[0]
            ),
        });
        return None;
    }
    let Some(image) = service.image.clone().filter(|i| !i.trim().is_empty()) else {
        return leave_service(
            here,
            left_out,
            if service.build_.is_some() {
                "it is built from a Dockerfile and names no image: berth runs images from a \
                 registry, pinned by digest (push it, give it `image:`, and `berth add` it)"
                    .to_owned()
            } else {
                "it names no image".to_owned()
            },
        );
    };
    let leave = |here: &mut Vec<LeftOut>, key: &str, why: String| {
        here.push(LeftOut {
            place: format!("{place}.{key}"),
            why,
        })
    };
    if service.build_.is_some() {
        leave(
            &mut here,
            "build",
            "berth runs the image by its pinned digest and builds nothing".to_owned(),
        );
    }
    if service.entrypoint.is_some() {
        leave(
            &mut here,
            "entrypoint",
            "berth.toml has no entrypoint: the image's ENTRYPOINT always runs, and `command` \
             replaces only its CMD"
                .to_owned(),
        );
    }

    let mut env: Env = match service_env(
        &place,
        kept.get("env_file"),
        kept.get("environment"),
        kept.get("secrets"),
        cx,
        &mut here,
    ) {
        Ok(env) => env,
        Err(why) => return leave_service(here, left_out, why),
    };

    let command = match &service.command {
        None => None,
        Some(cmd) => {
            let words = match cmd {
                dct::Command::Args(args) => args.clone(),
                dct::Command::Simple(text) => match shlex::split(text) {
                    Some(w) => w,
                    None => {
                        return leave_service(
                            here,
                            left_out,
                            "its command does not split into words as a shell would".to_owned(),
                        );
                    }
                },
            };
            let mut out = Vec::new();
            for (i, w) in words.iter().enumerate() {
                let parts = match parse(w, Form::Compose) {
                    Ok(p) => p,
                    Err(e) => return leave_service(here, left_out, format!("command[{i}]: {e}")),
                };
                match for_berth(&parts, cx.lookup) {
                    Ok((text, _)) => out.push(text),
                    Err(e) => return leave_service(here, left_out, format!("command[{i}]: {e}")),
                }
            }
            Some(out)
        }
    };

    // Named volumes; a host path or the Docker socket is the contract's refusal.
    let mut volumes: Vec<(String, String)> = Vec::new();
    let mut volume_sources: Vec<(String, String)> = Vec::new();
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
                    &mut here,
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
                    &mut here,
                    &at,
                    format!("a {other} mount: berth.toml has named volumes only"),
                );
                continue;
            }
        }
        if let Some(problem) = mount_path_problem(&target) {
            leave(&mut here, &at, format!("its path {target:?} {problem}"));
            continue;
        }
        let base = source.clone().unwrap_or_else(|| {
            target
                .rsplit('/')
                .find(|s| !s.is_empty())
                .unwrap_or("data")
                .to_owned()
        });
        let name = unique(volume_name(&base), 31, |n| {
            volumes.iter().any(|(taken, _)| taken == n)
        });
        if let Some(source) = source {
            volume_sources.push((source, name.clone()));
        }
        volumes.push((name, target));
    }

    // The ports it publishes: their container ports get connect variables; the host ports are
    // berth's to pick.
    let mut ports: Vec<u16> = Vec::new();
    let mut host_ports = Vec::new();
    let mut port =
        |here: &mut Vec<LeftOut>, container: &str, host: Option<String>, protocol: Option<&str>| {
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
                port(&mut here, container, host, protocol);
            }
        }
        dct::Ports::Long(items) => {
            for p in items {
                let host = p.published.as_ref().map(|h| match h {
                    dct::PublishedPort::Single(n) => n.to_string(),
                    dct::PublishedPort::Range(r) => r.clone(),
                });
                port(
                    &mut here,
                    &p.target.to_string(),
                    host,
                    p.protocol.as_deref(),
                );
            }
        }
    }
    if !host_ports.is_empty() {
        leave(
            &mut here,
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

    let mut needs = Vec::new();
    let ready = match &service.healthcheck {
        Some(h) if !h.disable => match &h.test {
            Some(test) => match ready_of(test, cx.lookup, &mut needs) {
                Ok(Some(r)) => Some(r),
                Ok(None) => {
                    leave(&mut here, "healthcheck", why_left_out("healthcheck"));
                    None
                }
                Err(e) => return leave_service(here, left_out, format!("healthcheck.test: {e}")),
            },
            None => None,
        },
        _ => None,
    };
    // A variable the check reads from the container's environment must be in it.
    for name in needs {
        if !env.env.iter().any(|(k, _)| *k == name) {
            env.env.push((name.clone(), format!("${{{name}}}")));
            leave(
                &mut here,
                "healthcheck.test",
                format!(
                    "it reads {name}: the instance gets {name} = \"${{{name}}}\" too, which `berth up` fills in, and the check's shell reads"
                ),
            );
        }
    }
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
                &mut here,
                &format!("healthcheck.{}", timing.join("/")),
                "berth asks its ready check until it answers, within the daemon's \
                 --ready-timeout"
                    .to_owned(),
            );
        }
    }
    let from_expose = ready.is_none() && ports.is_empty() && !exposed.is_empty();
    if !service.expose.is_empty() && !from_expose {
        leave(&mut here, "expose", why_left_out("expose"));
    }
    // Without a healthcheck, an image berth knows (postgres, redis, ...) gets the check `berth
    // add` gives it, which means ready; a port that accepts a connection may not.
    let preset = presets::preset_for_repository(repository_of(&image));
    let ready = match ready
        .or(preset.map(|p| Ready::Preset(p.ready)))
        .or_else(|| ports.first().map(|p| Ready::Tcp(*p)))
        .or_else(|| exposed.first().map(|p| Ready::Tcp(*p)))
    {
        Some(ready) => ready,
        None => {
            // The ports its image EXPOSEs are read once it is pinned; without one, it is left
            // out with this.
            let mut why = "berth needs a ready check, and the service has no healthcheck, no \
                           port and an image that exposes none: give it a healthcheck, or `berth \
                           add` its image with --port"
                .to_owned();
            if !refused.is_empty() {
                why.push_str(&format!(
                    "; besides, berth's contract refuses its {} (below)",
                    refused.join(", ")
                ));
            }
            Ready::FromImage { unless: why }
        }
    };
    let database = preset
        .map(|p| p.name)
        .filter(|n| matches!(*n, "postgres" | "mysql" | "redis"));
    left_out.extend(here);
    Some(Converted {
        name: String::new(),
        service: service_name.to_owned(),
        image,
        command,
        env: env.env,
        env_file: env.env_file,
        volumes,
        volume_sources,
        ready,
        ports,
        database,
        connect: Vec::new(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_numbers_as_compose_takes_them() {
        assert_eq!(port_range("3000-3002"), [3000, 3001, 3002]);
        assert_eq!(
            number_like(Value::String("10".into())),
            Value::Number(10.into())
        );
        let mut needs = Vec::new();
        let test = dct::HealthcheckTest::Multiple(vec![
            "CMD".into(),
            "pg_isready".into(),
            "-U".into(),
            "${POSTGRES_USER:-postgres}".into(),
        ]);
        let r = ready_of(&test, &|_| None, &mut needs).unwrap();
        let plain = ["pg_isready", "-U", "postgres"].map(String::from).to_vec();
        assert_eq!(r, Some(Ready::Exec(plain)));
        assert!(needs.is_empty());
        let r = ready_of(&test, &|_| Some("x".into()), &mut needs).unwrap();
        assert_eq!(
            r,
            Some(Ready::Exec(vec![
                "sh".into(),
                "-c".into(),
                "\"pg_isready\" \"-U\" \"${POSTGRES_USER:-postgres}\"".into()
            ]))
        );
        assert_eq!(needs, ["POSTGRES_USER"]);
    }
}
