//! Task messages: what a queue message asks a worker to do, and its text on the queue
//! (base64 of JSON, so any key survives the queue's XML). Decoding trusts nothing.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use super::ids::{PROTOCOL_VERSION, is_valid_backup_id};
use crate::keys::KeyRange;

/// What a queue message asks a worker to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TaskKind {
    /// Scan a key range of a table into blobs.
    Backup {
        /// The range.
        range: KeyRange,
        /// A position no key of the table reached when the task was made (learned by the
        /// worker that split it off): where to cut the range again without searching for
        /// the table's end. Only a hint for balance; never for correctness.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ceiling: Option<crate::keys::EntityKey>,
        /// Entities the worker that split it off expected it to hold, from the density of
        /// the keys it had read. A worker that finds this task waiting still splits its
        /// own range when that holds far more, so no range stays much larger than the
        /// others. Only a hint for balance.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        estimate: Option<u64>,
    },
    /// Back up several tables whole, one after another, under one claim: each is its own
    /// task (its own id and commit record), so this only saves queue requests. The
    /// coordinator groups tables it expects to be small (`enqueue`); the message's
    /// `table` and `task` are the first of them. A worker hands the tables after one that
    /// turns out large back to the queue, and turns a group it cannot finish into one
    /// message per table, so failures are counted and poisoned per table.
    Tables {
        /// The tables, in the order they are backed up; at most [`MAX_GROUPED_TABLES`].
        tables: Vec<WholeTable>,
    },
    /// Replay one data blob, or one block of it, into a table. The message names the
    /// target table (`table`); the rest comes from the backup's records.
    Restore {
        /// Restore id (under the backup's `restores/`).
        restore: String,
        /// Table the data was backed up from.
        source_table: String,
        /// Task id of the backed-up range (its commit record holds the blob list).
        range_task: String,
        /// Index of the blob in the commit record.
        blob: usize,
        /// Index of the block in the blob, or `None` for every block of the blob.
        block: Option<usize>,
    },
}

/// Most tables one message groups: keeps the message far below the queue's 64 KiB.
pub const MAX_GROUPED_TABLES: usize = 64;

/// A table backed up whole by its own task, in a group of tables (`TaskKind::Tables`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WholeTable {
    /// Table.
    pub table: String,
    /// Task id (its range is the whole key space).
    pub task: String,
}

/// A queue message. Sent as base64 of its JSON, so any key survives the queue's XML.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskMessage {
    /// Protocol version.
    pub v: u32,
    /// Container holding the job.
    pub container: String,
    /// Backup id.
    pub job: String,
    /// Table.
    pub table: String,
    /// Task id.
    pub task: String,
    /// What to do.
    #[serde(flatten)]
    pub kind: TaskKind,
}

impl TaskMessage {
    /// The id of the job the task belongs to: the restore's id for a restore task, the
    /// backup's otherwise.
    pub fn owner(&self) -> &str {
        match &self.kind {
            TaskKind::Restore { restore, .. } => restore,
            TaskKind::Backup { .. } | TaskKind::Tables { .. } => &self.job,
        }
    }

    /// The message of one whole-table task of backup `job` in `container`.
    pub fn whole_table(container: &str, job: &str, table: &WholeTable) -> TaskMessage {
        TaskMessage {
            v: PROTOCOL_VERSION,
            container: container.to_string(),
            job: job.to_string(),
            table: table.table.clone(),
            task: table.task.clone(),
            kind: TaskKind::Backup {
                range: KeyRange::all(),
                ceiling: None,
                estimate: None,
            },
        }
    }

    /// The message for `tables` of backup `job` in `container`: one task, or a group of
    /// them. `None` for no table.
    pub fn for_tables(container: &str, job: &str, tables: &[WholeTable]) -> Option<TaskMessage> {
        match tables {
            [] => None,
            [one] => Some(Self::whole_table(container, job, one)),
            [first, ..] => Some(TaskMessage {
                kind: TaskKind::Tables {
                    tables: tables.to_vec(),
                },
                ..Self::whole_table(container, job, first)
            }),
        }
    }

    /// The queue text.
    pub fn encode(&self) -> String {
        BASE64.encode(serde_json::to_vec(self).expect("task messages serialize"))
    }

    /// Parses queue text, saying what is wrong with a bad message.
    pub fn decode(text: &str) -> Result<Self, String> {
        let bytes = BASE64
            .decode(text.trim())
            .map_err(|_| "message is not base64".to_string())?;
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("message is not JSON: {e}"))?;
        let v = value.get("v").and_then(|v| v.as_u64());
        if v != Some(PROTOCOL_VERSION as u64) {
            return Err(format!("unsupported message version {v:?}"));
        }
        let msg: TaskMessage =
            serde_json::from_value(value).map_err(|e| format!("message is malformed: {e}"))?;
        if !is_valid_backup_id(&msg.job) {
            return Err(format!("message has an invalid job id {:?}", msg.job));
        }
        if !tablevault_azure::table::is_valid_table_name(&msg.table) {
            return Err(format!("message has an invalid table name {:?}", msg.table));
        }
        if !is_valid_backup_id(&msg.task) {
            return Err(format!("message has an invalid task id {:?}", msg.task));
        }
        if let TaskKind::Tables { tables } = &msg.kind {
            match tables.first() {
                None => return Err("message groups no table".into()),
                Some(first) if first.table != msg.table || first.task != msg.task => {
                    return Err("message's first grouped table is not its table".into());
                }
                Some(_) => {}
            }
            if tables.len() > MAX_GROUPED_TABLES {
                return Err(format!("message groups {} tables", tables.len()));
            }
            for t in tables {
                if !tablevault_azure::table::is_valid_table_name(&t.table) {
                    return Err(format!("message has an invalid table name {:?}", t.table));
                }
                if !is_valid_backup_id(&t.task) {
                    return Err(format!("message has an invalid task id {:?}", t.task));
                }
            }
        }
        if let TaskKind::Restore {
            restore,
            source_table,
            range_task,
            ..
        } = &msg.kind
        {
            if !is_valid_backup_id(restore) || !is_valid_backup_id(range_task) {
                return Err("message has an invalid restore or range id".into());
            }
            if !tablevault_azure::table::is_valid_table_name(source_table) {
                return Err(format!(
                    "message has an invalid source table {source_table:?}"
                ));
            }
        }
        Ok(msg)
    }

    /// The queue text of this task with the last error recorded, for the next attempt
    /// (and the poison record, if it comes to that). Kept short so messages stay far
    /// below the queue's 64 KiB.
    pub fn encode_with_last_error(&self, why: &str) -> String {
        let mut value = serde_json::to_value(self).expect("task messages serialize");
        let why: String = why.chars().take(MAX_LAST_ERROR_CHARS).collect();
        value["last_error"] = serde_json::Value::String(why);
        BASE64.encode(value.to_string())
    }
}

/// The queue text of a message handed back once more, and how many times it has been
/// handed back now. A task no worker can take (no one holds its account's credentials)
/// is offered less and less often instead of spinning on the queue.
pub fn handed_back(text: &str) -> (String, u64) {
    let Some(mut value) = BASE64
        .decode(text.trim())
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .filter(serde_json::Value::is_object)
    else {
        return (text.to_string(), 1);
    };
    let n = value
        .get("handed_back")
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
        + 1;
    value["handed_back"] = n.into();
    (BASE64.encode(value.to_string()), n)
}

/// Longest error text a message carries to its next delivery.
const MAX_LAST_ERROR_CHARS: usize = 1000;

/// The error an earlier delivery of a message recorded in it, if any.
pub fn last_error(text: &str) -> Option<String> {
    let bytes = BASE64.decode(text.trim()).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("last_error")?.as_str().map(str::to_string)
}

/// What goes on the poison queue: the original message text, untouched, and why it was
/// given up. Base64 of JSON, like task messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoisonEntry {
    /// Why the message was given up.
    pub reason: String,
    /// Deliveries so far.
    pub dequeue_count: u64,
    /// Job, table and task, when the message could be decoded.
    pub job: Option<String>,
    /// Table.
    pub table: Option<String>,
    /// Task.
    pub task: Option<String>,
    /// The original queue text.
    pub original: String,
    /// When.
    pub at: String,
    /// Which worker gave up.
    pub worker: String,
}

impl PoisonEntry {
    /// The poison queue text.
    pub fn encode(&self) -> String {
        BASE64.encode(serde_json::to_vec(self).expect("poison entries serialize"))
    }

    /// Reads poison queue text.
    pub fn decode(text: &str) -> Result<Self, String> {
        let bytes = BASE64
            .decode(text.trim())
            .map_err(|_| "poison entry is not base64".to_string())?;
        serde_json::from_slice(&bytes).map_err(|e| format!("poison entry is malformed: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::EntityKey;
    use crate::protocol::ids::new_backup_id;

    fn task() -> TaskMessage {
        TaskMessage {
            v: PROTOCOL_VERSION,
            container: "tablevault".into(),
            job: new_backup_id(),
            table: "Orders".into(),
            task: "r0003".into(),
            kind: TaskKind::Backup {
                range: KeyRange::new(Some(EntityKey::new("a<&>'\"\u{0}", "")), None),
                ceiling: Some(EntityKey::partition_start("z")),
                estimate: Some(12_345),
            },
        }
    }

    #[test]
    fn messages_round_trip_and_bad_ones_say_why() {
        let m = task();
        assert_eq!(TaskMessage::decode(&m.encode()).unwrap(), m);
        assert!(TaskMessage::decode("%%%").unwrap_err().contains("base64"));
        assert!(
            TaskMessage::decode(&BASE64.encode("{"))
                .unwrap_err()
                .contains("JSON")
        );
        assert!(
            TaskMessage::decode(&BASE64.encode(r#"{"v":9}"#))
                .unwrap_err()
                .contains("version")
        );
        let mut bad = serde_json::to_value(&m).unwrap();
        bad["table"] = "../../x".into();
        assert!(
            TaskMessage::decode(&BASE64.encode(bad.to_string()))
                .unwrap_err()
                .contains("table")
        );
        let mut bad = serde_json::to_value(&m).unwrap();
        bad["job"] = "../x".into();
        assert!(
            TaskMessage::decode(&BASE64.encode(bad.to_string()))
                .unwrap_err()
                .contains("job")
        );
    }

    #[test]
    fn groups_of_tables_round_trip_and_bad_ones_say_why() {
        let one = task();
        let tables: Vec<WholeTable> = ["Aaa", "Bbb", "Ccc"]
            .iter()
            .enumerate()
            .map(|(i, t)| WholeTable {
                table: t.to_string(),
                task: format!("r{i:04}"),
            })
            .collect();
        let tables_of = |t: &[WholeTable]| TaskMessage::for_tables(&one.container, &one.job, t);
        assert_eq!(tables_of(&[]), None);
        let single = tables_of(&tables[1..2]).unwrap();
        assert_eq!(
            (single.table.as_str(), single.task.as_str()),
            ("Bbb", "r0001")
        );
        assert!(
            matches!(&single.kind, TaskKind::Backup { range, .. } if *range == KeyRange::all())
        );
        let group = tables_of(&tables).unwrap();
        assert_eq!(
            (group.table.as_str(), group.task.as_str()),
            ("Aaa", "r0000")
        );
        assert_eq!(group.owner(), one.job);
        assert_eq!(TaskMessage::decode(&group.encode()).unwrap(), group);
        let refused = |edit: &dyn Fn(&mut serde_json::Value), why: &str| {
            let mut bad = serde_json::to_value(&group).unwrap();
            edit(&mut bad);
            let e = TaskMessage::decode(&BASE64.encode(bad.to_string())).unwrap_err();
            assert!(e.contains(why), "{e}");
        };
        refused(&|v| v["tables"] = serde_json::json!([]), "no table");
        refused(&|v| v["table"] = "Bbb".into(), "first");
        refused(&|v| v["tables"][1]["table"] = "../x".into(), "table name");
        refused(&|v| v["tables"][2]["task"] = "../x".into(), "task id");
        let many: Vec<serde_json::Value> = (0..=MAX_GROUPED_TABLES)
            .map(|i| serde_json::json!({"table": "Aaa", "task": format!("r{i:04}")}))
            .collect();
        refused(
            &|v| {
                v["tables"] = many.clone().into();
                v["tables"][0]["task"] = "r0000".into();
            },
            "groups",
        );
    }

    #[test]
    fn last_error_travels_in_the_message() {
        let t = task();
        let text = t.encode_with_last_error("HTTP 503 ServerBusy");
        assert_eq!(TaskMessage::decode(&text).unwrap(), t, "still a valid task");
        assert_eq!(last_error(&text).as_deref(), Some("HTTP 503 ServerBusy"));
        assert_eq!(last_error(&t.encode()), None);
        let long = "x".repeat(5000);
        assert_eq!(
            last_error(&t.encode_with_last_error(&long)).map(|s| s.len()),
            Some(MAX_LAST_ERROR_CHARS)
        );
    }

    #[test]
    fn hand_backs_are_counted_in_a_still_valid_task() {
        let t = task();
        let (once, n) = handed_back(&t.encode());
        assert_eq!(n, 1);
        let (twice, n) = handed_back(&once);
        assert_eq!(n, 2);
        assert_eq!(TaskMessage::decode(&twice).unwrap(), t);
        assert_eq!(handed_back("not base64 %%").1, 1);
    }

    #[test]
    fn poison_entries_keep_the_original_text() {
        let e = PoisonEntry {
            reason: "bad".into(),
            dequeue_count: 3,
            job: None,
            table: None,
            task: None,
            original: "not a task <&>".into(),
            at: "now".into(),
            worker: "w".into(),
        };
        assert_eq!(PoisonEntry::decode(&e.encode()).unwrap(), e);
    }
}
