//! What the container holds, as retention sees it: each backup's state, when it started,
//! when anything last happened to it, and the restores that still read it.
//!
//! Activity of an incomplete backup is the newest of: its plan's `created_at`, its
//! workers' heartbeats (`at`, rewritten every 20 s while a task runs), its commit records
//! (`finished_at`) and poison records (`at`). Times come from the records, not from blob
//! properties, so they mean the same on every storage.

use futures::StreamExt;
use serde::Deserialize;
use tablevault_core::protocol::{JobStatus, is_valid_backup_id};
use tablevault_core::store::{BackupPaths, Store, StoreError};

use super::policy::{Span, parse_time, time_of_id};
use crate::Result;
use crate::state::{Standing, standing};

/// Where a backup stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// It has its manifest.
    Complete,
    /// No manifest, nothing poisoned.
    InProgress,
    /// No manifest, some task poisoned.
    Incomplete,
    /// A deletion started and did not finish.
    Deleting,
    /// Files under a backup id without a plan (what an attempt that raced a deletion
    /// wrote).
    Leftover,
    /// Its plan or manifest cannot be read: it cannot be restored, and only `forget`
    /// removes it (a policy does not decide over what it cannot read).
    Damaged,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Complete => "complete",
            Kind::InProgress => "in-progress",
            Kind::Incomplete => "incomplete",
            Kind::Deleting => "deleting",
            Kind::Leftover => "leftover",
            Kind::Damaged => "damaged",
        }
    }
}

/// One backup of the container.
#[derive(Debug, Clone)]
pub(crate) struct Surveyed {
    pub id: String,
    pub kind: Kind,
    /// Planning time, Unix seconds.
    pub started: i64,
    pub source_account: Option<String>,
    pub tables: Vec<String>,
    /// The newest sign of work (not complete backups only; `started` otherwise).
    pub last_activity: i64,
    /// Restores that still read it, described (`restore <id> in-progress`).
    pub readers: Vec<String>,
    /// What cannot be read, for a damaged backup.
    pub damage: Option<String>,
    /// When its manifest was written, by the service's clock (complete backups, where the
    /// service says): a coordinator whose clock was slow planned a newer backup under an
    /// older time, and `--keep-last 1` removed it as the older.
    pub completed: Option<i64>,
    /// Its source account's Table endpoint, lower-cased, without a trailing `/`: two
    /// accounts can share a name (another emulator, another cloud, a Cosmos DB Table
    /// account), and the policy counts each account's backups apart. `None` when the
    /// plan is unknown.
    pub source_endpoint: Option<String>,
}

/// A Table endpoint as retention compares it.
pub(crate) fn endpoint_key(endpoint: &str) -> String {
    endpoint.trim_end_matches('/').to_ascii_lowercase()
}

/// Every backup of the container, oldest first.
pub(crate) async fn survey(
    store: &Store,
    now: i64,
    abandoned_after: &Span,
) -> Result<Vec<Surveyed>> {
    let ids = match store.list_dirs("").await {
        Ok(ids) => ids,
        Err(StoreError::Storage(e)) if e.has_code("ContainerNotFound") => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let found: Vec<Result<Option<Surveyed>>> = futures::stream::iter(ids)
        .filter(|id| std::future::ready(is_valid_backup_id(id)))
        .map(|id| async move { survey_one(store, &id, now, abandoned_after).await })
        .buffered(8)
        .collect()
        .await;
    let mut out = Vec::new();
    for f in found {
        out.extend(f?);
    }
    Ok(out)
}

/// One backup; `None` if the directory is not a tablevault backup.
async fn survey_one(
    store: &Store,
    id: &str,
    now: i64,
    abandoned_after: &Span,
) -> Result<Option<Surveyed>> {
    let paths = BackupPaths::new(id);
    let readers = live_restores(store, id, now, abandoned_after).await?;
    if let Some(d) = super::deleting(store, id).await? {
        let started = d
            .created_at
            .as_deref()
            .and_then(parse_time)
            .or_else(|| time_of_id(id))
            .unwrap_or(0);
        return Ok(Some(Surveyed {
            id: id.to_string(),
            kind: Kind::Deleting,
            started,
            source_account: d.source_account,
            tables: d.tables,
            last_activity: started,
            readers,
            damage: None,
            source_endpoint: None,
            completed: None,
        }));
    }
    let job = match store.backup_job(id).await {
        Ok(job) => job,
        Err(StoreError::Corrupt(why)) => {
            let Some(started) = time_of_id(id) else {
                return Ok(None);
            };
            return Ok(Some(Surveyed {
                id: id.to_string(),
                kind: Kind::Damaged,
                started,
                source_account: None,
                tables: Vec::new(),
                last_activity: started,
                readers,
                damage: Some(format!("plan unreadable: {why}")),
                source_endpoint: None,
                completed: None,
            }));
        }
        Err(e) => return Err(e.into()),
    };
    let Some(job) = job else {
        // No plan: leftovers, if the id is one of ours.
        let Some(started) = time_of_id(id) else {
            return Ok(None);
        };
        let last_activity = activity(store, &paths, started).await?;
        return Ok(Some(Surveyed {
            id: id.to_string(),
            kind: Kind::Leftover,
            started,
            source_account: None,
            tables: Vec::new(),
            last_activity,
            readers,
            damage: None,
            source_endpoint: None,
            completed: None,
        }));
    };
    let started = parse_time(&job.created_at)
        .or_else(|| time_of_id(id))
        .unwrap_or(0);
    let mut damage = None;
    let kind = match standing(store, &job).await? {
        Standing::Complete(_) => Kind::Complete,
        Standing::InProgress => Kind::InProgress,
        Standing::Incomplete => Kind::Incomplete,
        Standing::Damaged(why) => {
            damage = Some(why);
            Kind::Damaged
        }
    };
    let last_activity = if matches!(kind, Kind::Complete | Kind::Damaged) {
        started
    } else {
        activity(store, &paths, started).await?
    };
    let completed = match kind {
        Kind::Complete => store
            .blobs()
            .properties(&paths.manifest())
            .await?
            .and_then(|p| p.last_modified)
            .and_then(unix_seconds),
        _ => None,
    };
    Ok(Some(Surveyed {
        id: id.to_string(),
        kind,
        started,
        source_account: Some(job.source.account.clone()),
        tables: job.tables.iter().map(|t| t.name.clone()).collect(),
        last_activity,
        readers,
        damage,
        source_endpoint: Some(endpoint_key(&job.source.table_endpoint)),
        completed,
    }))
}

/// The fields of heartbeats, commit and poison records that say when.
#[derive(Deserialize)]
struct When {
    at: Option<String>,
    finished_at: Option<String>,
}

/// The newest time any heartbeat, commit record or poison record of the backup names,
/// or the service wrote one of them, the plan or a marker at.
async fn activity(store: &Store, paths: &BackupPaths, started: i64) -> Result<i64> {
    // When the service last saw a write under the backup, by its own clock: the times
    // inside the records are their writers' clocks, and a worker whose clock is behind
    // made a running backup look idle for as long as it was behind. The records are read
    // for their own times too; the plan and the enqueued marker (a backup being planned
    // has written nothing else) count by their write only.
    let mut newest = started;
    let mut names = Vec::new();
    for (root, delimiter, read) in [
        (paths.heartbeats_root(), None, true),
        (paths.commits_root(), None, true),
        (paths.poison_root(), None, true),
        (paths.root(), Some("/"), false),
    ] {
        for b in store.blobs().list(&root, delimiter).await?.blobs {
            if let Some(t) = b.last_modified.and_then(unix_seconds) {
                newest = newest.max(t);
            }
            if read {
                names.push(b.name);
            }
        }
    }
    let times: Vec<Result<Option<i64>, StoreError>> = futures::stream::iter(names)
        .map(|name| async move {
            let when = match store.read::<When>(&name).await {
                Ok(w) => w,
                Err(StoreError::Corrupt(_)) => None,
                Err(e) => return Err(e),
            };
            Ok(when.and_then(|w| w.at.or(w.finished_at).as_deref().and_then(parse_time)))
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for t in times {
        newest = newest.max(t?.unwrap_or(i64::MIN));
    }
    Ok(newest)
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_seconds(t: std::time::SystemTime) -> Option<i64> {
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs() as i64)
}

/// The restores of a backup that still read it: `in-progress` or `interrupted` (it can
/// be resumed), or planned within `abandoned_after` with no state yet (being planned).
/// Cancelled and finished restores read nothing more.
pub(crate) async fn live_restores(
    store: &Store,
    id: &str,
    now: i64,
    abandoned_after: &Span,
) -> Result<Vec<String>> {
    let root = BackupPaths::new(id).restores_root();
    let mut out = Vec::new();
    for rid in store.list_dirs(&root).await? {
        let rid = rid.trim_start_matches(&root).to_string();
        match store.restore_state(id, &rid).await {
            Ok(Some(s)) if !s.status.is_final() => {
                out.push(format!("restore {rid} {}", s.status));
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                let planned = match store.restore_job(id, &rid).await {
                    Ok(job) => job.and_then(|j| parse_time(&j.created_at)),
                    Err(StoreError::Corrupt(_)) => None,
                    Err(e) => return Err(e.into()),
                };
                if planned.is_some_and(|t| t > abandoned_after.before(now)) {
                    out.push(format!("restore {rid} being planned"));
                }
            }
            // An unreadable state: assume it is live.
            Err(StoreError::Corrupt(_)) => {
                out.push(format!("restore {rid} {}", JobStatus::InProgress));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}
