//! An incremental Server-Sent Events parser: feed it bytes as they arrive, take out complete
//! events. Handles `\n`, `\r\n` and `\r` line ends, multi-line `data:`, comments and `id:`.

/// One complete SSE event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Accumulates bytes and yields complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    current: SseEvent,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes held for the event not yet complete (its lines so far and a partial line): what
    /// a server that never ends a line or an event makes grow.
    pub fn pending_bytes(&self) -> usize {
        self.buffer.len() + self.current.data.len()
    }

    /// Add bytes; return the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some((line_end, next)) = find_line_end(&self.buffer) {
            let line: Vec<u8> = self.buffer[..line_end].to_vec();
            self.buffer.drain(..next);
            let line = String::from_utf8_lossy(&line);
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        events
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if !self.has_data && self.current.id.is_none() && self.current.event.is_none() {
                return None;
            }
            self.has_data = false;
            return Some(std::mem::take(&mut self.current));
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            "id" => self.current.id = Some(value.to_owned()),
            "event" => self.current.event = Some(value.to_owned()),
            _ => {}
        }
        None
    }
}

/// Position of the first line end and of the byte after it. A lone `\r` at the very end may
/// be the first half of `\r\n`, so it waits for more input.
fn find_line_end(buf: &[u8]) -> Option<(usize, usize)> {
    let i = buf.iter().position(|&b| b == b'\n' || b == b'\r')?;
    if buf[i] == b'\n' {
        return Some((i, i + 1));
    }
    match buf.get(i + 1) {
        Some(b'\n') => Some((i, i + 2)),
        Some(_) => Some((i, i + 1)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_and_line_ends_are_reassembled() {
        let mut parser = SseParser::new();
        let mut events = parser.feed(b"data: {\"a\"");
        assert!(events.is_empty(), "incomplete line yields nothing");
        events.extend(parser.feed(b":1}\r"));
        events.extend(
            parser.feed(b"\n\r\n: keep-alive\n\nid: 7\nevent: delta\ndata: x\ndata: y\n\n"),
        );
        assert_eq!(
            events,
            vec![
                SseEvent {
                    id: None,
                    event: None,
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    id: Some("7".into()),
                    event: Some("delta".into()),
                    data: "x\ny".into()
                },
            ]
        );
    }

    proptest::proptest! {
        /// Hostile or broken servers: any bytes (invalid UTF-8, NUL, lone `\r`, giant lines),
        /// cut anywhere, parse to the same events as when they come whole, without a panic.
        #[test]
        fn any_bytes_cut_anywhere_parse_the_same(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048),
            cuts in proptest::collection::vec(0usize..2048, 0..16),
        ) {
            let whole = SseParser::new().feed(&bytes);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut parser = SseParser::new();
            let mut pieces = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                pieces.extend(parser.feed(&bytes[from..cut]));
                from = cut;
            }
            proptest::prop_assert_eq!(pieces, whole);
        }

        #[test]
        fn well_formed_events_come_out_as_sent(
            data in proptest::collection::vec("[^\r\n]{0,40}", 1..5),
            id in proptest::option::of("[a-z0-9]{1,8}"),
        ) {
            let mut wire = String::new();
            if let Some(id) = &id {
                wire.push_str(&format!("id: {id}\r\n"));
            }
            for line in &data {
                wire.push_str(&format!("data: {line}\n"));
            }
            wire.push('\n');
            let events = SseParser::new().feed(wire.as_bytes());
            proptest::prop_assert_eq!(events.len(), 1);
            proptest::prop_assert_eq!(&events[0].data, &data.join("\n"));
            proptest::prop_assert_eq!(&events[0].id, &id);
        }
    }
}
