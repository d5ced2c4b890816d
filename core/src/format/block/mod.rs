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

use super::FORMAT_VERSION;
use super::escape::{needs_base64, push_attr, push_text, to_base64};
use tablevault_azure::table::{EdmValue, Entity, format_double};

const BLOCK_NS: &str = "urn:tablevault:format:1";
const ODATA_METADATA_NS: &str = "http://schemas.microsoft.com/ado/2007/08/dataservices/metadata";

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

mod decode;

pub use decode::{DecodedBlock, decode_block};

#[cfg(test)]
mod tests;
