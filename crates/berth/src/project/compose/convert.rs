//! The whole Compose file read as a conversion: bounds first, `.env` (or `--env-file`), the
//! YAML with its `<<` merge keys applied, Compose's interpolation except where berth.toml keeps
//! references, the top-level keys, profiles and `--only`, each service (`service`), then the
//! names (`names::assign`), connect variables (`connect`) and volumes services share.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use serde_norway::{Mapping, Value};

use super::super::envfile::{MAX_ENV_FILE_BYTES, parse_env, read_capped};
use super::super::interpolate::{Form, parse, substitute};
use super::bounds::nesting_problem;
use super::connect::connect;
use super::environment::Context;
use super::model::{Conversion, Inputs, LeftOut, key_text};
use super::names::assign;
use super::reasons::{networks_why, why_left_out};
use super::service::convert_service;

/// Where berth.toml keeps references instead of values: `services.S.environment`,
/// `services.S.command`, `services.S.healthcheck.test`.
fn keeps_references(path: &[String]) -> bool {
    matches!(
        path,
        [s, _, k] if s == "services" && (k == "environment" || k == "command")
    ) || matches!(path, [s, _, h, t] if s == "services" && h == "healthcheck" && t == "test")
}

/// Compose's interpolation in every value of the file (keys stay as written), except where
/// berth.toml keeps references; a problem names its place.
fn interpolate_tree(
    value: Value,
    path: &mut Vec<String>,
    lookup: &dyn Fn(&str) -> Option<String>,
    unset: &mut Vec<String>,
) -> anyhow::Result<Value> {
    if keeps_references(path) {
        return Ok(value);
    }
    Ok(match value {
        Value::String(s) => {
            let parts =
                parse(&s, Form::Compose).map_err(|e| anyhow::anyhow!("{}: {e}", path.join(".")))?;
            Value::String(
                substitute(&parts, lookup, unset)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.join(".")))?,
            )
        }
        Value::Sequence(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, v) in items.into_iter().enumerate() {
                let last = path.pop();
                path.push(format!("{}[{i}]", last.clone().unwrap_or_default()));
                let r = interpolate_tree(v, path, lookup, unset);
                path.pop();
                if let Some(l) = last {
                    path.push(l);
                }
                out.push(r?);
            }
            Value::Sequence(out)
        }
        Value::Mapping(map) => {
            let mut out = Mapping::new();
            for (k, v) in map {
                path.push(key_text(&k));
                let r = interpolate_tree(v, path, lookup, unset);
                path.pop();
                out.insert(k, r?);
            }
            Value::Mapping(out)
        }
        Value::Tagged(t) => interpolate_tree(t.value, path, lookup, unset)?,
        other => other,
    })
}

/// Reads `text` (the Compose file `file_name` in `inputs.dir`) into instances and what was left
/// out. An error means nothing can be written: the file does not parse or passes a bound, a
/// variable marked required is unset, `--only` names no service.
pub fn convert(text: &str, file_name: &str, inputs: &Inputs) -> anyhow::Result<Conversion> {
    let mut out = Conversion::default();
    if let Some(problem) = nesting_problem(text) {
        bail!("{file_name}: {problem}");
    }
    let (dotenv_path, dotenv_shown, dotenv_required) = match inputs.env_file {
        Some(p) => (p.to_path_buf(), p.display().to_string(), true),
        None => (inputs.dir.join(".env"), ".env".to_owned(), false),
    };
    let dotenv = match read_capped(&dotenv_path, &dotenv_shown, MAX_ENV_FILE_BYTES) {
        Ok(text) => parse_env(&text, &dotenv_shown).map_err(anyhow::Error::msg)?,
        Err(e) if e.missing && !dotenv_required => Vec::new(),
        Err(e) => bail!("{e}"),
    };
    let lookup = |name: &str| -> Option<String> {
        (inputs.env)(name).or_else(|| {
            dotenv
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    };
    let mut raw: Value = serde_norway::from_str(text)
        .map_err(|e| anyhow::anyhow!("{file_name} is not YAML: {}", yaml_problem(&e)))?;
    // `<<: *anchor` merge keys, as Compose applies them.
    raw.apply_merge()
        .map_err(|e| anyhow::anyhow!("{file_name}: a `<<` merge key: {}", yaml_problem(&e)))?;
    let mut unset = Vec::new();
    let raw = interpolate_tree(raw, &mut Vec::new(), &lookup, &mut unset).with_context(|| {
        format!("{file_name}: a variable it requires is not set, or a `$` is not Compose's")
    })?;
    for name in unset {
        out.left_out.push(LeftOut {
            place: format!("${{{name}}}"),
            why: format!("{name} is set neither in the shell nor in {dotenv_shown}: it became an empty string"),
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
    let mut secrets = Mapping::new();
    for (key, value) in top {
        let key = key_text(&key);
        match key.as_str() {
            "services" => services = Some(value),
            "secrets" => {
                if let Value::Mapping(m) = value {
                    secrets = m;
                }
            }
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
                why: networks_why(),
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
    let all: Vec<String> = services.keys().map(key_text).collect();
    for name in inputs.only {
        if !all.contains(name) {
            bail!(
                "--only {name:?}: {file_name} has no such service; it has {}",
                all.join(", ")
            );
        }
    }
    let profiles: Vec<String> = if inputs.profiles.is_empty() {
        dotenv
            .iter()
            .find(|(k, _)| k == "COMPOSE_PROFILES")
            .map(|(_, v)| {
                v.split(',')
                    .map(|p| p.trim().to_owned())
                    .filter(|p| !p.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    } else {
        inputs.profiles.to_vec()
    };
    let cx = Context {
        dir: inputs.dir,
        root: inputs.root,
        lookup: &lookup,
        secrets: &secrets,
    };
    for (name, service) in services {
        let service_name = key_text(&name);
        let place = format!("services.{service_name}");
        if !inputs.only.is_empty() && !inputs.only.contains(&service_name) {
            out.left_out.push(LeftOut {
                place,
                why: "not asked for: `--only` names the services converted".to_owned(),
            });
            continue;
        }
        let Value::Mapping(service) = service else {
            out.left_out.push(LeftOut {
                place,
                why: "it is not a mapping of the service's keys".to_owned(),
            });
            continue;
        };
        if let Some(converted) =
            convert_service(&service_name, service, &profiles, &cx, &mut out.left_out)
        {
            out.instances.push(converted);
        }
    }

    // Names, by the stated rule, once every service is known.
    let services: Vec<String> = out.instances.iter().map(|i| i.service.clone()).collect();
    for (instance, name) in out.instances.iter_mut().zip(assign(&services)) {
        if name != instance.service {
            out.renamed.push((instance.service.clone(), name.clone()));
        }
        instance.name = name;
    }
    connect(&mut out);
    shared_volumes(&mut out);
    let references = out.instances.iter().any(|i| {
        i.env.iter().any(|(_, v)| v.contains("${"))
            || i.command.iter().flatten().any(|c| c.contains("${"))
    });
    if references && !dotenv.is_empty() {
        let top = inputs.dir.canonicalize().ok() == inputs.root.canonicalize().ok();
        if inputs.env_file.is_some() || !top {
            out.left_out.push(LeftOut {
                place: dotenv_shown.clone(),
                why:
                    "`berth up` fills berth.toml's ${VAR} from the shell and from the .env at the \
                      top of the repository, not from this file: export its variables, or keep \
                      them in that .env"
                        .to_owned(),
            });
        }
    }
    Ok(out)
}

/// A YAML parser's problem, without the text it was reading.
fn yaml_problem(e: &serde_norway::Error) -> String {
    let text = e.to_string();
    let at = e
        .location()
        .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
        .unwrap_or_default();
    let first: String = text
        .split(" at line ")
        .next()
        .unwrap_or(&text)
        .chars()
        .take(200)
        .collect();
    format!("{first}{at}")
}

/// A Compose volume two or more converted services mount: each instance has its own.
fn shared_volumes(out: &mut Conversion) {
    let mut users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for i in &out.instances {
        for (source, _) in &i.volume_sources {
            users
                .entry(source.as_str())
                .or_default()
                .push(i.name.as_str());
        }
    }
    let mut notes = Vec::new();
    for (source, names) in users {
        if names.len() > 1 {
            notes.push(LeftOut {
                place: format!("volumes.{source}"),
                why: format!(
                    "{} share it in Compose; berth gives each instance volumes of its own, so they no longer see each other's files",
                    names.join(", ")
                ),
            });
        }
    }
    out.left_out.extend(notes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::compose::model::Ready;
    use std::path::Path;

    fn convert_in(
        dir: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Conversion> {
        convert(
            text,
            "compose.yaml",
            &Inputs {
                dir,
                root: dir,
                profiles: &[],
                only: &[],
                env_file: None,
                env,
            },
        )
    }

    fn convert_text(text: &str) -> anyhow::Result<Conversion> {
        let dir = tempfile::tempdir().unwrap();
        convert_in(dir.path(), text, &|_| None)
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
        assert!(
            matches!(ready("app"), Some(Ready::FromImage { unless }) if unless.starts_with("berth needs a ready check")),
            "an unknown image with no port waits for the ports its image exposes"
        );
        let db = out.instances.iter().find(|i| i.name == "db").unwrap();
        assert_eq!(
            db.connect,
            [(
                "DATABASE_URL".to_owned(),
                "postgres://postgres@{host}:{port:5432}/postgres".to_owned()
            )]
        );
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

    #[test]
    fn values_from_the_shell_and_dotenv_become_references() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "PG_PASS=from-dotenv\nPOSTGRES_PASSWORD=pt\nRETRIES=10\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("db.env"), "SECRET=in-file\n").unwrap();
        let out = convert_in(
            dir.path(),
            "services:\n  the_db:\n    image: postgres:16\n    env_file: db.env\n    environment:\n      - POSTGRES_PASSWORD\n      - PASS=${PG_PASS}\n      - LIT=a$$b\n    healthcheck:\n      test: pg_isready\n      retries: $RETRIES\n",
            &|n| (n == "SHELL_ONLY").then(|| "x".to_owned()),
        )
        .unwrap();
        let db = &out.instances[0];
        assert_eq!(db.name, "the-db");
        assert_eq!(out.renamed, [("the_db".to_owned(), "the-db".to_owned())]);
        assert_eq!(db.env_file, ["db.env"]);
        assert_eq!(
            db.env,
            [
                (
                    "POSTGRES_PASSWORD".to_owned(),
                    "${POSTGRES_PASSWORD}".to_owned()
                ),
                ("PASS".to_owned(), "${PG_PASS}".to_owned()),
                ("LIT".to_owned(), "a$$b".to_owned()),
            ]
        );
        let places: Vec<&str> = out.left_out.iter().map(|l| l.place.as_str()).collect();
        assert!(
            places.contains(&"services.the_db.healthcheck.retries"),
            "{places:?}"
        );
    }

    #[test]
    fn env_file_flag_profiles_from_dotenv_and_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "COMPOSE_PROFILES=tools\nTAG=from-dotenv\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("other.env"), "TAG=from-flag\n").unwrap();
        let text = "services:\n  a:\n    image: x:${TAG}\n    ports: [\"80\"]\n  b:\n    image: y\n    ports: [\"80\"]\n    profiles: [tools]\n";
        let run = |env_file: Option<&Path>, only: &[String]| {
            convert(
                text,
                "compose.yaml",
                &Inputs {
                    dir: dir.path(),
                    root: dir.path(),
                    profiles: &[],
                    only,
                    env_file,
                    env: &|_| None,
                },
            )
            .unwrap()
        };
        let out = run(None, &[]);
        let images: Vec<&str> = out.instances.iter().map(|i| i.image.as_str()).collect();
        assert_eq!(images, ["x:from-dotenv", "y"], "COMPOSE_PROFILES from .env");
        let other = dir.path().join("other.env");
        let out = run(Some(&other), &["a".to_owned()]);
        let images: Vec<&str> = out.instances.iter().map(|i| i.image.as_str()).collect();
        assert_eq!(
            images,
            ["x:from-flag"],
            "--env-file instead of .env, and --only"
        );
        assert!(
            out.left_out
                .iter()
                .any(|l| l.place == "services.b" && l.why.starts_with("not asked for"))
        );
        let err = convert(
            text,
            "compose.yaml",
            &Inputs {
                dir: dir.path(),
                root: dir.path(),
                profiles: &[],
                only: &["nope".to_owned()],
                env_file: None,
                env: &|_| None,
            },
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "--only \"nope\": compose.yaml has no such service; it has a, b"
        );
    }
}
