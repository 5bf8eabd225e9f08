//! Reading berth.toml's text with spans: the [`Checker`] that collects every problem at its
//! line, the typed reads of a value (a string, an integer, a list of strings, a table) that
//! name what was expected, and [`ProjectErrors`], all problems at once as `FILE:LINE: ...`.

use std::fmt;
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// Every problem found in a project file, each one line `FILE:LINE: PLACE ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectErrors(pub Vec<String>);

impl fmt::Display for ProjectErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for ProjectErrors {}

pub(super) struct Checker<'s> {
    pub(super) source: &'s str,
    pub(super) shown: &'s str,
    pub(super) problems: Vec<(usize, usize, String)>,
}

pub(super) type Item<'i> = Spanned<DeValue<'i>>;

impl Checker<'_> {
    pub(super) fn problem(&mut self, span: Range<usize>, message: String) {
        let start = span.start.min(self.source.len());
        let line = self.source[..start].matches('\n').count() + 1;
        self.problems.push((line, self.problems.len(), message));
    }

    pub(super) fn finish(mut self) -> ProjectErrors {
        self.problems.sort();
        ProjectErrors(
            self.problems
                .into_iter()
                .map(|(line, _, m)| format!("{}:{line}: {m}", self.shown))
                .collect(),
        )
    }

    pub(super) fn string(&mut self, value: &Item<'_>, place: &str) -> Option<String> {
        match value.get_ref() {
            DeValue::String(s) => Some(s.to_string()),
            other => {
                self.problem(
                    value.span(),
                    format!("{place} must be a string, not {}", other.type_str()),
                );
                None
            }
        }
    }

    pub(super) fn integer(&mut self, value: &Item<'_>, place: &str) -> Option<i64> {
        match value.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.problem(value.span(), format!("{place} is too large"));
                    None
                }
            },
            other => {
                self.problem(
                    value.span(),
                    format!("{place} must be an integer, not {}", other.type_str()),
                );
                None
            }
        }
    }

    pub(super) fn strings(
        &mut self,
        value: &Item<'_>,
        place: &str,
        min: usize,
        example: &str,
    ) -> Option<Vec<String>> {
        let DeValue::Array(items) = value.get_ref() else {
            self.problem(
                value.span(),
                format!("{place} must be an array of strings, such as {example}"),
            );
            return None;
        };
        if items.len() < min {
            self.problem(
                value.span(),
                format!("{place} must have at least {min} item(s), such as {example}"),
            );
            return None;
        }
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item.get_ref() {
                DeValue::String(s) => out.push(s.to_string()),
                other => {
                    self.problem(
                        item.span(),
                        format!("{place}[{i}] must be a string, not {}", other.type_str()),
                    );
                    return None;
                }
            }
        }
        Some(out)
    }

    pub(super) fn table<'a, 'i>(
        &mut self,
        value: &'a Item<'i>,
        place: &str,
        example: &str,
    ) -> Option<&'a DeTable<'i>> {
        match value.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.problem(
                    value.span(),
                    format!(
                        "{place} must be a table, such as {example}, not {}",
                        other.type_str()
                    ),
                );
                None
            }
        }
    }
}

/// A key as it would be written in a dotted path.
pub(super) fn display_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}
