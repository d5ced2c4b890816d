//! `tablevault verify`: checks a backup against its own records (every commit record,
//! blob and block: presence, sizes, metadata, checksums, decodability, counts, key
//! bounds) and, with `--against`, compares it entity by entity with a live table.
//!
//! The comparison is a merge of two streams in key order (the backup block by block, the
//! table page by page), so memory stays at one block and one page whatever the size.

use std::time::Instant;

use futures::StreamExt;
use serde::Serialize;
use tablevault_azure::StorageAccount;
use tablevault_azure::table::{Entity, TableClient};
use tablevault_core::format::BLOCK_VERSION;
use tablevault_core::keys::EntityKey;

use crate::compare::{LiveCursor, key};
use crate::watch::{Progress, Snapshot};
use crate::{Location, Result};

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

/// How a live entity differs from the backup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DifferenceKind {
    /// In the backup, not in the table.
    Missing,
    /// In the table, not in the backup.
    Extra,
    /// In both, with different data.
    Different,
}

impl DifferenceKind {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            DifferenceKind::Missing => "missing",
            DifferenceKind::Extra => "extra",
            DifferenceKind::Different => "different",
        }
    }
}

impl PartialEq<&str> for DifferenceKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Whether a backup checked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyStatus {
    /// Every check passed and nothing differs.
    Ok,
    /// Something is damaged or differs.
    Mismatch,
}

impl PartialEq<&str> for VerifyStatus {
    fn eq(&self, other: &&str) -> bool {
        let name = match self {
            VerifyStatus::Ok => "ok",
            VerifyStatus::Mismatch => "mismatch",
        };
        name == *other
    }
}

/// One difference between the backup and a live table.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Difference {
    /// Live table.
    pub table: String,
    /// The entity.
    pub key: EntityKey,
    /// What differs.
    pub kind: DifferenceKind,
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
    /// Whether everything checked out.
    pub status: VerifyStatus,
    /// Per table.
    pub tables: Vec<VerifyTableReport>,
    /// Everything wrong with the backup itself.
    pub problems: Vec<String>,
    /// Differences with the live tables (at most 100 listed).
    pub differences: Vec<Difference>,
    /// Wall time.
    pub duration_seconds: f64,
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
    fn record(&mut self, key: EntityKey, kind: DifferenceKind, properties: Vec<String>) {
        match kind {
            DifferenceKind::Missing => self.report.missing_in_live += 1,
            DifferenceKind::Extra => {
                if self.unknown.iter().any(|(a, b)| &key >= a && &key <= b) {
                    return;
                }
                self.report.extra_in_live += 1;
            }
            DifferenceKind::Different => self.report.different += 1,
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
    async fn compare(&mut self, live: &mut LiveCursor, backed_up: &Entity) -> Result<()> {
        let k = key(backed_up);
        loop {
            let Some(current) = live.peek().await? else {
                self.record(k, DifferenceKind::Missing, Vec::new());
                return Ok(());
            };
            let ck = key(current);
            if ck < k {
                let extra = live.advance().expect("peeked");
                self.record(key(&extra), DifferenceKind::Extra, Vec::new());
                continue;
            }
            if ck > k {
                self.record(k, DifferenceKind::Missing, Vec::new());
                return Ok(());
            }
            let current = live.advance().expect("peeked");
            let diff = backed_up.differences(&current);
            if !diff.is_empty() {
                self.record(k, DifferenceKind::Different, diff);
            }
            return Ok(());
        }
    }
}

/// Verifies a backup (and compares it with live tables when asked).
pub async fn verify(location: &Location, req: &VerifyRequest) -> Result<VerifyReport> {
    verify_with_progress(location, req, None).await
}

/// How a verify refused for a deletion of its backup ends its message.
const VERIFY_STOPPED: &str = "what was read of it is not a verdict on it";

/// [`verify`], telling `progress` after each block (ranges checked of all, entities read
/// of the manifest's count).
pub async fn verify_with_progress(
    location: &Location,
    req: &VerifyRequest,
    progress: Option<&dyn Progress>,
) -> Result<VerifyReport> {
    let store = &location.store()?;
    let started = Instant::now();
    let manifest = crate::retention::unless_removed(
        store,
        &req.backup_id,
        VERIFY_STOPPED,
        crate::restore::load_complete_manifest(store, &req.backup_id).await,
    )
    .await?;
    let pairs = crate::selection::select(&manifest, req.tables.as_deref(), &req.renames)?;
    let selected = || {
        manifest
            .tables
            .iter()
            .filter(|t| pairs.iter().any(|(s, _)| *s == t.name))
    };
    let mut shown = Snapshot {
        tasks_total: selected().map(|t| t.ranges.len() as u64).sum(),
        entities_expected: Some(selected().map(|t| t.entities).sum()),
        ..Snapshot::default()
    };
    let live_client = match &req.against {
        Some(a) => Some(TableClient::with_options(a, &location.client_options)?),
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
        // A table dropped since the backup is a difference, every entity missing, not a
        // usage error that ended the comparison of every other table (exit 2).
        let absent = match &live_client {
            Some(client) => !client.table_exists(live_table).await?,
            None => false,
        };
        if absent {
            problems.push(format!(
                "table {live_table} does not exist in the account compared against: its {} \
                 backed-up entities are missing",
                mt.entities
            ));
            report.missing_in_live = mt.entities;
        }
        let mut live = live_client
            .as_ref()
            .filter(|_| !absent)
            .map(|c| LiveCursor::new(c, live_table));
        let mut diff = Diff {
            table: live_table,
            report: &mut report,
            listed: &mut differences,
            unknown: Vec::new(),
        };
        for range in &mt.ranges {
            let commit = match store.commit_record(&range.commit).await {
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
                let label = blob.label(&commit);
                if let Some(problem) = blob.shape_problem(commit.format) {
                    problems.push(format!("{source}/{}: {label} {problem}", range.task));
                }
                // An inline blob is in the record just read: there is no data blob to look at.
                if !blob.is_inline() {
                    match store.blobs().properties(&blob.name).await? {
                        None => problems.push(format!("{}: data blob is missing", blob.name)),
                        Some(p) => {
                            if p.content_length != blob.length {
                                problems.push(format!(
                                    "{}: {} bytes, recorded {}",
                                    blob.name, p.content_length, blob.length
                                ));
                            }
                            if p.metadata.get("tvformat").map(String::as_str)
                                != Some(&BLOCK_VERSION.to_string())
                            {
                                problems.push(format!(
                                    "{}: tvformat metadata is not {BLOCK_VERSION}",
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
                }
                let compression = manifest.compression;
                let mut decoded = futures::stream::iter(&blob.blocks)
                    .map(|block| async move {
                        (block, store.read_block(blob, block, compression).await)
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
                                        label,
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
                            shown.entities += n;
                            if let Some(p) = progress {
                                p.update(shown);
                            }
                        }
                        Err(e) => {
                            diff.report.bad_blocks += 1;
                            diff.unknown
                                .push((block.first_key.clone(), block.last_key.clone()));
                            problems.push(if blob.is_inline() {
                                format!("{label}: {e}")
                            } else {
                                e.to_string()
                            });
                        }
                    }
                }
            }
            shown.tasks_done += 1;
            if let Some(p) = progress {
                p.update(shown);
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
                diff.record(key(&extra), DifferenceKind::Extra, Vec::new());
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
    // Files that went missing as they were read were removed, not damaged.
    if !problems.is_empty()
        && let Some(refusal) =
            crate::retention::removal_refusal(store, &req.backup_id, VERIFY_STOPPED, true).await
    {
        return Err(refusal);
    }
    let mismatch = !problems.is_empty()
        || tables.iter().any(|t| {
            t.bad_blocks > 0 || t.missing_in_live > 0 || t.extra_in_live > 0 || t.different > 0
        });
    Ok(VerifyReport {
        backup_id: req.backup_id.clone(),
        status: if mismatch {
            VerifyStatus::Mismatch
        } else {
            VerifyStatus::Ok
        },
        tables,
        problems,
        differences,
        duration_seconds: started.elapsed().as_secs_f64(),
    })
}
