//! Groups of small tables (`TaskKind::Tables`): one claimed message backs up several
//! tables whole, one after another, each as its own task with its own commit record. A
//! group only saves queue requests (a put, a claim and a delete per table, which cost a
//! backup of 200 small tables as much emulator CPU as its table reads); everything that
//! keeps a backup safe stays per task:
//!
//! * When a table turns out to hold more than a page, the tables after it go back on
//!   the queue at once (as one message), so they do not wait behind a large table.
//! * When a table fails, or a group comes back after an earlier claim ended without
//!   finishing it, the group becomes one message per unfinished table: those are retried,
//!   counted and poisoned like any task, and a group never retries as a whole.
//! * A worker that shuts down hands back a group of the tables it has not finished.

use std::time::Duration;

use tablevault_core::keys::KeyRange;
use tablevault_core::protocol::{TaskMessage, WholeTable};
use tablevault_core::queue::ReceivedMessage;
use tablevault_core::stats::WorkerStats;
use tablevault_core::store::{BackupPaths, Store};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::TaskError;
use crate::dispatch::{Role, Slot, found_or_settled, heartbeats_root, plans_tables};
use crate::lease::Lease;
use crate::metrics::Kind;
use crate::settle::retry_delay;
use crate::worker::Worker;

/// Why a group becomes one message per table.
#[derive(Clone, Copy)]
enum Ungroup<'a> {
    /// An earlier claim ended without finishing it: tables already committed are left out.
    CameBack,
    /// `table` failed with `why` (none from it on is committed).
    Failed { table: &'a WholeTable, why: &'a str },
}

impl Worker {
    /// Backs up a group of tables (`tables`, the first of which is `task`'s).
    pub(crate) async fn handle_group(
        &self,
        message: ReceivedMessage,
        task: TaskMessage,
        tables: Vec<WholeTable>,
        shutdown: CancellationToken,
        slot: &mut Slot,
    ) {
        let settler = &self.settler;
        let Some((store, lease)) = self.take(&message, &task).await else {
            return;
        };
        let heartbeats = heartbeats_root(&task);
        let reading = self.jobs.backup_job(&store, &task.job);
        let job = self
            .beside_fleet_listing(&store, &heartbeats, reading)
            .await
            .map(|job| {
                job.filter(|job| plans_tables(job, tables.iter().map(|t| t.table.as_str())))
            });
        let Some((job, lease)) = found_or_settled(job, lease).await else {
            return;
        };
        if message.dequeue_count > 1 {
            // An earlier claim ended without finishing (its worker died or lost the
            // message): from here on each unfinished table is a task of its own.
            tracing::info!(
                tables = tables.len(),
                "a group of tables came back; queueing each unfinished table as a task of its own"
            );
            self.ungroup(&store, &task, &tables, Ungroup::CameBack, lease, &message)
                .await;
            return;
        }
        let heartbeat = self.heartbeat(&store, &heartbeats, &task);
        let Some((source, limiter, _following)) = self
            .paced_client(
                Role::Source,
                &job.source,
                &store,
                &heartbeats,
                job.options.max_rate,
            )
            .await
        else {
            let receipt = lease.stop().await;
            settler.offer_to_others(&message, &receipt).await;
            return;
        };
        let whole = KeyRange::all();
        let more_pages = tokio::sync::Notify::new();
        // The tables this message still stands for: those from `end` on were handed on.
        let mut end = tables.len();
        let mut i = 0;
        while i < end {
            let table = &tables[i];
            let rest = &tables[i + 1..end];
            let mut attempt = self.backup_attempt(
                &store,
                &job,
                (&source, &limiter),
                (&task.container, &table.table, &table.task),
                &whole,
                None,
                true,
                (lease.lost(), shutdown.clone()),
            );
            attempt.more_pages = (!rest.is_empty()).then_some(&more_pages);
            let span = tracing::info_span!("grouped", table = %table.table, task = %table.task);
            let run = attempt.run().instrument(span);
            tokio::pin!(run);
            let outcome = tokio::select! {
                outcome = &mut run => outcome,
                _ = more_pages.notified(), if !rest.is_empty() => {
                    if self.hand_on(&task, rest).await {
                        end = i + 1;
                    }
                    run.await
                }
            };
            self.count_backup(&outcome);
            match outcome {
                Ok(_) => self.stats.changed.notify_one(),
                Err(TaskError::Lost) => {
                    // The next claim of the message turns it into single tasks.
                    self.config.metrics.lease_lost();
                    tracing::warn!("lost the group's message mid-table; another worker has it");
                    return;
                }
                Err(TaskError::Shutdown) => {
                    // Not the tables' fault: hand back those not finished, as a group
                    // with all its deliveries.
                    let receipt = lease.stop().await;
                    if let Some(unfinished) =
                        TaskMessage::for_tables(&task.container, &task.job, &tables[i..end])
                    {
                        let again = ReceivedMessage {
                            text: unfinished.encode(),
                            ..message.clone()
                        };
                        settler.hand_back(&again, &receipt, Duration::ZERO).await;
                    }
                    return;
                }
                Err(TaskError::Transient(why) | TaskError::Permanent(why)) => {
                    tracing::warn!(table = %table.table, reason = %why, "a table of the group failed; queueing it and the rest as tasks of their own");
                    let failed = Ungroup::Failed {
                        table,
                        why: why.as_str(),
                    };
                    self.ungroup(&store, &task, &tables[i..end], failed, lease, &message)
                        .await;
                    return;
                }
            }
            i += 1;
        }
        self.stats.changed.notify_one();
        slot.free();
        let (deleted, ()) = tokio::join!(lease.complete(), self.settle_backup_job(&store, &job));
        if let Err(e) = deleted {
            tracing::warn!(error = %e, "tables done but the group's message could not be deleted; a duplicate delivery finds them done");
        }
        drop(heartbeat);
    }

    /// Puts `rest` on the queue as one message for other workers; whether it landed.
    async fn hand_on(&self, task: &TaskMessage, rest: &[WholeTable]) -> bool {
        let Some(message) = TaskMessage::for_tables(&task.container, &task.job, rest) else {
            return false;
        };
        match self.settler.queue().put(&message.encode(), None).await {
            Ok(()) => {
                tracing::info!(
                    tables = rest.len(),
                    "the table holds more than a page; handed the rest of its group to other workers"
                );
                true
            }
            Err(e) => {
                // The tables stay with this claim: a put that failed may still have
                // landed, and then their duplicate tasks lose the commit race.
                tracing::debug!(error = %e, "could not hand the rest of the group on; keeping it");
                false
            }
        }
    }

    /// Replaces the group's message with one message per table of `tables` (for a group
    /// that came back, those not committed yet; a failed table's carrying its error),
    /// then deletes it. If a put fails, the group is given back for a retry instead.
    async fn ungroup(
        &self,
        store: &Store,
        task: &TaskMessage,
        tables: &[WholeTable],
        why: Ungroup<'_>,
        lease: Lease,
        message: &ReceivedMessage,
    ) {
        let paths = &BackupPaths::new(&task.job);
        let puts = tables.iter().map(|t| async move {
            if matches!(why, Ungroup::CameBack)
                && store
                    .exists(&paths.commit(&t.table, &t.task))
                    .await
                    .unwrap_or(false)
            {
                return Ok(());
            }
            let single = TaskMessage::whole_table(&task.container, &task.job, t);
            let text = match why {
                Ungroup::Failed { table, why } if table == t => single.encode_with_last_error(why),
                _ => single.encode(),
            };
            self.settler.queue().put(&text, None).await
        });
        let results = futures::future::join_all(puts).await;
        if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
            let delay = retry_delay(message.dequeue_count);
            tracing::warn!(error = %e, retry_in_s = delay.as_secs(), "could not queue the group's tables one by one; giving the group back");
            let _ = lease.release(delay, None).await;
            return;
        }
        if let Ungroup::Failed { .. } = why {
            WorkerStats::add(&self.stats.tasks_retried, 1);
            self.config.metrics.failed(Kind::Backup);
        }
        if let Err(e) = lease.complete().await {
            tracing::warn!(error = %e, "queued the group's tables one by one but could not delete the group; its next claim queues them again (duplicates are dropped)");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tablevault_core::protocol::last_error;
    use tablevault_core::queue::TaskQueue;
    use tablevault_core::testing::{MemoryBlobs, empty_commit};

    use super::*;
    use crate::worker::tests::worker_on_fakes_with;

    const JOB: &str = "20200101T000000Z-group001";

    /// A backup job of three whole tables in `blobs`, the first already committed, and
    /// the group message of its tables.
    async fn planted_group(blobs: &Arc<MemoryBlobs>) -> TaskMessage {
        let store = Store::new(blobs.clone());
        let paths = BackupPaths::new(JOB);
        let names = ["Aaa", "Bbb", "Ccc"];
        let tables: Vec<serde_json::Value> = names
            .iter()
            .map(|n| {
                serde_json::json!({ "name": n, "planning": "whole",
                    "tasks": [ { "task": "r0000", "range": { "start": null, "end": null } } ] })
            })
            .collect();
        let job = serde_json::json!({
            "protocol": 1, "format": 1, "backup_id": JOB, "created_at": "",
            "source": { "account": "gone", "table_endpoint": "http://127.0.0.1:9/gone" },
            "options": { "compression": "zstd", "blocks_per_blob": 20, "block_bytes": 100000,
                         "batch_bytes": 100000, "max_attempts": 3, "queue": "q" },
            "tables": tables, "tool_version": "test"
        });
        store.overwrite(&paths.job(), &job).await.unwrap();
        store
            .overwrite(
                &paths.commit("Aaa", "r0000"),
                &empty_commit(JOB, "Aaa", "r0000"),
            )
            .await
            .unwrap();
        let group: Vec<WholeTable> = names
            .iter()
            .map(|n| WholeTable {
                table: n.to_string(),
                task: "r0000".into(),
            })
            .collect();
        TaskMessage::for_tables("c", JOB, &group).unwrap()
    }

    /// A group that comes back (its worker died mid-group) is not run again as a whole:
    /// each table not yet committed becomes a task of its own, retried and poisoned
    /// alone, and the group's message is gone.
    #[tokio::test(start_paused = true)]
    async fn a_group_that_comes_back_becomes_one_task_per_unfinished_table() {
        let blobs = Arc::new(MemoryBlobs::new("c"));
        let group = planted_group(&blobs).await;
        let (worker, queue) = worker_on_fakes_with(blobs);
        queue.put(&group.encode(), None).await.unwrap();
        // A first claim that never ends: the message comes back a second time.
        let first = queue.receive(1, Duration::from_secs(1)).await.unwrap();
        assert_eq!(first[0].dequeue_count, 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let again = queue.receive(1, Duration::from_secs(30)).await.unwrap();
        assert_eq!(again[0].dequeue_count, 2);
        worker
            .handle(again[0].clone(), CancellationToken::new())
            .await;
        let mut left: Vec<TaskMessage> = queue
            .texts()
            .iter()
            .map(|t| TaskMessage::decode(t).unwrap())
            .collect();
        left.sort_by(|a, b| a.table.cmp(&b.table));
        assert_eq!(
            left,
            vec![
                TaskMessage::whole_table(
                    "c",
                    JOB,
                    &WholeTable {
                        table: "Bbb".into(),
                        task: "r0000".into()
                    }
                ),
                TaskMessage::whole_table(
                    "c",
                    JOB,
                    &WholeTable {
                        table: "Ccc".into(),
                        task: "r0000".into()
                    }
                ),
            ],
            "the committed table is dropped, the others are single tasks, the group is gone"
        );
    }

    /// A group whose tables cannot be queued one by one is given back whole, so its
    /// tables are never on no queue at all.
    #[tokio::test(start_paused = true)]
    async fn a_group_that_cannot_be_split_up_stays_queued() {
        use tablevault_core::testing::{Op, Strike, busy};
        let blobs = Arc::new(MemoryBlobs::new("c"));
        let group = planted_group(&blobs).await;
        let (worker, queue) = worker_on_fakes_with(blobs);
        queue.put(&group.encode(), None).await.unwrap();
        let _ = queue.receive(1, Duration::from_secs(1)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let again = queue.receive(1, Duration::from_secs(30)).await.unwrap();
        queue.fail(Op::Put, "", Strike::Before, busy("Put Message"));
        worker
            .handle(again[0].clone(), CancellationToken::new())
            .await;
        let texts = queue.texts();
        assert!(
            texts
                .iter()
                .any(|t| TaskMessage::decode(t).unwrap() == group),
            "the group is still queued: {texts:?}"
        );
        assert_eq!(last_error(&texts[0]), None);
    }
}
