//! Bounds on a Compose file before a YAML parser sees it, checked in one pass over its text:
//! how deep its flow collections (`[`, `{`) and block collections (indentation, `- - -`) nest.
//! A real project's file nests a handful of levels; a hostile one nested thousands deep would
//! take the parser time and stack out of proportion to its size.

/// The deepest nesting read.
pub const MAX_DEPTH: usize = 64;
/// The widest indentation read, in columns.
pub const MAX_INDENT: usize = 512;

/// The first bound the text passes, as a sentence naming its line.
pub fn nesting_problem(text: &str) -> Option<String> {
    let mut flow = 0usize;
    let mut quote: Option<char> = None;
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if quote.is_none() && flow == 0 {
            let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
            if indent > MAX_INDENT {
                return Some(format!(
                    "line {line_no} is indented more than {MAX_INDENT} columns: berth reads Compose files nested at most {MAX_DEPTH} deep"
                ));
            }
            let mut rest = line.trim_start();
            let mut dashes = 0;
            while let Some(r) = rest
                .strip_prefix('-')
                .filter(|r| r.is_empty() || r.starts_with([' ', '\t']))
            {
                dashes += 1;
                rest = r.trim_start();
            }
            if dashes > MAX_DEPTH {
                return Some(format!(
                    "line {line_no} nests more than {MAX_DEPTH} lists: berth reads Compose files nested at most {MAX_DEPTH} deep"
                ));
            }
        }
        let mut prev = ' ';
        for c in line.chars() {
            match quote {
                Some(q) => {
                    if c == q {
                        quote = None;
                    }
                }
                None => match c {
                    '#' if prev == ' ' || prev == '\t' => break,
                    '"' | '\'' if flow > 0 || matches!(prev, ' ' | ':' | '[' | '{' | ',') => {
                        quote = Some(c)
                    }
                    '[' | '{' => {
                        flow += 1;
                        if flow > MAX_DEPTH {
                            return Some(format!(
                                "line {line_no} nests more than {MAX_DEPTH} `[` or `{{`: berth reads Compose files nested at most {MAX_DEPTH} deep"
                            ));
                        }
                    }
                    ']' | '}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            prev = c;
        }
        // A single-quoted or double-quoted scalar may span lines; a plain one does not.
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_nesting_is_refused_in_one_pass() {
        assert!(
            nesting_problem("services:\n  db:\n    image: \"a[{\"\n    x: [1, {a: 2}]\n").is_none()
        );
        let deep = format!("x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        assert!(
            nesting_problem(&deep)
                .unwrap()
                .contains("line 1 nests more than 64")
        );
        let dashes = format!("x:\n{}1\n", "- ".repeat(1000));
        assert!(
            nesting_problem(&dashes)
                .unwrap()
                .contains("line 2 nests more than 64 lists")
        );
        let indent = format!("x:\n{}y: 1\n", " ".repeat(1000));
        assert!(
            nesting_problem(&indent)
                .unwrap()
                .contains("indented more than 512")
        );
    }
}
