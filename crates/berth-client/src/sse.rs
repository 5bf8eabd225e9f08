//! A Server-Sent Events parser, as the HTML standard's event-stream interpretation has it:
//! lines end with CRLF, LF or CR (also split across chunks); a line starting with `:` is a
//! comment; `data` lines join with `\n`; an event is dispatched at a blank line, and only when
//! it has data; the last event id carries over to later events; a leading BOM is skipped; an
//! event not ended by a blank line when the stream ends is dropped.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field, `message` when absent.
    pub event: String,
    /// The `data` lines joined with `\n`.
    pub data: String,
    /// The last event id, as it stood when the event was dispatched.
    pub id: String,
}

/// Feeds bytes in, takes events out.
#[derive(Debug, Default)]
pub struct SseParser {
    /// An unfinished line.
    line: Vec<u8>,
    /// The previous chunk ended with CR: a LF at the start of the next one ends nothing.
    after_cr: bool,
    /// The stream's first bytes have been seen (for the BOM).
    started: bool,
    event: String,
    data: String,
    has_data: bool,
    last_id: String,
}

/// Bytes an unfinished line may hold before the stream is refused: far beyond any event berth
/// sends, small enough that a broken peer cannot grow it without end.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The stream broke the parser's one limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineTooLong;

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last event id seen so far (what a reconnect sends as `Last-Event-ID`).
    pub fn last_event_id(&self) -> &str {
        &self.last_id
    }

    /// Takes a chunk of the stream; returns the events it completes.
    pub fn feed(&mut self, mut chunk: &[u8]) -> Result<Vec<SseEvent>, LineTooLong> {
        let mut out = Vec::new();
        if !self.started && !chunk.is_empty() {
            // The BOM may be split across chunks only in theory; berth never sends one.
            if let Some(rest) = chunk.strip_prefix(b"\xEF\xBB\xBF") {
                chunk = rest;
            }
            self.started = true;
        }
        if self.after_cr && !chunk.is_empty() {
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
            self.after_cr = false;
        }
        while let Some(end) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&chunk[..end]);
            let line = std::mem::take(&mut self.line);
            self.process(&line, &mut out);
            let was_cr = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if was_cr {
                if chunk.is_empty() {
                    self.after_cr = true;
                } else if chunk[0] == b'\n' {
                    chunk = &chunk[1..];
                }
            }
        }
        if self.line.len() + chunk.len() > MAX_LINE_BYTES {
            return Err(LineTooLong);
        }
        self.line.extend_from_slice(chunk);
        Ok(out)
    }

    fn process(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                let event = std::mem::take(&mut self.event);
                out.push(SseEvent {
                    event: if event.is_empty() {
                        "message".to_owned()
                    } else {
                        event
                    },
                    data,
                    id: self.last_id.clone(),
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "id" if !value.contains('\0') => value.clone_into(&mut self.last_id),
            // `retry` and unknown fields change nothing this client uses.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_chunks(bytes: &[u8], size: usize) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(size) {
            out.extend(p.feed(chunk).unwrap());
        }
        out
    }

    fn ev(event: &str, data: &str, id: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.into(),
        }
    }

    #[test]
    fn every_line_ending_and_every_chunking_give_the_same_events() {
        let text = ": heartbeat\nevent: instance\nid: run-1\ndata: {\"a\":\ndata: 1}\n\n: another\n\ndata:x\nevent:resync\n\n";
        let expected = vec![
            ev("instance", "{\"a\":\n1}", "run-1"),
            ev("resync", "x", "run-1"),
        ];
        for ending in ["\n", "\r\n", "\r"] {
            let bytes = text.replace('\n', ending);
            for size in 1..=bytes.len() {
                assert_eq!(
                    parse_in_chunks(bytes.as_bytes(), size),
                    expected,
                    "ending {ending:?}, chunks of {size}"
                );
            }
        }
    }

    #[test]
    fn an_event_without_data_or_without_its_blank_line_is_not_dispatched() {
        assert_eq!(parse_in_chunks(b"event: x\nid: 7\n\ndata: late", 3), vec![]);
        // The id of a dataless event still carries over.
        assert_eq!(
            parse_in_chunks(b"id: 7\n\ndata: y\n\n", 4),
            vec![ev("message", "y", "7")]
        );
    }

    #[test]
    fn a_bom_a_colonless_field_and_a_bare_data_line_are_read_as_the_standard_says() {
        assert_eq!(
            parse_in_chunks(b"\xEF\xBB\xBFdata\ndata\n\n", 100),
            vec![ev("message", "\n", "")]
        );
        assert_eq!(
            parse_in_chunks(b"data:  two spaces\n\n", 100),
            vec![ev("message", " two spaces", "")]
        );
        // An id with NUL is ignored.
        assert_eq!(
            parse_in_chunks(b"id: a\0b\ndata: z\n\n", 100),
            vec![ev("message", "z", "")]
        );
    }

    #[test]
    fn a_line_without_end_is_bounded() {
        let mut p = SseParser::new();
        let big = vec![b'x'; MAX_LINE_BYTES];
        assert!(p.feed(&big).is_ok());
        assert_eq!(p.feed(b"x"), Err(LineTooLong));
    }
}
