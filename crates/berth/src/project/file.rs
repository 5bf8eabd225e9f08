//! The project file as the commands use it: read from disk, checked, and its instances
//! selected by name.

use std::path::{Path, PathBuf};

use super::checker::parse;
use super::definition::InstanceDef;

/// A checked project file.
#[derive(Debug, Clone)]
pub struct Project {
    pub path: PathBuf,
    pub instances: Vec<InstanceDef>,
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
        let instances = parse(&source, shown)?;
        Ok(Project {
            path: path.to_owned(),
            instances,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> Project {
        let hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let text = format!(
            "[instances.db]\nimage = \"127.0.0.1:5000/pg:16@sha256:{hex}\"\nready = {{ tcp = 5432 }}\n[instances.cache]\nimage = \"127.0.0.1:5000/redis:7@sha256:{hex}\"\nready = {{ tcp = 6379 }}\n"
        );
        Project {
            path: PathBuf::from("berth.toml"),
            instances: parse(&text, "berth.toml").unwrap(),
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
