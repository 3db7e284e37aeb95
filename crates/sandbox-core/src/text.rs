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

#[cfg(test)]
mod tests {
    use super::*;

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
