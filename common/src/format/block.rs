//! One block: a self-contained XML document of batches of entries, and its strict decoder.
//!
//! ```xml
//! <?xml version="1.0" encoding="utf-8"?>
//! <Block xmlns="urn:tablevault:format:1" xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata" version="1" table="T">
//! <Batch>
//! <entry m:etag="W/&quot;datetime'…'&quot;"><PartitionKey>p</PartitionKey><RowKey>r</RowKey><Timestamp>2026-…Z</Timestamp><P n="Age" m:type="Edm.Int32">23</P></entry>
//! </Batch>
//! <End entities="1" batches="1"/>
//! </Block>
//! ```
//!
//! The counts come last so a block can be streamed through a compressor as its batches
//! close; a block without its `<End>` is incomplete.
//!
//! ```text
//! ```
//!
//! The decoder trusts nothing: a block comes from storage that someone else may have
//! written, so every structural rule and value is checked and any violation is an error
//! naming what is wrong. Nothing is returned unless the whole block decodes.

use std::collections::HashSet;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use quick_xml::events::{BytesStart, Event};

use super::escape::{from_base64, needs_base64, push_attr, push_text, to_base64};
use super::{FORMAT_VERSION, FormatError};
use crate::table::{EdmType, EdmValue, Entity, MAX_BATCH_OPERATIONS, format_double, parse_double};

const BLOCK_NS: &str = "urn:tablevault:format:1";
const ODATA_METADATA_NS: &str = "http://schemas.microsoft.com/ado/2007/08/dataservices/metadata";
/// The service allows 255 properties including the three system ones.
const MAX_PROPERTIES: usize = 255;

/// Writes the document prologue and the `<Block>` start tag.
pub(crate) fn write_header(out: &mut String, table: &str) {
    out.push_str("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<Block xmlns=\"");
    out.push_str(BLOCK_NS);
    out.push_str("\" xmlns:m=\"");
    out.push_str(ODATA_METADATA_NS);
    out.push_str(&format!("\" version=\"{FORMAT_VERSION}\" table=\""));
    push_attr(out, table);
    out.push_str("\">\n");
}

/// Writes the `<End>` element with the block's counts, and the `</Block>` end tag.
pub(crate) fn write_footer(out: &mut String, entities: usize, batches: usize) {
    out.push_str(&format!(
        "<End entities=\"{entities}\" batches=\"{batches}\"/>\n</Block>\n"
    ));
}

/// Writes one `<Batch>`: entities sharing a PartitionKey, at most 100.
pub(crate) fn write_batch(out: &mut String, entities: &[Entity]) {
    out.push_str("<Batch>\n");
    for e in entities {
        write_entry(out, e);
    }
    out.push_str("</Batch>\n");
}

fn write_element(out: &mut String, name: &str, extra_attrs: &str, value: &str) {
    out.push('<');
    out.push_str(name);
    out.push_str(extra_attrs);
    if needs_base64(value) {
        out.push_str(" enc=\"base64\">");
        out.push_str(&to_base64(value));
    } else {
        out.push('>');
        push_text(out, value);
    }
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

fn write_entry(out: &mut String, e: &Entity) {
    out.push_str("<entry");
    if let Some(etag) = &e.etag {
        if needs_base64(etag) {
            out.push_str(" etag64=\"");
            out.push_str(&to_base64(etag));
        } else {
            out.push_str(" m:etag=\"");
            push_attr(out, etag);
        }
        out.push('"');
    }
    out.push('>');
    write_element(out, "PartitionKey", "", &e.partition_key);
    write_element(out, "RowKey", "", &e.row_key);
    if let Some(ts) = &e.timestamp {
        write_element(out, "Timestamp", "", ts);
    }
    for (name, value) in &e.properties {
        let mut attrs = String::with_capacity(name.len() + 32);
        if needs_base64(name) {
            attrs.push_str(" n64=\"");
            attrs.push_str(&to_base64(name));
        } else {
            attrs.push_str(" n=\"");
            push_attr(&mut attrs, name);
        }
        attrs.push_str("\" m:type=\"");
        attrs.push_str(value.edm_type().name());
        attrs.push('"');
        let text: std::borrow::Cow<'_, str> = match value {
            EdmValue::String(s) | EdmValue::DateTime(s) | EdmValue::Guid(s) => s.into(),
            EdmValue::Boolean(b) => (if *b { "true" } else { "false" }).into(),
            EdmValue::Int32(i) => i.to_string().into(),
            EdmValue::Int64(i) => i.to_string().into(),
            EdmValue::Double(d) => format_double(*d).into(),
            EdmValue::Binary(b) => BASE64.encode(b).into(),
        };
        write_element(out, "P", &attrs, &text);
    }
    out.push_str("</entry>\n");
}

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
                if version != FORMAT_VERSION.to_string() {
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
                let value = parse_value(edm, text)
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

fn parse_value(edm: EdmType, text: String) -> Result<EdmValue, String> {
    Ok(match edm {
        EdmType::String => EdmValue::String(text),
        EdmType::DateTime => EdmValue::DateTime(text),
        EdmType::Guid => EdmValue::Guid(text),
        EdmType::Boolean => EdmValue::Boolean(match text.as_str() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(table: &str, batches: &[Vec<Entity>]) -> String {
        let mut body = String::new();
        for b in batches {
            write_batch(&mut body, b);
        }
        let mut out = String::new();
        write_header(&mut out, table);
        out.push_str(&body);
        write_footer(&mut out, batches.iter().map(Vec::len).sum(), batches.len());
        out
    }

    pub(crate) fn tricky_entity(pk: &str, rk: &str) -> Entity {
        let mut e = Entity::new(pk, rk)
            .with("Plain", EdmValue::String("hello".into()))
            .with(
                "Markup",
                EdmValue::String("<a href=\"x\">&amp;</a> ]]> '".into()),
            )
            .with("Cr", EdmValue::String("a\rb\r\nc\nd\te".into()))
            .with(
                "Controls",
                EdmValue::String("nul\u{0} bell\u{7} \u{FFFE}\u{FFFF} esc\u{1b}".into()),
            )
            .with("Empty", EdmValue::String(String::new()))
            .with("Spaces", EdmValue::String("  lead and trail  ".into()))
            .with("Astral", EdmValue::String("😀 𝔘".into()))
            .with("I64", EdmValue::Int64(i64::MIN))
            .with("I64Max", EdmValue::Int64(i64::MAX))
            .with("I32", EdmValue::Int32(i32::MIN))
            .with("NegZero", EdmValue::Double(-0.0))
            .with("Sub", EdmValue::Double(5e-324))
            .with("NaN", EdmValue::Double(f64::NAN))
            .with("Inf", EdmValue::Double(f64::INFINITY))
            .with("NInf", EdmValue::Double(f64::NEG_INFINITY))
            .with("Whole", EdmValue::Double(42.0))
            .with(
                "DT",
                EdmValue::DateTime("2024-01-02T03:04:05.1234567Z".into()),
            )
            .with(
                "G",
                EdmValue::Guid("c9da6455-213d-42c9-9a79-3e9149a57833".into()),
            )
            .with("Bin", EdmValue::Binary(vec![0, 1, 254, 255]))
            .with("BinEmpty", EdmValue::Binary(vec![]))
            .with("T", EdmValue::Boolean(true))
            .with("odd name\t\"<&>", EdmValue::Boolean(false))
            .with("ctl\u{1}name", EdmValue::Int32(1));
        e.timestamp = Some("2026-11-22T11:27:48.7518390Z".into());
        e.etag = Some("W/\"datetime'2026-11-22T11%3A27%3A48.7518390Z'\"".into());
        e
    }

    #[test]
    fn every_value_round_trips_exactly() {
        let batches = vec![
            vec![
                tricky_entity("p\r\n'\"", "r1"),
                tricky_entity("p\r\n'\"", "r2\u{0}"),
            ],
            vec![Entity::new("", ""), Entity::new("", "x")],
        ];
        let xml = encode("Tbl", &batches);
        let decoded = decode_block(xml.as_bytes()).unwrap();
        assert_eq!(decoded.table, "Tbl");
        assert_eq!(decoded.batches, batches);
        assert!(!xml.contains('\r'), "raw CR would be normalised by parsers");
    }

    fn assert_corrupt(xml: &str, why: &str) {
        match decode_block(xml.as_bytes()) {
            Err(FormatError::Corrupt(m)) => {
                assert!(m.contains(why), "{m:?} should mention {why:?}")
            }
            other => panic!("expected corruption ({why}), got {other:?}"),
        }
    }

    #[test]
    fn hostile_blocks_are_rejected_with_a_reason() {
        let head = r#"<Block version="1" table="T">"#;
        let end = |n: usize, b: usize| format!(r#"<End entities="{n}" batches="{b}"/></Block>"#);
        let e = |pk: &str, rk: &str| {
            format!("<entry><PartitionKey>{pk}</PartitionKey><RowKey>{rk}</RowKey></entry>")
        };
        assert_corrupt("", "no Block");
        assert_corrupt("not xml at all <", "");
        assert_corrupt(&format!("{head}<Batch>{}", e("p", "r")), "not closed");
        assert_corrupt(
            &format!(
                "{head}<Batch>{}{}</Batch>{}",
                e("p", "r"),
                e("q", "r"),
                end(2, 1)
            ),
            "mixes PartitionKeys",
        );
        assert_corrupt(
            &format!(
                "{head}<Batch>{}{}</Batch>{}",
                e("p", "r"),
                e("p", "r"),
                end(2, 1)
            ),
            "twice",
        );
        assert_corrupt(
            &format!("{head}<Batch></Batch>{}", end(0, 1)),
            "empty batch",
        );
        assert_corrupt(
            &format!("{head}<Batch>{}</Batch></Block>", e("p", "r")),
            "no End",
        );
        assert_corrupt(
            &format!("{head}<Batch>{}</Batch>{}", e("p", "r"), end(5, 1)),
            "declares 5 entities",
        );
        assert_corrupt(
            &format!(
                "{head}<End entities=\"0\" batches=\"0\"/><Batch>{}</Batch></Block>",
                e("p", "r")
            ),
            "unexpected element",
        );
        let many: String = (0..101).map(|i| e("p", &i.to_string())).collect();
        assert_corrupt(
            &format!("{head}<Batch>{many}</Batch></Block>"),
            "more than 100",
        );
        assert_corrupt(
            &format!("{head}<Batch><entry><RowKey>r</RowKey></entry></Batch></Block>"),
            "no PartitionKey",
        );
        assert_corrupt(
            &format!(
                r#"{head}<Batch><entry><PartitionKey>p</PartitionKey><RowKey>r</RowKey><P n="x" m:type="Edm.Int32">12a</P></entry></Batch></Block>"#
            ),
            "bad Int32",
        );
        assert_corrupt(
            &format!(
                r#"{head}<Batch><entry><PartitionKey>p</PartitionKey><RowKey>r</RowKey><P n="x" m:type="Edm.Decimal">1</P></entry></Batch></Block>"#
            ),
            "unknown type",
        );
        assert_corrupt(
            &format!(
                r#"{head}<Batch><entry><PartitionKey>p</PartitionKey><RowKey>r</RowKey><P n="x" m:type="Edm.Int32">1</P><P n="x" m:type="Edm.Int32">1</P></entry></Batch></Block>"#
            ),
            "twice",
        );
        assert_corrupt(&format!("{head}<Evil/></Block>"), "unexpected element");
        assert_corrupt(
            &format!("{head}<Batch>{}</Batch>{}<Block/>", e("p", "r"), end(1, 1)),
            "unexpected element",
        );
        assert!(matches!(
            decode_block(br#"<Block version="2" table="T"></Block>"#),
            Err(FormatError::UnsupportedVersion(v)) if v == "2"
        ));
        assert_corrupt(
            "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><Block version=\"1\" table=\"T\"><Batch><entry><PartitionKey>&a;</PartitionKey><RowKey>r</RowKey></entry></Batch></Block>",
            "",
        );
    }
}
