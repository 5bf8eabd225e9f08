//! A service's environment as berth.toml writes it, with no value of the shell, `.env` or an
//! env file in it: `env_file` entries become the instance's `env_file` (paths in the
//! repository, read by `berth up`), `environment` values written in the Compose file stay as
//! they are, and what Compose would take from the shell or `.env` (a `${VAR}` in a value, a
//! pass-through `- VAR`) becomes a `${VAR}` reference `berth up` resolves. A `*_FILE` variable
//! that reads a Compose secret becomes its variable without `_FILE`, as a reference.

use std::path::Path;

use berth_core::spec::ENV_NAME_PATTERN;
use serde_norway::{Mapping, Value};

use super::super::envfile::{MAX_ENV_FILE_BYTES, inside, parse_env, read_capped};
use super::super::interpolate::{Form, for_berth, parse, substitute};
use super::model::LeftOut;

/// What the environment reads besides the service.
pub struct Context<'a> {
    /// The Compose file's folder: env files are relative to it.
    pub dir: &'a Path,
    /// The repository's top: env files must be in it.
    pub root: &'a Path,
    /// The shell's variables, then `.env`'s (or `--env-file`'s).
    pub lookup: &'a dyn Fn(&str) -> Option<String>,
    /// The file's top-level `secrets`.
    pub secrets: &'a Mapping,
}

/// The instance's environment, in berth.toml's form.
#[derive(Debug, Default)]
pub struct Env {
    pub env: Vec<(String, String)>,
    pub env_file: Vec<String>,
}

impl Env {
    fn set(&mut self, k: String, v: String) {
        match self.env.iter_mut().find(|(name, _)| *name == k) {
            Some(slot) => slot.1 = v,
            None => self.env.push((k, v)),
        }
    }
}

/// `env_file`: one path, a list of paths, or a list of `{path, required}`.
fn env_files(value: Option<&Value>) -> Result<Vec<(String, bool)>, String> {
    let one = |v: &Value| -> Result<(String, bool), String> {
        match v {
            Value::String(s) => Ok((s.clone(), true)),
            Value::Mapping(m) => {
                let path = m
                    .get("path")
                    .and_then(Value::as_str)
                    .ok_or("env_file: an entry needs a path")?;
                let required = match m.get("required") {
                    None => true,
                    Some(Value::Bool(b)) => *b,
                    Some(Value::String(s)) if s == "true" || s == "false" => s == "true",
                    Some(_) => return Err("env_file: required must be true or false".to_owned()),
                };
                Ok((path.to_owned(), required))
            }
            _ => {
                Err("env_file must be a path, or a list of paths or of {path, required}".to_owned())
            }
        }
    };
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Sequence(items)) => items.iter().map(one).collect(),
        Some(v) => Ok(vec![one(v)?]),
    }
}

/// The service's `environment` as `(name, value as written)`; `None` passes the shell's
/// through.
fn pairs(value: Option<&Value>) -> Result<Vec<(String, Option<String>)>, String> {
    let scalar = |v: &Value| -> Result<Option<String>, String> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            Value::Bool(b) => Ok(Some(b.to_string())),
            Value::Number(n) => Ok(Some(n.to_string())),
            _ => Err("environment values must be strings, numbers or booleans".to_owned()),
        }
    };
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(match s.split_once('=') {
                    Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
                    None => (s.clone(), None),
                }),
                _ => Err("environment must be a list of NAME=VALUE strings".to_owned()),
            })
            .collect(),
        Some(Value::Mapping(map)) => map
            .iter()
            .map(|(k, v)| {
                let k = match k {
                    Value::String(s) => s.clone(),
                    other => serde_norway::to_string(other)
                        .unwrap_or_default()
                        .trim()
                        .to_owned(),
                };
                Ok((k, scalar(v)?))
            })
            .collect(),
        Some(_) => Err("environment must be a mapping or a list of NAME=VALUE".to_owned()),
    }
}

/// The secrets the service mounts, as `(path in the container, secret name)`.
fn mounted(value: Option<&Value>) -> Vec<(String, String)> {
    let Some(Value::Sequence(items)) = value else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let (source, target) = match item {
                Value::String(s) => (s.clone(), None),
                Value::Mapping(m) => (
                    m.get("source")?.as_str()?.to_owned(),
                    m.get("target").and_then(Value::as_str).map(str::to_owned),
                ),
                _ => return None,
            };
            let path = match target {
                Some(t) if t.starts_with('/') => t,
                Some(t) => format!("/run/secrets/{t}"),
                None => format!("/run/secrets/{source}"),
            };
            Some((path, source))
        })
        .collect()
}

/// The service's environment. `Err` is why the service is left out (an env file outside the
/// repository, missing or unreadable, a variable the file requires unset); `here` gains what
/// is left out of it.
pub fn service_env(
    place: &str,
    env_file: Option<&Value>,
    environment: Option<&Value>,
    secrets: Option<&Value>,
    cx: &Context,
    here: &mut Vec<LeftOut>,
) -> Result<Env, String> {
    let env_name = regex::Regex::new(ENV_NAME_PATTERN).expect("the contract's pattern");
    let mut out = Env::default();
    let mut from_files: Vec<String> = Vec::new();
    let leave = |here: &mut Vec<LeftOut>, at: String, why: String| {
        here.push(LeftOut {
            place: format!("{place}.{at}"),
            why,
        })
    };

    for (path, required) in env_files(env_file)? {
        let Some(relative) = inside(cx.root, cx.dir, Path::new(&path)) else {
            return Err(format!(
                "its env_file {path} is outside the repository: berth reads env files inside it only, and writes none of their values into berth.toml"
            ));
        };
        let full = cx.root.join(&relative);
        match read_capped(&full, &path, MAX_ENV_FILE_BYTES) {
            Ok(text) => {
                for (k, _) in parse_env(&text, &path)? {
                    if !env_name.is_match(&k) {
                        return Err(format!(
                            "its env_file {path} has a variable whose name is not {ENV_NAME_PATTERN}"
                        ));
                    }
                    from_files.push(k);
                }
                out.env_file.push(relative.display().to_string());
            }
            Err(e) if e.missing && !required => leave(
                here,
                "env_file".to_owned(),
                format!("{path} does not exist and is not required: berth.toml does not name it"),
            ),
            Err(e) if e.missing => {
                return Err(format!(
                    "its env_file {path} does not exist (a file each deployment writes?): write it, or leave the service out with `--only`"
                ));
            }
            Err(e) => return Err(format!("its env_file: {e}")),
        }
    }

    let mounts = mounted(secrets);
    for (k, v) in pairs(environment)? {
        if !env_name.is_match(&k) {
            leave(
                here,
                format!("environment.{k}"),
                format!("an instance's variable names are {ENV_NAME_PATTERN}"),
            );
            continue;
        }
        let Some(v) = v else {
            if (cx.lookup)(&k).is_some() {
                out.set(k.clone(), format!("${{{k}}}"));
            } else if !from_files.contains(&k) {
                leave(
                    here,
                    format!("environment.{k}"),
                    format!(
                        "it passes the shell's {k} through, and {k} is set neither in the shell nor in .env: set it, then `berth init` again (or write {k} = \"${{{k}}}\" into env)"
                    ),
                );
            }
            continue;
        };
        let parts = parse(&v, Form::Compose).map_err(|e| format!("environment.{k}: {e}"))?;
        let mut ignored = Vec::new();
        let value = substitute(&parts, cx.lookup, &mut ignored)
            .map_err(|e| format!("environment.{k}: {e}"))?;
        let (written, unset) =
            for_berth(&parts, cx.lookup).map_err(|e| format!("environment.{k}: {e}"))?;
        if let Some(base) = k.strip_suffix("_FILE")
            && let Some((_, secret)) = mounts.iter().find(|(p, _)| *p == value)
        {
            let (var, source) = match cx.secrets.get(secret.as_str()) {
                Some(Value::Mapping(m)) => match m.get("environment").and_then(Value::as_str) {
                    Some(var) => (var.to_owned(), format!("the shell's {var}")),
                    None => (
                        base.to_owned(),
                        match m.get("file").and_then(Value::as_str) {
                            Some(f) => format!("the file {f}"),
                            None => "outside the file".to_owned(),
                        },
                    ),
                },
                _ => (base.to_owned(), "nothing the file defines".to_owned()),
            };
            leave(
                here,
                format!("environment.{k}"),
                format!(
                    "it reads the Compose secret {secret} (from {source}), and berth mounts no secret file: the instance gets {base} = \"${{{var}}}\" instead, which `berth up` reads from the shell or .env"
                ),
            );
            if !out.env.iter().any(|(name, _)| name == base) {
                out.set(base.to_owned(), format!("${{{var}}}"));
            }
            continue;
        }
        if k.ends_with("_FILE") && value.starts_with("/run/secrets/") {
            leave(
                here,
                format!("environment.{k}"),
                format!(
                    "it names a secret file ({value}) the service does not mount: berth mounts none; give the value itself in env"
                ),
            );
            continue;
        }
        for name in unset {
            leave(
                here,
                format!("environment.{k}"),
                format!(
                    "{name} is set neither in the shell nor in .env: berth.toml has ${{{name}}}, which `berth up` leaves empty unless it is set then"
                ),
            );
        }
        out.set(k, written);
    }
    if let Some(Value::Sequence(items)) = secrets
        && !items.is_empty()
    {
        leave(
            here,
            "secrets".to_owned(),
            "berth mounts no secret file: a *_FILE variable that read one is a reference to a variable instead (named above)".to_owned(),
        );
    }
    Ok(out)
}
