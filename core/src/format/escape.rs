//! Writing text into XML so that any conformant parser reads back exactly the original
//! string.
//!
//! Two hazards: XML 1.0 cannot carry some characters at all (most C0 controls, U+FFFE,
//! U+FFFF), and parsers normalise line ends (CR, CRLF become LF) and, in attributes,
//! whitespace. Characters XML can carry are written with entity or character references
//! where a parser would otherwise change them (`&#13;` for CR; `&#9;`, `&#10;` in
//! attributes). A string containing a character XML cannot carry is written as base64 of
//! its UTF-8 bytes and marked as such (docs/FORMAT.md, "Escapes").

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

/// Whether XML 1.0 can carry the character (the `Char` production).
pub fn is_xml_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Whether the string needs the base64 escape.
pub fn needs_base64(s: &str) -> bool {
    !s.chars().all(is_xml_char)
}

/// Appends element text, escaping markup and CR.
pub fn push_text(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
}

/// Appends an attribute value (to be wrapped in double quotes), escaping markup and all
/// whitespace a parser would normalise.
pub fn push_attr(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\r' => out.push_str("&#13;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            c => out.push(c),
        }
    }
}

/// Base64 of the UTF-8 bytes, for strings XML cannot carry.
pub fn to_base64(s: &str) -> String {
    BASE64.encode(s.as_bytes())
}

/// Reverses [`to_base64`].
pub fn from_base64(s: &str) -> Result<String, String> {
    let bytes = BASE64
        .decode(s.trim())
        .map_err(|e| format!("bad base64: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "base64 text is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_xml_characters() {
        for ok in [
            'a', '\t', '\n', '\r', '\u{D7FF}', '\u{E000}', '\u{FFFD}', '😀',
        ] {
            assert!(is_xml_char(ok), "{ok:?}");
        }
        for bad in [
            '\u{0}', '\u{1}', '\u{B}', '\u{C}', '\u{1F}', '\u{FFFE}', '\u{FFFF}',
        ] {
            assert!(!is_xml_char(bad), "{bad:?}");
        }
        assert!(needs_base64("a\u{0}b"));
        assert!(!needs_base64("a\r\nb"));
    }

    #[test]
    fn escapes() {
        let mut t = String::new();
        push_text(&mut t, "a<b>&c\r\n\"d'\t");
        assert_eq!(t, "a&lt;b&gt;&amp;c&#13;\n\"d'\t");
        let mut a = String::new();
        push_attr(&mut a, "a\"b\r\n\tc");
        assert_eq!(a, "a&quot;b&#13;&#10;&#9;c");
        assert_eq!(from_base64(&to_base64("x\u{0}y")).unwrap(), "x\u{0}y");
    }
}
