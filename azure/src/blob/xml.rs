//! Parsers for the Blob service's XML answers: container listings and block lists.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use quick_xml::events::Event;

use super::{BlobItem, BlockInfo, BlockList, ListPage};
use crate::error::{Error, Result};

/// A small pull parser helper: the text of the current element.
fn read_text(reader: &mut quick_xml::Reader<&[u8]>, op: &'static str) -> Result<String> {
    let mut out = String::new();
    loop {
        match reader.read_event() {
            Ok(Event::Text(t)) => out.push_str(
                &t.unescape()
                    .map_err(|e| Error::invalid_response(op, format!("bad XML text: {e}")))?,
            ),
            Ok(Event::CData(t)) => out.push_str(&String::from_utf8_lossy(&t)),
            Ok(Event::End(_)) => return Ok(out),
            Ok(Event::Eof) => return Err(Error::invalid_response(op, "unexpected end of XML")),
            Ok(Event::Start(_)) => {
                return Err(Error::invalid_response(op, "unexpected element in text"));
            }
            Ok(_) => {}
            Err(e) => return Err(Error::invalid_response(op, format!("bad XML: {e}"))),
        }
    }
}

pub(super) fn parse_list(op: &'static str, body: &[u8]) -> Result<ListPage> {
    let mut reader = quick_xml::Reader::from_reader(body);
    reader.config_mut().trim_text(true);
    let mut page = ListPage::default();
    let mut path: Vec<Vec<u8>> = Vec::new();
    let mut current: Option<BlobItem> = None;
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) => {
                let name = e.name().as_ref().to_vec();
                let parent = path.last().map(Vec::as_slice);
                match (parent, name.as_slice()) {
                    (Some(b"Blobs"), b"Blob") => {
                        current = Some(BlobItem {
                            name: String::new(),
                            content_length: 0,
                            etag: String::new(),
                            metadata: BTreeMap::new(),
                            last_modified: None,
                        });
                        path.push(name);
                    }
                    (Some(b"Blob"), b"Name") => {
                        let t = read_text(&mut reader, op)?;
                        if let Some(c) = current.as_mut() {
                            c.name = t;
                        }
                    }
                    (Some(b"Properties"), b"Etag") => {
                        let t = read_text(&mut reader, op)?;
                        if let Some(c) = current.as_mut() {
                            c.etag = t;
                        }
                    }
                    (Some(b"Properties"), b"Last-Modified") => {
                        let t = read_text(&mut reader, op)?;
                        if let Some(c) = current.as_mut() {
                            c.last_modified = httpdate::parse_http_date(t.trim()).ok();
                        }
                    }
                    (Some(b"Properties"), b"Content-Length") => {
                        let t = read_text(&mut reader, op)?;
                        if let Some(c) = current.as_mut() {
                            c.content_length = t.trim().parse().unwrap_or(0);
                        }
                    }
                    (Some(b"Metadata"), _) => {
                        let t = read_text(&mut reader, op)?;
                        if let Some(c) = current.as_mut() {
                            c.metadata
                                .insert(String::from_utf8_lossy(&name).to_ascii_lowercase(), t);
                        }
                    }
                    (Some(b"BlobPrefix"), b"Name") => {
                        page.prefixes.push(read_text(&mut reader, op)?);
                    }
                    (Some(b"EnumerationResults"), b"NextMarker") => {
                        let t = read_text(&mut reader, op)?;
                        page.next_marker = Some(t).filter(|s| !s.is_empty());
                    }
                    _ => path.push(name),
                }
            }
            Ok(Event::End(e)) => {
                if e.name().as_ref() == b"Blob" {
                    page.blobs.extend(current.take());
                }
                path.pop();
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => return Err(Error::invalid_response(op, format!("bad listing XML: {e}"))),
        }
    }
    Ok(page)
}

pub(super) fn parse_block_list(op: &'static str, body: &[u8]) -> Result<BlockList> {
    let mut reader = quick_xml::Reader::from_reader(body);
    reader.config_mut().trim_text(true);
    let mut list = BlockList::default();
    let mut committed = true;
    let mut id = String::new();
    let mut size = 0u64;
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) => match e.name().as_ref() {
                b"CommittedBlocks" => committed = true,
                b"UncommittedBlocks" => committed = false,
                b"Name" => {
                    let raw = read_text(&mut reader, op)?;
                    let bytes = BASE64
                        .decode(raw.trim())
                        .map_err(|_| Error::invalid_response(op, "block id is not base64"))?;
                    id = String::from_utf8_lossy(&bytes).into_owned();
                }
                b"Size" => size = read_text(&mut reader, op)?.trim().parse().unwrap_or(0),
                _ => {}
            },
            Ok(Event::End(e)) if e.name().as_ref() == b"Block" => {
                let b = BlockInfo {
                    id: std::mem::take(&mut id),
                    size,
                };
                if committed {
                    list.committed.push(b);
                } else {
                    list.uncommitted.push(b);
                }
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => {
                return Err(Error::invalid_response(
                    op,
                    format!("bad block list XML: {e}"),
                ));
            }
        }
    }
    Ok(list)
}
