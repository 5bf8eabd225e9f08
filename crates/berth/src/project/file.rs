//! The project file as the commands use it: read from disk, checked, and its instances
//! selected by name.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use super::checker::parse_project;
use super::definition::{InstanceDef, Retention};
use super::envfile::{MAX_ENV_FILE_BYTES, inside, parse_env, read_capped};
use super::interpolate::{Form, parse as parse_refs, substitute};

/// A checked project file.
#[derive(Debug, Clone)]
pub struct Project {
    pub path: PathBuf,
    pub instances: Vec<InstanceDef>,
    /// Its `[retention]` (empty when it has none).
    pub retention: Retention,
}

impl Project {
    /// Reads and checks the project file at `path`; problems name it as `shown`.
    pub fn load(path: &Path, shown: &str) -> anyhow::Result<Project> {
        let source = match std::fs::read_to_string(path) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                anyhow::bail!(
                    "there is no {} at the top of this worktree ({}): `berth init` writes one (`--with postgres,redis` for those services, `--from compose.yaml` from a Compose file), or write an [instances.NAME] table for each service yourself (see docs/cli.md)",
                    crate::repo::PROJECT_FILE,
                    path.display()
                )
            }
            Err(e) => anyhow::bail!("could not read {}: {e}", path.display()),
        };
        let (mut instances, retention) = parse_project(&source, shown)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let env = |name: &str| std::env::var(name).ok();
        for warning in resolve(&mut instances, dir, shown, &env)? {
            eprintln!("berth: {}", super::envfile::printable(&warning));
        }
        Ok(Project {
            path: path.to_owned(),
            instances,
            retention,
        })
    }

    /// The named instances, in the order given, or all of them when `names` is empty.
    pub fn select(&self, names: &[String]) -> anyhow::Result<Vec<&InstanceDef>> {
        if names.is_empty() {
            return Ok(self.instances.iter().collect());
        }
        let mut out = Vec::new();
        for name in names {
            match self.instances.iter().find(|i| &i.name == name) {
                Some(i) if !out.iter().any(|o: &&InstanceDef| o.name == i.name) => out.push(i),
                Some(_) => {}
                None => anyhow::bail!(
                    "{} has no instance named {name:?}; it has {}",
                    crate::repo::PROJECT_FILE,
                    self.instances
                        .iter()
                        .map(|i| i.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        Ok(out)
    }
}

/// Fills in what berth.toml leaves to the CLI, for the spec it sends: each instance's
/// `env_file` variables (under its `env`), and the `${VAR}` references in its `env` values and
/// `command`, from `env` (the command's environment) and then the `.env` file in `dir` (the
/// repository's top). Nothing of it is written back. Answers the warnings (a variable unset);
/// an error names the field and the file, never a value.
pub fn resolve(
    instances: &mut [InstanceDef],
    dir: &Path,
    shown: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Vec<String>> {
    let uses_refs = instances.iter().any(|i| {
        i.env.values().any(|v| v.contains('$'))
            || i.command.iter().flatten().any(|c| c.contains('$'))
    });
    let dotenv = if uses_refs {
        match read_capped(&dir.join(".env"), ".env", MAX_ENV_FILE_BYTES) {
            Ok(text) => parse_env(&text, ".env").map_err(anyhow::Error::msg)?,
            Err(e) if e.missing => Vec::new(),
            Err(e) => anyhow::bail!("{shown} reads ${{VAR}} from .env: {e}"),
        }
    } else {
        Vec::new()
    };
    let lookup = |name: &str| {
        env(name).or_else(|| {
            dotenv
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    };
    let mut warnings = Vec::new();
    let mut problems = Vec::new();
    for def in instances.iter_mut() {
        let base = format!("instances.{}", def.name);
        let text_of = |place: String, text: &str, warnings: &mut Vec<String>| {
            let parts = parse_refs(text, Form::Braces)
                .map_err(|e| format!("{shown}: {place}: {e} (write $${{ for a literal ${{)"))?;
            let mut unset = Vec::new();
            let value = substitute(&parts, &lookup, &mut unset)
                .map_err(|e| format!("{shown}: {place}: {e}"))?;
            for name in unset {
                warnings.push(format!(
                    "{shown}: {place}: {name} is set neither in the environment nor in .env: it is empty"
                ));
            }
            Ok::<_, String>(value)
        };
        let mut env_out = BTreeMap::new();
        for (i, file) in def.env_file.iter().enumerate() {
            let place = format!("{base}.env_file[{i}]");
            let Some(relative) = inside(dir, dir, Path::new(file)) else {
                problems.push(format!(
                    "{shown}: {place}: {file} is outside the repository: berth reads env files inside it only"
                ));
                continue;
            };
            let text = match read_capped(&dir.join(&relative), file, MAX_ENV_FILE_BYTES) {
                Ok(t) => t,
                Err(e) => {
                    problems.push(format!("{shown}: {place}: {e}"));
                    continue;
                }
            };
            match parse_env(&text, file) {
                Ok(vars) => {
                    for (k, v) in vars {
                        env_out.insert(k, v);
                    }
                }
                Err(e) => problems.push(format!("{shown}: {place}: {e}")),
            }
        }
        for (k, v) in &def.env {
            match text_of(format!("{base}.env.{k}"), v, &mut warnings) {
                Ok(value) => {
                    env_out.insert(k.clone(), value);
                }
                Err(e) => problems.push(e),
            }
        }
        if let Some(command) = &def.command {
            let mut out = Vec::new();
            for (i, c) in command.iter().enumerate() {
                match text_of(format!("{base}.command[{i}]"), c, &mut warnings) {
                    Ok(value) => out.push(value),
                    Err(e) => problems.push(e),
                }
            }
            def.command = Some(out);
        }
        def.env = env_out;
    }
    if problems.is_empty() {
        Ok(warnings)
    } else {
        anyhow::bail!("{}", problems.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::checker::parse;
    use super::*;

    fn project() -> Project {
        let hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let text = format!(
            "[instances.db]\nimage = \"127.0.0.1:5000/pg:16@sha256:{hex}\"\nready = {{ tcp = 5432 }}\n[instances.cache]\nimage = \"127.0.0.1:5000/redis:7@sha256:{hex}\"\nready = {{ tcp = 6379 }}\n"
        );
        Project {
            path: PathBuf::from("berth.toml"),
            instances: parse(&text, "berth.toml").unwrap(),
            retention: Default::default(),
        }
    }

    #[test]
    fn select_keeps_the_order_given_once_each() {
        let p = project();
        let names = |v: Vec<&InstanceDef>| v.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(p.select(&[]).unwrap()), ["db", "cache"]);
        let asked = ["cache".to_owned(), "db".to_owned(), "cache".to_owned()];
        assert_eq!(names(p.select(&asked).unwrap()), ["cache", "db"]);
        let err = p.select(&["web".to_owned()]).unwrap_err().to_string();
        assert_eq!(
            err,
            "berth.toml has no instance named \"web\"; it has db, cache"
        );
    }

    #[test]
    fn env_files_and_references_are_resolved_for_the_spec_only() {
        let dir = tempfile::tempdir().unwrap();
        let hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        std::fs::write(dir.path().join(".env"), "PASS=from-dotenv\nUSER_NAME=dot\n").unwrap();
        std::fs::write(dir.path().join("db.env"), "A=1\nB=2\n").unwrap();
        let text = format!(
            "[instances.db]\nimage = \"127.0.0.1:5000/pg:16@sha256:{hex}\"\nready = {{ tcp = 5432 }}\nenv_file = [\"db.env\"]\nenv = {{ B = \"3\", PASSWORD = \"${{PASS}}\", USER = \"${{USER_NAME}}\", NONE = \"a${{UNSET_HERE}}\", LIT = \"$$x $y\" }}\ncommand = [\"run\", \"--user=${{USER_NAME:-x}}\"]\n"
        );
        let mut defs = parse(&text, "berth.toml").unwrap();
        assert_eq!(
            defs[0].env["PASSWORD"], "${PASS}",
            "parse keeps the reference"
        );
        let env = |n: &str| (n == "USER_NAME").then(|| "shell".to_owned());
        let warnings = resolve(&mut defs, dir.path(), "berth.toml", &env).unwrap();
        let got: Vec<(&str, &str)> = defs[0]
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("A", "1"),
                ("B", "3"),
                ("LIT", "$x $y"),
                ("NONE", "a"),
                ("PASSWORD", "from-dotenv"),
                ("USER", "shell"),
            ]
        );
        assert_eq!(defs[0].command.as_deref().unwrap(), ["run", "--user=shell"]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("instances.db.env.NONE: UNSET_HERE is set neither"));

        // A missing env file, one outside, a required variable: each named, no value quoted.
        std::fs::write(dir.path().join("secret.env"), "TOKEN=hunter2\n").unwrap();
        let text = format!(
            "[instances.db]\nimage = \"127.0.0.1:5000/pg:16@sha256:{hex}\"\nready = {{ tcp = 5432 }}\nenv_file = [\"gone.env\", \"sub/../../x.env\"]\nenv = {{ P = \"${{NEEDED?set NEEDED}}\" }}\n"
        );
        assert!(parse(&text, "berth.toml").is_err(), "outside by name");
        let text = text.replace("sub/../../x.env", "secret.env");
        let mut defs = parse(&text, "berth.toml").unwrap();
        let err = resolve(&mut defs, dir.path(), "berth.toml", &|_| None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("instances.db.env_file[0]: gone.env does not exist"),
            "{err}"
        );
        assert!(
            err.contains("instances.db.env.P: NEEDED must be set: set NEEDED"),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn a_missing_file_says_what_to_write() {
        let err = Project::load(Path::new("/nonexistent/berth.toml"), "berth.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "there is no berth.toml at the top of this worktree (/nonexistent/berth.toml)"
            ) && err.contains("`berth init` writes one"),
            "{err}"
        );
    }
}
