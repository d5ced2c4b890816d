//! Compares a complete backup with live tables, range by range: each of the backup's
//! committed ranges is read block by block and merged, in key order, with a scan of the
//! same key range of the live table. The ranges tile the key space, so every live entity
//! is looked at exactly once, and ranges are compared concurrently. Memory is one block
//! and one page per range in flight, whatever the table size.
//!
//! Restore uses it three ways: to preview what a restore would overwrite or delete
//! (`--dry-run`), to delete what the backup does not hold (`--mode replace`), and to
//! check the result after writing.

use std::collections::VecDeque;
use std::pin::Pin;

use futures::{Stream, StreamExt};
use serde::Serialize;
use tablevault_azure::table::{
    BatchOperation, Entity, EntityPage, Query, TableClient, batch_carries_keys,
};
use tablevault_core::keys::{EntityKey, KeyRange};
use tablevault_core::protocol::{Manifest, ManifestRange, RestoreMode};
use tablevault_core::store::Store;

use crate::verify::{Difference, DifferenceKind};
use crate::watch::{Progress, Snapshot};
use crate::{Error, Result};

/// Most differences listed per comparison (all are counted).
pub const MAX_LISTED: usize = 100;

/// Ranges compared at once.
const RANGES_IN_FLIGHT: usize = 8;

/// When a live entity counts as equal to its backed-up version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Equality {
    /// The same properties with the same types and values (Timestamp/ETag excluded).
    Exact,
    /// Every backed-up property is present with the same type and value; the live entity
    /// may have more (what `merge` leaves).
    BackupPropertiesOnly,
}

impl Equality {
    /// What a restore in `mode` promises: `merge` leaves other properties in place.
    pub fn for_mode(mode: RestoreMode) -> Self {
        if mode == RestoreMode::Merge {
            Equality::BackupPropertiesOnly
        } else {
            Equality::Exact
        }
    }
}

/// What to do besides counting.
#[derive(Debug, Clone, Copy)]
pub struct CompareOptions<'a> {
    /// How entities are compared.
    pub equality: Equality,
    /// Delete live entities the backup does not hold.
    pub delete_extras: bool,
    /// Counts each deletion as it succeeds, so that what an interrupted comparison
    /// deleted is known.
    pub deleted: Option<&'a std::sync::atomic::AtomicU64>,
}

/// Counts of one table's comparison.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Counts {
    /// Entities in the backup.
    pub backup: u64,
    /// In both and equal.
    pub matching: u64,
    /// In the backup, not live.
    pub missing: u64,
    /// In both, not equal.
    pub different: u64,
    /// Live, not in the backup.
    pub extra: u64,
    /// Extras deleted.
    pub deleted: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.backup += o.backup;
        self.matching += o.matching;
        self.missing += o.missing;
        self.different += o.different;
        self.extra += o.extra;
        self.deleted += o.deleted;
    }
}

/// One table's comparison.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TableComparison {
    /// Table in the backup.
    pub source: String,
    /// Live table.
    pub target: String,
    /// Whether the live table exists.
    pub exists: bool,
    /// Counts.
    pub counts: Counts,
    /// Some of the differences (at most [`MAX_LISTED`] per table), in key order.
    pub differences: Vec<Difference>,
}

type PageStream = Pin<Box<dyn Stream<Item = tablevault_azure::Result<EntityPage>> + Send>>;

/// The entities of one key range of a live table, one at a time in key order.
pub(crate) struct LiveCursor {
    pages: PageStream,
    buffer: VecDeque<Entity>,
    done: bool,
}

impl LiveCursor {
    /// The whole table.
    pub(crate) fn new(client: &TableClient, table: &str) -> Self {
        Self::range(client, table, &KeyRange::all())
    }

    /// One key range of the table (one filter after another, so still in key order).
    pub(crate) fn range(client: &TableClient, table: &str, range: &KeyRange) -> Self {
        let client = client.clone();
        let table = table.to_string();
        let pages = futures::stream::iter(range.filters())
            .flat_map(move |f| client.pages(&table, Query::scan(f)).into_stream());
        LiveCursor {
            pages: Box::pin(pages),
            buffer: VecDeque::new(),
            done: false,
        }
    }

    /// Nothing (a table that does not exist).
    fn empty() -> Self {
        LiveCursor {
            pages: Box::pin(futures::stream::empty()),
            buffer: VecDeque::new(),
            done: true,
        }
    }

    pub(crate) async fn peek(&mut self) -> Result<Option<&Entity>> {
        while self.buffer.is_empty() && !self.done {
            match self.pages.next().await {
                Some(page) => self.buffer.extend(page?.entities),
                None => self.done = true,
            }
        }
        Ok(self.buffer.front())
    }

    pub(crate) fn advance(&mut self) -> Option<Entity> {
        self.buffer.pop_front()
    }
}

pub(crate) fn key(e: &Entity) -> EntityKey {
    EntityKey::new(&e.partition_key, &e.row_key)
}

/// Deletes extras, a change set per partition where the keys allow it.
struct Deleter<'a> {
    client: &'a TableClient,
    table: &'a str,
    pending: Vec<EntityKey>,
    deleted: u64,
    /// The comparison's running count, across ranges.
    running: Option<&'a std::sync::atomic::AtomicU64>,
}

impl Deleter<'_> {
    fn count(&mut self, n: u64) {
        self.deleted += n;
        if let Some(r) = self.running {
            r.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }

    async fn push(&mut self, k: EntityKey) -> Result<()> {
        if self.pending.first().is_some_and(|p| p.pk != k.pk) || self.pending.len() >= 100 {
            self.flush().await?;
        }
        self.pending.push(k);
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        let keys = std::mem::take(&mut self.pending);
        let (grouped, single): (Vec<EntityKey>, Vec<EntityKey>) = keys
            .into_iter()
            .partition(|k| batch_carries_keys(&k.pk, &k.rk));
        let ops: Vec<BatchOperation> = grouped
            .iter()
            .map(|k| BatchOperation::Delete {
                partition_key: k.pk.clone(),
                row_key: k.rk.clone(),
            })
            .collect();
        let mut one_by_one = single;
        if !ops.is_empty() {
            match self.client.submit_batch(self.table, &ops).await {
                Ok(()) => self.count(ops.len() as u64),
                // Someone deleted one meanwhile: settle them one at a time.
                Err(e) if e.status() == Some(404) && !e.has_code("TableNotFound") => {
                    one_by_one.extend(grouped)
                }
                Err(e) => return Err(e.into()),
            }
        }
        for k in one_by_one {
            match self.client.delete_entity(self.table, &k.pk, &k.rk).await {
                Ok(()) => self.count(1),
                Err(e) if e.status() == Some(404) && !e.has_code("TableNotFound") => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Compares one committed range of the backup with the same range of the live table.
async fn compare_range(
    store: &Store,
    manifest: &Manifest,
    range: &ManifestRange,
    live_client: &TableClient,
    live_table: &str,
    exists: bool,
    opts: CompareOptions<'_>,
) -> Result<(Counts, Vec<Difference>)> {
    let commit = store.commit_record(&range.commit).await?;
    let mut live = if exists {
        LiveCursor::range(live_client, live_table, &commit.range)
    } else {
        LiveCursor::empty()
    };
    let mut counts = Counts::default();
    let mut listed = Vec::new();
    let mut deleter = opts.delete_extras.then(|| Deleter {
        client: live_client,
        table: live_table,
        pending: Vec::new(),
        deleted: 0,
        running: opts.deleted,
    });
    let mut note = |counts: &mut Counts, key: EntityKey, kind: DifferenceKind, props| {
        match kind {
            DifferenceKind::Missing => counts.missing += 1,
            DifferenceKind::Extra => counts.extra += 1,
            DifferenceKind::Different => counts.different += 1,
        }
        if listed.len() < MAX_LISTED {
            listed.push(Difference {
                table: live_table.to_string(),
                key,
                kind,
                properties: props,
            });
        }
    };
    for blob in &commit.blobs {
        for block in &blob.blocks {
            let decoded = store.read_block(blob, block, manifest.compression).await?;
            for backed_up in decoded.batches.iter().flatten() {
                counts.backup += 1;
                let k = key(backed_up);
                loop {
                    let Some(current) = live.peek().await? else {
                        note(&mut counts, k, DifferenceKind::Missing, Vec::new());
                        break;
                    };
                    let ck = key(current);
                    if ck < k {
                        live.advance();
                        if let Some(d) = deleter.as_mut() {
                            d.push(ck.clone()).await?;
                        }
                        note(&mut counts, ck, DifferenceKind::Extra, Vec::new());
                        continue;
                    }
                    if ck > k {
                        note(&mut counts, k, DifferenceKind::Missing, Vec::new());
                        break;
                    }
                    let current = live.advance().expect("peeked");
                    let mut diff = backed_up.differences(&current);
                    if opts.equality == Equality::BackupPropertiesOnly {
                        diff.retain(|p| backed_up.get(p).is_some());
                    }
                    if diff.is_empty() {
                        counts.matching += 1;
                    } else {
                        note(&mut counts, k, DifferenceKind::Different, diff);
                    }
                    break;
                }
            }
        }
    }
    while live.peek().await?.is_some() {
        let extra = live.advance().expect("peeked");
        if let Some(d) = deleter.as_mut() {
            d.push(key(&extra)).await?;
        }
        note(&mut counts, key(&extra), DifferenceKind::Extra, Vec::new());
    }
    if let Some(mut d) = deleter {
        d.flush().await?;
        counts.deleted = d.deleted;
    }
    Ok((counts, listed))
}

/// Compares the backup's tables `pairs` (`(backup table, live table)`) with the live
/// tables of `live_client`'s account.
pub async fn compare_tables(
    store: &Store,
    manifest: &Manifest,
    pairs: &[(String, String)],
    live_client: &TableClient,
    opts: CompareOptions<'_>,
    progress: Option<&dyn Progress>,
) -> Result<Vec<TableComparison>> {
    let mut out = Vec::new();
    let mut shown = Snapshot::default();
    let mut work = Vec::new();
    for (i, (source, target)) in pairs.iter().enumerate() {
        let mt = manifest
            .tables
            .iter()
            .find(|t| &t.name == source)
            .ok_or_else(|| Error::invalid(format!("table {source} is not in the backup")))?;
        let exists = live_client.table_exists(target).await?;
        out.push(TableComparison {
            source: source.clone(),
            target: target.clone(),
            exists,
            counts: Counts::default(),
            differences: Vec::new(),
        });
        work.extend(mt.ranges.iter().map(move |r| (i, r, exists)));
        shown.tasks_total += mt.ranges.len() as u64;
        *shown.entities_expected.get_or_insert(0) += mt.entities;
    }
    let mut results = futures::stream::iter(work)
        .map(|(i, range, exists)| {
            let target = &pairs[i].1;
            async move {
                compare_range(store, manifest, range, live_client, target, exists, opts)
                    .await
                    .map(|r| (i, range, r))
            }
        })
        .buffer_unordered(RANGES_IN_FLIGHT);
    let mut by_range: Vec<(usize, &ManifestRange, Vec<Difference>)> = Vec::new();
    while let Some(r) = results.next().await {
        let (i, range, (counts, listed)) = r?;
        shown.tasks_done += 1;
        shown.entities += counts.backup;
        if let Some(p) = progress {
            p.update(shown);
        }
        out[i].counts.add(&counts);
        by_range.push((i, range, listed));
    }
    // List differences in key order, whatever order the ranges finished in.
    by_range.sort_by(|a, b| (a.0, &a.1.range.start).cmp(&(b.0, &b.1.range.start)));
    for (i, _, listed) in by_range {
        let room = MAX_LISTED.saturating_sub(out[i].differences.len());
        out[i].differences.extend(listed.into_iter().take(room));
    }
    Ok(out)
}
