//! The `connect` templates: `{name}` placeholders, `{{` and `}}` for braces, and the
//! placeholders a `connect` value may use (`{host}`, `{port}`, `{port:N}`).

/// Why a template does not expand.
#[derive(Debug, PartialEq, Eq)]
pub enum Placeholder {
    Unknown(String),
    Unclosed,
}

/// Expands `{name}` placeholders with `value`; `{{` and `}}` are literal braces.
pub fn expand(
    template: &str,
    mut value: impl FnMut(&str) -> Option<String>,
) -> Result<String, Placeholder> {
    let mut out = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => return Err(Placeholder::Unclosed),
                    }
                }
                out.push_str(&value(&name).ok_or(Placeholder::Unknown(name))?);
            }
            '}' => return Err(Placeholder::Unclosed),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// What a `connect` placeholder asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wanted {
    /// `{host}`.
    Host,
    /// `{port}`: the host port of the tcp ready port.
    ReadyPort,
    /// `{port:N}`: the host port of container port N.
    Port(u16),
}

pub(super) fn placeholder(text: &str) -> Option<Wanted> {
    match text {
        "host" => Some(Wanted::Host),
        "port" => Some(Wanted::ReadyPort),
        _ => {
            let n: u16 = text.strip_prefix("port:")?.parse().ok()?;
            (n > 0).then_some(Wanted::Port(n))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let v = |p: &str| (p == "host").then(|| "db".to_owned());
        assert_eq!(expand("{host}:{{x}}", v), Ok("db:{x}".to_owned()));
        assert_eq!(
            expand("{nope}", v),
            Err(Placeholder::Unknown("nope".into()))
        );
        assert_eq!(expand("{host", v), Err(Placeholder::Unclosed));
    }

    #[test]
    fn a_lone_closing_brace_is_unclosed() {
        let v = |_: &str| Some(String::new());
        assert_eq!(expand("a}b", v), Err(Placeholder::Unclosed));
        assert_eq!(
            expand("no placeholders", v),
            Ok("no placeholders".to_owned())
        );
        assert_eq!(expand("", v), Ok(String::new()));
    }

    #[test]
    fn the_placeholders_connect_knows() {
        assert_eq!(placeholder("host"), Some(Wanted::Host));
        assert_eq!(placeholder("port"), Some(Wanted::ReadyPort));
        assert_eq!(placeholder("port:5432"), Some(Wanted::Port(5432)));
        assert_eq!(placeholder("port:0"), None);
        assert_eq!(placeholder("port:x"), None);
        assert_eq!(placeholder("port:65536"), None);
        assert_eq!(placeholder("Host"), None);
        assert_eq!(placeholder(""), None);
    }
}
