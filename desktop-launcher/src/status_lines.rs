//! The provider's status lines as they arrive (spec §Provider Protocol:
//! progress on stderr; §Provider Output Is Untrusted). Pure: stderr bytes
//! in, complete lines out, in order, each one shown once.
//!
//! Every complete, non-blank line is delivered, so two lines written
//! together (`created`, `started`) are both shown; a partial line waits for
//! its newline, or for the end of stderr. Bounds: a line is cut at
//! [`LINE_MAX_CHARS`] characters (the provider's own 240 plus its name
//! prefix fit), and a partial line longer than [`PARTIAL_MAX_BYTES`] is
//! taken as a line by itself, so a provider that never writes a newline
//! cannot grow the buffer. The caller redacts and sanitizes each line.

/// Longest status line shown, in characters.
pub const LINE_MAX_CHARS: usize = 300;
/// Longest partial line kept while waiting for its newline, in bytes.
pub const PARTIAL_MAX_BYTES: usize = 4096;

/// Splits a byte stream into status lines.
#[derive(Debug, Default)]
pub struct StatusLines {
    partial: Vec<u8>,
    last: Option<String>,
}

impl StatusLines {
    /// Feeds bytes; returns the lines they completed (blank ones and a
    /// repeat of the previous line skipped).
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                self.take(&mut out);
            } else {
                self.partial.push(b);
                if self.partial.len() >= PARTIAL_MAX_BYTES {
                    self.take(&mut out);
                }
            }
        }
        out
    }

    /// The end of the stream: the partial line, if any.
    pub fn finish(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        self.take(&mut out);
        out
    }

    fn take(&mut self, out: &mut Vec<String>) {
        let raw = std::mem::take(&mut self.partial);
        let text = String::from_utf8_lossy(&raw);
        let line = crate::response::truncate_chars(text.trim(), LINE_MAX_CHARS);
        if line.is_empty() || self.last.as_deref() == Some(line.as_str()) {
            return;
        }
        self.last = Some(line.clone());
        out.push(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_written_together_are_all_shown_in_order() {
        let mut s = StatusLines::default();
        assert_eq!(
            s.feed(b"p: pulled in 33ms\np: created\np: sta"),
            vec!["p: pulled in 33ms", "p: created"]
        );
        assert_eq!(s.feed(b"rted\r\n\n  \n"), vec!["p: started"]);
        assert_eq!(
            s.feed(b"p: started\n"),
            Vec::<String>::new(),
            "a repeat is shown once"
        );
        assert_eq!(s.feed(b"tail without newline"), Vec::<String>::new());
        assert_eq!(s.finish(), vec!["tail without newline"]);
        assert_eq!(s.finish(), Vec::<String>::new());
    }

    #[test]
    fn bounds_hold_for_long_lines_and_no_newline_at_all() {
        let mut s = StatusLines::default();
        let long = format!("{}\n", "é".repeat(1000));
        let lines = s.feed(long.as_bytes());
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].chars().count() <= LINE_MAX_CHARS + 1,
            "{}",
            lines[0].chars().count()
        );
        let flood = vec![b'x'; 3 * PARTIAL_MAX_BYTES];
        let lines = s.feed(&flood);
        assert_eq!(
            lines.len(),
            1,
            "cut into lines of the partial bound, repeats skipped"
        );
        assert!(s.partial.len() < PARTIAL_MAX_BYTES);
    }
}
