//! Azure Blob storage client for block blobs: containers, blocks with transactional MD5,
//! block lists with metadata and conditional create, ranged reads, listing with prefix,
//! delimiter and paging, properties and deletes.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use md5::{Digest, Md5};
use reqwest::Method;

use crate::Service;
use crate::config::{ConfigError, StorageAccount};
use crate::error::{Error, Result};
use crate::pipeline::{ClientOptions, Request, Response, ServiceClient, encode};

/// Conditions and metadata for writing a blob.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// `x-ms-meta-*` pairs. Names must be C# identifiers; values ASCII.
    pub metadata: Vec<(String, String)>,
    /// `Content-Type` of the blob.
    pub content_type: Option<String>,
    /// Create only: fail with `409 BlobAlreadyExists` if the blob exists (`If-None-Match: *`).
    pub if_none_match: bool,
    /// Replace only: fail with `412` (or `404`) if the blob does not exist (`If-Match: *`).
    pub if_exists: bool,
    /// Replace only the version with this ETag: fail with `412` if it changed, `404` if
    /// it is gone (`If-Match: ETAG`).
    pub if_match: Option<String>,
}

impl PutOptions {
    /// Options for a create-only write.
    pub fn create_only() -> Self {
        PutOptions {
            if_none_match: true,
            ..Self::default()
        }
    }
}

/// A blob's properties.
#[derive(Debug, Clone)]
pub struct BlobProperties {
    /// Size in bytes.
    pub content_length: u64,
    /// ETag.
    pub etag: String,
    /// Metadata, names lower-cased.
    pub metadata: BTreeMap<String, String>,
    /// When it was last written, by the service's clock (`None` when not known).
    pub last_modified: Option<std::time::SystemTime>,
}

/// One blob in a listing.
#[derive(Debug, Clone)]
pub struct BlobItem {
    /// Full name.
    pub name: String,
    /// Size in bytes.
    pub content_length: u64,
    /// ETag: changes with every write, so a reader can tell a blob was rewritten.
    pub etag: String,
    /// Metadata, names lower-cased (only when requested).
    pub metadata: BTreeMap<String, String>,
    /// When it was last written, by the service's clock (`None` when not known).
    pub last_modified: Option<std::time::SystemTime>,
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// Blobs on this page.
    pub blobs: Vec<BlobItem>,
    /// Virtual directories (with a delimiter).
    pub prefixes: Vec<String>,
    /// Marker for the next page.
    pub next_marker: Option<String>,
    /// The service's time when it answered (its `Date` header; the first page's, for a
    /// whole listing): a clock to judge blobs' times by that does not depend on this
    /// machine's.
    pub service_time: Option<std::time::SystemTime>,
}

/// A listing request.
#[derive(Debug, Clone, Default)]
pub struct ListOptions<'a> {
    /// Only names starting with this.
    pub prefix: Option<&'a str>,
    /// Group names at this delimiter into prefixes.
    pub delimiter: Option<&'a str>,
    /// Return metadata.
    pub include_metadata: bool,
    /// Page size (service maximum 5000).
    pub max_results: Option<u32>,
}

/// A block as listed by Get Block List.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    /// The block id (decoded).
    pub id: String,
    /// Its size.
    pub size: u64,
}

/// Committed and uncommitted blocks of a blob.
#[derive(Debug, Clone, Default)]
pub struct BlockList {
    /// In blob order.
    pub committed: Vec<BlockInfo>,
    /// Uploaded but not committed.
    pub uncommitted: Vec<BlockInfo>,
}

/// A client for one container.
#[derive(Clone)]
pub struct BlobClient {
    svc: ServiceClient,
    container: String,
}

/// Whether a container name is valid: 3-63 lower-case letters, digits and single hyphens.
pub fn is_valid_container_name(name: &str) -> bool {
    crate::queue::is_valid_queue_name(name)
}

fn content_md5(data: &[u8]) -> String {
    BASE64.encode(Md5::digest(data))
}

impl BlobClient {
    /// A client for `container` with default options.
    pub fn new(
        account: &StorageAccount,
        container: &str,
    ) -> std::result::Result<Self, ConfigError> {
        Self::with_options(account, container, &ClientOptions::default())
    }

    /// A client for `container` with explicit options.
    pub fn with_options(
        account: &StorageAccount,
        container: &str,
        options: &ClientOptions,
    ) -> std::result::Result<Self, ConfigError> {
        if !is_valid_container_name(container) {
            return Err(ConfigError::NotConfigured(format!(
                "{container:?} is not a valid container name (3-63 lower-case letters, digits and hyphens)"
            )));
        }
        Ok(BlobClient {
            svc: ServiceClient::new(account, Service::Blob, options)?,
            container: container.to_string(),
        })
    }

    /// The container's name.
    pub fn container(&self) -> &str {
        &self.container
    }

    /// The container's URL (no credentials).
    pub fn container_url(&self) -> String {
        format!(
            "{}/{}",
            self.svc.endpoint().as_str().trim_end_matches('/'),
            self.container
        )
    }

    fn blob_path(&self, op: &'static str, blob: &str) -> Result<String> {
        if blob.is_empty()
            || blob.len() > 1024
            || blob
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == "..")
        {
            return Err(Error::invalid_request(
                op,
                format!("{blob:?} is not a valid blob name"),
            ));
        }
        let encoded: Vec<String> = blob.split('/').map(encode).collect();
        Ok(format!("/{}/{}", self.container, encoded.join("/")))
    }

    /// Creates the container; `false` if it already existed.
    pub async fn create_container(&self) -> Result<bool> {
        let req = Request::new(
            "Create Container",
            Method::PUT,
            format!("/{}", self.container),
        )
        .query("restype", "container");
        match self.svc.send(req).await {
            Ok(_) => Ok(true),
            Err(e) if e.has_code("ContainerAlreadyExists") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes the container and everything in it.
    pub async fn delete_container(&self) -> Result<()> {
        let req = Request::new(
            "Delete Container",
            Method::DELETE,
            format!("/{}", self.container),
        )
        .query("restype", "container");
        self.svc.send(req).await.map(|_| ())
    }

    /// Uploads an uncommitted block with a `Content-MD5` the service verifies. All block
    /// ids of one blob must have the same length; `block_id` is base64-encoded here.
    pub async fn put_block(&self, blob: &str, block_id: &str, data: Bytes) -> Result<()> {
        const OP: &str = "Put Block";
        let req = Request::new(OP, Method::PUT, self.blob_path(OP, blob)?)
            .query("comp", "block")
            .query("blockid", BASE64.encode(block_id))
            .header("content-md5", &content_md5(&data))
            .body(data);
        self.svc.send(req).await.map(|_| ())
    }

    /// Commits blocks (ids as given to [`put_block`](Self::put_block), in order) as the
    /// blob's content, with metadata and conditions. Returns the new ETag.
    pub async fn put_block_list(
        &self,
        blob: &str,
        block_ids: &[String],
        options: &PutOptions,
    ) -> Result<String> {
        const OP: &str = "Put Block List";
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for id in block_ids {
            xml.push_str("<Latest>");
            xml.push_str(&BASE64.encode(id));
            xml.push_str("</Latest>");
        }
        xml.push_str("</BlockList>");
        let mut req = Request::new(OP, Method::PUT, self.blob_path(OP, blob)?)
            .query("comp", "blocklist")
            .header("content-type", "application/xml")
            .header("content-md5", &content_md5(xml.as_bytes()))
            .body(xml);
        req = apply_put_options(req, options, "x-ms-blob-content-type");
        let resp = self.svc.send(req).await?;
        Ok(etag(&resp))
    }

    /// Lists a blob's blocks.
    pub async fn get_block_list(&self, blob: &str) -> Result<BlockList> {
        const OP: &str = "Get Block List";
        let req = Request::new(OP, Method::GET, self.blob_path(OP, blob)?)
            .query("comp", "blocklist")
            .query("blocklisttype", "all");
        let resp = self.svc.send(req).await?;
        parse_block_list(OP, &resp.body)
    }

    /// Writes a whole blob in one request (with `Content-MD5`). Returns the new ETag.
    pub async fn put_blob(&self, blob: &str, data: Bytes, options: &PutOptions) -> Result<String> {
        const OP: &str = "Put Blob";
        let mut req = Request::new(OP, Method::PUT, self.blob_path(OP, blob)?)
            .header("x-ms-blob-type", "BlockBlob")
            .header("content-md5", &content_md5(&data))
            .body(data);
        req = apply_put_options(req, options, "content-type");
        let resp = self.svc.send(req).await?;
        Ok(etag(&resp))
    }

    /// Reads a whole blob.
    pub async fn get(&self, blob: &str) -> Result<Bytes> {
        const OP: &str = "Get Blob";
        let req = Request::new(OP, Method::GET, self.blob_path(OP, blob)?);
        Ok(self.svc.send(req).await?.body)
    }

    /// Reads a whole blob, `None` if it does not exist.
    pub async fn get_if_exists(&self, blob: &str) -> Result<Option<Bytes>> {
        match self.get(blob).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads `length` bytes at `offset`. A short answer is an error: a block is only useful
    /// whole.
    pub async fn get_range(&self, blob: &str, offset: u64, length: u64) -> Result<Bytes> {
        const OP: &str = "Get Blob Range";
        if length == 0 {
            return Ok(Bytes::new());
        }
        let range = format!("bytes={}-{}", offset, offset + length - 1);
        let req =
            Request::new(OP, Method::GET, self.blob_path(OP, blob)?).header("x-ms-range", &range);
        self.svc
            .send_with(req, |resp| {
                if resp.body.len() as u64 == length {
                    Ok(resp.body)
                } else if let Some(size) = resp
                    .header("content-range")
                    .and_then(|v| blob_ends_before(v, offset + length))
                {
                    // The service answered whole: the blob is shorter than the range
                    // (Azure answers 206 with what there is; 416 only past the end).
                    // Asking again gives the same answer.
                    Err(Error::Service {
                        op: OP,
                        status: 416,
                        code: Some("InvalidRange".into()),
                        message: format!(
                            "{blob} holds {size} bytes; bytes {offset}-{} were asked for",
                            offset + length - 1
                        ),
                        retry_after: None,
                    })
                } else {
                    // A truncated answer is worth another try.
                    Err(Error::Transport {
                        op: OP,
                        kind: crate::error::TransportKind::Interrupted,
                        detail: format!("asked for {length} bytes, got {}", resp.body.len()),
                    })
                }
            })
            .await
    }

    /// A blob's properties, `None` if it does not exist.
    pub async fn properties(&self, blob: &str) -> Result<Option<BlobProperties>> {
        const OP: &str = "Get Blob Properties";
        let req = Request::new(OP, Method::HEAD, self.blob_path(OP, blob)?);
        match self.svc.send(req).await {
            Ok(resp) => Ok(Some(BlobProperties {
                last_modified: resp
                    .header("last-modified")
                    .and_then(|d| httpdate::parse_http_date(d).ok()),
                content_length: resp
                    .header("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                etag: etag(&resp),
                metadata: resp
                    .headers
                    .iter()
                    .filter_map(|(k, v)| {
                        let name = k.as_str().strip_prefix("x-ms-meta-")?;
                        Some((name.to_string(), v.to_str().ok()?.to_string()))
                    })
                    .collect(),
            })),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes a blob; `false` if it did not exist.
    pub async fn delete(&self, blob: &str) -> Result<bool> {
        self.delete_if(blob, None).await
    }

    /// Deletes a blob only if its ETag is still `etag` (`If-Match`), so a version written
    /// since it was read survives; `false` if it did not exist or had changed.
    pub async fn delete_if_match(&self, blob: &str, etag: &str) -> Result<bool> {
        self.delete_if(blob, Some(etag)).await
    }

    async fn delete_if(&self, blob: &str, etag: Option<&str>) -> Result<bool> {
        const OP: &str = "Delete Blob";
        let mut req = Request::new(OP, Method::DELETE, self.blob_path(OP, blob)?);
        if let Some(etag) = etag {
            req = req.header("if-match", etag);
        }
        match self.svc.send(req).await {
            Err(e) if e.status() == Some(412) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) if e.status() == Some(404) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One page of a listing.
    pub async fn list_page(
        &self,
        options: &ListOptions<'_>,
        marker: Option<&str>,
    ) -> Result<ListPage> {
        const OP: &str = "List Blobs";
        let mut req = Request::new(OP, Method::GET, format!("/{}", self.container))
            .query("restype", "container")
            .query("comp", "list");
        if let Some(p) = options.prefix {
            req = req.query("prefix", p);
        }
        if let Some(d) = options.delimiter {
            req = req.query("delimiter", d);
        }
        if options.include_metadata {
            req = req.query("include", "metadata");
        }
        if let Some(n) = options.max_results {
            req = req.query("maxresults", n.to_string());
        }
        if let Some(m) = marker {
            req = req.query("marker", m);
        }
        let resp = self.svc.send(req).await?;
        let mut page = parse_list(OP, &resp.body)?;
        page.service_time = resp
            .header("date")
            .and_then(|d| httpdate::parse_http_date(d).ok());
        Ok(page)
    }

    /// Every blob and prefix of a listing, following markers.
    pub async fn list_all(&self, options: &ListOptions<'_>) -> Result<ListPage> {
        let mut all = ListPage::default();
        let mut marker: Option<String> = None;
        loop {
            let page = self.list_page(options, marker.as_deref()).await?;
            all.service_time = all.service_time.or(page.service_time);
            all.blobs.extend(page.blobs);
            all.prefixes.extend(page.prefixes);
            match page.next_marker {
                Some(m) => marker = Some(m),
                None => return Ok(all),
            }
        }
    }
}

fn apply_put_options(
    mut req: Request,
    options: &PutOptions,
    content_type_header: &'static str,
) -> Request {
    if options.if_none_match {
        req = req.header("if-none-match", "*");
    }
    if let Some(etag) = &options.if_match {
        req = req.header("if-match", etag);
    } else if options.if_exists {
        req = req.header("if-match", "*");
    }
    if let Some(ct) = &options.content_type {
        req = req.header(content_type_header, ct);
    }
    for (k, v) in &options.metadata {
        req = req.dynamic_header(&format!("x-ms-meta-{k}"), v);
    }
    req
}

/// The blob's size, from a `Content-Range` of `bytes S-E/SIZE`, when it says the blob
/// ends before `asked_end` (exclusive): the short answer is whole, not cut in transit.
fn blob_ends_before(content_range: &str, asked_end: u64) -> Option<u64> {
    let (_, size) = content_range.trim().rsplit_once('/')?;
    let size: u64 = size.parse().ok()?;
    (size < asked_end).then_some(size)
}

fn etag(resp: &Response) -> String {
    resp.header("etag").unwrap_or_default().to_string()
}

mod xml;

use xml::{parse_block_list, parse_list};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listing_with_prefixes_metadata_and_marker() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://x/" ContainerName="c"><Prefix>a/</Prefix><Delimiter>/</Delimiter><Blobs><Blob><Name>a/one &amp; two</Name><Properties><Content-Length>12</Content-Length><Content-Type>x</Content-Type></Properties><Metadata><Entities>5</Entities><Format>1</Format></Metadata></Blob><BlobPrefix><Name>a/sub/</Name></BlobPrefix></Blobs><NextMarker>m2</NextMarker></EnumerationResults>"#;
        let p = parse_list("t", xml).unwrap();
        assert_eq!(p.blobs.len(), 1);
        assert_eq!(p.blobs[0].name, "a/one & two");
        assert_eq!(p.blobs[0].content_length, 12);
        assert_eq!(
            p.blobs[0].metadata.get("entities").map(String::as_str),
            Some("5")
        );
        assert_eq!(p.prefixes, vec!["a/sub/".to_string()]);
        assert_eq!(p.next_marker.as_deref(), Some("m2"));
        let p = parse_list(
            "t",
            b"<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>",
        )
        .unwrap();
        assert!(p.blobs.is_empty() && p.next_marker.is_none());
    }

    #[test]
    fn parses_block_lists() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><BlockList><CommittedBlocks><Block><Name>MDAwMDAwMDE=</Name><Size>10</Size></Block></CommittedBlocks><UncommittedBlocks><Block><Name>MDAwMDAwMDI=</Name><Size>3</Size></Block></UncommittedBlocks></BlockList>"#;
        let l = parse_block_list("t", xml).unwrap();
        assert_eq!(
            l.committed,
            vec![BlockInfo {
                id: "00000001".into(),
                size: 10
            }]
        );
        assert_eq!(
            l.uncommitted,
            vec![BlockInfo {
                id: "00000002".into(),
                size: 3
            }]
        );
    }

    #[test]
    fn a_range_past_the_blob_end_is_told_from_a_cut_answer() {
        assert_eq!(blob_ends_before("bytes 100-149/150", 200), Some(150));
        assert_eq!(blob_ends_before("bytes 100-199/5000", 200), None);
        assert_eq!(blob_ends_before("bytes 100-199/*", 200), None);
        assert_eq!(blob_ends_before("garbage", 200), None);
    }

    #[test]
    fn md5_matches_reference() {
        assert_eq!(content_md5(b""), "1B2M2Y8AsgTpgAmY7PhCfg==");
    }
}
