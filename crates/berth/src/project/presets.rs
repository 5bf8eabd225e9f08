//! The services `berth init --with` and `berth add` know: an image's tag and what makes it
//! useful in development (env, volumes, a ready check that means ready, a connect table for
//! `berth env`), and the `[instances.NAME]` table they become.

/// One known service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// Its name in `--with` and the instance name it gets.
    pub name: &'static str,
    /// The image and tag it pins (on Docker Hub, or under `--mirror`).
    pub image: &'static str,
    pub env: &'static [(&'static str, &'static str)],
    pub volumes: &'static [(&'static str, &'static str)],
    /// The command it runs, when not the image's own (its entrypoint still runs), and the
    /// lowest major version of the image's tag that understands it (an older tag gets none).
    pub command: Option<(&'static [&'static str], u32)>,
    /// The ready check, as berth.toml writes it.
    pub ready: &'static str,
    /// A memory limit other than the default, as berth.toml writes it.
    pub memory: Option<&'static str>,
    pub connect: &'static [(&'static str, &'static str)],
}

/// Every preset, in the order `berth init --help` lists them.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "postgres",
        image: "postgres:17",
        env: &[("POSTGRES_PASSWORD", "dev")],
        volumes: &[("data", "/var/lib/postgresql/data")],
        // Crash recovery syncs the data directory with one syncfs(2) rather than an fsync of
        // every file: on a branch or restore over layers, an fsync opens each file for
        // writing, which copies every file up into the branch's own layer (its whole size);
        // syncfs copies nothing up. Postgres 14 and later (docs/branching.md).
        command: Some((&["postgres", "-c", "recovery_init_sync_method=syncfs"], 14)),
        // Over TCP: the image's first start runs a server on its socket only, for initdb.
        ready: r#"{ exec = ["pg_isready", "-U", "postgres", "-h", "127.0.0.1"], user = "postgres" }"#,
        memory: None,
        connect: &[(
            "DATABASE_URL",
            "postgres://postgres:dev@{host}:{port:5432}/postgres",
        )],
    },
    Preset {
        name: "redis",
        command: None,
        image: "redis:7",
        env: &[],
        volumes: &[("data", "/data")],
        ready: r#"{ exec = ["redis-cli", "ping"] }"#,
        memory: None,
        connect: &[("REDIS_URL", "redis://{host}:{port:6379}")],
    },
    Preset {
        name: "mailpit",
        command: None,
        image: "axllent/mailpit:latest",
        env: &[],
        volumes: &[],
        ready: "{ tcp = 8025 }",
        memory: None,
        connect: &[
            ("SMTP_URL", "smtp://{host}:{port:1025}"),
            ("MAILPIT_URL", "http://{host}:{port}"),
        ],
    },
    Preset {
        name: "mysql",
        command: None,
        image: "mysql:8.4",
        env: &[("MYSQL_ROOT_PASSWORD", "dev"), ("MYSQL_DATABASE", "app")],
        volumes: &[("data", "/var/lib/mysql")],
        ready: r#"{ exec = ["mysqladmin", "ping", "-h", "127.0.0.1", "-uroot", "-pdev"] }"#,
        memory: Some("1GiB"),
        connect: &[("DATABASE_URL", "mysql://root:dev@{host}:{port:3306}/app")],
    },
    Preset {
        name: "mongo",
        command: None,
        image: "mongo:8",
        env: &[],
        volumes: &[("data", "/data/db")],
        ready: r#"{ exec = ["mongosh", "--quiet", "--eval", "db.adminCommand('ping').ok"] }"#,
        memory: Some("1GiB"),
        connect: &[("MONGODB_URL", "mongodb://{host}:{port:27017}")],
    },
];

/// The preset of that name.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The preset whose image has this repository (`postgres`, `docker.io/library/postgres`,
/// `mirror.example/postgres`), for `berth add NAME postgres:16`.
pub fn preset_for_repository(repository: &str) -> Option<&'static Preset> {
    let last = |r: &'static str| r.rsplit('/').next().unwrap_or(r);
    let wanted = repository.rsplit('/').next().unwrap_or(repository);
    PRESETS.iter().find(|p| {
        let own = p.image.split(':').next().unwrap_or(p.image);
        last(own) == wanted
    })
}

/// The major version a reference's tag starts with (`postgres:17.2@sha256:...` → 17); `None`
/// for a tag that does not start with one (`latest`) or no tag.
fn major_version(reference: &str) -> Option<u32> {
    let name = reference.split('@').next().unwrap_or(reference);
    let last = name.rsplit('/').next().unwrap_or(name);
    let (_, tag) = last.split_once(':')?;
    let digits: String = tag.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A TOML basic string.
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `{ A = "x", B = "y" }`.
fn inline(pairs: &[(&str, &str)]) -> String {
    let items: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k} = {}", quoted(v)))
        .collect();
    format!("{{ {} }}", items.join(", "))
}

/// What an instance table holds, as `berth add` and `berth init` write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInstance<'a> {
    pub name: &'a str,
    /// The pinned reference.
    pub image: &'a str,
    /// The preset it follows, if any.
    pub preset: Option<&'a Preset>,
    /// For an image without a preset: the port that answers when it is ready.
    pub port: Option<u16>,
}

impl NewInstance<'_> {
    /// The `[instances.NAME]` table (and its `connect` table), ending in a newline.
    pub fn table(&self) -> String {
        let mut out = format!(
            "[instances.{}]\nimage = {}\n",
            self.name,
            quoted(self.image)
        );
        match self.preset {
            Some(p) => {
                if !p.env.is_empty() {
                    out.push_str(&format!("env = {}\n", inline(p.env)));
                }
                if !p.volumes.is_empty() {
                    out.push_str(&format!("volumes = {}\n", inline(p.volumes)));
                }
                if let Some((argv, since)) = p.command
                    && major_version(self.image).is_none_or(|v| v >= since)
                {
                    let argv: Vec<String> = argv.iter().map(|a| quoted(a)).collect();
                    out.push_str(&format!("command = [{}]\n", argv.join(", ")));
                }
                out.push_str(&format!("ready = {}\n", p.ready));
                if let Some(memory) = p.memory {
                    out.push_str(&format!("memory = {}\n", quoted(memory)));
                }
                if !p.connect.is_empty() {
                    out.push_str(&format!("\n[instances.{}.connect]\n", self.name));
                    for (k, v) in p.connect {
                        out.push_str(&format!("{k} = {}\n", quoted(v)));
                    }
                }
            }
            None => {
                let port = self.port.unwrap_or_default();
                out.push_str(&format!("ready = {{ tcp = {port} }}\n"));
                out.push_str(&format!(
                    "\n[instances.{}.connect]\n{}_URL = \"{{host}}:{{port}}\"\n",
                    self.name,
                    self.name.to_ascii_uppercase().replace('-', "_")
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::checker::parse;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn every_preset_makes_a_table_berth_toml_accepts() {
        let mut text = String::new();
        for p in PRESETS {
            let image = format!("{}@sha256:{HEX}", p.image);
            let new = NewInstance {
                name: p.name,
                image: &image,
                preset: Some(p),
                port: None,
            };
            text.push_str(&new.table());
            text.push('\n');
        }
        let defs = parse(&text, "berth.toml").unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        assert_eq!(defs.len(), PRESETS.len());
        let pg = defs.iter().find(|d| d.name == "postgres").unwrap();
        assert_eq!(pg.env["POSTGRES_PASSWORD"], "dev");
        assert_eq!(pg.connect[0].0, "DATABASE_URL");
        assert_eq!(
            pg.command.as_deref(),
            Some(&["postgres", "-c", "recovery_init_sync_method=syncfs"].map(String::from)[..])
        );
    }

    #[test]
    fn postgres_before_14_is_not_given_a_setting_it_does_not_know() {
        let pg = preset("postgres").unwrap();
        for (tag, command) in [
            ("13", false),
            ("14.1", true),
            ("17", true),
            ("latest", true),
        ] {
            let image = format!("mirror.example/postgres:{tag}@sha256:{HEX}");
            let new = NewInstance {
                name: "db",
                image: &image,
                preset: Some(pg),
                port: None,
            };
            let defs = parse(&new.table(), "berth.toml").unwrap();
            assert_eq!(defs[0].command.is_some(), command, "{tag}");
        }
    }

    #[test]
    fn an_image_without_a_preset_gets_a_tcp_ready_check_and_a_url() {
        let image = format!("127.0.0.1:5000/team/api-mock:1@sha256:{HEX}");
        let new = NewInstance {
            name: "api-mock",
            image: &image,
            preset: None,
            port: Some(8080),
        };
        let defs = parse(&new.table(), "berth.toml").unwrap();
        assert_eq!(defs[0].port(), Some(8080));
        assert_eq!(defs[0].connect[0].0, "API_MOCK_URL");
    }

    #[test]
    fn presets_are_found_by_repository_under_any_registry() {
        assert_eq!(preset_for_repository("postgres").unwrap().name, "postgres");
        assert_eq!(
            preset_for_repository("mirror.example/dockerhub/postgres")
                .unwrap()
                .name,
            "postgres"
        );
        assert_eq!(
            preset_for_repository("axllent/mailpit").unwrap().name,
            "mailpit"
        );
        assert!(preset_for_repository("team/app").is_none());
    }
}
