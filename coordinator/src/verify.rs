//! `tablevault verify`: checks a backup against its own records (every commit record,
//! blob and block: presence, sizes, metadata, checksums, decodability, counts, key
//! bounds) and, with `--against`, compares it entity by entity with a live table.
//!
//! The comparison is a merge of two streams in key order (the backup block by block, the
//! table page by page), so memory stays at one block and one page whatever the size.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Instant;

use futures::{Stream, StreamExt};
use serde::Serialize;
use tablevault_common::StorageAccount;
use tablevault_common::blob::BlobClient;
use tablevault_common::format::{DecodedBlock, FORMAT_VERSION};
use tablevault_common::job::{BlockRecord, Manifest};
use tablevault_common::keys::EntityKey;
use tablevault_common::table::{Entity, EntityPage, Query, TableClient};
use tablevault_worker::reader::{ReadError, load_commit, read_block};

use crate::exit::{CmdResult, Failure};

/// Most differences listed in a report (all are counted).
const MAX_LISTED: usize = 100;

/// What to verify.
#[derive(Debug, Clone)]
pub struct VerifyRequest {
    /// The backup.
    pub backup_id: String,
    /// Tables to check; all when `None`.
    pub tables: Option<Vec<String>>,
    /// `(backup table, live table)` renames for `against`.
    pub renames: Vec<(String, String)>,
    /// Compare with this account's tables.
    pub against: Option<StorageAccount>,
}

/// One difference between the backup and a live table.
#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    /// Live table.
    pub table: String,
    /// The entity.
    pub key: EntityKey,
    /// `missing` (in the backup, not in the table), `extra` (in the table, not in the
    /// backup) or `different`.
    pub kind: &'static str,
    /// For `different`: the properties that differ.
    pub properties: Vec<String>,
}

/// Per-table outcome.
#[derive(Debug, Clone, Serialize, Default)]
pub struct VerifyTableReport {
    /// Table in the backup.
    pub table: String,
    /// Live table compared with, if any.
    pub live_table: Option<String>,
    /// Entities the manifest says the backup holds.
    pub entities_expected: u64,
    /// Entities read from intact blocks.
    pub entities_read: u64,
    /// Blocks checked.
    pub blocks: u64,
    /// Blocks that failed a check.
    pub bad_blocks: u64,
    /// Live comparison: entities in the backup but not in the table.
    pub missing_in_live: u64,
    /// Live comparison: entities in the table but not in the backup.
    pub extra_in_live: u64,
    /// Live comparison: entities whose data differs.
    pub different: u64,
}

/// The outcome of `verify`.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// Backup id.
    pub backup_id: String,
    /// `ok` or `mismatch`.
    pub status: String,
    /// Per table.
    pub tables: Vec<VerifyTableReport>,
    /// Everything wrong with the backup itself.
    pub problems: Vec<String>,
    /// Differences with the live tables (at most 100 listed).
    pub differences: Vec<Difference>,
    /// Wall time.
    pub duration_seconds: f64,
}

impl VerifyReport {
    /// Prints the human summary.
    pub fn print_human(&self) {
        println!(
            "verify backup {}: {}",
            self.backup_id,
            if self.status == "ok" {
                "OK"
            } else {
                "MISMATCH"
            }
        );
        for t in &self.tables {
            print!(
                "  {}: {} of {} entities read from {} blocks ({} bad)",
                t.table, t.entities_read, t.entities_expected, t.blocks, t.bad_blocks
            );
            match &t.live_table {
                Some(live) => println!(
                    "; against {live}: {} missing, {} extra, {} different",
                    t.missing_in_live, t.extra_in_live, t.different
                ),
                None => println!(),
            }
        }
        for p in self.problems.iter().take(20) {
            println!("  PROBLEM: {p}");
        }
        for d in self.differences.iter().take(20) {
            println!(
                "  {} {} in {}{}",
                d.kind.to_uppercase(),
                d.key,
                d.table,
                if d.properties.is_empty() {
                    String::new()
                } else {
                    format!(": {}", d.properties.join(", "))
                }
            );
        }
    }
}

type PageStream<'a> =
    Pin<Box<dyn Stream<Item = tablevault_common::Result<EntityPage>> + Send + 'a>>;

/// The live table, one entity at a time in key order.
struct LiveCursor<'a> {
    pages: PageStream<'a>,
    buffer: VecDeque<Entity>,
    done: bool,
}

impl<'a> LiveCursor<'a> {
    fn new(client: &'a TableClient, table: &'a str) -> Self {
        LiveCursor {
            pages: Box::pin(client.query(
                table,
                Query {
                    filter: None,
                    top: Some(1000),
                },
            )),
            buffer: VecDeque::new(),
            done: false,
        }
    }

    async fn peek(&mut self) -> CmdResult<Option<&Entity>> {
        while self.buffer.is_empty() && !self.done {
            match self.pages.next().await {
                Some(page) => self.buffer.extend(page?.entities),
                None => self.done = true,
            }
        }
        Ok(self.buffer.front())
    }

    fn advance(&mut self) -> Option<Entity> {
        self.buffer.pop_front()
    }
}

fn key(e: &Entity) -> EntityKey {
    EntityKey::new(&e.partition_key, &e.row_key)
}

/// Accumulates differences for one table.
struct Diff<'a> {
    table: &'a str,
    report: &'a mut VerifyTableReport,
    listed: &'a mut Vec<Difference>,
    /// Key spans of blocks that could not be read: live entities there are not "extra".
    unknown: Vec<(EntityKey, EntityKey)>,
}

impl Diff<'_> {
    fn record(&mut self, key: EntityKey, kind: &'static str, properties: Vec<String>) {
        match kind {
            "missing" => self.report.missing_in_live += 1,
            "extra" => {
                if self.unknown.iter().any(|(a, b)| &key >= a && &key <= b) {
                    return;
                }
                self.report.extra_in_live += 1;
            }
            _ => self.report.different += 1,
        }
        if self.listed.len() < MAX_LISTED {
            self.listed.push(Difference {
                table: self.table.to_string(),
                key,
                kind,
                properties,
            });
        }
    }

    /// Compares one backed-up entity with the live cursor.
    async fn compare(&mut self, live: &mut LiveCursor<'_>, backed_up: &Entity) -> CmdResult<()> {
        let k = key(backed_up);
        loop {
            let Some(current) = live.peek().await? else {
                self.record(k, "missing", Vec::new());
                return Ok(());
            };
            let ck = key(current);
            if ck < k {
                let extra = live.advance().expect("peeked");
                self.record(key(&extra), "extra", Vec::new());
                continue;
            }
            if ck > k {
                self.record(k, "missing", Vec::new());
                return Ok(());
            }
            let current = live.advance().expect("peeked");
            let diff = backed_up.differences(&current);
            if !diff.is_empty() {
                self.record(k, "different", diff);
            }
            return Ok(());
        }
    }
}

async fn read(
    blobs: &BlobClient,
    blob: &str,
    block: &BlockRecord,
    m: &Manifest,
) -> Result<DecodedBlock, ReadError> {
    read_block(blobs, blob, block, m.compression).await
}

/// Verifies a backup (and compares it with live tables when asked).
pub async fn verify(blobs: &BlobClient, req: &VerifyRequest) -> CmdResult<VerifyReport> {
    let started = Instant::now();
    let manifest = crate::restore::load_complete_manifest(blobs, &req.backup_id).await?;
    let pairs = crate::selection::select(&manifest, req.tables.as_deref(), &req.renames)?;
    let live_client = match &req.against {
        Some(a) => Some(TableClient::new(a)?),
        None => None,
    };
    let mut problems = Vec::new();
    let mut differences = Vec::new();
    let mut tables = Vec::new();
    for (source, live_table) in &pairs {
        let mt = manifest
            .tables
            .iter()
            .find(|t| &t.name == source)
            .expect("selected from the manifest");
        let mut report = VerifyTableReport {
            table: source.clone(),
            live_table: live_client.as_ref().map(|_| live_table.clone()),
            entities_expected: mt.entities,
            ..Default::default()
        };
        if let Some(client) = &live_client
            && !client.table_exists(live_table).await?
        {
            return Err(Failure::usage(format!(
                "table {live_table} does not exist in the account to compare against"
            )));
        }
        let mut live = live_client.as_ref().map(|c| LiveCursor::new(c, live_table));
        let mut diff = Diff {
            table: live_table,
            report: &mut report,
            listed: &mut differences,
            unknown: Vec::new(),
        };
        for range in &mt.ranges {
            let commit = match load_commit(blobs, &range.commit).await {
                Ok(c) => c,
                Err(e) => {
                    problems.push(format!("{source}/{}: commit record: {e}", range.task));
                    continue;
                }
            };
            if commit.range != range.range
                || commit.entities != range.entities
                || commit.table != *source
            {
                problems.push(format!(
                    "{source}/{}: commit record does not match the manifest",
                    range.task
                ));
            }
            let mut range_entities = 0u64;
            for blob in &commit.blobs {
                match blobs.properties(&blob.name).await? {
                    None => problems.push(format!("{}: data blob is missing", blob.name)),
                    Some(p) => {
                        if p.content_length != blob.length {
                            problems.push(format!(
                                "{}: {} bytes, recorded {}",
                                blob.name, p.content_length, blob.length
                            ));
                        }
                        if p.metadata.get("tvformat").map(String::as_str)
                            != Some(&FORMAT_VERSION.to_string())
                        {
                            problems.push(format!(
                                "{}: tvformat metadata is not {FORMAT_VERSION}",
                                blob.name
                            ));
                        }
                        if p.metadata.get("tvcompression").map(String::as_str)
                            != Some(manifest.compression.as_str())
                        {
                            problems.push(format!(
                                "{}: tvcompression metadata is not {}",
                                blob.name, manifest.compression
                            ));
                        }
                    }
                }
                let manifest = &manifest;
                let mut decoded =
                    futures::stream::iter(&blob.blocks)
                        .map(|block| async move {
                            (block, read(blobs, &blob.name, block, manifest).await)
                        })
                        .buffered(4);
                while let Some((block, result)) = decoded.next().await {
                    diff.report.blocks += 1;
                    match result {
                        Ok(d) => {
                            for e in d.batches.iter().flatten() {
                                if !commit.range.contains(&key(e)) {
                                    problems.push(format!(
                                        "{}: block {}: entity {} outside range {}",
                                        blob.name,
                                        block.id,
                                        key(e),
                                        commit.range
                                    ));
                                }
                                if let Some(l) = live.as_mut() {
                                    diff.compare(l, e).await?;
                                }
                            }
                            let n = d.entity_count() as u64;
                            diff.report.entities_read += n;
                            range_entities += n;
                        }
                        Err(e) => {
                            diff.report.bad_blocks += 1;
                            diff.unknown
                                .push((block.first_key.clone(), block.last_key.clone()));
                            problems.push(e.to_string());
                        }
                    }
                }
            }
            if range_entities != commit.entities && diff.report.bad_blocks == 0 {
                problems.push(format!(
                    "{source}/{}: {range_entities} entities in blocks, recorded {}",
                    range.task, commit.entities
                ));
            }
        }
        if let Some(l) = live.as_mut() {
            while l.peek().await?.is_some() {
                let extra = l.advance().expect("peeked");
                diff.record(key(&extra), "extra", Vec::new());
            }
        }
        if report.entities_read != report.entities_expected && report.bad_blocks == 0 {
            problems.push(format!(
                "{source}: {} entities read, manifest says {}",
                report.entities_read, report.entities_expected
            ));
        }
        tables.push(report);
    }
    let mismatch = !problems.is_empty()
        || tables.iter().any(|t| {
            t.bad_blocks > 0 || t.missing_in_live > 0 || t.extra_in_live > 0 || t.different > 0
        });
    Ok(VerifyReport {
        backup_id: req.backup_id.clone(),
        status: if mismatch { "mismatch" } else { "ok" }.to_string(),
        tables,
        problems,
        differences,
        duration_seconds: started.elapsed().as_secs_f64(),
    })
}
