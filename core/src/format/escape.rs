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
#[cfg(test)]
pub fn needs_base64(s: &str) -> bool {
    let mut scratch = String::new();
    !push_checked(&mut scratch, s, &TEXT, true)
}

/// Byte classes of [`push_checked`]: copied, escaped, or possibly a character XML cannot
/// carry (the C0 controls but tab, LF and CR are single bytes, and U+FFFE/U+FFFF are
/// EF BF BE/BF; no other character XML refuses can be in a `str`).
const PLAIN: u8 = 0;
const ESCAPE: u8 = 1;
const SUSPECT: u8 = 2;

/// Element text escapes markup and CR; attribute values also `"` and the whitespace a
/// parser would normalise.
static TEXT: [u8; 256] = classes(b"&<>\r");
static ATTRIBUTE: [u8; 256] = classes(b"&<>\r\"\n\t");

const fn classes(escaped: &[u8]) -> [u8; 256] {
    let mut t = [PLAIN; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = SUSPECT;
        b += 1;
    }
    t[0xef] = SUSPECT;
    t[b'\t' as usize] = PLAIN;
    t[b'\n' as usize] = PLAIN;
    let mut i = 0;
    while i < escaped.len() {
        t[escaped[i] as usize] = ESCAPE;
        i += 1;
    }
    t
}

fn reference(b: u8) -> &'static str {
    match b {
        b'&' => "&amp;",
        b'<' => "&lt;",
        b'>' => "&gt;",
        b'"' => "&quot;",
        b'\r' => "&#13;",
        b'\n' => "&#10;",
        b'\t' => "&#9;",
        _ => unreachable!("only these bytes are escaped"),
    }
}

/// Appends `s` escaped as `classes` says, or, if XML cannot carry it and `check` is set,
/// leaves `out` as it was and returns false. Only ASCII bytes are escaped, so every split
/// point is a character boundary.
fn push_checked(out: &mut String, s: &str, classes: &[u8; 256], check: bool) -> bool {
    let mark = out.len();
    out.reserve(s.len());
    let bytes = s.as_bytes();
    let mut clean = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match classes[usize::from(b)] {
            PLAIN => {}
            ESCAPE => {
                out.push_str(&s[clean..i]);
                out.push_str(reference(b));
                clean = i + 1;
            }
            _ => {
                if check
                    && (b != 0xef
                        || (bytes.get(i + 1) == Some(&0xbf)
                            && matches!(bytes.get(i + 2), Some(0xbe | 0xbf))))
                {
                    out.truncate(mark);
                    return false;
                }
            }
        }
    }
    out.push_str(&s[clean..]);
    true
}

/// Appends element text, escaping markup and CR; returns false, appending nothing, if
/// XML cannot carry the string (it needs the base64 escape).
pub fn push_text(out: &mut String, s: &str) -> bool {
    push_checked(out, s, &TEXT, true)
}

/// Appends an attribute value (to be wrapped in double quotes), escaping markup and all
/// whitespace a parser would normalise; returns false, appending nothing, if XML cannot
/// carry the string (it needs the base64 escape).
pub fn push_attr(out: &mut String, s: &str) -> bool {
    push_checked(out, s, &ATTRIBUTE, true)
}

/// [`push_attr`] whatever the string holds (characters XML cannot carry are written as
/// they are, and a reader refuses them).
pub fn push_attr_unchecked(out: &mut String, s: &str) {
    push_checked(out, s, &ATTRIBUTE, false);
}

/// Appends base64 of the UTF-8 bytes, for strings XML cannot carry.
pub fn push_base64(out: &mut String, s: &str) {
    BASE64.encode_string(s.as_bytes(), out);
}

/// Reverses [`push_base64`].
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
        for c in ['\u{0}', '\u{8}', '\u{B}', '\u{1F}', '\u{FFFE}', '\u{FFFF}'] {
            assert!(needs_base64(&format!("x{c}y")), "{c:?}");
        }
        for c in [
            '\t',
            '\u{7F}',
            '\u{FFFD}',
            '\u{EFFF}',
            '\u{FBFF}',
            '\u{10FFFF}',
        ] {
            assert!(!needs_base64(&format!("x{c}y")), "{c:?}");
        }
        assert!(!needs_base64("a\r\nb"));
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #[test]
            fn byte_wise_checks_agree_with_the_char_production(
                s in proptest::collection::vec(
                    prop_oneof![
                        any::<char>(),
                        Just('\u{FFFE}'),
                        Just('\u{FFFF}'),
                        Just('\u{FFFD}'),
                        Just('\u{EFBF}'),
                        Just('\u{1}'),
                        Just('\r'),
                        Just('&'),
                    ],
                    0..12,
                ).prop_map(String::from_iter),
            ) {
                prop_assert_eq!(needs_base64(&s), !s.chars().all(is_xml_char));
            }
        }
    }

    #[test]
    fn escapes() {
        let mut t = String::new();
        assert!(push_text(&mut t, "a<b>&c\r\n\"d'\t"));
        assert_eq!(t, "a&lt;b&gt;&amp;c&#13;\n\"d'\t");
        let mut a = String::new();
        assert!(push_attr(&mut a, "a\"b\r\n\tc"));
        assert_eq!(a, "a&quot;b&#13;&#10;&#9;c");
        assert!(!push_text(&mut a, "a<\u{1}"));
        assert!(!push_attr(&mut a, "a<\u{FFFF}"));
        assert_eq!(a, "a&quot;b&#13;&#10;&#9;c", "nothing appended");
        let mut b = String::new();
        push_base64(&mut b, "x\u{0}y");
        assert_eq!(from_base64(&b).unwrap(), "x\u{0}y");
    }
}
