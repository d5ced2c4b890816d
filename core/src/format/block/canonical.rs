//! A fast reader for blocks laid out exactly as [`super::write_batch`] and its siblings
//! write them: the same prologue, the same attribute order and quoting, one newline
//! between elements, only the references the writer emits.
//!
//! It either returns the block, having applied every rule of the general decoder
//! ([`super::decode::decode_xml`]), or `None` as soon as anything differs from that layout
//! or breaks a rule; the caller then reads the block with the general decoder, which
//! accepts every other layout and words the errors. So this reader decides nothing on its
//! own: for any input it returns nothing or exactly what the general decoder returns.

use std::borrow::Cow;

use tablevault_azure::table::{EdmType, EdmValue, Entity, MAX_BATCH_OPERATIONS};

use super::decode::{DecodedBlock, MAX_PROPERTIES, parse_value};
use super::{BLOCK_NS, ODATA_METADATA_NS};
use crate::format::BLOCK_VERSION;
use crate::format::escape::from_base64;

/// The block, if it is laid out as tablevault writes it and valid; otherwise `None`.
pub(crate) fn decode(text: &str) -> Option<DecodedBlock> {
    let mut r = Cursor { s: text, pos: 0 };
    r.eat("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<Block xmlns=\"")?;
    r.eat(BLOCK_NS)?;
    r.eat("\" xmlns:m=\"")?;
    r.eat(ODATA_METADATA_NS)?;
    r.eat("\" version=\"")?;
    r.eat(&BLOCK_VERSION.to_string())?;
    r.eat("\" table=\"")?;
    let table = r.attr_value()?.into_owned();
    r.eat(">\n")?;
    let mut batches: Vec<Vec<Entity>> = Vec::new();
    let mut entities = 0;
    // Capacity hints from the previous batch and entity: a block's rows look alike.
    let mut batch_hint = 0;
    let mut properties_hint = 0;
    while r.eat("<Batch>\n").is_some() {
        let mut batch: Vec<Entity> = Vec::with_capacity(batch_hint);
        // Whether the RowKeys so far ascend strictly (so are distinct) in byte order.
        let mut ascending = true;
        while r.at("<entry") {
            let entity = r.entry(properties_hint)?;
            properties_hint = entity.properties.len();
            if let Some(last) = batch.last() {
                if last.partition_key != entity.partition_key {
                    return None;
                }
                ascending &= last.row_key < entity.row_key;
            }
            batch.push(entity);
            if batch.len() > MAX_BATCH_OPERATIONS {
                return None;
            }
        }
        r.eat("</Batch>\n")?;
        if batch.is_empty() || (!ascending && has_duplicate_row_key(&batch)) {
            return None;
        }
        batch_hint = batch.len();
        entities += batch.len();
        batches.push(batch);
    }
    r.eat("<End entities=\"")?;
    let declared_entities = r.number()?;
    r.eat("\" batches=\"")?;
    let declared_batches = r.number()?;
    r.eat("\"/>\n</Block>\n")?;
    if r.pos != text.len() || declared_entities != entities || declared_batches != batches.len() {
        return None;
    }
    Some(DecodedBlock { table, batches })
}

fn has_duplicate_row_key(batch: &[Entity]) -> bool {
    let mut keys: Vec<&str> = batch.iter().map(|e| e.row_key.as_str()).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

/// Byte classes for [`Cursor::scan`].
const PLAIN: u8 = 0;
const END: u8 = 1;
const REFERENCE: u8 = 2;
const GIVE_UP: u8 = 3;

/// Element text ends at `<`; the writer escapes `>` and every control but tab and LF.
static TEXT: [u8; 256] = classes(b'<', b"\t\n");
/// An attribute value ends at `"`; the writer escapes `<`, `>` and every control.
static ATTRIBUTE: [u8; 256] = classes(b'"', b"");

const fn classes(end: u8, raw_controls: &[u8]) -> [u8; 256] {
    let mut t = [PLAIN; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = GIVE_UP;
        b += 1;
    }
    let mut i = 0;
    while i < raw_controls.len() {
        t[raw_controls[i] as usize] = PLAIN;
        i += 1;
    }
    t[b'<' as usize] = GIVE_UP;
    t[b'>' as usize] = GIVE_UP;
    t[b'&' as usize] = REFERENCE;
    t[end as usize] = END;
    t
}

/// The first position from `i` on whose eight-byte word holds a byte that is not plain
/// in either class table (a control, `<`, `>`, `&` or `"`): most of a long value is
/// skipped a word at a time, the rest byte by byte.
fn skip_plain_words(bytes: &[u8], mut i: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let x = u64::from_ne_bytes(chunk.try_into().expect("eight bytes"));
        // Bytes below 0x20 (the subtraction borrows into the high bit of those below
        // 0x80), or equal to one of the four.
        let special = (x.wrapping_sub(u64::from_ne_bytes([0x20; 8])) & !x & HIGHS)
            | has_zero(x ^ u64::from_ne_bytes([b'<'; 8]))
            | has_zero(x ^ u64::from_ne_bytes([b'>'; 8]))
            | has_zero(x ^ u64::from_ne_bytes([b'&'; 8]))
            | has_zero(x ^ u64::from_ne_bytes([b'"'; 8]));
        if special != 0 {
            break;
        }
        i += 8;
    }
    i
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a [u8] {
        &self.s.as_bytes()[self.pos..]
    }

    /// Whether the input continues with `lit`.
    fn at(&self, lit: &str) -> bool {
        self.rest().starts_with(lit.as_bytes())
    }

    /// Consumes `lit`, or `None` if the input does not continue with it.
    fn eat(&mut self, lit: &str) -> Option<()> {
        if self.at(lit) {
            self.pos += lit.len();
            Some(())
        } else {
            None
        }
    }

    /// A decimal count (ASCII digits only).
    fn number(&mut self) -> Option<usize> {
        let digits = self
            .rest()
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let n = self.s[self.pos..self.pos + digits].parse().ok()?;
        self.pos += digits;
        Some(n)
    }

    /// The run of bytes up to the byte `classes` marks as its end: where it ends and
    /// whether it holds references; `None` at a byte marked [`GIVE_UP`] or at the end of
    /// the input.
    fn scan(&self, classes: &[u8; 256]) -> Option<(usize, bool)> {
        let bytes = self.s.as_bytes();
        let mut i = self.pos;
        let mut references = false;
        loop {
            i = skip_plain_words(bytes, i);
            while i < bytes.len() && classes[usize::from(bytes[i])] == PLAIN {
                i += 1;
            }
            match classes[usize::from(*bytes.get(i)?)] {
                END => return Some((i, references)),
                REFERENCE => references = true,
                _ => return None,
            }
            i += 1;
        }
    }

    /// The text from here to `end`, with references resolved.
    fn take(&mut self, end: usize, references: bool, attribute: bool) -> Option<Cow<'a, str>> {
        let raw = &self.s[self.pos..end];
        self.pos = end;
        if references {
            unescape(raw, attribute).map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(raw))
        }
    }

    /// An attribute value up to and including its closing quote, with the references the
    /// writer emits resolved. Anything the writer escapes appearing raw gives up.
    fn attr_value(&mut self) -> Option<Cow<'a, str>> {
        let (end, references) = self.scan(&ATTRIBUTE)?;
        let value = self.take(end, references, true)?;
        self.pos += 1;
        Some(value)
    }

    /// Element text up to the next `<`, with the references the writer emits resolved.
    /// Anything the writer escapes appearing raw (CR, markup, other controls) gives up.
    fn text(&mut self) -> Option<Cow<'a, str>> {
        let (end, references) = self.scan(&TEXT)?;
        self.take(end, references, false)
    }

    /// The rest of a value element whose name has been read: an optional
    /// `enc="base64"`, the text, the end tag `</name>`.
    fn value(&mut self, name: &str) -> Option<Cow<'a, str>> {
        let base64 = if self.eat(" enc=\"base64\">").is_some() {
            true
        } else {
            self.eat(">")?;
            false
        };
        let text = self.text()?;
        self.eat("</")?;
        self.eat(name)?;
        self.eat(">")?;
        if base64 {
            from_base64(&text).ok().map(Cow::Owned)
        } else {
            Some(text)
        }
    }

    /// The value of an `m:type` attribute, up to and including its closing quote.
    fn edm_type(&mut self) -> Option<EdmType> {
        for t in [
            EdmType::String,
            EdmType::Int32,
            EdmType::Int64,
            EdmType::Double,
            EdmType::Boolean,
            EdmType::DateTime,
            EdmType::Guid,
            EdmType::Binary,
        ] {
            let name = t.name();
            if self.at(name) && self.rest().get(name.len()) == Some(&b'"') {
                self.pos += name.len() + 1;
                return Some(t);
            }
        }
        // Another spelling (references, say) is for the general reader to judge.
        None
    }

    fn key(&mut self, name: &str) -> Option<String> {
        self.eat("<")?;
        self.eat(name)?;
        self.value(name).map(Cow::into_owned)
    }

    fn entry(&mut self, properties_hint: usize) -> Option<Entity> {
        self.eat("<entry")?;
        let etag = if self.eat(" m:etag=\"").is_some() {
            Some(self.attr_value()?.into_owned())
        } else if self.eat(" etag64=\"").is_some() {
            Some(from_base64(&self.attr_value()?).ok()?)
        } else {
            None
        };
        self.eat(">")?;
        let partition_key = self.key("PartitionKey")?;
        let row_key = self.key("RowKey")?;
        let timestamp = if self.at("<Timestamp") {
            Some(self.key("Timestamp")?)
        } else {
            None
        };
        let mut properties: Vec<(String, EdmValue)> = Vec::with_capacity(properties_hint);
        loop {
            let name = if self.eat("<P n=\"").is_some() {
                self.attr_value()?.into_owned()
            } else if self.eat("<P n64=\"").is_some() {
                from_base64(&self.attr_value()?).ok()?
            } else {
                break;
            };
            if name.is_empty() || matches!(name.as_str(), "PartitionKey" | "RowKey" | "Timestamp") {
                return None;
            }
            self.eat(" m:type=\"")?;
            let edm = self.edm_type()?;
            let value = parse_value(edm, self.value("P")?).ok()?;
            properties.push((name, value));
            if properties.len() > MAX_PROPERTIES {
                return None;
            }
        }
        self.eat("</entry>\n")?;
        if has_duplicate_name(&properties) {
            return None;
        }
        Some(Entity {
            partition_key,
            row_key,
            timestamp,
            etag,
            properties,
        })
    }
}

fn has_duplicate_name(properties: &[(String, EdmValue)]) -> bool {
    if properties.len() < 16 {
        properties
            .iter()
            .enumerate()
            .any(|(i, (n, _))| properties[..i].iter().any(|(m, _)| m == n))
    } else {
        let mut names: Vec<&str> = properties.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        names.windows(2).any(|w| w[0] == w[1])
    }
}

/// Resolves the references the writer emits (`&amp;` `&lt;` `&gt;` `&#13;`, and in
/// attributes `&quot;` `&#10;` `&#9;`); any other reference gives up.
fn unescape(raw: &str, attribute: bool) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let r = &rest.as_bytes()[i..];
        let (c, len) = match r.get(1)? {
            b'a' if r.starts_with(b"&amp;") => ('&', 5),
            b'l' if r.starts_with(b"&lt;") => ('<', 4),
            b'g' if r.starts_with(b"&gt;") => ('>', 4),
            b'#' if r.starts_with(b"&#13;") => ('\r', 5),
            b'q' if attribute && r.starts_with(b"&quot;") => ('"', 6),
            b'#' if attribute && r.starts_with(b"&#10;") => ('\n', 5),
            b'#' if attribute && r.starts_with(b"&#9;") => ('\t', 4),
            _ => return None,
        };
        out.push(c);
        rest = &rest[i + len..];
    }
    out.push_str(rest);
    Some(out)
}
