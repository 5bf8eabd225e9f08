//! The connect variables an imported instance gets: `NAME_ADDR` for each port it published,
//! and a known database's URL as `berth init --with` writes one, with no reference in it.

use super::model::{Conversion, Converted, LeftOut};
use super::names::env_prefix;

/// Each instance's connect variables: `NAME_ADDR` for the ports it published, and for a known
/// database its URL (DATABASE_URL, REDIS_URL) as `berth init --with` writes one, with no
/// value that is a reference in it.
pub fn connect(out: &mut Conversion) {
    let mut taken: Vec<String> = Vec::new();
    let mut notes = Vec::new();
    for instance in &mut out.instances {
        let var = env_prefix(&instance.name);
        for (i, p) in instance.ports.iter().enumerate() {
            instance.connect.push((
                if i == 0 {
                    format!("{var}_ADDR")
                } else {
                    format!("{var}_ADDR_{p}")
                },
                format!("{{host}}:{{port:{p}}}"),
            ));
        }
        let literal = |name: &str| -> Option<Option<String>> {
            let (_, v) = instance.env.iter().find(|(k, _)| k == name)?;
            Some((!v.contains('$')).then(|| v.clone()))
        };
        let url = match instance.database {
            Some("postgres") => {
                let user = literal("POSTGRES_USER");
                let db = literal("POSTGRES_DB");
                let password = ("POSTGRES_PASSWORD", literal("POSTGRES_PASSWORD"));
                match (user, db) {
                    (Some(None), _) | (_, Some(None)) => {
                        notes.push(LeftOut {
                            place: format!("services.{}.environment", instance.service),
                            why: "no DATABASE_URL: its user or database is a ${VAR} reference, \
                                  which a connect variable cannot read"
                                .to_owned(),
                        });
                        None
                    }
                    (user, db) => {
                        let user = user.flatten().unwrap_or_else(|| "postgres".to_owned());
                        let db = db.flatten().unwrap_or_else(|| user.clone());
                        Some((
                            "DATABASE_URL",
                            url("postgres", &user, password, 5432, &db, instance, &mut notes),
                        ))
                    }
                }
            }
            Some("mysql") => {
                let (user, password) = match literal("MYSQL_USER") {
                    Some(Some(u)) => (u, ("MYSQL_PASSWORD", literal("MYSQL_PASSWORD"))),
                    _ => (
                        "root".to_owned(),
                        ("MYSQL_ROOT_PASSWORD", literal("MYSQL_ROOT_PASSWORD")),
                    ),
                };
                let db = literal("MYSQL_DATABASE").flatten().unwrap_or_default();
                Some((
                    "DATABASE_URL",
                    url("mysql", &user, password, 3306, &db, instance, &mut notes),
                ))
            }
            Some("redis") => Some(("REDIS_URL", "redis://{host}:{port:6379}".to_owned())),
            _ => None,
        };
        if let Some((name, template)) = url {
            let name = if taken.iter().any(|t| t == name) {
                format!("{var}_{name}")
            } else {
                name.to_owned()
            };
            taken.push(name.clone());
            instance.connect.push((name, template));
        }
    }
    out.left_out.extend(notes);
}

/// A database URL template: `scheme://user[:password]@{host}:{port:N}/db`.
fn url(
    scheme: &str,
    user: &str,
    (password_var, password): (&str, Option<Option<String>>),
    port: u16,
    db: &str,
    instance: &Converted,
    notes: &mut Vec<LeftOut>,
) -> String {
    let password = match password {
        Some(Some(p)) => format!(":{}", percent(&p)),
        Some(None) => {
            notes.push(LeftOut {
                place: format!("services.{}.environment.{password_var}", instance.service),
                why: "its connection URL has no password: the password is a ${VAR} reference, \
                      kept out of berth.toml's connect variables"
                    .to_owned(),
            });
            String::new()
        }
        None => String::new(),
    };
    format!(
        "{scheme}://{}{password}@{{host}}:{{port:{port}}}/{}",
        percent(user),
        percent(db)
    )
}

/// A URL part with everything but `A-Za-z0-9-._~` percent-encoded (so no brace reaches a
/// connect template).
fn percent(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
