//! The strict block decoder. A block comes from storage that someone else may have
//! written, so every structural rule and value is checked and any violation is an error
//! naming what is wrong. Nothing is returned unless the whole block decodes.

use std::borrow::Cow;
use std::collections::HashSet;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use quick_xml::events::{BytesStart, Event};
use tablevault_azure::table::{EdmType, EdmValue, Entity, MAX_BATCH_OPERATIONS, parse_double};

use crate::format::escape::from_base64;
use crate::format::{BLOCK_VERSION, FormatError};

/// The service allows 255 properties including the three system ones.
pub(super) const MAX_PROPERTIES: usize = 255;

/// A decoded block.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedBlock {
    /// The table the block was taken from.
    pub table: String,
    /// Its batches, in order; each is at most 100 entities of one PartitionKey.
    pub batches: Vec<Vec<Entity>>,
}

impl DecodedBlock {
    /// Number of entities in all batches.
    pub fn entity_count(&self) -> usize {
        self.batches.iter().map(Vec::len).sum()
    }
}

fn corrupt(msg: impl Into<String>) -> FormatError {
    FormatError::Corrupt(msg.into())
}

fn attr(e: &BytesStart<'_>, name: &[u8]) -> Result<Option<String>, FormatError> {
    for a in e.attributes() {
        let a = a.map_err(|err| corrupt(format!("bad attribute: {err}")))?;
        if a.key.as_ref() == name {
            let v = a
                .unescape_value()
                .map_err(|err| corrupt(format!("bad attribute value: {err}")))?;
            return Ok(Some(v.into_owned()));
        }
    }
    Ok(None)
}

/// Decodes and validates a whole block (already decompressed).
pub fn decode_block(xml: &[u8]) -> Result<DecodedBlock, FormatError> {
    let text = std::str::from_utf8(xml).map_err(|_| corrupt("block is not UTF-8"))?;
    // Blocks as tablevault writes them are read by a parser of exactly that layout, which
    // gives up (returning nothing) at the first thing it does not expect or any rule the
    // block breaks; everything else, errors included, is for the general XML reader.
    if let Some(block) = super::canonical::decode(text) {
        return Ok(block);
    }
    decode_xml(text)
}

/// [`decode_block`] with a general XML reader: any layout the format allows (other
/// whitespace, attribute order, references, comments), and the errors.
pub(crate) fn decode_xml(text: &str) -> Result<DecodedBlock, FormatError> {
    let mut reader = quick_xml::Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    let mut block: Option<DecodedBlock> = None;
    let mut declared: Option<(usize, usize)> = None;
    let mut finished = false;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| corrupt(format!("bad XML at byte {}: {e}", reader.error_position())))?;
        match event {
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_) => {}
            Event::Text(t) if t.iter().all(u8::is_ascii_whitespace) => {}
            Event::Start(e) if e.name().as_ref() == b"Block" && block.is_none() && !finished => {
                let version =
                    attr(&e, b"version")?.ok_or_else(|| corrupt("Block has no version"))?;
                if version != BLOCK_VERSION.to_string() {
                    return Err(FormatError::UnsupportedVersion(version));
                }
                let table = attr(&e, b"table")?.ok_or_else(|| corrupt("Block has no table"))?;
                block = Some(DecodedBlock {
                    table,
                    batches: Vec::new(),
                });
            }
            Event::Start(e) if e.name().as_ref() == b"Batch" && !finished && declared.is_none() => {
                let b = block
                    .as_mut()
                    .ok_or_else(|| corrupt("Batch outside Block"))?;
                b.batches.push(read_batch(&mut reader)?);
            }
            Event::Empty(e)
                if e.name().as_ref() == b"End"
                    && block.is_some()
                    && !finished
                    && declared.is_none() =>
            {
                let count = |n: &[u8]| -> Result<usize, FormatError> {
                    attr(&e, n)?
                        .ok_or_else(|| corrupt("End has no counts"))?
                        .parse()
                        .map_err(|_| corrupt("bad count in End"))
                };
                declared = Some((count(b"entities")?, count(b"batches")?));
            }
            Event::End(e) if e.name().as_ref() == b"Block" => finished = true,
            Event::Eof => break,
            Event::Start(e) | Event::Empty(e) => {
                return Err(corrupt(format!(
                    "unexpected element <{}>",
                    String::from_utf8_lossy(e.name().as_ref())
                )));
            }
            _ => return Err(corrupt("unexpected content outside batches")),
        }
    }
    let block = block.ok_or_else(|| corrupt("no Block element"))?;
    if !finished {
        return Err(corrupt("Block is not closed (truncated?)"));
    }
    let (ents, bats) = declared.ok_or_else(|| corrupt("Block has no End element (incomplete)"))?;
    if ents != block.entity_count() || bats != block.batches.len() {
        return Err(corrupt(format!(
            "Block declares {ents} entities in {bats} batches but holds {} in {}",
            block.entity_count(),
            block.batches.len()
        )));
    }
    Ok(block)
}

fn read_batch(reader: &mut quick_xml::Reader<&[u8]>) -> Result<Vec<Entity>, FormatError> {
    let mut entities: Vec<Entity> = Vec::new();
    let mut row_keys: HashSet<String> = HashSet::new();
    loop {
        match reader
            .read_event()
            .map_err(|e| corrupt(format!("bad XML: {e}")))?
        {
            Event::Text(t) if t.iter().all(u8::is_ascii_whitespace) => {}
            Event::Comment(_) => {}
            Event::Start(e) if e.name().as_ref() == b"entry" => {
                let entity = read_entry(reader, &e)?;
                if let Some(first) = entities.first()
                    && first.partition_key != entity.partition_key
                {
                    return Err(corrupt(format!(
                        "batch mixes PartitionKeys {:?} and {:?}",
                        first.partition_key, entity.partition_key
                    )));
                }
                if !row_keys.insert(entity.row_key.clone()) {
                    return Err(corrupt(format!(
                        "batch holds RowKey {:?} twice",
                        entity.row_key
                    )));
                }
                entities.push(entity);
                if entities.len() > MAX_BATCH_OPERATIONS {
                    return Err(corrupt(format!(
                        "batch holds more than {MAX_BATCH_OPERATIONS} entities"
                    )));
                }
            }
            Event::End(e) if e.name().as_ref() == b"Batch" => {
                if entities.is_empty() {
                    return Err(corrupt("empty batch"));
                }
                return Ok(entities);
            }
            Event::Eof => return Err(corrupt("Batch is not closed (truncated?)")),
            _ => return Err(corrupt("unexpected content in a Batch")),
        }
    }
}

/// Reads an element's text up to its end tag; `enc="base64"` is decoded.
/// Reads the named attributes of an element in one pass (unknown ones are ignored).
fn attrs<'e, const N: usize>(
    e: &'e BytesStart<'_>,
    names: [&[u8]; N],
) -> Result<[Option<std::borrow::Cow<'e, str>>; N], FormatError> {
    let mut out = [const { None }; N];
    for a in e.attributes() {
        let a = a.map_err(|err| corrupt(format!("bad attribute: {err}")))?;
        if let Some(i) = names.iter().position(|n| *n == a.key.as_ref()) {
            let v = a
                .unescape_value()
                .map_err(|err| corrupt(format!("bad attribute value: {err}")))?;
            out[i] = Some(v);
        }
    }
    Ok(out)
}

/// Whether an `enc` attribute asks for the base64 escape.
fn is_base64(enc: Option<&str>) -> Result<bool, FormatError> {
    match enc {
        None => Ok(false),
        Some("base64") => Ok(true),
        Some(other) => Err(corrupt(format!("unknown encoding {other:?}"))),
    }
}

fn read_value(
    reader: &mut quick_xml::Reader<&[u8]>,
    base64: bool,
    empty: bool,
) -> Result<String, FormatError> {
    let mut text = String::new();
    if !empty {
        loop {
            match reader
                .read_event()
                .map_err(|e| corrupt(format!("bad XML: {e}")))?
            {
                Event::Text(t) => text.push_str(
                    &t.unescape()
                        .map_err(|e| corrupt(format!("bad text: {e}")))?,
                ),
                Event::CData(t) => text
                    .push_str(std::str::from_utf8(&t).map_err(|_| corrupt("CDATA is not UTF-8"))?),
                Event::Comment(_) => {}
                Event::End(_) => break,
                Event::Eof => return Err(corrupt("value is not closed (truncated?)")),
                _ => return Err(corrupt("unexpected markup inside a value")),
            }
        }
    }
    if base64 {
        from_base64(&text).map_err(corrupt)
    } else {
        Ok(text)
    }
}

fn read_entry(
    reader: &mut quick_xml::Reader<&[u8]>,
    start: &BytesStart<'_>,
) -> Result<Entity, FormatError> {
    let [etag, etag64] = attrs(start, [b"m:etag", b"etag64"])?;
    let etag = match (etag, etag64) {
        (Some(e), None) => Some(e.into_owned()),
        (None, Some(b)) => Some(from_base64(&b).map_err(corrupt)?),
        (None, None) => None,
        (Some(_), Some(_)) => return Err(corrupt("entry has two etags")),
    };
    let mut pk: Option<String> = None;
    let mut rk: Option<String> = None;
    let mut timestamp: Option<String> = None;
    let mut properties: Vec<(String, EdmValue)> = Vec::new();
    let mut names: HashSet<String> = HashSet::new();
    loop {
        let (e, empty) = match reader
            .read_event()
            .map_err(|e| corrupt(format!("bad XML: {e}")))?
        {
            Event::Text(t) if t.iter().all(u8::is_ascii_whitespace) => continue,
            Event::Comment(_) => continue,
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(e) if e.name().as_ref() == b"entry" => break,
            Event::Eof => return Err(corrupt("entry is not closed (truncated?)")),
            _ => return Err(corrupt("unexpected content in an entry")),
        };
        let slot = match e.name().as_ref() {
            b"PartitionKey" => &mut pk,
            b"RowKey" => &mut rk,
            b"Timestamp" => &mut timestamp,
            b"P" => {
                let [n, n64, type_name, enc] = attrs(&e, [b"n", b"n64", b"m:type", b"enc"])?;
                let name = match (n, n64) {
                    (Some(n), None) => n.into_owned(),
                    (None, Some(b)) => from_base64(&b).map_err(corrupt)?,
                    _ => return Err(corrupt("property needs exactly one of n or n64")),
                };
                if name.is_empty()
                    || matches!(name.as_str(), "PartitionKey" | "RowKey" | "Timestamp")
                {
                    return Err(corrupt(format!("invalid property name {name:?}")));
                }
                let type_name =
                    type_name.ok_or_else(|| corrupt(format!("property {name:?} has no m:type")))?;
                let edm = EdmType::from_name(&type_name).ok_or_else(|| {
                    corrupt(format!("property {name:?} has unknown type {type_name:?}"))
                })?;
                let text = read_value(reader, is_base64(enc.as_deref())?, empty)?;
                let value = parse_value(edm, Cow::Owned(text))
                    .map_err(|why| corrupt(format!("property {name:?}: {why}")))?;
                // Entities usually have a few properties: a linear scan beats hashing
                // until there are many.
                let duplicate = if properties.len() < 16 {
                    properties.iter().any(|(n, _)| *n == name)
                } else {
                    if names.is_empty() {
                        names.extend(properties.iter().map(|(n, _)| n.clone()));
                    }
                    !names.insert(name.clone())
                };
                if duplicate {
                    return Err(corrupt(format!("property {name:?} appears twice")));
                }
                properties.push((name, value));
                if properties.len() > MAX_PROPERTIES {
                    return Err(corrupt("entry has more than 255 properties"));
                }
                continue;
            }
            other => {
                return Err(corrupt(format!(
                    "unexpected element <{}> in an entry",
                    String::from_utf8_lossy(other)
                )));
            }
        };
        if slot.is_some() {
            return Err(corrupt(format!(
                "entry has two <{}> elements",
                String::from_utf8_lossy(e.name().as_ref())
            )));
        }
        let [enc] = attrs(&e, [b"enc"])?;
        *slot = Some(read_value(reader, is_base64(enc.as_deref())?, empty)?);
    }
    Ok(Entity {
        partition_key: pk.ok_or_else(|| corrupt("entry has no PartitionKey"))?,
        row_key: rk.ok_or_else(|| corrupt("entry has no RowKey"))?,
        timestamp,
        etag,
        properties,
    })
}

/// Parses a property's text as its type. Strings take the text as it is (no copy when
/// it is owned already).
pub(super) fn parse_value(edm: EdmType, text: Cow<'_, str>) -> Result<EdmValue, String> {
    Ok(match edm {
        EdmType::String => EdmValue::String(text.into_owned()),
        EdmType::DateTime => EdmValue::DateTime(text.into_owned()),
        EdmType::Guid => EdmValue::Guid(text.into_owned()),
        EdmType::Boolean => EdmValue::Boolean(match &*text {
            "true" => true,
            "false" => false,
            other => return Err(format!("bad Boolean {other:?}")),
        }),
        EdmType::Int32 => EdmValue::Int32(text.parse().map_err(|_| format!("bad Int32 {text:?}"))?),
        EdmType::Int64 => EdmValue::Int64(text.parse().map_err(|_| format!("bad Int64 {text:?}"))?),
        EdmType::Double => {
            EdmValue::Double(parse_double(&text).ok_or_else(|| format!("bad Double {text:?}"))?)
        }
        EdmType::Binary => EdmValue::Binary(
            BASE64
                .decode(text.trim())
                .map_err(|e| format!("bad base64 in Binary: {e}"))?,
        ),
    })
}
