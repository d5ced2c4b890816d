//! A fast reader for Query Entities pages shaped as the service writes them: one object
//! whose members are scalars and a `value` array of flat entity objects, member names
//! without escapes, string escapes other than `\u`.
//!
//! It checks the whole body against the JSON grammar as strictly as serde_json does and
//! hands each entity's members to the decoder serde_json's path uses; at anything outside
//! that shape (or anything invalid) it gives up and returns `None`, and the caller reads
//! the body with serde_json, which accepts every other shape and words the errors. So for
//! any input it returns nothing or exactly what the serde_json path returns.

use std::borrow::Cow;

use super::Entity;
use super::decode::{EntityDecodeError, Members, decode_members};

/// The page's entities, or the first that could not be decoded; `None` to read the body
/// with serde_json instead.
pub(super) fn decode(text: &str) -> Option<Result<Vec<Entity>, EntityDecodeError>> {
    let mut r = Scanner {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    let mut entities = Vec::new();
    let mut error = None;
    let mut seen_value = false;
    r.whitespace();
    r.eat(b'{')?;
    r.whitespace();
    loop {
        let key = r.name()?;
        r.whitespace();
        r.eat(b':')?;
        r.whitespace();
        if key == "value" {
            if seen_value {
                return None;
            }
            seen_value = true;
            entities.reserve((text.len() / 256).min(1000));
            r.entities(&mut entities, &mut error)?;
        } else {
            r.scalar()?;
        }
        r.whitespace();
        if r.eat(b',').is_some() {
            r.whitespace();
            continue;
        }
        r.eat(b'}')?;
        break;
    }
    r.whitespace();
    if !seen_value || r.pos != text.len() {
        return None;
    }
    Some(match error {
        Some(e) => Err(e),
        None => Ok(entities),
    })
}

/// How a byte inside a JSON string is read.
const PLAIN: u8 = 0;
const QUOTE: u8 = 1;
const BACKSLASH: u8 = 2;
const CONTROL: u8 = 3;

static STRING: [u8; 256] = {
    let mut t = [PLAIN; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = CONTROL;
        b += 1;
    }
    t[b'"' as usize] = QUOTE;
    t[b'\\' as usize] = BACKSLASH;
    t
};

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        if self.bytes.get(self.pos) == Some(&b) {
            self.pos += 1;
            Some(())
        } else {
            None
        }
    }

    /// A string; returns its JSON text (quotes included) and whether it has escapes.
    /// Gives up at `\u` escapes and at anything JSON does not allow in a string.
    fn string(&mut self) -> Option<(&'a str, bool)> {
        let start = self.pos;
        self.eat(b'"')?;
        let mut escapes = false;
        loop {
            self.skip_plain();
            while STRING[usize::from(*self.bytes.get(self.pos)?)] == PLAIN {
                self.pos += 1;
            }
            match STRING[usize::from(self.bytes[self.pos])] {
                QUOTE => {
                    self.pos += 1;
                    return Some((&self.text[start..self.pos], escapes));
                }
                BACKSLASH => {
                    escapes = true;
                    match self.bytes.get(self.pos + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.pos += 2,
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    }

    /// Skips whole words of eight bytes none of which ends a string or needs a look
    /// (`"`, `\\`, controls): the bulk of long strings.
    fn skip_plain(&mut self) {
        const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
        const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
        let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
        while let Some(chunk) = self.bytes.get(self.pos..self.pos + 8) {
            let x = u64::from_ne_bytes(chunk.try_into().expect("eight bytes"));
            // A byte below 0x20 (x - 0x20 borrows into its high bit, for bytes below
            // 0x80), or equal to `"` or `\\`.
            let special = (x.wrapping_sub(u64::from_ne_bytes([0x20; 8])) & !x & HIGHS)
                | has_zero(x ^ u64::from_ne_bytes([b'"'; 8]))
                | has_zero(x ^ u64::from_ne_bytes([b'\\'; 8]));
            if special != 0 {
                return;
            }
            self.pos += 8;
        }
    }

    /// A member name without escapes.
    fn name(&mut self) -> Option<&'a str> {
        match self.string()? {
            (raw, false) => Some(&raw[1..raw.len() - 1]),
            _ => None,
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// A number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        if self.eat(b'0').is_none() && self.digits() == 0 {
            return None;
        }
        if self.eat(b'.').is_some() && self.digits() == 0 {
            return None;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.pos) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Some(())
        } else {
            None
        }
    }

    /// A string, number, `true`, `false` or `null`; its JSON text. Gives up at objects
    /// and arrays.
    fn scalar(&mut self) -> Option<&'a str> {
        let start = self.pos;
        match self.bytes.get(self.pos)? {
            b'"' => {
                self.string()?;
            }
            b'-' | b'0'..=b'9' => self.number()?,
            b't' => self.literal("true")?,
            b'f' => self.literal("false")?,
            b'n' => self.literal("null")?,
            _ => return None,
        }
        Some(&self.text[start..self.pos])
    }

    /// The `value` array. Each entity is decoded as it is read, until one fails; the
    /// rest is only checked.
    fn entities(
        &mut self,
        entities: &mut Vec<Entity>,
        error: &mut Option<EntityDecodeError>,
    ) -> Option<()> {
        let mut members: Members<'a> = Vec::new();
        self.eat(b'[')?;
        self.whitespace();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.members(&mut members)?;
            if error.is_none() {
                match decode_members(&members) {
                    Ok(e) => entities.push(e),
                    Err(e) => *error = Some(e),
                }
            }
            self.whitespace();
            if self.eat(b',').is_some() {
                self.whitespace();
                continue;
            }
            self.eat(b']')?;
            return Some(());
        }
    }

    /// One flat entity object into `members` (cleared first).
    fn members(&mut self, members: &mut Members<'a>) -> Option<()> {
        members.clear();
        self.eat(b'{')?;
        self.whitespace();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let name = self.name()?;
            self.whitespace();
            self.eat(b':')?;
            self.whitespace();
            let value = self.scalar()?;
            members.push((Cow::Borrowed(name), value));
            self.whitespace();
            if self.eat(b',').is_some() {
                self.whitespace();
                continue;
            }
            self.eat(b'}')?;
            return Some(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serde_json path alone.
    fn slow(text: &str) -> Result<Result<Vec<Entity>, EntityDecodeError>, String> {
        super::super::decode::decode_page_with_serde(text).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_service_pages_and_gives_up_on_anything_else() {
        let page = r#" {"odata.metadata":"m","value":[ {"odata.etag":"W/\"x\"","PartitionKey":"p","RowKey":"r","N":-1.5e3,"T":true,"Z":null,"S@odata.type":"Edm.String","S":"a\/\n"} , {"PartitionKey":"p","RowKey":"s"}],"n":0} "#;
        let fast = decode(page).expect("the service's shape");
        assert_eq!(Ok(fast), slow(page));
        for other in [
            r#"{"value":[{"PartitionKey":"p","RowKey":"r","X":"\u0041"}]}"#,
            r#"{"value":[{"PartitionKey":"p","RowKey":"r","X":[]}]}"#,
            r#"{"value":[{"Partition\nKey":"p"}]}"#,
            r#"{"value":[],"value":[]}"#,
            r#"{"values":[]}"#,
            r#"{"value":[{"PartitionKey":"p","RowKey":"r","X":01}]}"#,
            r#"{"value":[{"PartitionKey":"p","RowKey":"r","X":1.}]}"#,
            r#"{"value":[{"PartitionKey":"p","RowKey":"r","X":-}]}"#,
            r#"{"value":[{"PartitionKey":"p","RowKey":"r","X":1e}]}"#,
            r#"{"value":[{"PartitionKey":"p","RowKey":"r","X":tru}]}"#,
            r#"{"value":[{"PartitionKey":"p","RowKey":"r",}]}"#,
            r#"{"value":[{"PartitionKey":"p","RowKey":"r"},]}"#,
            r#"{"value":[{"PartitionKey":"p","RowKey":"r\x"}]}"#,
            "{\"value\":[{\"PartitionKey\":\"p\u{1}\",\"RowKey\":\"r\"}]}",
            r#"{"value":[]} x"#,
            r#"{"value":[]"#,
            "",
        ] {
            assert_eq!(decode(other), None, "{other}");
        }
        // serde_json's raw values carry no surrounding whitespace either, and strings
        // with escapes are read alike on both paths.
        let spaced = " {\"value\" : [ { \"PartitionKey\" : \"p\\u0041\" , \"RowKey\"\t:\n\"r\\\"\\\\\\/\\b\\f\\n\\r\\t\" , \"N\" : 12 , \"D\" : 1.5 } ] } ";
        assert_eq!(decode(spaced), None);
        let e = &slow(spaced).unwrap().unwrap()[0];
        assert_eq!(e.partition_key, "pA");
        assert_eq!(e.row_key, "r\"\\/\u{8}\u{c}\n\r\t");
        assert_eq!(e.get("N"), Some(&super::super::EdmValue::Int32(12)));
        assert_eq!(e.get("D"), Some(&super::super::EdmValue::Double(1.5)));
        let escaped = spaced.replace("\\u0041", "A");
        assert_eq!(decode(&escaped), Some(slow(spaced).unwrap()));
        // A page whose entity is wrong but whose JSON is fine gives the decode error.
        let wrong = r#"{"value":[{"PartitionKey":"p"},{"PartitionKey":"p","RowKey":"r"}]}"#;
        assert_eq!(
            decode(wrong).map(|r| r.map_err(|e| e.to_string())),
            Some(Err(
                "property \"RowKey\": missing from the entity".to_string()
            ))
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]

            /// Whatever the scanner reads, serde_json reads the same.
            #[test]
            fn the_scanner_agrees_with_serde_json(
                parts in proptest::collection::vec(
                    prop_oneof![
                        Just("{".to_string()), Just("}".to_string()), Just("[".to_string()),
                        Just("]".to_string()), Just(",".to_string()), Just(":".to_string()),
                        Just(" ".to_string()), Just("\"value\"".to_string()),
                        Just("\"PartitionKey\"".to_string()), Just("\"RowKey\"".to_string()),
                        Just("\"X@odata.type\"".to_string()), Just("\"Edm.Int64\"".to_string()),
                        Just("\"X\"".to_string()), Just("true".to_string()), Just("null".to_string()),
                        "-?[0-9]{0,3}(\\.[0-9]{0,2})?([eE][-+]?[0-9]{0,2})?",
                        "\"([a-z]|\\\\[\"\\\\/bfnrtux]|\\\\u00[0-9a-f]{2}|\u{1}|é){0,4}\"",
                    ],
                    0..40,
                ),
            ) {
                let text: String = parts.concat();
                if let Some(fast) = decode(&text) {
                    prop_assert_eq!(Ok(fast), slow(&text));
                }
            }

            /// Pages with a few bytes changed: whatever the scanner still reads, serde_json
            /// reads the same.
            #[test]
            fn damaged_pages_are_read_alike_or_left_to_serde_json(
                cuts in proptest::collection::vec(
                    (any::<prop::sample::Index>(), prop::sample::select(
                        &b" \t\n\r{}[],:\"\\/-+.0123456789eEtrufalsnbx\x01"[..]
                    )),
                    1..4,
                ),
            ) {
                let mut text = br#" {"odata.metadata":"m","value":[{"odata.etag":"W/\"x\"","PartitionKey":"p","RowKey":"r","N":-1.5e3,"T":true,"Z":null,"I@odata.type":"Edm.Int64","I":"12","S":"a\/\n"},{"PartitionKey":"p","RowKey":"s","D":0.25,"F":false}],"n":10} "#.to_vec();
                for (at, byte) in cuts {
                    let i = at.index(text.len());
                    text[i] = byte;
                }
                let text = String::from_utf8(text).unwrap();
                if let Some(fast) = decode(&text) {
                    prop_assert_eq!(Ok(fast), slow(&text));
                }
            }

            #[test]
            fn pages_of_entities_are_read_by_the_scanner(
                rows in proptest::collection::vec(("[a-z\"\\\\/\n]{0,6}", any::<i64>(), any::<bool>()), 0..5),
            ) {
                let values: Vec<String> = rows
                    .iter()
                    .enumerate()
                    .map(|(i, (s, n, b))| {
                        format!(
                            r#"{{"PartitionKey":"p","RowKey":"{i}","S":{},"N@odata.type":"Edm.Int64","N":"{n}","B":{b}}}"#,
                            serde_json::to_string(s).unwrap()
                        )
                    })
                    .collect();
                let text = format!(r#"{{"odata.metadata":"x","value":[{}]}}"#, values.join(","));
                let fast = decode(&text).expect("the service's shape");
                prop_assert_eq!(Ok(fast), slow(&text));
            }
        }
    }
}
