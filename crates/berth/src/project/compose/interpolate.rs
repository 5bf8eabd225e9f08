//! Compose's interpolation, applied to a Compose file's raw YAML before anything reads it.

use std::collections::BTreeSet;

use anyhow::{Context, bail};
use serde_norway::{Mapping, Value};

/// Compose's interpolation in every string of the file (keys stay as written): `$$` is `$`,
/// `$VAR` and `${VAR}` its value, `${VAR:-default}`/`${VAR-default}`, `${VAR:?message}`/
/// `${VAR?message}` (an error when unset), `${VAR:+other}`/`${VAR+other}`.
pub fn interpolate_value(
    value: Value,
    lookup: &dyn Fn(&str) -> Option<String>,
    unset: &mut BTreeSet<String>,
) -> anyhow::Result<Value> {
    Ok(match value {
        Value::String(s) => Value::String(interpolate(&s, lookup, unset)?),
        Value::Sequence(items) => Value::Sequence(
            items
                .into_iter()
                .map(|v| interpolate_value(v, lookup, unset))
                .collect::<anyhow::Result<_>>()?,
        ),
        Value::Mapping(map) => {
            let mut out = Mapping::new();
            for (k, v) in map {
                out.insert(k, interpolate_value(v, lookup, unset)?);
            }
            Value::Mapping(out)
        }
        Value::Tagged(t) => interpolate_value(t.value, lookup, unset)?,
        other => other,
    })
}

fn interpolate(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    unset: &mut BTreeSet<String>,
) -> anyhow::Result<String> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(more) = after.strip_prefix('$') {
            out.push('$');
            rest = more;
        } else if let Some(inner) = after.strip_prefix('{') {
            // The braces' end, counting nested `${...}` in a default.
            let mut depth = 1;
            let mut end = None;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(i);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let end = end.with_context(|| format!("{text:?} has a `${{` with no `}}`"))?;
            let body = &inner[..end];
            let name_end = body.find(|c: char| !is_name(c)).unwrap_or(body.len());
            let (name, op) = body.split_at(name_end);
            let value = lookup(name);
            let word = |w: &str, unset: &mut BTreeSet<String>| interpolate(w, lookup, unset);
            let replaced = if op.is_empty() {
                value.unwrap_or_else(|| {
                    unset.insert(name.to_owned());
                    String::new()
                })
            } else if let Some(d) = op.strip_prefix(":-") {
                match value.filter(|v| !v.is_empty()) {
                    Some(v) => v,
                    None => word(d, unset)?,
                }
            } else if let Some(d) = op.strip_prefix('-') {
                match value {
                    Some(v) => v,
                    None => word(d, unset)?,
                }
            } else if let Some(m) = op.strip_prefix(":?").or_else(|| op.strip_prefix('?')) {
                match value.filter(|v| !(op.starts_with(':') && v.is_empty())) {
                    Some(v) => v,
                    None => bail!("{name} must be set: {}", word(m, unset)?),
                }
            } else if let Some(a) = op.strip_prefix(":+") {
                match value.filter(|v| !v.is_empty()) {
                    Some(_) => word(a, unset)?,
                    None => String::new(),
                }
            } else if let Some(a) = op.strip_prefix('+') {
                match value {
                    Some(_) => word(a, unset)?,
                    None => String::new(),
                }
            } else {
                bail!("{text:?}: `${{{body}}}` is not a substitution Compose knows");
            };
            out.push_str(&replaced);
            rest = &inner[end + 1..];
        } else {
            let name_end = after.find(|c: char| !is_name(c)).unwrap_or(after.len());
            if name_end == 0 {
                out.push('$');
            } else {
                let name = &after[..name_end];
                out.push_str(&lookup(name).unwrap_or_else(|| {
                    unset.insert(name.to_owned());
                    String::new()
                }));
            }
            rest = &after[name_end..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<String> {
        match name {
            "USER_SET" => Some("alice".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn interpolation_follows_compose() {
        let mut unset = BTreeSet::new();
        let i = |t: &str, u: &mut BTreeSet<String>| interpolate(t, &vars, u).unwrap();
        assert_eq!(i("${USER_SET}-$USER_SET", &mut unset), "alice-alice");
        assert_eq!(i("${NOPE:-dev}", &mut unset), "dev");
        assert_eq!(i("${EMPTY:-dev}/${EMPTY-dev}", &mut unset), "dev/");
        assert_eq!(i("${NOPE:-${USER_SET}}", &mut unset), "alice");
        assert_eq!(i("$$HOME costs $$5", &mut unset), "$HOME costs $5");
        assert_eq!(i("${USER_SET:+on}${NOPE:+on}", &mut unset), "on");
        assert!(unset.is_empty());
        assert_eq!(i("a${NOPE}b", &mut unset), "ab");
        assert_eq!(unset.into_iter().collect::<Vec<_>>(), ["NOPE"]);
        let err = interpolate("${NOPE:?give a password}", &vars, &mut BTreeSet::new());
        assert_eq!(
            err.unwrap_err().to_string(),
            "NOPE must be set: give a password"
        );
    }
}
