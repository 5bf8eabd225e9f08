//! The exec frame: the one JSON line that opens the raw exec route's body, before the command's
//! stdin. Decoded strictly; a refusal names the place and never quotes argv (it may hold a
//! secret).

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decode::{Problems, pattern};

/// The longest frame line, in bytes, without its newline.
pub const MAX_FRAME_BYTES: usize = 64 * 1024;
/// The timeout berth's own clients send when their user gives none: ten minutes.
pub const DEFAULT_TIMEOUT_MS: i64 = 10 * 60_000;
/// The longest timeout: six hours.
pub const MAX_TIMEOUT_MS: i64 = 6 * 60 * 60_000;
/// The most arguments.
pub const MAX_ARGS: usize = 4096;
/// The most bytes kept of each of stdout and stderr.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

static USER: LazyLock<Regex> = LazyLock::new(|| pattern(r"^[A-Za-z0-9._:-]{1,64}$"));

/// An exec frame: the first line of an exec request's body, as a client sends it and the daemon
/// decodes it ([`decode_frame`], which holds it to the limits below).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecFrame {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// The user (name, uid or uid:gid) to run as, or the image's.
    pub user: Option<String>,
    /// Killed after this many milliseconds.
    pub timeout_ms: i64,
}

/// How an exec ended (`resourceInstanceExecResultSchema`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    /// Null when the command was killed at its timeout.
    pub exit_code: Option<i64>,
    /// The tail of stdout, at most 1 MiB.
    pub stdout: String,
    /// The tail of stderr, at most 1 MiB.
    pub stderr: String,
    /// Whether either output was cut to its tail.
    pub truncated: bool,
    /// Whether the command was killed at its timeout.
    pub timed_out: bool,
}

/// Decodes a frame line (without its newline).
pub fn decode_frame(line: &[u8]) -> Result<ExecFrame, Problems> {
    let mut p = Problems::default();
    let value: Value = match crate::decode::parse_json(line, "frame") {
        Ok(v) => v,
        Err(crate::decode::ParseError::Syntax { line, column }) => {
            p.push(
                "frame",
                &format!("must be one line of JSON (line {line}, column {column})"),
            );
            return Err(p);
        }
        Err(crate::decode::ParseError::DuplicateKey { place }) => {
            p.push(&place, "has a duplicate key");
            return Err(p);
        }
    };
    let frame = (|| {
        let mut fields = p.object(&value, "frame")?;
        let argv = fields.required(&mut p, "argv").and_then(|v| {
            let items = p.array(v, "frame.argv")?;
            if items.is_empty() || items.len() > MAX_ARGS {
                p.push("frame.argv", &format!("must have 1 to {MAX_ARGS} items"));
                return None;
            }
            let args: Vec<Option<String>> = items
                .iter()
                .enumerate()
                .map(|(i, a)| p.argument(a, &format!("frame.argv[{i}]")))
                .collect();
            args.into_iter().collect::<Option<Vec<_>>>()
        });
        let user = fields.required(&mut p, "user").and_then(|v| match v {
            Value::Null => Some(None),
            v => p
                .matching(v, "frame.user", &USER, "must be a user, or null")
                .map(Some),
        });
        let timeout_ms = fields
            .required(&mut p, "timeoutMs")
            .and_then(|v| p.integer(v, "frame.timeoutMs", 1000, MAX_TIMEOUT_MS));
        fields.finish(&mut p);
        Some(ExecFrame {
            argv: argv?,
            user: user?,
            timeout_ms: timeout_ms?,
        })
    })();
    p.finish(frame)
}

/// The `Upgrade` protocol of an exec on a terminal (`POST .../exec/tty`).
pub const TTY_PROTOCOL: &str = "berth-tty";
/// On the upgraded connection, each message is a kind (one byte), a length (four bytes, big
/// endian) and that many bytes. From the client: keystrokes.
pub const TTY_INPUT: u8 = 0;
/// From the client: the terminal's new size, columns then rows (two bytes each, big endian).
pub const TTY_RESIZE: u8 = 1;
/// From the daemon: what the terminal shows.
pub const TTY_OUTPUT: u8 = 0;
/// From the daemon, last: how the command ended, as the JSON of a [`TtyExit`].
pub const TTY_EXIT: u8 = 2;
/// The longest message's bytes, either way.
pub const MAX_TTY_MESSAGE: usize = 64 * 1024;

/// What opens an exec on a terminal: the request's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TtyFrame {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// The user (name, uid or uid:gid) to run as, or the image's.
    pub user: Option<String>,
    /// The terminal's columns (1 to 1000).
    pub cols: u16,
    /// The terminal's rows (1 to 1000).
    pub rows: u16,
}

/// How a command on a terminal ended: the last message of the connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TtyExit {
    /// Its exit code; null when the engine could not say.
    pub exit_code: Option<i64>,
}

/// Decodes a terminal's frame (the body of `POST .../exec/tty`), as strictly as an exec frame.
pub fn decode_tty_frame(body: &[u8]) -> Result<TtyFrame, Problems> {
    let mut p = Problems::default();
    let value: Value = match crate::decode::parse_json(body, "body") {
        Ok(v) => v,
        Err(crate::decode::ParseError::Syntax { line, column }) => {
            p.push(
                "body",
                &format!("must be JSON (line {line}, column {column})"),
            );
            return Err(p);
        }
        Err(crate::decode::ParseError::DuplicateKey { place }) => {
            p.push(&place, "has a duplicate key");
            return Err(p);
        }
    };
    let frame = (|| {
        let mut fields = p.object(&value, "body")?;
        let argv = fields.required(&mut p, "argv").and_then(|v| {
            let items = p.array(v, "body.argv")?;
            if items.is_empty() || items.len() > MAX_ARGS {
                p.push("body.argv", &format!("must have 1 to {MAX_ARGS} items"));
                return None;
            }
            let args: Vec<Option<String>> = items
                .iter()
                .enumerate()
                .map(|(i, a)| p.argument(a, &format!("body.argv[{i}]")))
                .collect();
            args.into_iter().collect::<Option<Vec<_>>>()
        });
        let user = fields.required(&mut p, "user").and_then(|v| match v {
            Value::Null => Some(None),
            v => p
                .matching(v, "body.user", &USER, "must be a user, or null")
                .map(Some),
        });
        let cols = fields
            .required(&mut p, "cols")
            .and_then(|v| p.integer(v, "body.cols", 1, 1000));
        let rows = fields
            .required(&mut p, "rows")
            .and_then(|v| p.integer(v, "body.rows", 1, 1000));
        fields.finish(&mut p);
        Some(TtyFrame {
            argv: argv?,
            user: user?,
            cols: u16::try_from(cols?).ok()?,
            rows: u16::try_from(rows?).ok()?,
        })
    })();
    p.finish(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_terminals_frame_decodes_and_its_size_is_bounded() {
        let f = decode_tty_frame(br#"{"argv":["sh"],"user":null,"cols":80,"rows":24}"#).unwrap();
        assert_eq!((f.argv, f.cols, f.rows), (vec!["sh".to_owned()], 80, 24));
        let e = decode_tty_frame(br#"{"argv":["sh"],"user":null,"cols":0,"rows":24}"#)
            .unwrap_err()
            .joined();
        assert!(e.contains("body.cols"), "{e}");
        let e = decode_tty_frame(br#"{"argv":["s3cret"],"user":null,"rows":24}"#)
            .unwrap_err()
            .joined();
        assert!(e.contains("body.cols") && !e.contains("s3cret"), "{e}");
    }

    #[test]
    fn a_valid_frame_decodes() {
        let f = decode_frame(
            br#"{"argv":["psql","-c","select 1"],"user":"postgres","timeoutMs":60000}"#,
        )
        .unwrap();
        assert_eq!(f.argv, vec!["psql", "-c", "select 1"]);
        assert_eq!(f.user.as_deref(), Some("postgres"));
        assert_eq!(f.timeout_ms, 60_000);
    }

    #[test]
    fn each_bad_field_is_refused_with_its_place_and_argv_is_never_quoted() {
        let cases: &[(&[u8], &str)] = &[
            (b"not json", "frame must be one line of JSON"),
            (b"[]", "frame must be an object"),
            (
                br#"{"argv":[],"user":null,"timeoutMs":1000}"#,
                "frame.argv must have 1 to 4096 items",
            ),
            (
                br#"{"argv":["a\u0000secret"],"user":null,"timeoutMs":1000}"#,
                "frame.argv[0] must not contain a NUL byte",
            ),
            (
                br#"{"argv":[5],"user":null,"timeoutMs":1000}"#,
                "frame.argv[0] must be a string",
            ),
            (
                br#"{"argv":["x"],"user":"a b","timeoutMs":1000}"#,
                "frame.user must be a user",
            ),
            (
                br#"{"argv":["x"],"user":null,"timeoutMs":999}"#,
                "frame.timeoutMs must be an integer between 1000 and 21600000",
            ),
            (
                br#"{"argv":["x"],"user":null,"timeoutMs":21600001}"#,
                "frame.timeoutMs must be an integer between 1000 and 21600000",
            ),
            (
                br#"{"argv":["x"],"user":null}"#,
                "frame.timeoutMs is missing",
            ),
            (
                br#"{"argv":["x"],"user":null,"timeoutMs":1000,"env":{}}"#,
                "frame.env is not an allowed key",
            ),
        ];
        for (line, expected) in cases {
            let problems = decode_frame(line).unwrap_err().joined();
            assert!(
                problems.contains(expected),
                "{problems:?} should contain {expected:?}"
            );
            assert!(!problems.contains("secret"));
        }
        let many = format!(
            r#"{{"argv":[{}],"user":null,"timeoutMs":1000}}"#,
            vec!["\"a\""; 4097].join(",")
        );
        assert!(
            decode_frame(many.as_bytes())
                .unwrap_err()
                .joined()
                .contains("1 to 4096")
        );
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_frame(&bytes);
        }

        #[test]
        fn any_argv_without_nul_round_trips(argv in proptest::collection::vec("[^\u{0}]{0,16}", 1..8), timeout in 1000i64..=MAX_TIMEOUT_MS) {
            let line = serde_json::json!({"argv": argv, "user": null, "timeoutMs": timeout}).to_string();
            let frame = decode_frame(line.as_bytes()).unwrap();
            prop_assert_eq!(frame.argv, argv);
            prop_assert_eq!(frame.timeout_ms, timeout);
        }
    }
}
