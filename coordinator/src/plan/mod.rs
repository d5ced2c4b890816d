//! Range planning: cuts a table's key space into ranges, one task each. Planning only
//! sets where work starts; workers split what turns out large while they scan
//! (`tablevault_core::split`), so no plan has to be right about sizes.
//!
//! * Split keys given by the user are sorted in the service's order (UTF-16 code units),
//!   deduplicated and validated (here).
//! * With `--ranges N`, the key space is discovered by probing ([`discover_ranges`]).
//! * Otherwise a table the last backup of the account holds is cut into ranges of equal
//!   entity counts from that backup's block list ([`previous`]), with no probe; any
//!   other table is one task.

mod discover;
pub mod previous;

pub use discover::discover_ranges;

use tablevault_core::keys::{EntityKey, KeyRange, cmp_keys, key_problem};

use crate::{Error, Result};

/// How a table's ranges were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planning {
    /// From `--split-keys`.
    SplitKeys,
    /// By probing the table.
    Discovered,
    /// From the block list of the last backup.
    Previous,
    /// One task for the whole table (workers split it as they go).
    Whole,
}

impl Planning {
    /// The name recorded in job.json.
    pub fn as_str(self) -> &'static str {
        match self {
            Planning::SplitKeys => "split-keys",
            Planning::Discovered => "discovered",
            Planning::Previous => "previous-backup",
            Planning::Whole => "whole",
        }
    }
}

/// Validates, sorts (UTF-16 order) and deduplicates user split keys.
pub fn normalize_split_keys(keys: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::with_capacity(keys.len());
    for k in keys {
        if k.is_empty() {
            return Err(Error::invalid(
                "an empty split key splits nothing (every PartitionKey is >= \"\"); remove it",
            ));
        }
        if let Some(why) = key_problem(k) {
            return Err(Error::invalid(format!("split key {k:?} {why}")));
        }
        out.push(k.clone());
    }
    out.sort_by(|a, b| cmp_keys(a, b));
    out.dedup();
    Ok(out)
}

/// Ranges from sorted split keys: `(-inf, k1), [k1, k2), …, [kn, +inf)`.
pub fn ranges_from_split_keys(sorted: &[String]) -> Vec<KeyRange> {
    let points: Vec<EntityKey> = sorted.iter().map(EntityKey::partition_start).collect();
    KeyRange::partition(&points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keys_sort_in_utf16_order_and_reject_bad_keys() {
        let keys: Vec<String> = ["m", "\u{1F600}", "\u{E000}", "b", "m"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let sorted = normalize_split_keys(&keys).unwrap();
        assert_eq!(sorted, vec!["b", "m", "\u{1F600}", "\u{E000}"]);
        let ranges = ranges_from_split_keys(&sorted);
        assert_eq!(ranges.len(), 5);
        assert!(normalize_split_keys(&["a/b".to_string()]).is_err());
        assert!(normalize_split_keys(&[String::new()]).is_err());
    }
}
