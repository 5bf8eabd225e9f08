//! Output for people and for scripts: tables, marks and colors when stdout is a terminal, and
//! not a single control code when it is not.

use std::io::IsTerminal;

use berth_client::{InstanceState, InstanceView, StopReason, Timestamp};

/// How output is shaped.
#[derive(Debug, Clone, Copy)]
pub struct Ui {
    /// stdout is a terminal (and NO_COLOR is unset): colors and marks.
    pub color: bool,
    /// Both stdout and stderr are terminals: spinners may be drawn.
    pub live: bool,
}

impl Ui {
    pub fn new(json: bool) -> Ui {
        let stdout = std::io::stdout().is_terminal();
        let stderr = std::io::stderr().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Ui {
            color: stdout && !no_color,
            live: stdout && stderr && !json,
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    pub fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }

    pub fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }

    pub fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }

    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    /// `✔` in green on a terminal, `ok` otherwise.
    pub fn ok_mark(&self) -> String {
        if self.color {
            self.green("✔")
        } else {
            "ok".to_owned()
        }
    }

    /// `✘` in red on a terminal, `FAIL` otherwise.
    pub fn fail_mark(&self) -> String {
        if self.color {
            self.red("✘")
        } else {
            "FAIL".to_owned()
        }
    }

    /// A state's kind, colored by what it means.
    pub fn state(&self, kind: &str) -> String {
        match kind {
            "running" | "active" => self.green(kind),
            "failed" => self.red(kind),
            "starting" | "not-started" | "exited" | "fenced" => self.yellow(kind),
            _ => self.dim(kind),
        }
    }

    /// Prints a table: a header and rows, columns padded to their widest cell. A cell may be
    /// given a paint after padding, so colors never upset the alignment.
    pub fn table(&self, headers: &[&str], rows: &[Vec<Cell>]) {
        print!("{}", self.render_table(headers, rows));
    }

    pub fn render_table(&self, headers: &[&str], rows: &[Vec<Cell>]) -> String {
        let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
        for row in rows {
            for (i, cell) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(cell.text.chars().count());
                }
            }
        }
        let mut out = String::new();
        let line = |cells: Vec<String>, out: &mut String| {
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        };
        line(
            headers
                .iter()
                .enumerate()
                .map(|(i, h)| self.bold(&pad(h, widths[i], i + 1 == headers.len())))
                .collect(),
            &mut out,
        );
        for row in rows {
            line(
                row.iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let padded = pad(
                            &c.text,
                            widths.get(i).copied().unwrap_or(0),
                            i + 1 == row.len(),
                        );
                        match c.paint {
                            Paint::None => padded,
                            Paint::State => {
                                let rest = padded[c.text.len()..].to_owned();
                                format!("{}{rest}", self.state(&c.text))
                            }
                        }
                    })
                    .collect(),
                &mut out,
            );
        }
        out
    }
}

fn pad(text: &str, width: usize, last: bool) -> String {
    if last {
        return text.to_owned();
    }
    let n = text.chars().count();
    format!("{text}{}", " ".repeat(width.saturating_sub(n)))
}

/// How a table cell is colored.
#[derive(Debug, Clone, Copy)]
pub enum Paint {
    None,
    State,
}

/// One table cell.
#[derive(Debug, Clone)]
pub struct Cell {
    pub text: String,
    pub paint: Paint,
}

impl Cell {
    /// A cell showing `text` with its control characters escaped.
    pub fn plain(text: impl Into<String>) -> Cell {
        Cell {
            text: escape(&text.into()),
            paint: Paint::None,
        }
    }

    /// A state cell, colored by its kind.
    pub fn state(text: impl Into<String>) -> Cell {
        Cell {
            text: escape(&text.into()),
            paint: Paint::State,
        }
    }
}

/// `text` safe to print on a terminal: every control character (C0, DEL, C1), which could move
/// the cursor, recolor or rewrite the screen, break a table's lines or hide what follows, is
/// shown as its escape (`\u{1b}`) instead. Escaping twice changes nothing more. Text the daemon
/// sends that a caller chose (who stopped an instance, a domain's name, a failure message) is
/// shown through this.
pub fn escape(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The instance's state kind.
pub fn state_kind(instance: &InstanceView) -> &'static str {
    instance.state.kind()
}

/// When the instance entered its state (`since` or `at`).
pub fn state_time(instance: &InstanceView) -> Option<Timestamp> {
    instance.state.time()
}

/// A timestamp as milliseconds since the epoch (none before it).
pub fn millis(timestamp: Timestamp) -> Option<u128> {
    u128::try_from(timestamp.millis()).ok()
}

/// `12s ago`, `3m ago`, `2h ago`, `4d ago`; `-` for none.
pub fn ago(timestamp: Option<Timestamp>) -> String {
    let Some(t) = timestamp else {
        return "-".to_owned();
    };
    let d = Timestamp::now().since(t).as_secs();
    match d {
        0..60 => format!("{d}s ago"),
        60..3600 => format!("{}m ago", d / 60),
        3600..86400 => format!("{}h ago", d / 3600),
        _ => format!("{}d ago", d / 86400),
    }
}

/// A byte count for people: `812 B`, `4.0 KiB`, `12.3 MiB`.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// When the daemon's container engine does not answer: a sentence saying so, since when, and
/// that the state shown is the last one seen.
pub fn engine_note(instance: &InstanceView) -> Option<String> {
    instance.engine.as_ref().map(|_| {
        format!(
            "engine unreachable: {} is the last state berth saw",
            instance.state.kind()
        )
    })
}

/// The note of an instance whose worktree has ended: where it was, and what ends it for good.
pub fn worktree_note(instance: &InstanceView) -> Option<String> {
    let worktree = instance.worktree.as_ref()?;
    worktree.ended_at.map(|at| {
        format!(
            "its worktree {} was removed {}: `berth prune` archives it",
            escape(&worktree.path),
            ago(Some(at))
        )
    })
}

/// A frozen instance's note: since when, and what thaws it.
pub fn frozen_note(instance: &InstanceView) -> Option<String> {
    instance.frozen.as_ref().map(|f| {
        format!(
            "frozen {}: a connection, an exec or an up thaws it",
            ago(Some(f.since))
        )
    })
}

/// The daemon's container engine does not answer: what it met, and what happens next.
pub fn engine_away(away: &berth_client::EngineUnreachable) -> String {
    format!(
        "the daemon's container engine has not answered for {}: {}; berth acts again by \
         itself once it answers (check that Docker runs, or what DOCKER_HOST points the daemon at)",
        ago(Some(away.since)).trim_end_matches(" ago"),
        escape(&away.message)
    )
}

/// A word for the state with what it carries: `stopped (by ada)`, `failed: <message>`.
pub fn state_detail(instance: &InstanceView) -> String {
    match &instance.state {
        InstanceState::Stopped { reason, .. } => match reason {
            StopReason::Person { by } => format!("stopped by {}", escape(by)),
            StopReason::Idle => "stopped (idle)".to_owned(),
            StopReason::Unknown => "stopped".to_owned(),
        },
        InstanceState::Exited { exit_code, .. } => match exit_code {
            Some(code) => format!("exited with {code}; restarting"),
            None => "exited; restarting".to_owned(),
        },
        InstanceState::Failed { message, .. } => format!("failed: {}", escape(message)),
        other => other.kind().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_carry_no_control_codes_off_a_terminal() {
        let ui = Ui {
            color: false,
            live: false,
        };
        let out = ui.render_table(
            &["NAME", "STATE", "SINCE"],
            &[
                vec![
                    Cell::plain("db"),
                    Cell::state("running"),
                    Cell::plain("3s ago"),
                ],
                vec![
                    Cell::plain("cache"),
                    Cell::state("failed"),
                    Cell::plain("-"),
                ],
            ],
        );
        assert_eq!(
            out,
            "NAME   STATE    SINCE\ndb     running  3s ago\ncache  failed   -\n"
        );
        let ui = Ui { color: true, ..ui };
        let out = ui.render_table(
            &["A", "B"],
            &[vec![Cell::state("running"), Cell::plain("x")]],
        );
        assert!(out.contains("\x1b[32mrunning\x1b[0m  x"), "{out:?}");
    }

    #[test]
    fn what_a_caller_chose_is_shown_with_its_control_characters_escaped() {
        assert_eq!(escape("ada lovelace"), "ada lovelace");
        assert_eq!(
            escape("\x1b[31mred\x1b[0m\nnext\u{9b}2J\u{7f}"),
            "\\u{1b}[31mred\\u{1b}[0m\\u{a}next\\u{9b}2J\\u{7f}"
        );
        assert_eq!(escape(&escape("\x1b")), escape("\x1b"));
        let stopped: InstanceView = serde_json::from_value(serde_json::json!({
            "resourceInstanceId": "rin:00000000-0000-4000-8000-000000000000",
            "key": "db", "alias": "db", "worktreeKey": null, "specDigest": "sha256:x",
            "desired": "stopped", "stopReason": null,
            "state": {"kind": "stopped", "at": "2026-11-30T00:00:00.000Z",
                "reason": {"kind": "person", "by": "x\r\x1b]0;title\x07"}},
            "observedAt": "2026-11-30T00:00:00.000Z", "startedAt": null,
            "lastReachedAt": null, "volumes": []
        }))
        .unwrap();
        assert_eq!(
            state_detail(&stopped),
            "stopped by x\\u{d}\\u{1b}]0;title\\u{7}"
        );
        let cell = Cell::plain("a\tb");
        assert_eq!(cell.text, "a\\u{9}b");
    }

    #[test]
    fn sizes_read_as_people_count() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(bytes(12 * 1024 * 1024 + 300 * 1024), "12.3 MiB");
    }
}
