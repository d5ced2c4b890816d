//! `tablevault list`: the backups in a container, oldest first, with their state.

use serde::Serialize;
use tablevault_common::blob::ListOptions;
use tablevault_common::job::BackupPaths;

use crate::backup::Target;
use crate::exit::CmdResult;

/// One backup in the list.
#[derive(Debug, Clone, Serialize)]
pub struct ListEntry {
    /// Backup id.
    pub backup_id: String,
    /// When it was planned.
    pub created_at: String,
    /// `complete`, `incomplete` (poisoned tasks) or `in-progress`.
    pub status: String,
    /// Source account.
    pub source_account: String,
    /// Tables.
    pub tables: Vec<String>,
    /// Entities (complete backups only).
    pub entities: Option<u64>,
}

/// Lists the backups of a container.
pub async fn list(target: &Target) -> CmdResult<Vec<ListEntry>> {
    let blobs = target.blobs()?;
    let top = match blobs
        .list_all(&ListOptions {
            delimiter: Some("/"),
            ..Default::default()
        })
        .await
    {
        Ok(t) => t,
        Err(e) if e.has_code("ContainerNotFound") => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for prefix in top.prefixes {
        let id = prefix.trim_end_matches('/');
        if !tablevault_common::job::is_valid_backup_id(id) {
            continue;
        }
        let Ok(job) = crate::state::load_job(&blobs, id).await else {
            continue; // not a tablevault backup (or unreadable): skip rather than fail the list
        };
        let manifest = crate::state::load_manifest(&blobs, id).await?;
        let status = if manifest.is_some() {
            "complete"
        } else {
            let poisoned = blobs
                .list_page(
                    &ListOptions {
                        prefix: Some(&BackupPaths::new(id).poison_root()),
                        max_results: Some(1),
                        ..Default::default()
                    },
                    None,
                )
                .await?;
            if poisoned.blobs.is_empty() {
                "in-progress"
            } else {
                "incomplete"
            }
        };
        out.push(ListEntry {
            backup_id: id.to_string(),
            created_at: job.created_at.clone(),
            status: status.to_string(),
            source_account: job.source.account.clone(),
            tables: job.tables.iter().map(|t| t.name.clone()).collect(),
            entities: manifest.map(|m| m.entities),
        });
    }
    Ok(out)
}
