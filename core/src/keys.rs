//! Entity keys in the order the service keeps them, and half-open key ranges.
//!
//! The service orders PartitionKey and RowKey by UTF-16 code units, which differs from
//! Rust's UTF-8 byte order for characters above U+FFFF against U+E000..U+FFFF. Every
//! comparison of keys in tablevault goes through [`cmp_keys`], so planned ranges never
//! overlap or leave gaps.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

use tablevault_azure::table::{Cmp, Filter};

/// Compares two key strings by UTF-16 code units, as the service does.
pub fn cmp_keys(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(b);
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Why a string cannot be a PartitionKey or RowKey.
pub fn key_problem(key: &str) -> Option<String> {
    if key.encode_utf16().count() > 1024 {
        return Some("is longer than 1024 characters".into());
    }
    key.chars()
        .find(|c| {
            matches!(c, '/' | '\\' | '#' | '?')
                || ('\u{0}'..='\u{1f}').contains(c)
                || ('\u{7f}'..='\u{9f}').contains(c)
        })
        .map(|c| format!("contains {c:?}, which the service does not allow in keys"))
}

/// A position in a table: PartitionKey then RowKey.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EntityKey {
    /// PartitionKey.
    pub pk: String,
    /// RowKey (`""`, the smallest, for the start of a partition).
    pub rk: String,
}

impl EntityKey {
    /// The first position of a partition.
    pub fn partition_start(pk: impl Into<String>) -> Self {
        EntityKey {
            pk: pk.into(),
            rk: String::new(),
        }
    }

    /// A full key.
    pub fn new(pk: impl Into<String>, rk: impl Into<String>) -> Self {
        EntityKey {
            pk: pk.into(),
            rk: rk.into(),
        }
    }
}

impl Ord for EntityKey {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_keys(&self.pk, &other.pk).then_with(|| cmp_keys(&self.rk, &other.rk))
    }
}

impl PartialOrd for EntityKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// An entity's key, both parts always shown: `("p", "")` is an entity whose RowKey is
/// empty, not a partition.
impl fmt::Display for EntityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({:?}, {:?})", self.pk, self.rk)
    }
}

/// A range bound: `"p"` is the start of partition `p` (RowKey `""`), else the key.
struct Bound<'a>(&'a EntityKey);

impl fmt::Display for Bound<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.rk.is_empty() {
            write!(f, "{:?}", self.0.pk)
        } else {
            self.0.fmt(f)
        }
    }
}

/// The half-open range `[start, end)` of entity keys; `None` is unbounded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct KeyRange {
    /// Inclusive start, or from the beginning of the table.
    pub start: Option<EntityKey>,
    /// Exclusive end, or to the end of the table.
    pub end: Option<EntityKey>,
}

impl KeyRange {
    /// The whole table.
    pub fn all() -> Self {
        KeyRange::default()
    }

    /// A range between two optional bounds.
    pub fn new(start: Option<EntityKey>, end: Option<EntityKey>) -> Self {
        KeyRange { start, end }
    }

    /// The smallest range holding every key from `first` to `last`, both included.
    pub fn spanning(first: &EntityKey, last: &EntityKey) -> KeyRange {
        // No key holds U+0000, so `last` followed by it is the first position after it.
        KeyRange::new(
            Some(first.clone()),
            Some(EntityKey::new(&last.pk, format!("{}\u{0}", last.rk))),
        )
    }

    /// Whether the key falls inside.
    pub fn contains(&self, key: &EntityKey) -> bool {
        self.start.as_ref().is_none_or(|s| key >= s) && self.end.as_ref().is_none_or(|e| key < e)
    }

    /// Whether no key can fall inside.
    pub fn is_empty(&self) -> bool {
        matches!((&self.start, &self.end), (Some(s), Some(e)) if s >= e)
    }

    /// Splits the whole key space at partition boundaries: `(-inf, k1), [k1, k2), …, [kn, +inf)`.
    /// `split_keys` must be sorted with [`cmp_keys`] and free of duplicates.
    pub fn partition(split_points: &[EntityKey]) -> Vec<KeyRange> {
        let mut ranges = Vec::with_capacity(split_points.len() + 1);
        let mut start = None;
        for k in split_points {
            ranges.push(KeyRange::new(start.take(), Some(k.clone())));
            start = Some(k.clone());
        }
        ranges.push(KeyRange::new(start, None));
        ranges
    }

    /// The `$filter`s whose results, concatenated in order, are exactly the entities of the
    /// range in key order. Each is a simple range over PartitionKey (plus RowKey for the
    /// partial partitions at either end), which the service serves as a range scan; an
    /// `or` of them would not be.
    pub fn filters(&self) -> Vec<Option<Filter>> {
        if self.is_empty() {
            return Vec::new();
        }
        segment_filters(self.start.as_ref().map(|s| (s, Cmp::Ge)), self.end.as_ref())
    }
}

/// The `$filter`s whose results, concatenated in order, are exactly the keys after
/// `last` (excluded) and before `end`, in key order: where a scan that has read up to
/// `last` goes on over a range whose end moved down. Like [`KeyRange::filters`], each is
/// a simple range the service serves as a range scan.
pub fn filters_after(last: &EntityKey, end: Option<&EntityKey>) -> Vec<Option<Filter>> {
    if end.is_some_and(|e| e <= last) {
        return Vec::new();
    }
    segment_filters(Some((last, Cmp::Gt)), end)
}

/// The filters of a non-empty range from `start` (its partition's keys whose RowKey
/// compares to the start's by the given `Ge` or `Gt`) to `end` (excluded): the rest of
/// the start's partition, the partitions in between, the head of the end's partition.
fn segment_filters(
    start: Option<(&EntityKey, Cmp)>,
    end: Option<&EntityKey>,
) -> Vec<Option<Filter>> {
    // All of the start's partition: no segment of its own.
    let whole_partition = |s: &EntityKey, op: Cmp| op == Cmp::Ge && s.rk.is_empty();
    if let (Some((s, op)), Some(e)) = (start, end)
        && s.pk == e.pk
    {
        let mut parts = vec![Filter::partition_key(Cmp::Eq, &s.pk)];
        if !whole_partition(s, op) {
            parts.push(Filter::row_key(op, &s.rk));
        }
        parts.push(Filter::row_key(Cmp::Lt, &e.rk));
        return vec![Filter::all(parts)];
    }
    let mut out = Vec::new();
    let mut middle = Vec::new();
    match start {
        Some((s, op)) if !whole_partition(s, op) => {
            out.push(Filter::all([
                Filter::partition_key(Cmp::Eq, &s.pk),
                Filter::row_key(op, &s.rk),
            ]));
            middle.push(Filter::partition_key(Cmp::Gt, &s.pk));
        }
        Some((s, _)) => middle.push(Filter::partition_key(Cmp::Ge, &s.pk)),
        None => {}
    }
    if let Some(e) = end {
        middle.push(Filter::partition_key(Cmp::Lt, &e.pk));
    }
    out.push(Filter::all(middle));
    if let Some(e) = end
        && !e.rk.is_empty()
    {
        out.push(Filter::all([
            Filter::partition_key(Cmp::Eq, &e.pk),
            Filter::row_key(Cmp::Lt, &e.rk),
        ]));
    }
    out
}

impl fmt::Display for KeyRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.start {
            Some(s) => write!(f, "[{}", Bound(s))?,
            None => f.write_str("(-inf")?,
        }
        match &self.end {
            Some(e) => write!(f, ", {})", Bound(e)),
            None => f.write_str(", +inf)"),
        }
    }
}

/// Finds ranges among `candidates` that cover the whole key space exactly, end to end,
/// with no gap and no overlap. Returns their indices in key order, or `None` if no such
/// chain exists yet.
///
/// Several chains can exist when a range was split dynamically and both the parent and
/// its children committed; any of them is a complete backup, and the one with the fewest
/// pieces is returned.
pub fn find_tiling(candidates: &[&KeyRange]) -> Option<Vec<usize>> {
    use std::collections::{BTreeMap, VecDeque};
    // Breadth-first search from "-inf" over range starts; nodes are boundary keys.
    let mut by_start: BTreeMap<Option<&EntityKey>, Vec<usize>> = BTreeMap::new();
    for (i, r) in candidates.iter().enumerate() {
        if !r.is_empty() {
            by_start.entry(r.start.as_ref()).or_default().push(i);
        }
    }
    let mut prev: BTreeMap<Option<&EntityKey>, Option<(Option<&EntityKey>, usize)>> =
        BTreeMap::new();
    let mut queue = VecDeque::new();
    prev.insert(None, None);
    queue.push_back(None::<&EntityKey>);
    while let Some(node) = queue.pop_front() {
        for &i in by_start.get(&node).map(Vec::as_slice).unwrap_or(&[]) {
            let end = candidates[i].end.as_ref();
            let reached_end = end.is_none();
            // "-inf" and "+inf" are both None; keep them apart.
            if reached_end {
                let mut chain = vec![i];
                let mut at = node;
                while let Some(Some((from, idx))) = prev.get(&at) {
                    chain.push(*idx);
                    at = *from;
                }
                chain.reverse();
                return Some(chain);
            }
            if let std::collections::btree_map::Entry::Vacant(slot) = prev.entry(end) {
                slot.insert(Some((node, i)));
                queue.push_back(end);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_order_differs_from_utf8_above_the_bmp() {
        let private_use = "\u{E000}";
        let emoji = "\u{1F600}"; // encoded as surrogates D83D DE00 < E000
        assert_eq!(private_use.cmp(emoji), Ordering::Less, "UTF-8 order");
        assert_eq!(
            cmp_keys(private_use, emoji),
            Ordering::Greater,
            "UTF-16 order"
        );
        assert_eq!(cmp_keys("a", "b"), Ordering::Less);
        assert_eq!(cmp_keys("", "a"), Ordering::Less);
        assert_eq!(cmp_keys("ab", "a"), Ordering::Greater);
    }

    /// An entity with an empty RowKey is shown as both parts; a range bound at a
    /// partition's start as the partition.
    #[test]
    fn an_empty_row_key_is_shown_as_an_entity_and_as_a_partition_bound() {
        let k = EntityKey::new("p", "");
        assert_eq!(k.to_string(), r#"("p", "")"#);
        assert_eq!(EntityKey::new("p", "r").to_string(), r#"("p", "r")"#);
        let r = KeyRange::new(Some(k), Some(EntityKey::new("q", "r")));
        assert_eq!(r.to_string(), r#"["p", ("q", "r"))"#);
    }

    #[test]
    fn key_validation() {
        assert!(key_problem("fine key ü 😀").is_none());
        for bad in ["a/b", "a\\b", "a#b", "a?b", "a\u{1}b", "a\u{7f}"] {
            assert!(key_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn partition_tiles_the_key_space() {
        let points = vec![
            EntityKey::partition_start("m"),
            EntityKey::partition_start("t"),
        ];
        let ranges = KeyRange::partition(&points);
        assert_eq!(ranges.len(), 3);
        let refs: Vec<&KeyRange> = ranges.iter().collect();
        assert_eq!(find_tiling(&refs), Some(vec![0, 1, 2]));
        assert!(ranges[0].contains(&EntityKey::new("l", "zzz")));
        assert!(!ranges[0].contains(&EntityKey::new("m", "")));
        assert!(ranges[1].contains(&EntityKey::new("m", "")));
        assert!(ranges[2].contains(&EntityKey::new("zz", "a")));
    }

    #[test]
    fn tiling_detects_gaps_and_accepts_split_children() {
        let k = |s: &str| Some(EntityKey::partition_start(s));
        let a = KeyRange::new(None, k("m"));
        let b = KeyRange::new(k("m"), None);
        let b1 = KeyRange::new(k("m"), k("p"));
        let b2 = KeyRange::new(k("p"), None);
        assert_eq!(find_tiling(&[&a]), None, "gap");
        assert_eq!(find_tiling(&[&b, &b1]), None, "nothing from -inf");
        assert_eq!(find_tiling(&[&a, &b1, &b2]), Some(vec![0, 1, 2]));
        assert_eq!(
            find_tiling(&[&b1, &a, &b, &b2]),
            Some(vec![1, 2]),
            "fewest pieces"
        );
        assert_eq!(find_tiling(&[&KeyRange::all()]), Some(vec![0]));
    }

    #[test]
    fn filters_after_a_key_resume_strictly_after_it() {
        let s = |f: Vec<Option<Filter>>| -> Vec<String> {
            f.iter()
                .map(|x| x.as_ref().map_or("*".into(), |f| f.to_string()))
                .collect()
        };
        let last = EntityKey::new("a", "r'1");
        assert_eq!(
            s(filters_after(&last, None)),
            vec![
                "(PartitionKey eq 'a') and (RowKey gt 'r''1')",
                "PartitionKey gt 'a'",
            ]
        );
        assert_eq!(
            s(filters_after(&last, Some(&EntityKey::partition_start("c")))),
            vec![
                "(PartitionKey eq 'a') and (RowKey gt 'r''1')",
                "(PartitionKey gt 'a') and (PartitionKey lt 'c')",
            ]
        );
        assert_eq!(
            s(filters_after(&last, Some(&EntityKey::new("c", "r9")))),
            vec![
                "(PartitionKey eq 'a') and (RowKey gt 'r''1')",
                "(PartitionKey gt 'a') and (PartitionKey lt 'c')",
                "(PartitionKey eq 'c') and (RowKey lt 'r9')",
            ]
        );
        assert_eq!(
            s(filters_after(&last, Some(&EntityKey::new("a", "r9")))),
            vec!["((PartitionKey eq 'a') and (RowKey gt 'r''1')) and (RowKey lt 'r9')"]
        );
        for end in [
            EntityKey::partition_start("a"),
            EntityKey::new("a", "r'1"),
            EntityKey::new("a", "r"),
        ] {
            assert!(filters_after(&last, Some(&end)).is_empty(), "{end}");
        }
    }

    #[test]
    fn filters_for_each_shape() {
        let s = |f: &Vec<Option<Filter>>| -> Vec<String> {
            f.iter()
                .map(|x| x.as_ref().map_or("*".into(), |f| f.to_string()))
                .collect()
        };
        assert_eq!(s(&KeyRange::all().filters()), vec!["*"]);
        let r = KeyRange::new(
            Some(EntityKey::partition_start("a")),
            Some(EntityKey::partition_start("b")),
        );
        assert_eq!(
            s(&r.filters()),
            vec!["(PartitionKey ge 'a') and (PartitionKey lt 'b')"]
        );
        let r = KeyRange::new(
            Some(EntityKey::new("a", "r1")),
            Some(EntityKey::new("c", "r9")),
        );
        assert_eq!(
            s(&r.filters()),
            vec![
                "(PartitionKey eq 'a') and (RowKey ge 'r1')",
                "(PartitionKey gt 'a') and (PartitionKey lt 'c')",
                "(PartitionKey eq 'c') and (RowKey lt 'r9')",
            ]
        );
        let r = KeyRange::new(
            Some(EntityKey::new("a", "r1")),
            Some(EntityKey::new("a", "r9")),
        );
        assert_eq!(
            s(&r.filters()),
            vec!["((PartitionKey eq 'a') and (RowKey ge 'r1')) and (RowKey lt 'r9')"]
        );
        let r = KeyRange::new(None, Some(EntityKey::partition_start("o'k")));
        assert_eq!(s(&r.filters()), vec!["PartitionKey lt 'o''k'"]);
        let r = KeyRange::new(
            Some(EntityKey::partition_start("b")),
            Some(EntityKey::partition_start("a")),
        );
        assert!(r.filters().is_empty());
    }
}
