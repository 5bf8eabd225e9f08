//! The checker: reads berth.toml's text with spans kept for every key and value, checks each
//! instance field by field and then with the contract's own decoder, and reports every problem at
//! once as `FILE:LINE: PLACE ...` ([`ProjectErrors`]).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::LazyLock;

use berth_core::spec::{FORBIDDEN_SPEC_FIELDS, SpecRefused, decode_spec_problems};
use regex::Regex;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::definition::{
    DEFAULT_CPU_MILLICORES, DEFAULT_IDLE_STOP_SECONDS, DEFAULT_MEMORY_BYTES, FIELDS, InstanceDef,
    MAX_KEEP_ARCHIVED_DAYS, MAX_KEEP_BEFORE_RESTORE, ReadyDef, Retention, Scope, field_of_place,
};
use super::reading::{Checker, Item, ProjectErrors, display_key};
use super::template::{Placeholder, Wanted, expand, placeholder};

static NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[a-z0-9][a-z0-9_-]{0,62}$").unwrap());
static ALIAS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(berth_core::spec::ALIAS_PATTERN).unwrap());

/// Parses and checks a project file's text: its instances.
pub fn parse(source: &str, shown: &str) -> Result<Vec<InstanceDef>, ProjectErrors> {
    parse_project(source, shown).map(|(instances, _)| instances)
}

/// Parses and checks a project file's text: its instances and its `[retention]`.
pub fn parse_project(
    source: &str,
    shown: &str,
) -> Result<(Vec<InstanceDef>, Retention), ProjectErrors> {
    let mut cx = Checker {
        source,
        shown,
        problems: Vec::new(),
    };
    let doc = match DeTable::parse(source) {
        Ok(doc) => doc,
        Err(e) => {
            let at = e.span().map_or(0, |s| s.start);
            cx.problem(at..at, e.message().trim().to_owned());
            return Err(cx.finish());
        }
    };
    let mut instances_table = None;
    let mut retention = Retention::default();
    for (key, value) in doc.get_ref().iter() {
        match key.get_ref().as_ref() {
            "instances" => instances_table = Some(value),
            "retention" => retention = cx.retention(value),
            other => cx.problem(
                key.span(),
                format!(
                    "{} is not a section of {shown}: it holds [instances.NAME] tables and a \
                     [retention] table",
                    display_key(other)
                ),
            ),
        }
    }
    let mut parsed: Vec<(Range<usize>, Parsed)> = Vec::new();
    match instances_table {
        None => cx.problem(
            0..0,
            format!("{shown} defines no instance: add an [instances.NAME] table for each service"),
        ),
        Some(value) => match value.get_ref() {
            DeValue::Table(table) => {
                if table.is_empty() {
                    cx.problem(
                        value.span(),
                        "instances holds no instance: add an [instances.NAME] table".to_owned(),
                    );
                }
                for (name, body) in table.iter() {
                    if let Some(p) = cx.instance(name, body) {
                        parsed.push((name.span(), p));
                    }
                }
            }
            _ => cx.problem(
                value.span(),
                "instances must be a table of [instances.NAME] tables".to_owned(),
            ),
        },
    }
    parsed.sort_by_key(|(span, _)| span.start);

    // Aliases are what linked workspaces resolve; within one scope each must be distinct.
    let mut seen: HashMap<(Scope, String), String> = HashMap::new();
    for (_, p) in &parsed {
        let def = &p.def;
        let place = format!("instances.{}.alias", def.name);
        if let Some(first) = seen.get(&(def.scope, def.alias.clone())) {
            cx.problem(
                p.span_of("alias"),
                format!(
                    "{place} {:?} is already the alias of instances.{first}: aliases must be distinct among {} instances",
                    def.alias,
                    def.scope.as_str()
                ),
            );
        } else {
            seen.insert((def.scope, def.alias.clone()), def.name.clone());
        }
    }
    if cx.problems.is_empty() {
        Ok((parsed.into_iter().map(|(_, p)| p.def).collect(), retention))
    } else {
        Err(cx.finish())
    }
}

/// An instance and where each of its fields was written.
struct Parsed {
    def: InstanceDef,
    header: Range<usize>,
    spans: HashMap<String, Range<usize>>,
}

impl Parsed {
    fn span_of(&self, field: &str) -> Range<usize> {
        let top = field.split(['.', '[']).next().unwrap_or(field);
        self.spans
            .get(field)
            .or_else(|| self.spans.get(top))
            .cloned()
            .unwrap_or_else(|| self.header.clone())
    }
}

impl Checker<'_> {
    /// `[retention]`: what `berth prune` keeps (and `berth restore`, at 0 before-restore
    /// snapshots), each within the bounds the CLI's flags take.
    fn retention(&mut self, value: &Item<'_>) -> Retention {
        let mut retention = Retention::default();
        let Some(table) = self.table(value, "retention", "[retention] keep-before-restore = 3")
        else {
            return retention;
        };
        for (key, value) in table.iter() {
            let place = format!("retention.{}", display_key(key.get_ref()));
            let (slot, max, what) = match key.get_ref().as_ref() {
                "keep-before-restore" => (
                    &mut retention.keep_before_restore,
                    MAX_KEEP_BEFORE_RESTORE,
                    "before-restore snapshots kept per instance; 0 keeps none",
                ),
                "keep-archived-days" => (
                    &mut retention.keep_archived_days,
                    MAX_KEEP_ARCHIVED_DAYS,
                    "days an archived instance's data is kept before `berth prune` frees it",
                ),
                _ => {
                    self.problem(
                        key.span(),
                        format!(
                            "{place} is not a field of [retention]; the fields are \
                             keep-before-restore, keep-archived-days"
                        ),
                    );
                    continue;
                }
            };
            match self.integer(value, &place) {
                Some(n) if (0..=i64::from(max)).contains(&n) => *slot = u32::try_from(n).ok(),
                Some(_) => self.problem(
                    value.span(),
                    format!("{place} must be a whole number from 0 to {max} ({what})"),
                ),
                None => {}
            }
        }
        retention
    }

    fn instance(
        &mut self,
        name_key: &Spanned<std::borrow::Cow<'_, str>>,
        body: &Item<'_>,
    ) -> Option<Parsed> {
        let name = name_key.get_ref().to_string();
        let base = format!("instances.{}", display_key(&name));
        let before = self.problems.len();
        if !NAME.is_match(&name) {
            self.problem(
                name_key.span(),
                format!("{base}: an instance name must be 1 to 63 lower-case letters, digits, '_' or '-', starting with a letter or digit"),
            );
        }
        let DeValue::Table(table) = body.get_ref() else {
            self.problem(
                body.span(),
                format!("{base} must be a table: [instances.{name}] with image = ..., ready = ..."),
            );
            return None;
        };
        let mut spans = HashMap::new();
        let mut image = None;
        let mut scope = Scope::Worktree;
        let mut alias = None;
        let mut command = None;
        let mut env = BTreeMap::new();
        let mut env_file = Vec::new();
        let mut volumes = BTreeMap::new();
        let mut ready = None;
        let mut cpu = DEFAULT_CPU_MILLICORES;
        let mut memory = DEFAULT_MEMORY_BYTES;
        let mut idle = DEFAULT_IDLE_STOP_SECONDS;
        let mut idle_freeze = None;
        let mut branch_from: Option<String> = None;
        let mut template = false;
        let mut pool = None;
        let mut connect_raw: Vec<(Range<usize>, String, String)> = Vec::new();

        for (key, value) in table.iter() {
            let field = key.get_ref().as_ref();
            let place = format!("{base}.{}", display_key(field));
            spans.insert(field.to_owned(), value.span());
            match field {
                "image" => image = self.image(value, &place),
                "scope" => {
                    if let Some(s) = self.string(value, &place) {
                        match s.as_str() {
                            "worktree" => scope = Scope::Worktree,
                            "shared" => scope = Scope::Shared,
                            _ => self.problem(
                                value.span(),
                                format!("{place} must be \"worktree\" (one per worktree) or \"shared\" (one for the repository)"),
                            ),
                        }
                    }
                }
                "alias" => {
                    if let Some(s) = self.string(value, &place) {
                        if ALIAS.is_match(&s) {
                            alias = Some(s);
                        } else {
                            self.problem(
                                value.span(),
                                format!("{place} must be a DNS label: 1 to 63 lower-case letters, digits and '-', starting with a letter"),
                            );
                        }
                    }
                }
                "command" => {
                    command =
                        self.strings(value, &place, 0, "[\"postgres\", \"-c\", \"fsync=off\"]")
                }
                "env" => env = self.env(value, &place),
                "env_file" => env_file = self.env_files(value, &place),
                "volumes" => volumes = self.volumes(value, &place),
                "ready" => ready = self.ready(value, &place),
                "cpu" => cpu = self.cpu(value, &place).unwrap_or(cpu),
                "memory" => memory = self.memory(value, &place).unwrap_or(memory),
                "idle-stop" => idle = self.idle(value, &place).unwrap_or(idle),
                "idle-freeze" => idle_freeze = self.idle(value, &place),
                "connect" => connect_raw = self.connect(value, &place),
                "branch-from" => {
                    if let Some(b) = self.string(value, &place) {
                        if b.is_empty() || b.len() > 200 || b.chars().any(char::is_control) {
                            self.problem(
                                value.span(),
                                format!("{place} must be a git branch name (of the worktree whose data a new worktree starts with) or \"shared\""),
                            );
                        } else {
                            branch_from = Some(b);
                        }
                    }
                }
                "pool" => match self.integer(value, &place) {
                    Some(n) if (1..=berth_api::pools::MAX_POOL_SIZE).contains(&n) => pool = Some(n),
                    Some(_) => self.problem(
                        value.span(),
                        format!("{place} must be a whole number from 1 to {} (how many instances `berth lease` keeps ready, made from a template)", berth_api::pools::MAX_POOL_SIZE),
                    ),
                    None => {}
                },
                "template" => match value.get_ref().as_bool() {
                    Some(b) => template = b,
                    None => self.problem(
                        value.span(),
                        format!("{place} must be true (a new instance starts on a template of its image, made once, instead of on empty volumes) or false"),
                    ),
                },
                other => self.unknown(key.span(), &place, other),
            }
        }
        if image.is_none() && !spans.contains_key("image") {
            self.problem(
                name_key.span(),
                format!("{base}.image is missing: every instance runs an image pinned by digest (repo[:tag]@sha256:<64 hex>)"),
            );
        }
        if ready.is_none() && !spans.contains_key("ready") {
            self.problem(
                name_key.span(),
                format!("{base}.ready is missing: say how berth knows it is ready, ready = {{ tcp = PORT }} or ready = {{ exec = [\"cmd\", ...] }}"),
            );
        }
        let alias = match alias {
            Some(a) => a,
            None if spans.contains_key("alias") => String::new(),
            None if ALIAS.is_match(&name) => name.clone(),
            None => {
                self.problem(
                    name_key.span(),
                    format!("{base}: the name is not a DNS label, so it cannot be the alias; set alias = \"...\" (lower-case letters, digits and '-', starting with a letter)"),
                );
                String::new()
            }
        };
        let mut connect = Vec::new();
        for (span, var, template) in connect_raw {
            let place = format!("{base}.connect.{var}");
            let tcp = matches!(ready, Some(ReadyDef::Tcp(_)));
            match expand(&template, |p| match placeholder(p)? {
                Wanted::ReadyPort if !tcp => None,
                _ => Some(String::new()),
            }) {
                Ok(_) => connect.push((var, template)),
                Err(Placeholder::Unknown(p)) if p == "port" => self.problem(
                    span,
                    format!("{place} uses {{port}}, the host port of the tcp ready check, and this instance's ready check is not tcp: write {{port:N}} for container port N"),
                ),
                Err(Placeholder::Unknown(p)) => self.problem(
                    span,
                    format!("{place} uses {{{p}}}: the placeholders are {{host}}, {{port}} and {{port:N}} (write {{{{ and }}}} for braces)"),
                ),
                Err(Placeholder::Unclosed) => {
                    self.problem(span, format!("{place} has a '{{' or '}}' that is not part of a placeholder (write {{{{ and }}}} for braces)"))
                }
            }
        }
        if self.problems.len() > before {
            return None;
        }
        let (Some(image), Some(ready)) = (image, ready) else {
            return None;
        };
        let def = InstanceDef {
            name,
            scope,
            alias,
            image,
            command,
            env,
            env_file,
            volumes,
            ready,
            cpu_millicores: cpu,
            memory_bytes: memory,
            idle_stop_seconds: idle,
            idle_freeze_seconds: idle_freeze,
            connect,
            branch_from,
            template,
            pool,
        };
        let parsed = Parsed {
            def,
            header: name_key.span(),
            spans,
        };
        // The daemon's own decoder, so that nothing it would refuse gets past here.
        let placeholder_key = (parsed.def.scope == Scope::Worktree).then_some("worktree-00000000");
        match decode_spec_problems(&parsed.def.spec_json(placeholder_key)) {
            Ok(_) => {}
            Err(SpecRefused::Forbidden(fields)) => {
                // The file's fields never write these; a spec the CLI built with one is refused
                // where the instance starts.
                for (field, reason) in fields {
                    let place = format!("{base}.{field}");
                    self.problem(
                        parsed.header.clone(),
                        format!("{place} is refused: {reason}"),
                    );
                }
                return None;
            }
            Err(SpecRefused::Problems(problems)) => {
                for problem in problems.list() {
                    let field = field_of_place(&problem.place);
                    let span = field
                        .as_deref()
                        .map_or_else(|| parsed.header.clone(), |f| parsed.span_of(f));
                    let place = match &field {
                        Some(f) => format!("{base}.{f}"),
                        None => base.clone(),
                    };
                    self.problem(
                        span,
                        format!("{place}: the daemon would refuse it: {problem}"),
                    );
                }
                return None;
            }
        }
        Some(parsed)
    }

    fn unknown(&mut self, span: Range<usize>, place: &str, field: &str) {
        if let Some((_, reason)) = FORBIDDEN_SPEC_FIELDS.iter().find(|(f, _)| *f == field) {
            self.problem(span, format!("{place} is refused: {reason}"));
            return;
        }
        let normal = field.to_ascii_lowercase().replace('_', "-");
        let hint = match FIELDS
            .iter()
            .find(|f| **f == normal || (normal == "idle" && **f == "idle-stop"))
        {
            Some(f) => format!(" (did you mean {f}?)"),
            None => String::new(),
        };
        self.problem(
            span,
            format!(
                "{place} is not a field of an instance{hint}; the fields are {}",
                FIELDS.join(", ")
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn image() -> String {
        format!("127.0.0.1:5000/team/postgres:16@sha256:{HEX}")
    }

    fn errors(text: &str) -> Vec<String> {
        parse(text, "berth.toml").expect_err("refused").0
    }

    #[test]
    fn a_full_instance_becomes_the_contract_spec() {
        let text = format!(
            r#"
[instances.db]
image = "{}"
scope = "worktree"
command = ["postgres", "-c", "fsync=off"]
env = {{ POSTGRES_PASSWORD = "dev", PORT = 5432 }}
volumes = {{ data = "/var/lib/postgresql/data" }}
ready = {{ exec = ["pg_isready"], user = "postgres" }}
cpu = "500m"
memory = "1GiB"
idle-stop = "30m"
idle-freeze = "2m"
[instances.db.connect]
DATABASE_URL = "postgres://postgres:dev@{{host}}:{{port:5432}}/postgres"

[instances.cache]
image = "{}"
scope = "shared"
alias = "redis"
ready = {{ tcp = 6379 }}
"#,
            image(),
            image()
        );
        let defs = parse(&text, "berth.toml").unwrap();
        assert_eq!(
            defs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["db", "cache"]
        );
        let spec = defs[0].spec_json(Some("main-0a1b2c3d"));
        assert_eq!(
            spec,
            json!({
                "alias": "db", "worktreeKey": "main-0a1b2c3d", "image": image(),
                "command": ["postgres", "-c", "fsync=off"],
                "env": {"POSTGRES_PASSWORD": "dev", "PORT": "5432"},
                "volumes": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
                "limits": {"cpuMillicores": 500, "memoryBytes": 1073741824},
                "ready": {"kind": "exec", "argv": ["pg_isready"], "user": "postgres"},
                "idleStopAfterSeconds": 1800,
                "idleFreezeAfterSeconds": 120
            })
        );
        assert!(berth_core::spec::decode_spec(&spec).is_ok());
        let cache = defs[1].spec_json(Some("ignored"));
        assert_eq!(cache["worktreeKey"], Value::Null);
        assert_eq!(
            cache["limits"],
            json!({"cpuMillicores": 1000, "memoryBytes": 536870912})
        );
        assert_eq!(cache["idleStopAfterSeconds"], 3600);
        assert!(
            cache.get("idleFreezeAfterSeconds").is_none(),
            "sent only when asked for"
        );
        assert_eq!(defs[1].alias, "redis");
        let endpoints = [(5432, "127.0.0.1".to_owned(), 40001)];
        assert_eq!(
            defs[0].connect_values(&endpoints),
            Ok(vec![(
                "DATABASE_URL".to_owned(),
                "postgres://postgres:dev@127.0.0.1:40001/postgres".to_owned()
            )])
        );
        let err = defs[0].connect_values(&[]).unwrap_err();
        assert!(err.contains("db has no host endpoint for {host}"), "{err}");
    }

    #[test]
    fn every_problem_names_its_line_and_field() {
        let text = format!(
            "[instances.db]\nimage = \"{}\"\nready = {{ tcp = 1 }}\nidle-stop = \"soon\"\nfoo = 1\n",
            image()
        );
        let errs = errors(&text);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].starts_with("berth.toml:4: instances.db.idle-stop must be a duration"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("berth.toml:5: instances.db.foo is not a field"),
            "{errs:?}"
        );

        let errs = errors("[instances.db]\nimage = \"postgres:16\"\nready = { tcp = 1 }\n");
        assert!(
            errs[0].starts_with(
                "berth.toml:2: instances.db.image \"postgres:16\" is not pinned by digest"
            ),
            "{errs:?}"
        );

        let text = format!(
            "[instances.a]\nimage = \"{i}\"\nready = {{ tcp = 1 }}\nalias = \"db\"\n[instances.b]\nimage = \"{i}\"\nready = {{ tcp = 1 }}\nalias = \"db\"\n",
            i = image()
        );
        let errs = errors(&text);
        assert_eq!(
            errs,
            vec![
                "berth.toml:8: instances.b.alias \"db\" is already the alias of instances.a: aliases must be distinct among worktree instances"
            ]
        );

        let errs = errors("[instances.db]\nready = { tcp = 1 }\n");
        assert!(
            errs[0].starts_with("berth.toml:1: instances.db.image is missing"),
            "{errs:?}"
        );

        let errs = errors("[instances.db]\nprivileged = true\n");
        assert!(errs.iter().any(|e| e == "berth.toml:2: instances.db.privileged is refused: berth never runs an instance privileged"), "{errs:?}");

        let errs = errors("[instances.db]\nimage = \"x\"\nimage = \"y\"\n");
        assert!(errs[0].starts_with("berth.toml:3: "), "{errs:?}");

        let errs = errors(&format!(
            "[instances.db]\nimage = \"{}\"\nready = {{ exec = [\"true\"] }}\nenv = {{ A = \"a\\u0000b\" }}\n[instances.db.connect]\nX = \"{{port}}\"\n",
            image()
        ));
        assert!(
            errs.iter()
                .any(|e| e.starts_with("berth.toml:6: instances.db.connect.X uses {port}")),
            "{errs:?}"
        );

        let errs = errors(&format!(
            "[instances.db]\nimage = \"{}\"\nready = {{ tcp = 1 }}\n[instances.db.connect]\nA = \"{{port:1}}\"\nB = \"{{port:x}}\"\nC = \"{{port:0}}\"\n",
            image()
        ));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].starts_with("berth.toml:6: instances.db.connect.B uses {port:x}"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("berth.toml:7: instances.db.connect.C uses {port:0}"),
            "{errs:?}"
        );
    }

    #[test]
    fn the_contract_decoder_catches_what_the_file_checks_miss() {
        let errs = errors(&format!(
            "[instances.db]\nimage = \"{}\"\nready = {{ exec = [\"true\"] }}\nenv = {{ A = \"a\\u0000b\" }}\n",
            image()
        ));
        assert_eq!(
            errs,
            vec![
                "berth.toml:4: instances.db.env.A: the daemon would refuse it: spec.env.A must not contain a NUL byte"
            ]
        );
    }

    #[test]
    fn keys_are_shown_as_written_in_a_dotted_path() {
        assert_eq!(display_key("db"), "db");
        assert_eq!(display_key("idle-stop"), "idle-stop");
        assert_eq!(display_key("my_db2"), "my_db2");
        assert_eq!(display_key(""), "\"\"");
        assert_eq!(display_key("a.b"), "\"a.b\"");
        assert_eq!(display_key("DB URL"), "\"DB URL\"");
    }

    #[test]
    fn retention_is_read_and_each_problem_is_named_at_its_line() {
        let instance = format!(
            "[instances.db]\nimage = \"{}\"\nready = {{ tcp = 5432 }}\n",
            image()
        );
        let text =
            format!("[retention]\nkeep-before-restore = 0\nkeep-archived-days = 30\n\n{instance}");
        let (_, retention) = parse_project(&text, "berth.toml").unwrap();
        assert_eq!(
            retention,
            Retention {
                keep_before_restore: Some(0),
                keep_archived_days: Some(30),
            }
        );
        let (_, none) = parse_project(&instance, "berth.toml").unwrap();
        assert_eq!(none, Retention::default());
        let bad = format!(
            "[retention]\nkeep-before-restore = -1\nkeep-archived-days = \"7\"\nkeep = 2\n\n{instance}"
        );
        assert_eq!(
            errors(&bad),
            [
                "berth.toml:2: retention.keep-before-restore must be a whole number from 0 to \
                 1000 (before-restore snapshots kept per instance; 0 keeps none)",
                "berth.toml:3: retention.keep-archived-days must be an integer, not string",
                "berth.toml:4: retention.keep is not a field of [retention]; the fields are \
                 keep-before-restore, keep-archived-days",
            ]
        );
        assert_eq!(
            errors(&format!("retention = 3\n{instance}")),
            [
                "berth.toml:1: retention must be a table, such as [retention] \
              keep-before-restore = 3, not integer"
            ]
        );
    }
}
