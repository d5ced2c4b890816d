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
//! This file writes blocks; [`decode`] reads them back and trusts nothing.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::BLOCK_VERSION;
use super::escape::{push_attr, push_attr_unchecked, push_base64, push_text};
use tablevault_azure::table::{EdmValue, Entity, write_double, write_int};

const BLOCK_NS: &str = "urn:tablevault:format:1";
const ODATA_METADATA_NS: &str = "http://schemas.microsoft.com/ado/2007/08/dataservices/metadata";

/// Writes the document prologue and the `<Block>` start tag.
pub(crate) fn write_header(out: &mut String, table: &str) {
    out.push_str("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<Block xmlns=\"");
    out.push_str(BLOCK_NS);
    out.push_str("\" xmlns:m=\"");
    out.push_str(ODATA_METADATA_NS);
    out.push_str(&format!("\" version=\"{BLOCK_VERSION}\" table=\""));
    push_attr_unchecked(out, table);
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

/// Writes `<name>value</name>`, or the base64 form if XML cannot carry the value.
fn write_element(out: &mut String, name: &str, value: &str) {
    out.push('<');
    out.push_str(name);
    write_text_content(out, value);
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

/// Closes a start tag and writes a string value: escaped text, or `enc="base64"` and the
/// base64 of its UTF-8 if XML cannot carry it.
fn write_text_content(out: &mut String, value: &str) {
    let mark = out.len();
    out.push('>');
    if !push_text(out, value) {
        out.truncate(mark);
        out.push_str(" enc=\"base64\">");
        push_base64(out, value);
    }
}

/// Writes ` name="value"`, or ` name64="base64"` if XML cannot carry the value.
fn write_attr(out: &mut String, name: &str, name64: &str, value: &str) {
    let mark = out.len();
    out.push(' ');
    out.push_str(name);
    out.push_str("=\"");
    if !push_attr(out, value) {
        out.truncate(mark);
        out.push(' ');
        out.push_str(name64);
        out.push_str("=\"");
        push_base64(out, value);
    }
    out.push('"');
}

fn write_entry(out: &mut String, e: &Entity) {
    out.push_str("<entry");
    if let Some(etag) = &e.etag {
        write_attr(out, "m:etag", "etag64", etag);
    }
    out.push('>');
    write_element(out, "PartitionKey", &e.partition_key);
    write_element(out, "RowKey", &e.row_key);
    if let Some(ts) = &e.timestamp {
        write_element(out, "Timestamp", ts);
    }
    for (name, value) in &e.properties {
        out.push_str("<P");
        write_attr(out, "n", "n64", name);
        out.push_str(" m:type=\"");
        out.push_str(value.edm_type().name());
        out.push('"');
        // Only strings can need escapes; the other values' text is plain ASCII.
        match value {
            EdmValue::String(s) | EdmValue::DateTime(s) | EdmValue::Guid(s) => {
                write_text_content(out, s)
            }
            EdmValue::Boolean(b) => {
                out.push('>');
                out.push_str(if *b { "true" } else { "false" });
            }
            EdmValue::Int32(i) => {
                out.push('>');
                write_int(out, i64::from(*i));
            }
            EdmValue::Int64(i) => {
                out.push('>');
                write_int(out, *i);
            }
            EdmValue::Double(d) => {
                out.push('>');
                write_double(out, *d);
            }
            EdmValue::Binary(b) => {
                out.push('>');
                BASE64.encode_string(b, out);
            }
        }
        out.push_str("</P>");
    }
    out.push_str("</entry>\n");
}

mod canonical;
mod decode;

pub use decode::{DecodedBlock, decode_block};
#[cfg(test)]
pub(crate) use {canonical::decode as decode_canonical, decode::decode_xml};

#[cfg(test)]
mod tests;
