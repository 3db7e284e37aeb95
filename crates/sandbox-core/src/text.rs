//! Text the sandbox prints that came from the command or the file system.
//!
//! What the sandbox prints after a run is its own word, and a user trusts it.
//! A path, host name or reason the command chose may carry bytes a terminal
//! acts on: escape sequences (OSC titles and hyperlinks, cursor moves), a
//! carriage return that overwrites the line, a newline that adds a line of
//! the command's choosing, or bidirectional overrides that reorder what is
//! read. [`terminal_safe`] shows every such character escaped, so one printed
//! line is one line, and reads as what it holds.

use std::borrow::Cow;

/// `text` with every character a terminal would act on rather than show
/// written as a Rust escape (`\n`, `\u{1b}`): C0 and C1 controls and DEL, and
/// the Unicode characters that reorder or hide text (bidirectional marks,
/// embeddings, overrides and isolates, zero-width characters and fillers,
/// line and paragraph separators, tag characters, the byte-order mark). A backslash is doubled, so an escape in the output is
/// never the command's own text. Borrowed when nothing needs escaping.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether `c` is shown escaped by [`terminal_safe`].
fn needs_escape(c: char) -> bool {
    c == '\\'
        || c.is_control()
        || matches!(
            c,
            // Invisible or reordering: soft hyphen, Arabic letter mark,
            // Hangul fillers, zero-width and bidirectional marks, line and
            // paragraph separators, embeddings, overrides and isolates,
            // invisible operators, the byte-order mark, interlinear
            // annotations, tag characters.
            '\u{ad}'
                | '\u{61c}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{3164}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// `value` as JSON (`pretty`: indented) whose strings write every character
/// [`terminal_safe`] escapes as a `\uXXXX` escape (serde_json escapes only
/// the C0 controls, `"` and `\`): the same JSON value, and text a terminal
/// shows as it is, for records and events printed to stdout.
pub fn json_terminal_safe<T: serde::Serialize + ?Sized>(
    value: &T,
    pretty: bool,
) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(256);
    if pretty {
        let f = SafeStrings(serde_json::ser::PrettyFormatter::new());
        value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, f))?;
    } else {
        let f = SafeStrings(serde_json::ser::CompactFormatter);
        value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, f))?;
    }
    // serde_json writes UTF-8 only (its strings come from `str`).
    String::from_utf8(out).map_err(|e| serde::ser::Error::custom(e.to_string()))
}

/// A JSON formatter that writes what [`needs_escape`] in strings as
/// `\uXXXX` (a surrogate pair above U+FFFF) and is `F` otherwise. Written
/// here because serde_json has no option for it.
struct SafeStrings<F>(F);

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for SafeStrings<F> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut from = 0;
        for (at, c) in fragment.char_indices() {
            if needs_escape(c) {
                w.write_all(&fragment.as_bytes()[from..at])?;
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(w, "\\u{unit:04x}")?;
                }
                from = at + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[from..])
    }
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C1 controls, DEL and reordering marks come out escaped (the raw
    /// bytes never appear), the value reads back the same, and plain text
    /// (non-ASCII included) is written as serde_json writes it.
    #[test]
    fn json_for_a_terminal_escapes_what_a_terminal_acts_on_and_keeps_the_value() {
        let text = "a\u{9b}2J\u{7f}\u{202e}fdp\u{e0041}\u{1b}]0;x\u{7}\\ \"q\" ünï";
        let value = serde_json::json!({"path": text, "list": [text]});
        for pretty in [false, true] {
            let json = json_terminal_safe(&value, pretty).unwrap();
            assert!(
                !json
                    .chars()
                    .any(|c| c != '\n' && needs_escape(c) && c != '\\'),
                "{json}"
            );
            assert!(
                json.contains("\\u009b") && json.contains("\\u202e"),
                "{json}"
            );
            assert!(json.contains("\\udb40\\udc41"), "{json}");
            assert!(json.contains("ünï"), "{json}");
            let back: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(back, value);
        }
        // Nothing to escape: what serde_json writes.
        let plain = serde_json::json!({"a": [1, "b/ü"]});
        assert_eq!(
            json_terminal_safe(&plain, true).unwrap(),
            serde_json::to_string_pretty(&plain).unwrap()
        );
        assert_eq!(
            json_terminal_safe(&plain, false).unwrap(),
            plain.to_string()
        );
    }

    #[test]
    fn every_control_character_is_escaped_and_plain_text_is_borrowed() {
        for c in (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            let text = format!("a{c}b");
            let shown = terminal_safe(&text);
            assert!(
                !shown.chars().any(|s| s.is_control()),
                "{c:?} shown as {shown:?}"
            );
            assert!(shown.starts_with('a') && shown.ends_with('b'));
        }
        assert!(matches!(
            terminal_safe("/home/me/ws/ünïcode ok.txt"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn terminal_sequences_and_reordering_marks_are_neutralised() {
        assert_eq!(
            terminal_safe("x\x1b]0;owned\x07\r\nsandbox: all clear"),
            "x\\u{1b}]0;owned\\u{7}\\r\\nsandbox: all clear"
        );
        assert_eq!(terminal_safe("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(terminal_safe("a\u{202e}fdp.exe"), "a\\u{202e}fdp.exe");
        for c in [
            '\u{61c}',
            '\u{2028}',
            '\u{2029}',
            '\u{ad}',
            '\u{3164}',
            '\u{e0041}',
        ] {
            let text = format!("a{c}b");
            assert!(!terminal_safe(&text).contains(c), "{c:?}");
        }
        // The command's own backslash cannot pass for an escape.
        assert_eq!(terminal_safe("a\\nb\n"), "a\\\\nb\\n");
    }
}
