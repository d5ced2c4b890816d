//! Discovering where a table's PartitionKeys live by probing: `$top=1` queries find keys
//! that exist, and intervals are bisected (by key value) until there are enough ranges or
//! no interval can be split further. Probes are cheap index seeks on the service; ranges
//! come out similar in key span, which is similar in size when keys are spread evenly
//! (ids, hashes, hex) and can be uneven otherwise (docs/ARCHITECTURE.md).

use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use tablevault_azure::table::{Cmp, Filter, Query, TableClient};
use tablevault_core::keys::{EntityKey, KeyRange, cmp_keys};

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

/// Code units a probe position is made of, in key order: printable ASCII (less the four
/// characters keys cannot hold), then anchors spread over the rest of the BMP. Most keys
/// are ASCII, so bisecting over this dense alphabet converges in a few probes where
/// bisecting raw 16-bit code units would spend most probes far above every key.
fn alphabet() -> &'static [u16] {
    static ALPHABET: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    ALPHABET.get_or_init(|| {
        let mut a: Vec<u16> = (0x20u16..=0x7E)
            .filter(|c| !matches!(c, 0x23 | 0x2F | 0x3F | 0x5C))
            .collect();
        a.extend([
            0xA0, 0x100, 0x400, 0x800, 0x1000, 0x2000, 0x3000, 0x4E00, 0x6000, 0x8000, 0xA000,
            0xAC00, 0xE000, 0xF000, 0xFFFD,
        ]);
        a
    })
}

/// Index of the largest alphabet unit at or below `u`.
fn rank(u: u16) -> u64 {
    alphabet().partition_point(|&a| a <= u).saturating_sub(1) as u64
}

const DIGITS: usize = 4;

/// A string between `lo` and `hi` (or the top of the key space), by key value: the common
/// prefix, then the midpoint of the next four positions in `alphabet` rank space. Only
/// used as a probe position, so it need not be a key anyone stored; it is always legal.
pub fn midpoint(lo: &str, hi: Option<&str>) -> String {
    let a: Vec<u16> = lo.encode_utf16().collect();
    let b: Vec<u16> = hi.map(|h| h.encode_utf16().collect()).unwrap_or_default();
    let common = match hi {
        Some(_) => a.iter().zip(&b).take_while(|(x, y)| x == y).count(),
        None => 0,
    };
    let base = alphabet().len() as u64 + 1; // digit 0 means "no character"
    let digits = |v: &[u16]| -> u64 {
        (0..DIGITS).fold(0u64, |acc, i| {
            acc * base + v.get(common + i).map_or(0, |&u| rank(u) + 1)
        })
    };
    let low = digits(&a);
    let high = if hi.is_some() {
        digits(&b)
    } else {
        base.pow(DIGITS as u32) - 1
    };
    let mut mid = low + high.saturating_sub(low) / 2;
    let mut tail = Vec::with_capacity(DIGITS);
    for _ in 0..DIGITS {
        tail.push(mid % base);
        mid /= base;
    }
    tail.reverse();
    let mut units: Vec<u16> = a[..common].to_vec();
    for d in tail {
        // Digit 0 ("no character") can only be followed by more zeros in a valid
        // midpoint; stop there.
        if d == 0 {
            break;
        }
        units.push(alphabet()[(d - 1) as usize]);
    }
    let m = String::from_utf16_lossy(&units);
    // Ranks are floors, so between two anchors the midpoint can land at or below `lo`;
    // the smallest step above `lo` is still a useful probe.
    if cmp_keys(&m, lo).is_le() {
        format!("{lo} ")
    } else {
        m
    }
}

/// Adds `amount` units at position `pos` of `s`, read as a number in [`alphabet`] rank
/// space, carrying leftwards. `None` when the result passes the top of the key space.
fn increment(s: &str, pos: usize, amount: u64) -> Option<String> {
    let units: Vec<u16> = s.encode_utf16().collect();
    let base = alphabet().len() as u64 + 1;
    let mut digits: Vec<u64> = (0..=pos)
        .map(|i| units.get(i).map_or(0, |&u| rank(u) + 1))
        .collect();
    let mut carry = amount;
    for d in digits.iter_mut().rev() {
        let v = *d + carry;
        *d = v % base;
        carry = v / base;
        if carry == 0 {
            break;
        }
    }
    if carry > 0 {
        return None;
    }
    // Digit 0 is "no character"; after a carry it can only appear where nothing follows.
    let out: Vec<u16> = digits
        .iter()
        .map(|&d| alphabet()[d.saturating_sub(1) as usize])
        .collect();
    Some(String::from_utf16_lossy(&out))
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

#[cfg(test)]
mod tests {
    use super::*;
    use tablevault_core::keys::key_problem;

    #[test]
    fn midpoints_fall_between_and_are_legal() {
        let cases: &[(&str, Option<&str>)] = &[
            ("a", Some("c")),
            ("customer-0001", Some("customer-0999")),
            ("a", None),
            ("z", None),
            ("", Some("b")),
            ("abc", Some("abd")),
            ("\u{D7FF}", Some("\u{E001}")),
        ];
        for (lo, hi) in cases {
            let m = midpoint(lo, *hi);
            assert!(cmp_keys(&m, lo).is_ge(), "{m:?} >= {lo:?}");
            if let Some(h) = hi {
                assert!(cmp_keys(&m, h).is_lt(), "{m:?} < {h:?}");
            }
            assert!(key_problem(&m).is_none(), "{m:?} is a legal key");
        }
        assert_eq!(midpoint("a", Some("c")), "b");
        // Towards the top of the key space the first probe leaves ASCII, but only just: the
        // alphabet is dense where keys usually are.
        let top = midpoint("p001", None);
        assert!(
            cmp_keys(&top, "~").is_gt() && cmp_keys(&top, "\u{3000}").is_lt(),
            "{top:?}"
        );
        assert!(midpoint("customer-0001", Some("customer-0999")).starts_with("customer-0"));
    }

    #[test]
    fn increments_carry_in_rank_space() {
        assert_eq!(increment("a", 0, 1).as_deref(), Some("b"));
        assert_eq!(increment("ab", 1, 1).as_deref(), Some("ac"));
        let carried = increment("a~", 1, 1).unwrap();
        assert!(
            cmp_keys(&carried, "a~").is_gt() && cmp_keys(&carried, "b").is_lt(),
            "{carried:?}"
        );
        assert_eq!(increment("\u{FFFD}", 0, 1), None);
        assert!(cmp_keys(&increment("", 0, 1).unwrap(), "").is_gt());
    }
}
