//! Names: a Compose service's name as an instance name (which is also its alias, the host
//! name other containers reach it by), a Compose volume's as berth's, and the rule that keeps
//! both unique and the same from run to run.

/// A service name as an instance name and alias (a DNS label): lower case, each run of
/// characters other than `a-z 0-9` (`_` included) as one `-`, from its first letter, at most
/// 63, not ending in `-`.
pub fn instance_name(service: &str) -> String {
    let mut mapped = String::new();
    for c in service.to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            mapped.push(c);
        } else if !mapped.ends_with('-') {
            mapped.push('-');
        }
    }
    let trimmed = mapped.trim_start_matches(|c: char| !c.is_ascii_lowercase());
    let name: String = trimmed.chars().take(63).collect();
    let name = name.trim_end_matches('-');
    if name.is_empty() {
        "service".to_owned()
    } else {
        name.to_owned()
    }
}

/// A Compose volume name as berth's: `[a-z][a-z0-9-]{0,30}`.
pub fn volume_name(source: &str) -> String {
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

/// `base`, or `base-2`, `base-3`, ... (within `max` characters) when `taken` says it is.
pub fn unique(base: String, max: usize, taken: impl Fn(&str) -> bool) -> String {
    if !taken(&base) {
        return base;
    }
    (2..)
        .map(|i| {
            let suffix = format!("-{i}");
            let keep = base.len().min(max - suffix.len());
            format!("{}{suffix}", base[..keep].trim_end_matches('-'))
        })
        .find(|n| !taken(n))
        .expect("a free name")
}

/// The instance names of `services` (Compose names, in file order): a service whose name is
/// already its instance name keeps it; then, in file order, every other takes its mapped name,
/// or that name with `-2`, `-3`, ... when it is taken. So `Web` beside `web` is `web-2`, and
/// the same file always gives the same names.
pub fn assign(services: &[String]) -> Vec<String> {
    let mapped: Vec<String> = services.iter().map(|s| instance_name(s)).collect();
    let mut names: Vec<Option<String>> = vec![None; services.len()];
    let mut taken: Vec<String> = Vec::new();
    for (i, s) in services.iter().enumerate() {
        if mapped[i] == *s && !taken.contains(s) {
            taken.push(s.clone());
            names[i] = Some(s.clone());
        }
    }
    for i in 0..services.len() {
        if names[i].is_none() {
            let name = unique(mapped[i].clone(), 63, |n| taken.iter().any(|t| t == n));
            taken.push(name.clone());
            names[i] = Some(name);
        }
    }
    names.into_iter().map(Option::unwrap_or_default).collect()
}

/// An instance name as the start of a variable's name: `cache-2` is `CACHE_2`.
pub fn env_prefix(name: &str) -> String {
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
pub fn repository_of(image: &str) -> &str {
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
    fn names_become_berths_by_the_stated_rule() {
        assert_eq!(instance_name("plausible_db"), "plausible-db");
        assert_eq!(instance_name("My.Service"), "my-service");
        assert_eq!(instance_name("_db_"), "db");
        assert_eq!(instance_name("1st"), "st");
        assert_eq!(instance_name("web\u{1b}]0;x\u{7}"), "web-0-x");
        assert_eq!(instance_name("___"), "service");
        assert_eq!(volume_name("postgres_data"), "postgres-data");
        assert_eq!(volume_name("1st.Volume"), "st-volume");
        assert_eq!(volume_name("___"), "data");
        assert_eq!(env_prefix("cache-2"), "CACHE_2");
        assert_eq!(unique("data".into(), 31, |n| n == "data"), "data-2");
        assert_eq!(
            repository_of("127.0.0.1:5000/pg:1@sha256:ab"),
            "127.0.0.1:5000/pg"
        );
        assert_eq!(repository_of("127.0.0.1:5000/pg"), "127.0.0.1:5000/pg");
    }

    #[test]
    fn collisions_are_renamed_the_same_way_whatever_the_order() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(assign(&s(&["Web", "web"])), ["web-2", "web"]);
        assert_eq!(assign(&s(&["web", "Web"])), ["web", "web-2"]);
        assert_eq!(
            assign(&s(&["a_b", "a-b", "A_B"])),
            ["a-b-2", "a-b", "a-b-3"]
        );
    }
}
