//! Discovering where a table's PartitionKeys live by probing: `$top=1` queries find keys
//! that exist, and intervals are bisected (by key value) until there are enough ranges or
//! no interval can be split further. Probes are cheap index seeks on the service; ranges
//! come out similar in key span, which is similar in size when keys are spread evenly
//! (ids, hashes, hex) and can be uneven otherwise (docs/ARCHITECTURE.md).

use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use tablevault_azure::table::{Cmp, Filter, Query, TableClient};
use tablevault_core::keys::{EntityKey, KeyRange, cmp_keys};
use tablevault_core::split::{increment, midpoint};

/// First PartitionKey in `[from, below)` (`from` inclusive unless `after`).
async fn first_pk(
    probes: &AtomicUsize,
    client: &TableClient,
    table: &str,
    from: Option<&str>,
    after: bool,
    below: Option<&str>,
) -> tablevault_azure::Result<Option<String>> {
    let mut parts = Vec::new();
    if let Some(f) = from {
        parts.push(Filter::partition_key(
            if after { Cmp::Gt } else { Cmp::Ge },
            f,
        ));
    }
    if let Some(b) = below {
        parts.push(Filter::partition_key(Cmp::Lt, b));
    }
    let query = Query {
        filter: Filter::all(parts),
        top: Some(1),
        keys_only: true,
        page_bytes: None,
    };
    probes.fetch_add(1, Ordering::Relaxed);
    // Pages may be empty with a continuation (the service stops at partition boundaries
    // and time limits): the paginator follows them until an entity or the end.
    Ok(client
        .pages(table, query)
        .first_entity()
        .await?
        .map(|e| e.partition_key))
}

#[derive(Debug, Clone)]
struct Interval {
    /// First PartitionKey in the interval (a real key).
    lo: String,
    /// Exclusive upper bound (a real key), or the end of the table.
    hi: Option<String>,
    /// No key at or above this within the interval (learned from empty probes).
    ceiling: Option<String>,
    /// Holds a single PartitionKey: cannot be split by PartitionKey.
    atomic: bool,
}

impl Interval {
    fn new(lo: String, hi: Option<String>, ceiling: Option<String>) -> Self {
        Interval {
            lo,
            hi,
            ceiling,
            atomic: false,
        }
    }
}

fn min_bound<'a>(a: Option<&'a str>, b: Option<&'a str>) -> Option<&'a str> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if cmp_keys(x, y).is_le() { x } else { y }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Splits an interval at `next`, the PartitionKey right after `lo`, or marks it atomic
/// when there is none: the fallback when probing by value found nothing.
async fn split_at_next(
    probes: &AtomicUsize,
    client: &TableClient,
    table: &str,
    mut iv: Interval,
) -> tablevault_azure::Result<Vec<Interval>> {
    let below = min_bound(iv.hi.as_deref(), iv.ceiling.as_deref()).map(str::to_string);
    match first_pk(probes, client, table, Some(&iv.lo), true, below.as_deref()).await? {
        Some(next) => {
            let mut left = Interval::new(iv.lo.clone(), Some(next.clone()), None);
            left.atomic = true;
            Ok(vec![left, Interval::new(next, iv.hi, iv.ceiling)])
        }
        None => {
            iv.atomic = true;
            Ok(vec![iv])
        }
    }
}

/// One probing step on an interval: returns the intervals that replace it.
///
/// A bounded interval probes its midpoint by value and splits at the first key found
/// there (one probe when keys are spread; each empty probe halves the search). The
/// unbounded last interval first searches upwards from its first key in doubling steps,
/// so keys with long common prefixes cost a handful of probes, not one per character.
async fn refine(
    probes: &AtomicUsize,
    client: &TableClient,
    table: &str,
    mut iv: Interval,
) -> tablevault_azure::Result<Vec<Interval>> {
    if iv.hi.is_none() && iv.ceiling.is_none() {
        // Gallop from a middling step (64 units at the last position): up while keys
        // exist beyond the candidate, down while they do not. Most key shapes settle in a
        // few probes either way.
        let pos = iv.lo.encode_utf16().count().max(1) - 1;
        let lo = iv.lo.clone();
        let lo = lo.as_str();
        let probe_at = |k: u32| {
            let candidate = increment(lo, pos, 1u64 << k);
            async move {
                match candidate {
                    Some(c) if cmp_keys(&c, lo).is_gt() => {
                        let found = first_pk(probes, client, table, Some(&c), false, None).await?;
                        Ok::<_, tablevault_azure::Error>((Some(c), found))
                    }
                    // Past the top of the key space (or no higher): nothing there.
                    _ => Ok((None, None)),
                }
            }
        };
        let mut k = 6u32;
        let mut last_hit: Option<String> = None;
        let (candidate, found) = probe_at(k).await?;
        if found.is_some() {
            last_hit = found;
            while k < 47 {
                k += 1;
                let (candidate, found) = probe_at(k).await?;
                match found {
                    Some(key) => last_hit = Some(key),
                    None => {
                        iv.ceiling = candidate;
                        break;
                    }
                }
            }
        } else {
            iv.ceiling = candidate;
            while k > 0 && last_hit.is_none() {
                k -= 1;
                let (candidate, found) = probe_at(k).await?;
                match found {
                    Some(key) => last_hit = Some(key),
                    None => iv.ceiling = candidate.or(iv.ceiling),
                }
            }
        }
        return match last_hit {
            Some(k) if cmp_keys(&k, &iv.lo).is_gt() => Ok(vec![
                Interval::new(iv.lo.clone(), Some(k.clone()), None),
                Interval::new(k, None, iv.ceiling),
            ]),
            _ => split_at_next(probes, client, table, iv).await,
        };
    }
    for _ in 0..12 {
        let top = min_bound(iv.hi.as_deref(), iv.ceiling.as_deref());
        let mid = midpoint(&iv.lo, top);
        if top.is_some_and(|t| cmp_keys(&mid, t).is_ge()) {
            break;
        }
        match first_pk(probes, client, table, Some(&mid), false, iv.hi.as_deref()).await? {
            Some(k) if cmp_keys(&k, &iv.lo).is_gt() => {
                return Ok(vec![
                    Interval::new(iv.lo.clone(), Some(k.clone()), None),
                    Interval::new(k, iv.hi.clone(), iv.ceiling.clone()),
                ]);
            }
            _ => iv.ceiling = Some(mid),
        }
    }
    split_at_next(probes, client, table, iv).await
}

/// Discovers up to `target` ranges for a table by probing. Returns the ranges (which tile
/// the key space) and the number of probes spent.
pub async fn discover_ranges(
    client: &TableClient,
    table: &str,
    target: usize,
) -> tablevault_azure::Result<(Vec<KeyRange>, usize)> {
    let probes = AtomicUsize::new(0);
    let Some(first) = first_pk(&probes, client, table, None, false, None).await? else {
        return Ok((vec![KeyRange::all()], 1));
    };
    let mut intervals = vec![Interval::new(first, None, None)];
    for _round in 0..24 {
        if intervals.len() >= target || intervals.iter().all(|i| i.atomic) {
            break;
        }
        // Refine the widest-looking intervals first: all of them, up to what the target
        // still needs, probing several at once.
        let want = target - intervals.len();
        let (to_refine, keep): (Vec<_>, Vec<_>) = {
            let mut idx = 0usize;
            intervals.into_iter().partition(|i| {
                let pick = !i.atomic && idx < want;
                if !i.atomic {
                    idx += 1;
                }
                pick
            })
        };
        let refined: Vec<tablevault_azure::Result<Vec<Interval>>> =
            futures::stream::iter(to_refine)
                .map(|iv| refine(&probes, client, table, iv))
                .buffer_unordered(8)
                .collect()
                .await;
        intervals = keep;
        for r in refined {
            intervals.extend(r?);
        }
        intervals.sort_by(|a, b| cmp_keys(&a.lo, &b.lo));
    }
    let points: Vec<EntityKey> = intervals
        .iter()
        .skip(1)
        .map(|i| EntityKey::partition_start(&i.lo))
        .collect();
    Ok((KeyRange::partition(&points), probes.into_inner()))
}
