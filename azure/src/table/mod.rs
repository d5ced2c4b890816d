//! Azure Table storage client: tables (list, create, delete), entity queries as pages that
//! follow both continuation headers, point operations, and entity group transactions.

mod batch;
mod entity;
mod filter;
mod pages;

use std::time::{Duration, Instant};

use reqwest::Method;
use serde::Deserialize;

pub use batch::{BatchOperation, MAX_BATCH_BYTES, MAX_BATCH_OPERATIONS, batch_carries_keys};
pub use entity::{
    EdmType, EdmValue, Entity, EntityDecodeError, format_double, parse_double, write_double,
    write_int,
};
pub use filter::{Cmp, Filter, literal, string_literal};
pub use pages::Pages;

use crate::Service;
use crate::config::{ConfigError, StorageAccount};
use crate::error::{Error, Result};
use crate::pipeline::Idempotency;
use crate::pipeline::{ClientOptions, Request, Response, ServiceClient};

/// Most entities the service returns per page.
pub const MAX_PAGE_SIZE: u32 = 1000;

/// Whether a table name is valid: `^[A-Za-z][A-Za-z0-9]{2,62}$`, and not `tables`.
pub fn is_valid_table_name(name: &str) -> bool {
    table_name_problem(name).is_none()
}

/// Why a name cannot be a table's (`"…" is not a valid table name …`), if it cannot.
pub fn table_name_problem(name: &str) -> Option<String> {
    let b = name.as_bytes();
    if name.eq_ignore_ascii_case("tables") {
        Some(format!("{name:?} is reserved by the service"))
    } else if (3..=63).contains(&b.len())
        && b[0].is_ascii_alphabetic()
        && b.iter().all(u8::is_ascii_alphanumeric)
    {
        None
    } else {
        Some(format!(
            "{name:?} is not a valid table name (3-63 letters and digits, starting with a letter)"
        ))
    }
}

fn check_table_name(op: &'static str, name: &str) -> Result<()> {
    match table_name_problem(name) {
        None => Ok(()),
        Some(why) => Err(Error::invalid_request(op, why)),
    }
}

/// What to ask of a query.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// `$filter`.
    pub filter: Option<Filter>,
    /// `$top`: entities per page (at most 1000).
    pub top: Option<u32>,
    /// `$select=PartitionKey,RowKey`: only the keys come back, where the keys are all
    /// a query wants to know (a split's probes and samples).
    pub keys_only: bool,
    /// The most bytes a page's response may hold. A page over it is not read but asked
    /// again with a quarter of its `$top`, and later pages ask for as many entities as
    /// the last page says fit ([`Pages`]), so memory is bounded by bytes, not by the
    /// size of entities: a page of 1,000 entities of 300 KB each is 300 MB.
    pub page_bytes: Option<usize>,
}

/// The most bytes of a page a scan reads ([`Query::page_bytes`]): 1,000 entities of up
/// to 8 KiB of JSON each, the most a block of 4 MB holds in three such pages.
pub const SCAN_PAGE_BYTES: usize = 8 << 20;

impl Query {
    /// Every entity matching `filter` (all of them for `None`), in pages as full as the
    /// service allows: how tables are read when everything is wanted.
    pub fn scan(filter: Option<Filter>) -> Self {
        Query {
            filter,
            top: Some(MAX_PAGE_SIZE),
            keys_only: false,
            page_bytes: Some(SCAN_PAGE_BYTES),
        }
    }
}

/// Where the next page starts, as the service said. Opaque: send it back as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// `x-ms-continuation-NextPartitionKey`.
    pub next_partition_key: String,
    /// `x-ms-continuation-NextRowKey`, which the service may omit.
    pub next_row_key: Option<String>,
}

/// One page of a query. Pages may be short or empty and still have a continuation.
#[derive(Debug)]
pub struct EntityPage {
    /// Entities, in key order.
    pub entities: Vec<Entity>,
    /// Where to continue, or `None` at the end.
    pub continuation: Option<Continuation>,
    /// Size of the response body, for throughput accounting.
    pub response_bytes: usize,
}

/// Outcome of creating a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The table was created.
    Created,
    /// The table already existed.
    AlreadyExists,
}

#[derive(Deserialize)]
struct TableList {
    value: Vec<TableItem>,
}

#[derive(Deserialize)]
struct TableItem {
    #[serde(rename = "TableName")]
    name: String,
}

/// A client for the Table service of one account.
#[derive(Clone)]
pub struct TableClient {
    svc: ServiceClient,
    /// How long `create_table` waits out `TableBeingDeleted`.
    create_wait: Duration,
}

impl TableClient {
    /// A client with default options.
    pub fn new(account: &StorageAccount) -> std::result::Result<Self, ConfigError> {
        Self::with_options(account, &ClientOptions::default())
    }

    /// A client with explicit options.
    pub fn with_options(
        account: &StorageAccount,
        options: &ClientOptions,
    ) -> std::result::Result<Self, ConfigError> {
        Ok(TableClient {
            svc: ServiceClient::new(account, Service::Table, options)?,
            create_wait: Duration::from_secs(300),
        })
    }

    /// Every table in the account, following `NextTableName` across pages.
    pub async fn list_tables(&self) -> Result<Vec<String>> {
        self.list_tables_paged(None).await
    }

    /// Every table in the account, asking for `page_size` names per page.
    pub async fn list_tables_paged(&self, page_size: Option<u32>) -> Result<Vec<String>> {
        self.list_tables_where(None, page_size).await
    }

    /// The tables `filter` (an OData filter on `TableName`) selects, following
    /// `NextTableName` across pages.
    async fn list_tables_where(
        &self,
        filter: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Vec<String>> {
        const OP: &str = "Query Tables";
        let mut names = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut req = Request::new(OP, Method::GET, "/Tables");
            if let Some(f) = filter {
                req = req.query("$filter", f.to_string());
            }
            if let Some(top) = page_size {
                req = req.query("$top", top.min(MAX_PAGE_SIZE).to_string());
            }
            if let Some(n) = &next {
                req = req.query("NextTableName", n.clone());
            }
            let resp = self.svc.send(req).await?;
            let list: TableList = serde_json::from_slice(&resp.body)
                .map_err(|e| Error::invalid_response(OP, format!("table list: {e}")))?;
            names.extend(list.value.into_iter().map(|t| t.name));
            next = resp
                .header("x-ms-continuation-nexttablename")
                .filter(|s| !s.is_empty())
                .map(str::to_string);
            if next.is_none() {
                return Ok(names);
            }
        }
    }

    /// Whether a table exists, under this name in any case: the service's table names
    /// are case-insensitive (`MULTI1` is `Multi1`), but a `TableName eq` filter is not,
    /// and found no `Multi1` for `MULTI1`, so a restore renamed into `MULTI1` went ahead
    /// as into a new table, without asking, while writing into the live `Multi1`. The
    /// names beginning with the name's letter in either case are listed and compared.
    /// Where the credentials may not list tables, the table is queried for one entity.
    pub async fn table_exists(&self, name: &str) -> Result<bool> {
        const OP: &str = "Query Tables";
        check_table_name(OP, name)?;
        let first = name.chars().next().unwrap_or('a');
        let starting_with = |c: char| {
            let after = char::from_u32(c as u32 + 1).unwrap_or(c);
            format!(
                "(TableName ge {} and TableName lt {})",
                string_literal(&c.to_string()),
                string_literal(&after.to_string())
            )
        };
        let filter = format!(
            "{} or {}",
            starting_with(first.to_ascii_uppercase()),
            starting_with(first.to_ascii_lowercase())
        );
        match self.list_tables_where(Some(&filter), None).await {
            Ok(names) => Ok(names.iter().any(|t| t.eq_ignore_ascii_case(name))),
            // Credentials for one table (a service SAS, `tn=`) may read it but not list
            // tables: a one-entity query tells whether it is there.
            Err(refused) if matches!(refused.status(), Some(401 | 403)) => {
                self.holds_table(name).await.map_err(|_| refused)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the table is there, asked of the table itself with a one-entity query
    /// (credentials for one table, a service SAS with `tn=`, may read it but not list
    /// tables): `false` on `404`; any other refusal is the error.
    pub async fn holds_table(&self, name: &str) -> Result<bool> {
        let probe = Query {
            top: Some(1),
            keys_only: true,
            ..Default::default()
        };
        match self.query_page(name, &probe, None).await {
            Ok(_) => Ok(true),
            Err(e) if e.status() == Some(404) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Creates a table. A table still being deleted (`409 TableBeingDeleted`, which lasts
    /// 40 s or more on the real service) is waited out, up to a limit.
    pub async fn create_table(&self, name: &str) -> Result<CreateOutcome> {
        const OP: &str = "Create Table";
        check_table_name(OP, name)?;
        let started = Instant::now();
        let mut delay = Duration::from_secs(2);
        loop {
            let body = serde_json::json!({ "TableName": name }).to_string();
            // A retried create that had succeeded answers TableAlreadyExists, which is an
            // outcome we report, so the request counts as idempotent.
            let req = Request::new(OP, Method::POST, "/Tables")
                .header("content-type", "application/json")
                .header("prefer", "return-no-content")
                .body(body)
                .idempotency(Idempotency::Idempotent);
            match self.svc.send(req).await {
                Ok(_) => return Ok(CreateOutcome::Created),
                Err(e) if e.has_code("TableAlreadyExists") => {
                    return Ok(CreateOutcome::AlreadyExists);
                }
                Err(e)
                    if e.has_code("TableBeingDeleted") && started.elapsed() < self.create_wait =>
                {
                    tracing::info!(
                        table = name,
                        wait_s = delay.as_secs(),
                        "table is being deleted; waiting to re-create it"
                    );
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(15));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes a table (`404 TableNotFound` if it does not exist).
    pub async fn delete_table(&self, name: &str) -> Result<()> {
        const OP: &str = "Delete Table";
        check_table_name(OP, name)?;
        let req = Request::new(OP, Method::DELETE, format!("/Tables('{name}')"));
        self.svc.send(req).await.map(|_| ())
    }

    /// Fetches one page of a query. Follow [`EntityPage::continuation`] until it is `None`;
    /// short and empty pages are normal.
    pub async fn query_page(
        &self,
        table: &str,
        query: &Query,
        continuation: Option<&Continuation>,
    ) -> Result<EntityPage> {
        const OP: &str = "Query Entities";
        check_table_name(OP, table)?;
        let mut req = Request::new(OP, Method::GET, format!("/{table}()"));
        if let Some(f) = &query.filter {
            req = req.query("$filter", f.as_str());
        }
        if let Some(top) = query.top {
            req = req.query("$top", top.min(MAX_PAGE_SIZE).to_string());
        }
        if query.keys_only {
            req = req.query("$select", "PartitionKey,RowKey");
        }
        // One entity is read whatever its size: a page cannot be smaller.
        if let Some(limit) = query.page_bytes.filter(|_| query.top.is_none_or(|t| t > 1)) {
            req = req.max_body(limit);
        }
        if let Some(c) = continuation {
            req = req.query("NextPartitionKey", c.next_partition_key.clone());
            // An empty NextRowKey= is an error on the service: omit it when absent.
            if let Some(rk) = c.next_row_key.as_deref().filter(|s| !s.is_empty()) {
                req = req.query("NextRowKey", rk);
            }
        }
        self.svc.send_with(req, |resp| parse_page(OP, resp)).await
    }

    /// The pages of a query, followed to its end.
    pub fn pages(&self, table: &str, query: Query) -> Pages {
        Pages::new(self.clone(), table, query)
    }

    /// Reads one entity; `None` if it does not exist.
    pub async fn get_entity(
        &self,
        table: &str,
        partition_key: &str,
        row_key: &str,
    ) -> Result<Option<Entity>> {
        const OP: &str = "Get Entity";
        check_table_name(OP, table)?;
        let req = Request::new(
            OP,
            Method::GET,
            format!("/{}", batch::entity_path(table, partition_key, row_key)),
        );
        match self.svc.send(req).await {
            Ok(resp) => {
                let text = std::str::from_utf8(&resp.body)
                    .map_err(|_| Error::invalid_response(OP, "entity is not UTF-8"))?;
                entity::entity_from_json(text)
                    .map(Some)
                    .map_err(|e| Error::invalid_response(OP, e.to_string()))
            }
            Err(e) if e.status() == Some(404) && !e.has_code("TableNotFound") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Inserts an entity (`409 EntityAlreadyExists` if present). Keys travel in the body.
    pub async fn insert_entity(&self, table: &str, entity: &Entity) -> Result<()> {
        const OP: &str = "Insert Entity";
        check_table_name(OP, table)?;
        let req = Request::new(OP, Method::POST, format!("/{table}"))
            .header("content-type", "application/json")
            .header("prefer", "return-no-content")
            .body(entity.to_json());
        self.svc.send(req).await.map(|_| ())
    }

    /// Inserts or replaces (`merge == false`) or inserts or merges (`merge == true`).
    pub async fn upsert_entity(&self, table: &str, entity: &Entity, merge: bool) -> Result<()> {
        const OP: &str = "Upsert Entity";
        check_table_name(OP, table)?;
        let method = if merge {
            Method::from_bytes(b"MERGE").expect("MERGE is a valid method token")
        } else {
            Method::PUT
        };
        let req = Request::new(
            OP,
            method,
            format!(
                "/{}",
                batch::entity_path(table, &entity.partition_key, &entity.row_key)
            ),
        )
        .header("content-type", "application/json")
        .body(entity.to_json())
        .idempotency(Idempotency::Idempotent);
        self.svc.send(req).await.map(|_| ())
    }

    /// Deletes an entity whatever its version.
    pub async fn delete_entity(
        &self,
        table: &str,
        partition_key: &str,
        row_key: &str,
    ) -> Result<()> {
        const OP: &str = "Delete Entity";
        check_table_name(OP, table)?;
        let req = Request::new(
            OP,
            Method::DELETE,
            format!("/{}", batch::entity_path(table, partition_key, row_key)),
        )
        .header("if-match", "*");
        self.svc.send(req).await.map(|_| ())
    }

    /// Runs an entity group transaction: all operations apply, or none does. A failure
    /// is [`Error::BatchOperation`] with the failing operation's index and the service's
    /// reason. Transient failures are retried; batches containing inserts only when the
    /// service certainly rolled them back.
    pub async fn submit_batch(&self, table: &str, ops: &[BatchOperation]) -> Result<()> {
        const OP: &str = "Entity Group Transaction";
        check_table_name(OP, table)?;
        if ops.is_empty() {
            return Ok(());
        }
        if ops.len() > MAX_BATCH_OPERATIONS {
            return Err(Error::invalid_request(
                OP,
                format!(
                    "{} operations; a batch holds at most {MAX_BATCH_OPERATIONS}",
                    ops.len()
                ),
            ));
        }
        let id = uuid::Uuid::new_v4().simple();
        let batch_boundary = format!("batch_{id}");
        let changeset_boundary = format!("changeset_{id}");
        let body = batch::build_body(
            self.svc.endpoint().as_str(),
            table,
            ops,
            &batch_boundary,
            &changeset_boundary,
        );
        let idempotency = if ops.iter().all(BatchOperation::is_idempotent) {
            Idempotency::Idempotent
        } else {
            Idempotency::NotIdempotent
        };
        let req = Request::new(OP, Method::POST, "/$batch")
            .header(
                "content-type",
                &format!("multipart/mixed; boundary={batch_boundary}"),
            )
            .body(body)
            .idempotency(idempotency);
        let count = ops.len();
        self.svc
            .send_with(req, |resp| batch::check_response(OP, &resp.body, count))
            .await
    }
}

fn parse_page(op: &'static str, resp: Response) -> Result<EntityPage> {
    let continuation = continuation(
        resp.header("x-ms-continuation-nextpartitionkey"),
        resp.header("x-ms-continuation-nextrowkey"),
    );
    Ok(EntityPage {
        entities: decode_page(op, &resp.body)?,
        continuation,
        response_bytes: resp.body.len(),
    })
}

/// The continuation a page's headers give, if any. Either token says there is more: the
/// emulator writes the next entity's keys themselves (base64), and in the partition
/// whose PartitionKey is empty its NextPartitionKey is empty and its NextRowKey is not.
/// Read as the end, a backup kept the first 1,000 entities of such a partition and
/// nothing after them, and reported complete.
fn continuation(partition: Option<&str>, row: Option<&str>) -> Option<Continuation> {
    let row = row.filter(|s| !s.is_empty());
    let partition = partition.filter(|s| !s.is_empty() || row.is_some())?;
    Some(Continuation {
        next_partition_key: partition.to_string(),
        next_row_key: row.map(str::to_string),
    })
}

fn decode_page(op: &'static str, body: &[u8]) -> Result<Vec<Entity>> {
    let text = std::str::from_utf8(body)
        .map_err(|_| Error::invalid_response(op, "entity page is not UTF-8"))?;
    entity::decode_page(text)
        .map_err(|e| Error::invalid_response(op, format!("entity page is not valid JSON: {e}")))?
        .map_err(|e| Error::invalid_response(op, e.to_string()))
}

/// The entities of one Query Entities response body (`{"value":[…]}`, minimal metadata),
/// decoded exactly as [`TableClient::query_page`] decodes them. For tools and benchmarks
/// that hold a response body already.
pub fn entities_from_page_json(body: &[u8]) -> Result<Vec<Entity>> {
    decode_page("Query Entities", body)
}

/// The multipart request body of an entity group transaction, exactly as
/// [`TableClient::submit_batch`] builds it: `endpoint` is the absolute table endpoint,
/// the boundaries are the batch's and the change set's. For tools and benchmarks.
pub fn batch_request_body(
    endpoint: &str,
    table: &str,
    ops: &[BatchOperation],
    batch_boundary: &str,
    changeset_boundary: &str,
) -> String {
    batch::build_body(endpoint, table, ops, batch_boundary, changeset_boundary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Either token says there is more; neither, or empty ones, that there is not.
    #[test]
    fn a_continuation_is_either_token() {
        let c = |pk, rk| continuation(pk, rk).map(|c| (c.next_partition_key, c.next_row_key));
        assert_eq!(
            c(Some("cA=="), Some("cg==")),
            Some(("cA==".into(), Some("cg==".into())))
        );
        assert_eq!(c(Some("cA=="), None), Some(("cA==".into(), None)));
        assert_eq!(c(Some("cA=="), Some("")), Some(("cA==".into(), None)));
        // The emulator, in the partition whose key is empty.
        assert_eq!(
            c(Some(""), Some("cg==")),
            Some((String::new(), Some("cg==".into())))
        );
        assert_eq!(c(Some(""), Some("")), None);
        assert_eq!(c(Some(""), None), None);
        assert_eq!(c(None, None), None);
    }

    #[test]
    fn pages_decode_entity_by_entity_with_json_errors_first() {
        let page = r#"{"odata.metadata":"m","value":[
            {"PartitionKey":"p","RowKey":"1","N":1,"S@odata.type":"Edm.String","S":"a\"b"},
            {"odata.etag":"W/\"x\"","PartitionKey":"p","RowKey":"2","Timestamp":"t"}],
            "odata.nextLink":{"x":[1,2]}}"#;
        let entities = entities_from_page_json(page.as_bytes()).unwrap();
        assert_eq!(
            entities,
            vec![
                Entity::new("p", "1")
                    .with("N", EdmValue::Int32(1))
                    .with("S", EdmValue::String("a\"b".into())),
                {
                    let mut e = Entity::new("p", "2");
                    e.etag = Some("W/\"x\"".into());
                    e.timestamp = Some("t".into());
                    e
                }
            ]
        );
        let message = |body: &str| {
            entities_from_page_json(body.as_bytes())
                .unwrap_err()
                .to_string()
        };
        assert!(
            entities_from_page_json(br#"{"value":[]}"#)
                .unwrap()
                .is_empty()
        );
        let bad_entity =
            r#"{"value":[{"PartitionKey":"p"},{"PartitionKey":"p","RowKey":"r","X":[]}]}"#;
        assert!(
            message(bad_entity).contains("\"RowKey\": missing"),
            "{}",
            message(bad_entity)
        );
        // A body that is not JSON is reported as such even after an entity that is wrong.
        let both = r#"{"value":[{"PartitionKey":"p"}],}"#;
        assert!(
            message(both).contains("not valid JSON"),
            "{}",
            message(both)
        );
        for body in [
            r#"{"values":[]}"#,
            r#"{"value":[],"value":[]}"#,
            r#"{"value":{}}"#,
            r#"{"value":[1]}"#,
            "[]",
            r#"{"value":[]} x"#,
        ] {
            assert!(
                message(body).contains("not valid JSON"),
                "{body}: {}",
                message(body)
            );
        }
    }

    #[test]
    fn table_names() {
        for ok in [
            "abc",
            "Abc123",
            "a23456789012345678901234567890123456789012345678901234567890123",
        ] {
            assert!(is_valid_table_name(ok), "{ok}");
        }
        for bad in [
            "ab", "1abc", "a-bc", "tables", "Tables", "abc/../x", "ab c", "",
        ] {
            assert!(!is_valid_table_name(bad), "{bad}");
        }
        // A reserved name is refused as reserved, not as malformed.
        assert!(table_name_problem("Tables").unwrap().contains("reserved"));
        assert!(table_name_problem("a-bc").unwrap().contains("3-63"));
    }
}
