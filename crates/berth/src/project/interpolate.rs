//! Variable references in text, as Compose writes them in a Compose file and as berth.toml
//! writes them in an instance's `env` values and `command`.
//!
//! Compose's form: `$$` is `$`, `$VAR` and `${VAR}` a variable's value, `${VAR:-default}` /
//! `${VAR-default}` (when unset or empty / when unset), `${VAR:?message}` / `${VAR?message}` (an
//! error when unset or empty / when unset), `${VAR:+other}` / `${VAR+other}`. berth.toml's form
//! is the same with braces only: a `$` not followed by `{` or `$` is itself, so a shell's `$HOME`
//! in a command stays as written.
//!
//! Text is parsed once into [`Part`]s; nesting (a default that holds another reference) is
//! bounded, so a hostile file cannot take more than linear time or a deep stack.

/// How deep references may nest inside defaults.
pub const MAX_NESTING: usize = 8;

/// Which form the text is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A Compose file's: `$VAR` is a reference too.
    Compose,
    /// berth.toml's: only `${...}` is.
    Braces,
}

/// A piece of text: as written, or a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Var(Var),
}

/// `${NAME<op><word>}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Var {
    pub name: String,
    pub op: Op,
    /// The default, message or alternative.
    pub word: Vec<Part>,
}

/// What a reference does when its variable is unset (or empty, with `colon`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `${NAME}` or `$NAME`.
    Plain,
    /// `${NAME:-word}` / `${NAME-word}`.
    Default { colon: bool },
    /// `${NAME:?word}` / `${NAME?word}`.
    Required { colon: bool },
    /// `${NAME:+word}` / `${NAME+word}`.
    Alternate { colon: bool },
}

fn is_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses `text`; the error says what is wrong without quoting the text.
pub fn parse(text: &str, form: Form) -> Result<Vec<Part>, String> {
    parse_at(text, form, 0)
}

fn parse_at(text: &str, form: Form, depth: usize) -> Result<Vec<Part>, String> {
    if depth > MAX_NESTING {
        return Err(format!(
            "references nest more than {MAX_NESTING} deep inside defaults"
        ));
    }
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        literal.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(more) = after.strip_prefix('$') {
            literal.push('$');
            rest = more;
        } else if let Some(inner) = after.strip_prefix('{') {
            // The braces' end, counting nested `{...}` in a word.
            let mut depth_here = 1usize;
            let mut end = None;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth_here += 1,
                    '}' => {
                        depth_here -= 1;
                        if depth_here == 0 {
                            end = Some(i);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let end = end.ok_or("a `${` has no `}`")?;
            let body = &inner[..end];
            let name_end = body.find(|c: char| !is_name(c)).unwrap_or(body.len());
            let (name, op_text) = body.split_at(name_end);
            if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                return Err("a `${...}` does not start with a variable name".to_owned());
            }
            let (op, word) = if op_text.is_empty() {
                (Op::Plain, "")
            } else {
                let colon = op_text.starts_with(':');
                let t = op_text.strip_prefix(':').unwrap_or(op_text);
                let op = match t.chars().next() {
                    Some('-') => Op::Default { colon },
                    Some('?') => Op::Required { colon },
                    Some('+') => Op::Alternate { colon },
                    _ => {
                        return Err(format!(
                            "`${{{name}...}}` is not a substitution Compose knows (`:-`, `-`, `:?`, `?`, `:+`, `+`)"
                        ));
                    }
                };
                (op, &t[1..])
            };
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal)));
            }
            parts.push(Part::Var(Var {
                name: name.to_owned(),
                op,
                word: parse_at(word, form, depth + 1)?,
            }));
            rest = &inner[end + 1..];
        } else if form == Form::Compose
            && after.starts_with(|c: char| is_name(c) && !c.is_ascii_digit())
        {
            let name_end = after.find(|c: char| !is_name(c)).unwrap_or(after.len());
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal)));
            }
            parts.push(Part::Var(Var {
                name: after[..name_end].to_owned(),
                op: Op::Plain,
                word: Vec::new(),
            }));
            rest = &after[name_end..];
        } else {
            literal.push('$');
            rest = after;
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(Part::Text(literal));
    }
    Ok(parts)
}

/// The variables the text names, outermost first.
pub fn names(parts: &[Part]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in parts {
        if let Part::Var(v) = p {
            for n in std::iter::once(v.name.clone()).chain(names(&v.word)) {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
    }
    out
}

/// The text as berth.toml keeps it: with its references when a variable it names is set
/// (`lookup`: the shell's, `.env`'s), so that no value of them is written, or when one it uses
/// plainly is unset (it is for `berth up` to fill in); as its value when only defaults make it
/// (the file's own text). Answers the text and the variables unset; an error is a `?`
/// reference's.
pub fn for_berth(
    parts: &[Part],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Vec<String>), String> {
    let mut unset = Vec::new();
    let value = substitute(parts, lookup, &mut unset)?;
    let any_set = names(parts).iter().any(|n| lookup(n).is_some());
    if any_set || !unset.is_empty() {
        Ok((render(parts), unset))
    } else {
        Ok((value.replace('$', "$$"), unset))
    }
}

/// The text with each reference replaced: `lookup` gives a variable's value; a variable used
/// plainly and unset is added to `unset` and is empty. A `?` reference whose variable is unset is
/// an error with its message.
pub fn substitute(
    parts: &[Part],
    lookup: &dyn Fn(&str) -> Option<String>,
    unset: &mut Vec<String>,
) -> Result<String, String> {
    let mut out = String::new();
    for p in parts {
        match p {
            Part::Text(t) => out.push_str(t),
            Part::Var(v) => {
                let value = lookup(&v.name);
                let set = |colon: bool| value.as_ref().filter(|x| !(colon && x.is_empty()));
                let text = match v.op {
                    Op::Plain => match value {
                        Some(x) => x,
                        None => {
                            if !unset.contains(&v.name) {
                                unset.push(v.name.clone());
                            }
                            String::new()
                        }
                    },
                    Op::Default { colon } => match set(colon) {
                        Some(x) => x.clone(),
                        None => substitute(&v.word, lookup, unset)?,
                    },
                    Op::Required { colon } => match set(colon) {
                        Some(x) => x.clone(),
                        None => {
                            let message = substitute(&v.word, lookup, unset)?;
                            return Err(if message.is_empty() {
                                format!("{} must be set", v.name)
                            } else {
                                format!("{} must be set: {message}", v.name)
                            });
                        }
                    },
                    Op::Alternate { colon } => match set(colon) {
                        Some(_) => substitute(&v.word, lookup, unset)?,
                        None => String::new(),
                    },
                };
                out.push_str(&text);
            }
        }
    }
    Ok(out)
}

/// The text in berth.toml's form: its references as `${...}`, a `$` as `$$`.
pub fn render(parts: &[Part]) -> String {
    let mut out = String::new();
    for p in parts {
        match p {
            Part::Text(t) => out.push_str(&t.replace('$', "$$")),
            Part::Var(v) => {
                out.push_str("${");
                out.push_str(&v.name);
                let op = match v.op {
                    Op::Plain => "",
                    Op::Default { colon: true } => ":-",
                    Op::Default { colon: false } => "-",
                    Op::Required { colon: true } => ":?",
                    Op::Required { colon: false } => "?",
                    Op::Alternate { colon: true } => ":+",
                    Op::Alternate { colon: false } => "+",
                };
                out.push_str(op);
                out.push_str(&render(&v.word));
                out.push('}');
            }
        }
    }
    out
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

    fn compose(text: &str, unset: &mut Vec<String>) -> String {
        substitute(&parse(text, Form::Compose).unwrap(), &vars, unset).unwrap()
    }

    #[test]
    fn interpolation_follows_compose() {
        let mut unset = Vec::new();
        let i = compose;
        assert_eq!(i("${USER_SET}-$USER_SET", &mut unset), "alice-alice");
        assert_eq!(i("${NOPE:-dev}", &mut unset), "dev");
        assert_eq!(i("${EMPTY:-dev}/${EMPTY-dev}", &mut unset), "dev/");
        assert_eq!(i("${NOPE:-${USER_SET}}", &mut unset), "alice");
        assert_eq!(
            i("$$HOME costs $$5 or $5", &mut unset),
            "$HOME costs $5 or $5"
        );
        assert_eq!(i("${USER_SET:+on}${NOPE:+on}", &mut unset), "on");
        assert!(unset.is_empty());
        assert_eq!(i("a${NOPE}b", &mut unset), "ab");
        assert_eq!(unset, ["NOPE"]);
        let err = substitute(
            &parse("${NOPE:?give a password}", Form::Compose).unwrap(),
            &vars,
            &mut Vec::new(),
        );
        assert_eq!(err.unwrap_err(), "NOPE must be set: give a password");
        let err = substitute(
            &parse("${EMPTY:?}", Form::Compose).unwrap(),
            &vars,
            &mut Vec::new(),
        );
        assert_eq!(err.unwrap_err(), "EMPTY must be set");
        assert_eq!(i("${EMPTY?x}", &mut unset), "");
    }

    #[test]
    fn braces_form_leaves_a_shells_dollar() {
        let parts = parse("echo $HOME ${USER_SET} $${X}", Form::Braces).unwrap();
        assert_eq!(
            substitute(&parts, &vars, &mut Vec::new()).unwrap(),
            "echo $HOME alice ${X}"
        );
    }

    #[test]
    fn a_compose_reference_renders_as_berths() {
        let parts = parse("pre $$x $A ${B:-${C}} ${D?m}", Form::Compose).unwrap();
        assert_eq!(render(&parts), "pre $$x ${A} ${B:-${C}} ${D?m}");
        let again = parse(&render(&parts), Form::Braces).unwrap();
        assert_eq!(render(&again), render(&parts));
    }

    #[test]
    fn berth_keeps_references_to_what_is_set_and_the_files_own_defaults_as_values() {
        let f = |t: &str| for_berth(&parse(t, Form::Compose).unwrap(), &vars).unwrap();
        assert_eq!(f("${USER_SET:-x}"), ("${USER_SET:-x}".to_owned(), vec![]));
        assert_eq!(f("${NOPE:-dev}$$"), ("dev$$".to_owned(), vec![]));
        assert_eq!(
            f("a${NOPE}"),
            ("a${NOPE}".to_owned(), vec!["NOPE".to_owned()])
        );
        assert_eq!(
            names(&parse("${A:-${B}}", Form::Compose).unwrap()),
            ["A", "B"]
        );
    }

    #[test]
    fn bad_references_are_named_and_nesting_is_bounded() {
        assert!(parse("${A", Form::Compose).unwrap_err().contains("no `}`"));
        assert!(parse("${A*b}", Form::Compose).is_err());
        assert!(parse("${}", Form::Compose).is_err());
        let deep = format!("{}x{}", "${A:-".repeat(50), "}".repeat(50));
        assert!(parse(&deep, Form::Compose).unwrap_err().contains("nest"));
        let ok = format!("{}x{}", "${A:-".repeat(5), "}".repeat(5));
        assert!(parse(&ok, Form::Compose).is_ok());
    }
}
