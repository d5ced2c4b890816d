//! Where to cut the unread remainder of a key range in two (dynamic work rebalancing).
//!
//! A worker that has read a range up to some key and finds other workers idle hands the
//! upper part of what it has not read yet to the queue as a new task. The cut must fall
//! strictly after the last key read and before the range's end, so the two ranges still
//! tile the original one exactly; where it falls only affects balance, never
//! correctness. It is chosen by value with a few `$top=1` probes ([`KeyProbe`]):
//!
//! * If another partition follows the current one, the cut is a PartitionKey: the first
//!   one found at or above the midpoint (by key value) between the next partition and the
//!   range's end. An unbounded range first learns a *ceiling*, a value no PartitionKey
//!   reaches, which children inherit so it is searched for once per table.
//! * Otherwise the rest of the range is one partition, and the cut is a RowKey found the
//!   same way inside it. So a single huge partition is split too.
//!
//! Probes are index seeks on the service and are bounded per split ([`MAX_PROBES`]).

use std::cmp::Ordering;

use async_trait::async_trait;
use tablevault_azure::table::{Cmp, Filter};

use crate::keys::{EntityKey, cmp_keys};

/// One `$top=1` question about a table: the first key matching it, in key order.
#[derive(Debug, Clone, Copy)]
pub enum Probe<'a> {
    /// The first key of a later partition than `after`, before `end`.
    NextPartition {
        /// The partition to look past.
        after: &'a str,
        /// Exclusive end.
        end: Option<&'a EntityKey>,
    },
    /// The first key whose PartitionKey is at or above `from`, before `end`.
    Partition {
        /// Lowest PartitionKey.
        from: &'a str,
        /// Exclusive end.
        end: Option<&'a EntityKey>,
    },
    /// The first key of `partition` whose RowKey is at or above `from` (above it when
    /// `exclusive`) and below `below`.
    Row {
        /// The partition.
        partition: &'a str,
        /// Lowest RowKey.
        from: &'a str,
        /// Whether `from` itself is excluded.
        exclusive: bool,
        /// Exclusive upper RowKey.
        below: Option<&'a str>,
    },
}

impl Probe<'_> {
    /// The `$filter` asking it. The service's answer can still lie past an end that
    /// stops inside a partition; [`Probe::matches`] decides.
    pub fn filter(&self) -> Filter {
        let end_pk = |end: Option<&EntityKey>| {
            end.map(|e| {
                let op = if e.rk.is_empty() { Cmp::Lt } else { Cmp::Le };
                Filter::partition_key(op, &e.pk)
            })
        };
        let parts: Vec<Filter> = match *self {
            Probe::NextPartition { after, end } => {
                std::iter::once(Filter::partition_key(Cmp::Gt, after))
                    .chain(end_pk(end))
                    .collect()
            }
            Probe::Partition { from, end } => std::iter::once(Filter::partition_key(Cmp::Ge, from))
                .chain(end_pk(end))
                .collect(),
            Probe::Row {
                partition,
                from,
                exclusive,
                below,
            } => [
                Some(Filter::partition_key(Cmp::Eq, partition)),
                Some(Filter::row_key(
                    if exclusive { Cmp::Gt } else { Cmp::Ge },
                    from,
                )),
                below.map(|b| Filter::row_key(Cmp::Lt, b)),
            ]
            .into_iter()
            .flatten()
            .collect(),
        };
        Filter::all(parts).expect("every probe has a lower bound")
    }

    /// Whether a key answers it.
    pub fn matches(&self, k: &EntityKey) -> bool {
        match *self {
            Probe::NextPartition { after, end } => {
                cmp_keys(&k.pk, after).is_gt() && end.is_none_or(|e| k < e)
            }
            Probe::Partition { from, end } => {
                cmp_keys(&k.pk, from).is_ge() && end.is_none_or(|e| k < e)
            }
            Probe::Row {
                partition,
                from,
                exclusive,
                below,
            } => {
                k.pk == partition
                    && if exclusive {
                        cmp_keys(&k.rk, from).is_gt()
                    } else {
                        cmp_keys(&k.rk, from).is_ge()
                    }
                    && below.is_none_or(|b| cmp_keys(&k.rk, b).is_lt())
            }
        }
    }
}

/// Answers [`Probe`]s: the Table service in production, a sorted list in tests.
#[async_trait]
pub trait KeyProbe: Send + Sync {
    /// The first key answering the probe.
    async fn first_key(&self, probe: Probe<'_>) -> tablevault_azure::Result<Option<EntityKey>>;
}

/// A table to probe.
pub struct TableProbe<'a> {
    /// The client.
    pub client: &'a tablevault_azure::table::TableClient,
    /// The table.
    pub table: &'a str,
}

#[async_trait]
impl KeyProbe for TableProbe<'_> {
    async fn first_key(&self, probe: Probe<'_>) -> tablevault_azure::Result<Option<EntityKey>> {
        let query = tablevault_azure::table::Query {
            filter: Some(probe.filter()),
            top: Some(1),
        };
        // Empty pages with a continuation are normal; the paginator follows them.
        Ok(self
            .client
            .pages(self.table, query)
            .first_entity()
            .await?
            .map(|e| EntityKey::new(e.partition_key, e.row_key))
            .filter(|k| probe.matches(k)))
    }
}

/// Most probes one split may send.
pub const MAX_PROBES: usize = 24;

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

/// Index of the largest unit of `alphabet` at or below `u`.
fn rank_in(alphabet: &[u16], u: u16) -> u64 {
    alphabet.partition_point(|&a| a <= u).saturating_sub(1) as u64
}

/// Index of the largest [`alphabet`] unit at or below `u`.
fn rank(u: u16) -> u64 {
    rank_in(alphabet(), u)
}

/// The alphabet the differing tails of two bounds are written in: the character classes
/// their units belong to (digits, hex letters, letters, each punctuation mark, the
/// non-ASCII anchors). Keys are usually drawn from such a class (hex digests, numbers,
/// names), and bisecting in its rank space keeps halves even where the global alphabet
/// has gaps no key uses (between `9` and `a` in hex, say).
///
/// A unit of the upper bound's tail (`high`) just above a class the other tails use
/// (`g` above hex digits, `G` above upper-case ones) adds only itself: it is a ceiling
/// found just above hex keys, and counting every letter up to `z` below it would make
/// the hex space look two and a quarter times as wide as it is.
fn local_alphabet(tails: &[&[u16]], high: &[u16]) -> Vec<u16> {
    let mut set = std::collections::BTreeSet::new();
    let range = |a: u8, b: u8| (a as u16)..=(b as u16);
    let mut units: Vec<u16> = tails.iter().flat_map(|t| t.iter().copied()).collect();
    let uses = |class: std::ops::RangeInclusive<u16>| units.iter().any(|u| class.contains(u));
    // `g` (`G`) above hex digits the other tails use, and no letter past `f` (`F`).
    let sentinels: Vec<u16> = high
        .iter()
        .copied()
        .filter(|&u| match u {
            0x67 => uses(0x61..=0x66) && !uses(0x67..=0x7A),
            0x47 => uses(0x41..=0x46) && !uses(0x47..=0x5A),
            _ => false,
        })
        .collect();
    set.extend(sentinels.iter().copied());
    units.extend(high.iter().copied().filter(|u| !sentinels.contains(u)));
    for u in units {
        match u {
            0x30..=0x39 => set.extend(range(b'0', b'9')),
            0x61..=0x66 => set.extend(range(b'a', b'f')),
            0x67..=0x7A => set.extend(range(b'a', b'z')),
            0x41..=0x46 => set.extend(range(b'A', b'F')),
            0x47..=0x5A => set.extend(range(b'A', b'Z')),
            0x20..=0x7E => {
                set.insert(u);
            }
            _ => set.extend(alphabet().iter().copied().filter(|&a| a >= 0xA0)),
        }
    }
    set.into_iter().collect()
}

const DIGITS: usize = 4;

/// A string between `lo` and `hi` (or the top of the key space), by key value: the common
/// prefix, then the midpoint of the next four positions in the rank space of the
/// alphabet the bounds use (their character classes; a dense alphabet of printable ASCII and BMP anchors without `hi`).
/// Only used as a probe position, so it need not be a key anyone stored; it is always
/// legal and always above `lo`.
pub fn midpoint(lo: &str, hi: Option<&str>) -> String {
    point_at(lo, hi, 0.5)
}

/// The number space [`point_at`] and [`fraction`] work in between two bounds: their
/// common prefix dropped, then `places` units read as digits of the alphabet the
/// bounds' tails use (their character classes; the dense alphabet without `hi`).
/// Digit 0 means "no character".
struct Scale {
    lo: Vec<u16>,
    common: usize,
    alpha: std::borrow::Cow<'static, [u16]>,
    places: usize,
    /// The value of `hi`, or the top of the space.
    high: u64,
}

impl Scale {
    /// `also`: keys known to lie between the bounds, whose tails' classes count too.
    fn new(lo: &str, hi: Option<&str>, places: usize, also: &[&str]) -> Self {
        let a: Vec<u16> = lo.encode_utf16().collect();
        let b: Option<Vec<u16>> = hi.map(|h| h.encode_utf16().collect());
        let common = b
            .as_ref()
            .map_or(0, |b| a.iter().zip(b).take_while(|(x, y)| x == y).count());
        let alpha = match &b {
            Some(b) => {
                let tail = |v: &[u16]| v[common..].iter().take(places).copied().collect::<Vec<_>>();
                let also: Vec<Vec<u16>> = also
                    .iter()
                    .map(|k| k.encode_utf16().collect::<Vec<u16>>())
                    .filter(|k| k.len() >= common)
                    .map(|k| tail(&k))
                    .collect();
                let mut tails: Vec<&[u16]> = also.iter().map(Vec::as_slice).collect();
                let lo_tail = tail(&a);
                tails.push(&lo_tail);
                let local = local_alphabet(&tails, &tail(b));
                if local.is_empty() {
                    std::borrow::Cow::Borrowed(alphabet())
                } else {
                    std::borrow::Cow::Owned(local)
                }
            }
            None => std::borrow::Cow::Borrowed(alphabet()),
        };
        let mut scale = Scale {
            lo: a,
            common,
            alpha,
            places,
            high: 0,
        };
        scale.high = match &b {
            Some(b) => scale.value(b),
            None => scale.base().pow(places as u32) - 1,
        };
        scale
    }

    fn base(&self) -> u64 {
        self.alpha.len() as u64 + 1
    }

    /// The value of the `places` units after the common prefix.
    fn value(&self, v: &[u16]) -> u64 {
        let base = self.base();
        (0..self.places).fold(0u64, |acc, i| {
            acc * base
                + v.get(self.common + i)
                    .map_or(0, |&u| rank_in(&self.alpha, u) + 1)
        })
    }

    fn low(&self) -> u64 {
        self.value(&self.lo)
    }
}

/// Like [`midpoint`], but the point a fraction `share` (0 to 1) of the way from `lo` to
/// `hi`.
pub fn point_at(lo: &str, hi: Option<&str>, share: f64) -> String {
    let scale = Scale::new(lo, hi, DIGITS, &[]);
    let (low, high, base) = (scale.low(), scale.high, scale.base());
    let share = if share.is_finite() {
        share.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let mut mid = low + (high.saturating_sub(low) as f64 * share) as u64;
    let mut tail = Vec::with_capacity(DIGITS);
    for _ in 0..DIGITS {
        tail.push(mid % base);
        mid /= base;
    }
    tail.reverse();
    let mut units: Vec<u16> = scale.lo[..scale.common].to_vec();
    for d in tail {
        // Digit 0 ("no character") can only be followed by more zeros in a valid
        // midpoint; stop there.
        if d == 0 {
            break;
        }
        units.push(scale.alpha[(d - 1) as usize]);
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

/// Where `key` lies between `lo` (0) and `hi` (1; `None` is the top of the key space),
/// in the space [`point_at`] cuts in, read to more places. Keys outside are clamped.
pub fn fraction(lo: &str, hi: Option<&str>, key: &str) -> f64 {
    // Seven places of a ~100-letter alphabet stay within a u64 and an f64's exact
    // integers.
    let scale = Scale::new(lo, hi, 7, &[key]);
    let k: Vec<u16> = key.encode_utf16().collect();
    let prefix = &scale.lo[..scale.common];
    if !k.starts_with(prefix) {
        return if cmp_keys(key, lo).is_le() { 0.0 } else { 1.0 };
    }
    let (low, high) = (scale.low(), scale.high);
    if high <= low {
        return 1.0;
    }
    let v = scale.value(&k);
    (v.saturating_sub(low) as f64 / (high - low) as f64).clamp(0.0, 1.0)
}

/// Adds `amount` units at position `pos` of `s`, read as a number in the dense alphabet's rank
/// space, carrying leftwards. `None` when the result passes the top of the key space.
pub fn increment(s: &str, pos: usize, amount: u64) -> Option<String> {
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

/// `s` cut after position `pos`, with the unit there raised `steps` places in the
/// alphabet: a value above every string that starts with `s[..=pos]`. `None` when no
/// alphabet unit lies that far above (the top of the key space).
fn bump(s: &[u16], pos: usize, steps: usize) -> Option<String> {
    let u = *s.get(pos)?;
    let above = alphabet().partition_point(|&a| a <= u);
    let next = *alphabet().get(above + steps.saturating_sub(1))?;
    let mut out = s[..pos].to_vec();
    out.push(next);
    Some(String::from_utf16_lossy(&out))
}

/// One dimension to cut in: PartitionKeys (across partitions) or RowKeys (inside one).
enum Dimension<'a> {
    Partitions {
        end: Option<&'a EntityKey>,
    },
    Rows {
        partition: &'a str,
        below: Option<&'a str>,
    },
}

/// Probes and counts them.
struct Prober<'a> {
    probe: &'a dyn KeyProbe,
    sent: usize,
}

impl Prober<'_> {
    async fn ask(&mut self, probe: Probe<'_>) -> tablevault_azure::Result<Option<EntityKey>> {
        self.sent += 1;
        self.probe.first_key(probe).await
    }

    /// The first value of the dimension at or above `from` within its bound.
    async fn first_at(
        &mut self,
        dim: &Dimension<'_>,
        from: &str,
    ) -> tablevault_azure::Result<Option<String>> {
        Ok(match *dim {
            Dimension::Partitions { end } => self
                .ask(Probe::Partition { from, end })
                .await?
                .map(|k| k.pk),
            Dimension::Rows { partition, below } => self
                .ask(Probe::Row {
                    partition,
                    from,
                    exclusive: false,
                    below,
                })
                .await?
                .map(|k| k.rk),
        })
    }

    /// Whether some value of the dimension is at or above `bump(units, pos, steps)`;
    /// also returns that candidate. No candidate (the top of the key space) is never
    /// reached.
    async fn reaches(
        &mut self,
        dim: &Dimension<'_>,
        units: &[u16],
        pos: usize,
        steps: usize,
    ) -> tablevault_azure::Result<(Option<String>, bool)> {
        match bump(units, pos, steps) {
            None => Ok((None, false)),
            Some(c) => {
                let hit = self.first_at(dim, &c).await?.is_some();
                Ok((Some(c), hit))
            }
        }
    }
}

/// Searches a dimension for a value no key reaches, just above the keys that exist
/// (`lo` is one of them): first the shortest prefix of `lo` whose successor some key
/// reaches (bisecting on the prefix length), then, at that position, how far up the
/// alphabet keys go (galloping, then bisecting). `None` when nothing tighter than the top
/// of the key space was found within the budget.
async fn find_ceiling(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    lo: &str,
) -> tablevault_azure::Result<Option<String>> {
    let units: Vec<u16> = lo.encode_utf16().collect();
    if units.is_empty() {
        return Ok(None);
    }
    // Candidates shrink as the position grows, so "reached" is false up to some
    // position and true from there on.
    let (first, hit) = p.reaches(dim, &units, 0, 1).await?;
    let mut coarse = None;
    let pos = if hit {
        0
    } else {
        let (mut ok, mut ceiling) = (0usize, first);
        let mut reached_at = units.len();
        while reached_at - ok > 1 && p.sent < MAX_PROBES {
            let mid = (ok + reached_at) / 2;
            let (c, hit) = p.reaches(dim, &units, mid, 1).await?;
            if hit {
                reached_at = mid;
            } else {
                ok = mid;
                ceiling = c.or(ceiling);
            }
        }
        if reached_at >= units.len() || reached_at - ok > 1 {
            return Ok(ceiling);
        }
        coarse = ceiling;
        reached_at
    };
    // Keys vary at `pos`: gallop up the alphabet there until no key is reached.
    let mut steps = 2usize;
    let mut last_hit = 1usize;
    while p.sent < MAX_PROBES {
        let (c, hit) = p.reaches(dim, &units, pos, steps).await?;
        let Some(c) = c else { return Ok(coarse) };
        if hit {
            last_hit = steps;
            steps *= 2;
            continue;
        }
        // Tighten between the last step reached and this one.
        let (mut hit_at, mut miss_at, mut ceiling) = (last_hit, steps, c);
        while miss_at - hit_at > 1 && p.sent < MAX_PROBES {
            let mid = (hit_at + miss_at) / 2;
            match p.reaches(dim, &units, pos, mid).await? {
                (Some(_), true) => hit_at = mid,
                (Some(c), false) => {
                    miss_at = mid;
                    ceiling = c;
                }
                (None, _) => break,
            }
        }
        return Ok(Some(ceiling));
    }
    Ok(coarse)
}

/// Bisects a dimension by value between `lo` and `hi` (both exclusive), returning the
/// first value found at or above a point (the first `share` of the way, then
/// midpoints). `None` when every probe came back empty.
async fn bisect(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    lo: &str,
    mut hi: Option<String>,
    share: f64,
) -> tablevault_azure::Result<Option<String>> {
    let mut share = share;
    while p.sent < MAX_PROBES {
        // The first probe goes where the caller wants the cut; when nothing lies at or
        // above it, the keys are lower, and halving finds them.
        let mid = point_at(lo, hi.as_deref(), share);
        share = 0.5;
        if hi
            .as_deref()
            .is_some_and(|h| cmp_keys(&mid, h) != Ordering::Less)
        {
            return Ok(None);
        }
        match p.first_at(dim, &mid).await? {
            Some(found) if cmp_keys(&found, lo).is_gt() => return Ok(Some(found)),
            _ => hi = Some(mid),
        }
    }
    Ok(None)
}

/// The point a `share` of the way from `lo` to `hi`, when it lies strictly between them.
fn point_below(lo: &str, hi: &str, share: f64) -> Option<String> {
    let at = point_at(lo, Some(hi), share);
    (cmp_keys(&at, lo).is_gt() && cmp_keys(&at, hi).is_lt()).then_some(at)
}

/// Where to cut a dimension between `lo` and `hi` a `share` of the way: at that value
/// itself when the density read is known (`by_value`) and it lies strictly between
/// the bounds (the key at it would divide the entities the same way), else at the
/// first value probes find there ([`bisect`]).
async fn cut_value(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    lo: &str,
    hi: Option<String>,
    share: f64,
    by_value: bool,
) -> tablevault_azure::Result<Option<String>> {
    if let Some(at) = hi
        .as_deref()
        .filter(|_| by_value)
        .and_then(|h| point_below(lo, h, share))
    {
        return Ok(Some(at));
    }
    bisect(p, dim, lo, hi, share).await
}

/// What an attempt has read of its range so far: the first key, and how many entities.
#[derive(Debug, Clone, Copy)]
pub struct ReadSoFar<'a> {
    /// The first key read.
    pub first: &'a EntityKey,
    /// Entities read.
    pub entities: u64,
    /// What it has read of the partition it is in, when it knows.
    pub partition: Option<PartitionRead<'a>>,
    /// The most entities it read of one partition.
    pub largest_partition: u64,
    /// Whether its range was planned, not split off another task with an estimate. Only
    /// a planned range, nobody's estimate yet, is cut into pieces ([`Split::pieces`]):
    /// a piece is cut in two as idle workers ask, so an estimate thrown off by a large
    /// partition (Zipf-like sizes) cannot hand out ten pieces of a few hundred entities.
    pub planned: bool,
}

/// What an attempt has read of the partition it is in.
#[derive(Debug, Clone, Copy)]
pub struct PartitionRead<'a> {
    /// The first RowKey read in it.
    pub first_rk: &'a str,
    /// Entities read in it.
    pub entities: u64,
    /// Whether the page read ahead is still in it.
    pub continues: bool,
}

/// Where partitions are not paced, a partition an attempt has read this many entities
/// of, with the page read ahead still in it, is cut inside (the part above the cut
/// keeps the partitions after it): cutting after it would leave all of a large
/// partition with one task (with Zipf-like partition sizes, a task of a quarter of the
/// table beside tasks of a few thousand entities).
pub const LARGE_PARTITION_READ: u64 = PIECE_ENTITIES / 2;

/// A remainder estimated at fewer entities than this is not split: a couple of pages
/// read by another worker save less than a task costs, and tiny tasks unbalance the
/// backup's work.
pub const MIN_SPLIT_ENTITIES: u64 = 2_000;

/// The least share of the remainder a splitting task keeps.
const MIN_SHARE: f64 = 0.2;

/// Where in the remainder to cut so that the task that read `read` entities over
/// `read_span` of the key space and the new task end with about as many entities each,
/// if keys are as dense in the `rest_span` that remains. A half when the density is
/// unknown; `None` when the remainder is estimated too small to split.
pub fn balanced_share(read: u64, read_span: f64, rest_span: f64) -> Option<f64> {
    let Some(rest) = remainder_estimate(read, read_span, rest_span) else {
        return Some(0.5);
    };
    if rest < MIN_SPLIT_ENTITIES as f64 {
        return None;
    }
    Some((0.5 - read as f64 / (2.0 * rest)).clamp(MIN_SHARE, 0.5))
}

/// Entities left in `rest_span` of the key space if keys lie there as densely as the
/// `read` ones did over `read_span`; `None` when that cannot be told.
fn remainder_estimate(read: u64, read_span: f64, rest_span: f64) -> Option<f64> {
    (read_span > 0.0 && rest_span.is_finite()).then(|| read as f64 * rest_span / read_span)
}

/// Where to cut a remainder, and what is known of its size.
struct CutShare {
    /// The share of the remainder the splitter keeps.
    share: f64,
    /// Entities the remainder is estimated to hold, when the density read says.
    rest: Option<f64>,
}

impl CutShare {
    /// Entities the upper part is estimated to hold.
    fn upper(&self) -> Option<u64> {
        self.rest.map(|r| (r * (1.0 - self.share)).round() as u64)
    }
}

/// The share of the remainder to cut at ([`balanced_share`]) when `read` entities were
/// read from `from` up to `reached` in a dimension bounded by `hi` (a half when nothing
/// is known), and the remainder's estimated size. With `outweigh` (a waiting task's
/// estimate), `None` unless the remainder is estimated at twice that.
fn cut_share(
    read: Option<(&str, u64)>,
    hi: Option<&str>,
    reached: &str,
    outweigh: Option<u64>,
) -> Option<CutShare> {
    let Some((from, entities)) = read else {
        return outweigh.is_none().then_some(CutShare {
            share: 0.5,
            rest: None,
        });
    };
    let at = fraction(from, hi, reached);
    let rest = remainder_estimate(entities, at, 1.0 - at);
    if outweigh.is_some_and(|w| !rest.is_some_and(|r| r >= 2.0 * w as f64)) {
        return None;
    }
    let share = balanced_share(entities, at, 1.0 - at)?;
    Some(CutShare { share, rest })
}

/// Entities a piece handed to idle workers is cut to, at least: about what a tail
/// split leaves ([`MIN_SPLIT_ENTITIES`] and up), so a table's first pieces and its
/// last ones end about the same size.
pub const PIECE_ENTITIES: u64 = 2_500;

/// Most tasks (the splitter's included) one split makes: past that, pieces grow
/// instead, and workers that run dry split them in turn.
pub const MAX_PIECES: u64 = 16;

/// How to cut a remainder estimated at `rest` entities, after `read` were read, into
/// several tasks for idle workers: the splitting task keeps about one piece's worth
/// (what it read included, and at least a fifth of a piece), the rest becomes equal
/// pieces of at least [`PIECE_ENTITIES`] and at least what was read, [`MAX_PIECES`]
/// tasks at most. Returns the shares of the remainder where the pieces start, and each
/// piece's estimate; `None` when fewer than two pieces fit (then one cut in two,
/// [`balanced_share`]).
///
/// One cut in two, repeated as each idle worker asks, ends with the splitter's task
/// near half of what it started with and the last pieces a few thousand entities:
/// largest / mean near the number of tasks over the number of workers. Pieces of one
/// size from the start keep every task near the mean.
pub fn fan_out_shares(read: u64, rest: f64) -> Option<(Vec<f64>, u64)> {
    if !rest.is_finite() || rest <= 0.0 {
        return None;
    }
    let total = read as f64 + rest;
    // A task that read much before it split ends at least that large: pieces as large
    // keep the tasks even.
    let piece = (PIECE_ENTITIES as f64)
        .max(total / MAX_PIECES as f64)
        .max(read as f64);
    let kept = (piece - read as f64).max(MIN_SHARE * piece);
    let upper = rest - kept;
    let pieces = (upper / piece).floor().min((MAX_PIECES - 1) as f64);
    if pieces < 2.0 {
        return None;
    }
    let size = upper / pieces;
    let shares = (0..pieces as u64)
        .map(|j| (kept + j as f64 * size) / rest)
        .collect();
    Some((shares, size.round() as u64))
}

/// The points a `shares` of the way from `lo` to `hi` (increasing shares), each
/// strictly between the bounds and above the one before; `None` unless at least two
/// are.
fn fan_out_points(lo: &str, hi: &str, shares: &[f64]) -> Option<Vec<String>> {
    let mut points: Vec<String> = Vec::with_capacity(shares.len());
    for &share in shares {
        if let Some(at) = point_below(lo, hi, share)
            && points.last().is_none_or(|p| cmp_keys(&at, p).is_gt())
        {
            points.push(at);
        }
    }
    (points.len() >= 2).then_some(points)
}

/// A cut found by [`find_split`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Where the upper part starts: strictly after the last key read, before the end.
    pub at: EntityKey,
    /// A position no key reaches, if one is known (for the upper part's task): a
    /// PartitionKey start, or a key inside the last partition.
    pub ceiling: Option<EntityKey>,
    /// Probes sent.
    pub probes: usize,
    /// Entities the upper part is estimated to hold, when the density read says (each
    /// piece's, with `pieces`).
    pub estimate: Option<u64>,
    /// Where further pieces of the upper part start, in key order above `at`, when
    /// idle workers get the remainder in several equal pieces ([`fan_out_shares`]);
    /// empty for one cut in two.
    pub pieces: Vec<EntityKey>,
}

/// Finds where to cut the unread part of a range that has been read up to `after`
/// (included) and ends at `end` (excluded), by key value: in the middle, or, when `read`
/// says how densely the keys read so far lie, where both tasks end with about as many
/// entities. `ceiling` is a position no key was seen to reach, if known. `unpaced`: the
/// service serves partitions with no rate of their own (the emulator). Only then is a
/// remainder inside one partition cut by RowKey: where a partition is served at a fixed
/// rate (Azure's ~2,000 entities/s), two readers of one partition are no faster than
/// one, only throttled. `None` when the remainder holds no
/// key to cut at (or only inside a partition that may not be cut), or is estimated
/// under [`MIN_SPLIT_ENTITIES`], or under twice `outweigh` (the estimate of a task
/// already waiting for a worker: a range is worth splitting while another waits only
/// if it holds far more).
///
/// Probes are spent only on what the scan cannot tell: `seen_next` is the first key of
/// a later partition when the scan has already fetched it (the page after `after`), and
/// once both bounds of the remainder are known (`end`, or a ceiling) and `read` says the
/// remainder holds enough entities to split, the cut is placed by value without looking
/// for the key at it (that key would split the entities the same way). Where keys are
/// not spread evenly between the bounds, that cut can leave the upper part empty; that
/// task then costs one empty query, and the splitter, whose end has moved down, cuts
/// lower next time. Each probe costs the emulator a filter and sort of the whole table,
/// as much as half a page; on Azure it is an index seek.
///
/// Where partitions are not paced, in a planned range (`read.planned`), with no task
/// waiting (`outweigh` is `None`), both bounds and the density known, and the density
/// not mostly one large partition, a remainder holding several pieces' worth is
/// cut into pieces of one size at once ([`fan_out_shares`], [`Split::pieces`]), all placed by
/// value. Where they are paced, the pieces made the ramp of a large fleet overshoot the
/// account (simulated first backups at 64 workers: 84.6-88.1% of the account with
/// 0.9-1.3% refused, against 91.4-92.0% and at most 0.5% cutting in two).
#[allow(clippy::too_many_arguments)]
pub async fn find_split(
    probe: &dyn KeyProbe,
    after: &EntityKey,
    seen_next: Option<&EntityKey>,
    end: Option<&EntityKey>,
    ceiling: Option<&EntityKey>,
    read: Option<ReadSoFar<'_>>,
    outweigh: Option<u64>,
    unpaced: bool,
) -> tablevault_azure::Result<Option<Split>> {
    let mut p = Prober { probe, sent: 0 };
    let mut learned = ceiling.cloned();
    let estimate;
    let mut pieces = Vec::new();
    let seen_next =
        seen_next.filter(|k| cmp_keys(&k.pk, &after.pk).is_gt() && end.is_none_or(|e| *k < e));
    // A range ending inside the current partition, or below a ceiling found inside it,
    // holds no later partition.
    let last_partition = end.is_some_and(|e| e.pk == after.pk)
        || learned
            .as_ref()
            .is_some_and(|c| c.pk == after.pk && !c.rk.is_empty());
    // A large partition is cut inside even when later ones follow.
    let inside_large = unpaced
        && read
            .and_then(|r| r.partition)
            .is_some_and(|p| p.continues && p.entities >= LARGE_PARTITION_READ);
    let next = match seen_next {
        _ if inside_large => None,
        Some(k) => Some(k.clone()),
        None if last_partition => None,
        None => {
            p.ask(Probe::NextPartition {
                after: &after.pk,
                end,
            })
            .await?
        }
    };
    let at = match next {
        Some(next) => {
            // Another partition follows: cut between partitions.
            let across = Dimension::Partitions { end };
            let hi = match (end, &learned) {
                (Some(e), _) => Some(e.pk.clone()),
                (None, Some(c)) if c.rk.is_empty() && cmp_keys(&c.pk, &next.pk).is_gt() => {
                    Some(c.pk.clone())
                }
                (None, _) => {
                    let found = find_ceiling(&mut p, &across, &next.pk).await?;
                    learned = found.as_ref().map(EntityKey::partition_start);
                    found
                }
            };
            // Partitions read so far span [first, next); the rest, [next, hi).
            let read_from = read
                .filter(|r| r.first.pk != next.pk)
                .map(|r| (r.first.pk.as_str(), r.entities));
            let Some(cut) = cut_share(read_from, hi.as_deref(), &next.pk, outweigh) else {
                return Ok(None);
            };
            // Pieces are cut by the density read: not when most of it is one large
            // partition (with Zipf-like sizes, a large partition made the sparse ones
            // after it look as dense: ten pieces of a few hundred entities each).
            let skewed = read.is_some_and(|r| {
                r.largest_partition >= LARGE_PARTITION_READ && 2 * r.largest_partition > r.entities
            });
            let allowed = unpaced && !skewed && read.is_some_and(|r| r.planned);
            if let Some((points, size)) = fan_out(read_from, &cut, &next.pk, hi.as_deref())
                .filter(|_| allowed && outweigh.is_none())
            {
                estimate = Some(size);
                let mut points = points.into_iter().map(EntityKey::partition_start);
                let at = points.next().expect("fan_out gives at least two points");
                pieces = points.collect();
                at
            } else {
                estimate = cut.upper();
                let pk = cut_value(
                    &mut p,
                    &across,
                    &next.pk,
                    hi,
                    cut.share,
                    read_from.is_some(),
                )
                .await?
                .unwrap_or(next.pk);
                EntityKey::partition_start(pk)
            }
        }
        None if !unpaced => return Ok(None),
        None => {
            // Only the rest of the current partition is left (and, at most, the head of
            // the end's, which stays with this task), or it is large: then the part
            // above the cut keeps the partitions after it too.
            let below = end.filter(|e| e.pk == after.pk).map(|e| e.rk.as_str());
            let inside = Dimension::Rows {
                partition: &after.pk,
                below,
            };
            let hi = match (below, &learned) {
                (Some(b), _) => Some(b.to_string()),
                (None, Some(c)) if c.pk == after.pk && cmp_keys(&c.rk, &after.rk).is_gt() => {
                    Some(c.rk.clone())
                }
                (None, _) => {
                    let Some(first) = p
                        .ask(Probe::Row {
                            partition: &after.pk,
                            from: &after.rk,
                            exclusive: true,
                            below: None,
                        })
                        .await?
                    else {
                        return Ok(None);
                    };
                    let found = find_ceiling(&mut p, &inside, &first.rk).await?;
                    // Unless later partitions may follow, nothing reaches (partition,
                    // found).
                    if !inside_large {
                        learned = found.as_ref().map(|rk| EntityKey::new(&after.pk, rk));
                    }
                    found
                }
            };
            // Inside one partition, the density is known if the read began in it, or
            // from what was read of it.
            let read_from = read.and_then(|r| {
                if r.first.pk == after.pk {
                    Some((r.first.rk.as_str(), r.entities))
                } else {
                    r.partition.map(|p| (p.first_rk, p.entities))
                }
            });
            let Some(cut) = cut_share(read_from, hi.as_deref(), &after.rk, outweigh) else {
                return Ok(None);
            };
            let allowed = read.is_some_and(|r| r.planned);
            if let Some((points, size)) = fan_out(read_from, &cut, &after.rk, hi.as_deref())
                .filter(|_| allowed && outweigh.is_none())
            {
                estimate = Some(size);
                let mut points = points.into_iter().map(|rk| EntityKey::new(&after.pk, rk));
                let at = points.next().expect("fan_out gives at least two points");
                pieces = points.collect();
                at
            } else {
                estimate = cut.upper();
                match cut_value(
                    &mut p,
                    &inside,
                    &after.rk,
                    hi,
                    cut.share,
                    read_from.is_some(),
                )
                .await?
                {
                    Some(rk) => EntityKey::new(&after.pk, rk),
                    None => return Ok(None),
                }
            }
        }
    };
    if &at <= after || end.is_some_and(|e| &at >= e) {
        return Ok(None);
    }
    Ok(Some(Split {
        at,
        ceiling: learned,
        probes: p.sent,
        estimate,
        pieces,
    }))
}

/// With both bounds of the remainder `[reached, hi)` known and its size estimated from
/// what `read_from` read (`cut`), the points where its pieces for idle workers start
/// ([`fan_out_shares`]), and each piece's estimate.
fn fan_out(
    read_from: Option<(&str, u64)>,
    cut: &CutShare,
    reached: &str,
    hi: Option<&str>,
) -> Option<(Vec<String>, u64)> {
    let (shares, size) = fan_out_shares(read_from?.1, cut.rest?)?;
    Some((fan_out_points(reached, hi?, &shares)?, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::key_problem;
    use proptest::prelude::*;

    /// A table as a sorted list of keys.
    struct Sorted(Vec<EntityKey>);

    impl Sorted {
        fn new(mut keys: Vec<EntityKey>) -> Self {
            keys.sort();
            keys.dedup();
            Sorted(keys)
        }
    }

    #[async_trait]
    impl KeyProbe for Sorted {
        async fn first_key(&self, probe: Probe<'_>) -> tablevault_azure::Result<Option<EntityKey>> {
            Ok(self.0.iter().find(|k| probe.matches(k)).cloned())
        }
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Splits after key `i` and returns the share of the remainder given away.
    fn share_given_away(t: &Sorted, i: usize, end: Option<&EntityKey>) -> (f64, Split) {
        let after = &t.0[i];
        let split = run(find_split(t, after, None, end, None, None, None, true))
            .unwrap()
            .expect("a split");
        assert!(split.at > *after, "{:?} after {after:?}", split.at);
        assert!(end.is_none_or(|e| split.at < *e));
        assert!(split.probes <= MAX_PROBES + 2, "{} probes", split.probes);
        let remainder: Vec<&EntityKey> = t.0[i + 1..]
            .iter()
            .filter(|k| end.is_none_or(|e| *k < e))
            .collect();
        let above = remainder.iter().filter(|k| ***k >= split.at).count();
        (above as f64 / remainder.len() as f64, split)
    }

    fn guid(i: u64) -> String {
        format!(
            "{:032x}",
            (i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
        )
    }

    /// `n` GUID PartitionKeys, one entity each.
    fn guid_partitions(n: u64) -> Sorted {
        Sorted::new((0..n).map(|i| EntityKey::new(guid(i), "r")).collect())
    }

    /// `n` GUID RowKeys in one partition.
    fn guid_rows(n: u64) -> Sorted {
        Sorted::new((0..n).map(|i| EntityKey::new("p", guid(i))).collect())
    }

    /// `n` entities under `customer-NNNNN` PartitionKeys, 500 each.
    fn sequential(n: u64) -> Sorted {
        Sorted::new(
            (0..n)
                .map(|i| {
                    EntityKey::new(format!("customer-{:05}", i / 500), format!("order-{i:010}"))
                })
                .collect(),
        )
    }

    /// `n` entities in one partition, numbered RowKeys.
    fn one_partition(pk: &str, n: u64) -> Sorted {
        Sorted::new(
            (0..n)
                .map(|i| EntityKey::new(pk, format!("{i:08}")))
                .collect(),
        )
    }

    #[test]
    fn guid_partitions_split_near_the_middle() {
        let t = guid_partitions(20_000);
        for i in [999usize, 5_000, 12_000] {
            let (share, split) = share_given_away(&t, i, None);
            assert!((0.25..=0.75).contains(&share), "after {i}: {share}");
            assert!(
                split.ceiling.is_some(),
                "an unbounded split learns a ceiling"
            );
            // With the ceiling known, the next split of the upper part needs fewer probes.
            fewer_probes_with_the_ceiling(&t, i, &split);
        }
    }

    /// Splitting again after key `i` with the ceiling `split` learned takes fewer probes.
    fn fewer_probes_with_the_ceiling(t: &Sorted, i: usize, split: &Split) {
        let again = run(find_split(
            t,
            &t.0[i],
            None,
            None,
            split.ceiling.as_ref(),
            None,
            None,
            true,
        ))
        .unwrap()
        .unwrap();
        assert!(
            again.probes < split.probes,
            "{} < {}",
            again.probes,
            split.probes
        );
    }

    #[test]
    fn sequential_partitions_split_near_the_middle() {
        let t = sequential(20_000);
        let (share, _) = share_given_away(&t, 999, None);
        assert!((0.2..=0.8).contains(&share), "{share}");
        let end = EntityKey::partition_start("customer-00030");
        let (share, _) = share_given_away(&t, 2_500, Some(&end));
        assert!((0.2..=0.8).contains(&share), "{share}");
    }

    #[test]
    fn one_huge_partition_splits_by_row_key() {
        let t = one_partition("tenant", 50_000);
        let (share, split) = share_given_away(&t, 999, None);
        assert_eq!(split.at.pk, "tenant");
        assert!((0.35..=0.65).contains(&share), "{share}");
        assert_eq!(
            split.ceiling.as_ref().map(|c| c.pk.as_str()),
            Some("tenant")
        );
        // The upper part's task cuts again with the ceiling it inherits, fewer probes.
        let at = t.0.iter().position(|k| *k >= split.at).unwrap();
        fewer_probes_with_the_ceiling(&t, at + 999, &split);
        let end = EntityKey::new("tenant", "00030000");
        let (share, _) = share_given_away(&t, 20_000, Some(&end));
        assert!((0.2..=0.8).contains(&share), "{share}");
        // GUID RowKeys too.
        let t = guid_rows(20_000);
        let (share, _) = share_given_away(&t, 1_000, None);
        assert!((0.2..=0.8).contains(&share), "{share}");
    }

    /// Reads `t` from key `from` through key `i`, splits with what was read, and returns
    /// (entities this task ends with, entities given away per new task), or `None` for
    /// no split.
    fn balanced(
        t: &Sorted,
        from: usize,
        i: usize,
        end: Option<&EntityKey>,
    ) -> Option<(usize, usize)> {
        let read = plain_read(&t.0[from], (i + 1 - from) as u64);
        let split = run(find_split(
            t,
            &t.0[i],
            None,
            end,
            None,
            Some(read),
            None,
            true,
        ))
        .unwrap()?;
        let upto = |k: &EntityKey| end.is_none_or(|e| k < e);
        let kept = t.0[from..].iter().filter(|k| **k < split.at).count();
        let given = t.0.iter().filter(|k| **k >= split.at && upto(k)).count();
        Some((kept, given / (1 + split.pieces.len())))
    }

    /// What a planned range read: `entities` from `first`, nothing known of partitions.
    fn plain_read(first: &EntityKey, entities: u64) -> ReadSoFar<'_> {
        ReadSoFar {
            first,
            entities,
            partition: None,
            largest_partition: 0,
            planned: true,
        }
    }

    /// `n` entities in each of four key shapes, named.
    fn four_shapes(n: u64) -> [(&'static str, Sorted); 4] {
        [
            ("guid", guid_partitions(n)),
            ("sequential", sequential(n)),
            ("giant", one_partition("tenant", n)),
            ("guid rows", guid_rows(n)),
        ]
    }

    #[test]
    fn a_task_that_has_read_much_keeps_less_of_the_rest() {
        for (name, t) in &four_shapes(20_000) {
            // Early, midway, and after half of a range: both tasks end with about as
            // many entities, where halving the rest would leave the reader up to twice
            // as many. (Having read half, the reader still keeps a fifth of the rest.)
            for (from, i) in [(0, 999), (0, 4_999), (10_000, 12_999), (0, 9_999)] {
                let (kept, given) = balanced(t, from, i, None).expect("a split");
                let ratio = kept as f64 / given as f64;
                assert!(
                    (0.6..=1.75).contains(&ratio),
                    "{name}: read {from}..={i}: kept {kept}, gave {given}"
                );
            }
        }
    }

    #[test]
    fn a_large_partition_is_cut_inside_even_when_later_ones_follow() {
        // Partition "b" holds 5,000 entities between small ones; a task read "a" and
        // 2,000 of "b", and the page read ahead is still in "b".
        let keys = (0..100)
            .map(|i| EntityKey::new("a", format!("{i:05}")))
            .chain((0..5_000).map(|i| EntityKey::new("b", format!("{i:05}"))))
            .chain((0..2_000).map(|i| EntityKey::new(format!("c{:02}", i / 100), "r")))
            .collect();
        let t = Sorted::new(keys);
        let after = EntityKey::new("b", "01999");
        let next = EntityKey::new("c00", "r");
        let split_with = |continues: bool, unpaced: bool| {
            let read = ReadSoFar {
                first: &t.0[0],
                entities: 2_100,
                partition: Some(PartitionRead {
                    first_rk: "00000",
                    entities: 2_000,
                    continues,
                }),
                largest_partition: 2_000,
                planned: true,
            };
            run(find_split(
                &t,
                &after,
                Some(&next),
                None,
                None,
                Some(read),
                None,
                unpaced,
            ))
            .unwrap()
        };
        let inside = split_with(true, true).expect("a split");
        assert_eq!(inside.at.pk, "b", "{inside:?}");
        assert!(inside.at > after);
        // What "b" has left is estimated from what was read of it, and the ceiling
        // found inside "b" is not passed on: the partitions after it are still there.
        let estimate = inside.estimate.expect("an estimate") as f64;
        assert!((500.0..=3_000.0).contains(&estimate), "{estimate}");
        assert!(
            inside
                .ceiling
                .as_ref()
                .is_none_or(|c| t.0.iter().all(|k| k < c)),
            "{inside:?}"
        );
        // A partition that ends on the page read ahead, or where partitions are paced:
        // cut after it, if at all.
        for (continues, unpaced) in [(false, true), (true, false)] {
            let after_it = split_with(continues, unpaced);
            assert!(
                after_it.is_none_or(|s| s.at.pk.as_str() > "b"),
                "{continues} {unpaced}"
            );
        }
    }

    #[test]
    fn a_density_read_mostly_from_one_large_partition_gives_no_pieces() {
        // A task read 3,000 entities, 2,000 of them in one partition: the partitions
        // after it need not be as dense, so the rest is cut in two, not into pieces.
        let t = guid_partitions(20_000);
        let split_with = |largest_partition| {
            let read = ReadSoFar {
                first: &t.0[0],
                entities: 3_000,
                partition: None,
                largest_partition,
                planned: true,
            };
            run(find_split(
                &t,
                &t.0[2_999],
                None,
                Some(&t.0[19_000]),
                None,
                Some(read),
                None,
                true,
            ))
            .unwrap()
            .expect("a split")
        };
        assert!(!split_with(1).pieces.is_empty());
        assert!(split_with(2_000).pieces.is_empty());
    }

    #[test]
    fn a_ceiling_just_above_hex_keys_does_not_widen_their_space() {
        // A ceiling search over hex keys ends at `g`, the next letter: the hex space
        // below it is sixteen digits wide, not thirty-six.
        for (lo, key, hi, want) in [
            ("0000", "8000", "g", 0.5),
            ("0000", "c000", "g", 0.75),
            ("0000", "0ccc", "g", 0.05),
            ("0000", "8000", "G", 0.5),
        ] {
            let f = fraction(lo, Some(hi), key);
            assert!((f - want).abs() < 0.01, "{key} in [{lo}, {hi}): {f}");
        }
        assert_eq!(point_at("0000", Some("g"), 0.5), "8");
        // Letters that are keys, not a ceiling above hex digits, keep their class.
        let f = fraction("apple", Some("zebra"), "mango");
        assert!((0.4..0.55).contains(&f), "{f}");
        assert!(
            fraction("a", Some("g"), "d") > 0.45,
            "hex-like letters below g"
        );
    }

    #[test]
    fn pieces_for_idle_workers_are_of_one_size_and_bounded_in_number() {
        // A first split (little read) of tables from small to huge.
        for rest in [2_000.0, 4_000.0, 9_000.0, 19_000.0, 49_000.0, 1e6, 1e10] {
            let Some((shares, size)) = fan_out_shares(1_000, rest) else {
                assert!(rest < 4.0 * PIECE_ENTITIES as f64, "{rest}: no pieces");
                continue;
            };
            assert!(
                shares.len() >= 2 && shares.len() < MAX_PIECES as usize,
                "{rest}"
            );
            assert!(size >= PIECE_ENTITIES, "{rest}: pieces of {size}");
            assert!(shares.windows(2).all(|w| w[0] < w[1]), "{shares:?}");
            assert!(shares[0] > 0.0 && *shares.last().unwrap() < 1.0);
            // The splitter ends with about one piece, what it read included.
            let kept = shares[0] * rest + 1_000.0;
            assert!(
                (0.9..=1.5).contains(&(kept / size as f64)),
                "{rest}: kept {kept}, pieces of {size}"
            );
        }
        // Late in a task, the rest is too small for pieces: one cut in two.
        assert_eq!(fan_out_shares(40_000, 3_000.0), None);
        assert_eq!(fan_out_shares(10_000, 10_000.0), None);
        // A task that read much first hands out pieces as large as what it read.
        let (shares, size) = fan_out_shares(5_000, 15_000.0).unwrap();
        assert_eq!((shares.len(), size), (2, 7_000));
        for nonsense in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(fan_out_shares(1_000, nonsense), None);
        }
    }

    #[test]
    fn idle_workers_get_the_rest_of_a_sized_range_in_pieces_that_hold_what_was_estimated() {
        for (name, t) in &four_shapes(20_000) {
            // A table's first task read its first page; the ceiling is known.
            let ceiling = run(find_split(t, &t.0[999], None, None, None, None, None, true))
                .unwrap()
                .unwrap()
                .ceiling;
            let read = plain_read(&t.0[0], 1_000);
            let split_for = |outweigh| {
                run(find_split(
                    t,
                    &t.0[999],
                    None,
                    None,
                    ceiling.as_ref(),
                    Some(read),
                    outweigh,
                    true,
                ))
                .unwrap()
                .unwrap()
            };
            let split = split_for(None);
            assert!(split.pieces.len() >= 3, "{name}: {split:?}");
            let size = split.estimate.expect("each piece's estimate") as f64;
            let starts: Vec<&EntityKey> = std::iter::once(&split.at).chain(&split.pieces).collect();
            let kept = t.0.iter().filter(|k| **k < split.at).count() as f64;
            assert!(
                (0.5..=1.5).contains(&(kept / size)),
                "{name}: kept {kept} of {size}"
            );
            for (i, start) in starts.iter().enumerate() {
                let held =
                    t.0.iter()
                        .filter(|k| *k >= *start && starts.get(i + 1).is_none_or(|n| *k < *n))
                        .count() as f64;
                assert!(
                    (0.5..=1.5).contains(&(held / size)),
                    "{name}: piece {i} holds {held}, estimated {size}"
                );
            }
            // While a task waits, a range is only ever cut in two.
            assert!(split_for(Some(100)).pieces.is_empty(), "{name}");
            // And a piece is only ever cut in two.
            let piece = run(find_split(
                t,
                &t.0[999],
                None,
                None,
                ceiling.as_ref(),
                Some(ReadSoFar {
                    planned: false,
                    ..read
                }),
                None,
                true,
            ))
            .unwrap()
            .unwrap();
            assert!(piece.pieces.is_empty(), "{name}");
            // Where partitions are paced, too.
            let paced = run(find_split(
                t,
                &t.0[999],
                None,
                None,
                ceiling.as_ref(),
                Some(read),
                None,
                false,
            ))
            .unwrap();
            assert!(paced.is_none_or(|s| s.pieces.is_empty()), "{name}");
        }
    }

    #[test]
    fn a_scan_that_knows_both_bounds_and_what_follows_cuts_without_probes() {
        let sequential = sequential(20_000);
        let guid_table = guid_partitions(20_000);
        for (name, t) in [("sequential", &sequential), ("guid", &guid_table)] {
            // A task read keys 2,000..=4,999 of a range ending at key 16,000, and its
            // scan has fetched the page holding the next partition.
            let (from, i, end) = (2_000, 4_999, t.0[16_000].clone());
            let next = t.0[i + 1..].iter().find(|k| k.pk != t.0[i].pk).unwrap();
            let read = plain_read(&t.0[from], (i + 1 - from) as u64);
            let split = run(find_split(
                t,
                &t.0[i],
                Some(next),
                Some(&end),
                None,
                Some(read),
                None,
                true,
            ))
            .unwrap()
            .expect("a split");
            assert_eq!(split.probes, 0, "{name}");
            let kept = t.0[from..].iter().filter(|k| **k < split.at).count();
            let given = t.0.iter().filter(|k| **k >= split.at && **k < end).count()
                / (1 + split.pieces.len());
            let ratio = kept as f64 / given as f64;
            assert!(
                (0.6..=1.75).contains(&ratio),
                "{name}: kept {kept}, gave {given}"
            );
            // Unbounded, with the ceiling a first split learned: no probes either.
            let first = run(find_split(t, &t.0[999], None, None, None, None, None, true))
                .unwrap()
                .unwrap();
            let again = run(find_split(
                t,
                &t.0[i],
                Some(next),
                None,
                first.ceiling.as_ref(),
                Some(read),
                None,
                true,
            ))
            .unwrap()
            .unwrap();
            assert_eq!(again.probes, 0, "{name}");
            // A "next partition" that is not one (the same partition, or past the end) is
            // ignored, and a probe finds the real one.
            for wrong in [&t.0[i], &end] {
                let probed = run(find_split(
                    t,
                    &t.0[i],
                    Some(wrong),
                    Some(&end),
                    None,
                    Some(read),
                    None,
                    true,
                ))
                .unwrap()
                .unwrap();
                assert_eq!(probed.probes, 1, "{name}");
                assert_eq!(probed.at, split.at, "{name}");
            }
        }
        // Inside one partition, a range ending in it, or a ceiling found in it, says no
        // later partition follows; with neither, a probe asks.
        let giant = one_partition("tenant", 20_000);
        let end = giant.0[16_000].clone();
        let read = plain_read(&giant.0[0], 5_000);
        let split_with = |end: Option<&EntityKey>, ceiling: Option<&EntityKey>| {
            run(find_split(
                &giant,
                &giant.0[4_999],
                None,
                end,
                ceiling,
                Some(read),
                None,
                true,
            ))
            .unwrap()
            .unwrap()
        };
        let bounded = split_with(Some(&end), None);
        assert_eq!((bounded.probes, bounded.at.pk.as_str()), (0, "tenant"));
        let unbounded = split_with(None, None);
        assert!(unbounded.probes > 1, "{unbounded:?}");
        let again = split_with(None, unbounded.ceiling.as_ref());
        assert_eq!((again.probes, again.at.pk.as_str()), (0, "tenant"));
    }

    #[test]
    fn a_cut_placed_by_value_in_a_gap_leaves_the_upper_part_empty_and_the_next_cut_is_lower() {
        // Two clusters of partitions far apart, the range ending where the second
        // starts: a cut by value between them hands out an empty range; the splitter,
        // now ending there, cuts again inside the first cluster.
        let keys: Vec<EntityKey> = (0..10_000)
            .map(|i| EntityKey::new(format!("a{i:05}"), ""))
            .chain((0..10).map(|i| EntityKey::new(format!("z{i:05}"), "")))
            .collect();
        let t = Sorted::new(keys);
        let end = EntityKey::partition_start("z");
        let read = plain_read(&t.0[0], 1_000);
        let first = run(find_split(
            &t,
            &t.0[999],
            Some(&t.0[1_000]),
            Some(&end),
            None,
            Some(read),
            None,
            true,
        ))
        .unwrap()
        .unwrap();
        assert!(
            !t.0.iter().any(|k| *k >= first.at && *k < end),
            "{:?}",
            first.at
        );
        // Hardly anything was read over the span down to the cut, so it looks large.
        let second = run(find_split(
            &t,
            &t.0[999],
            Some(&t.0[1_000]),
            Some(&first.at),
            None,
            Some(read),
            None,
            true,
        ))
        .unwrap()
        .unwrap();
        assert!(second.at < first.at);
    }

    #[test]
    fn a_range_is_split_while_a_task_waits_only_if_it_holds_twice_as_much() {
        let t = sequential(20_000);
        // Read keys 0..2,000; about 10,000 are left before the end.
        let (i, end) = (1_999, t.0[12_000].clone());
        let next = t.0[i + 1..].iter().find(|k| k.pk != t.0[i].pk).unwrap();
        let read = plain_read(&t.0[0], 2_000);
        let split = |outweigh| {
            run(find_split(
                &t,
                &t.0[i],
                Some(next),
                Some(&end),
                None,
                Some(read),
                outweigh,
                true,
            ))
            .unwrap()
        };
        let free = split(None).expect("a split with nothing waiting");
        // The estimate is each piece's.
        let given = t.0.iter().filter(|k| **k >= free.at && **k < end).count() as f64
            / (1 + free.pieces.len()) as f64;
        let estimate = free.estimate.expect("an estimate of the upper part") as f64;
        assert!(
            (estimate - given).abs() <= given * 0.25,
            "estimated {estimate}, gave {given}"
        );
        assert!(split(Some(4_000)).is_some(), "10,000 outweigh 4,000");
        assert_eq!(split(Some(6_000)), None, "10,000 do not outweigh 6,000");
        // Without a density, nothing outweighs a waiting task.
        let blind = run(find_split(
            &t,
            &t.0[i],
            Some(next),
            Some(&end),
            None,
            None,
            Some(10),
            true,
        ))
        .unwrap();
        assert_eq!(blind, None);
    }

    #[test]
    fn a_small_remainder_is_not_split() {
        let t = guid_partitions(20_000);
        assert_eq!(balanced(&t, 0, 19_000, None), None, "about 1,000 left");
        let end = t.0[6_000].clone();
        assert_eq!(
            balanced(&t, 5_000, 5_500, Some(&end)),
            None,
            "about 500 left"
        );
        // Without knowing what was read, it still splits (and so it did before).
        assert!(
            run(find_split(
                &t,
                &t.0[19_000],
                None,
                None,
                None,
                None,
                None,
                true
            ))
            .unwrap()
            .is_some()
        );
        let giant = one_partition("t", 20_000);
        assert_eq!(balanced(&giant, 0, 18_999, None), None);
        assert!(
            balanced(&giant, 0, 14_999, None).is_some(),
            "5,000 left is split"
        );
    }

    #[test]
    fn fractions_order_keys_between_their_bounds() {
        assert_eq!(fraction("a", Some("c"), "b"), 0.5);
        assert_eq!(fraction("a", Some("c"), "0"), 0.0);
        assert_eq!(fraction("a", Some("c"), "d"), 1.0);
        let f = fraction("customer-00000", Some("customer-00040"), "customer-00010");
        assert!((0.2..0.3).contains(&f), "{f}");
        for (lo, hi) in [
            ("0000", Some("ffff")),
            ("a", None),
            ("customer-1", Some("customer-9")),
        ] {
            let m = midpoint(lo, hi);
            let f = fraction(lo, hi, &m);
            assert!((0.45..=0.55).contains(&f), "{lo} {hi:?} {m}: {f}");
            let q = point_at(lo, hi, 0.25);
            let g = fraction(lo, hi, &q);
            assert!((0.2..=0.3).contains(&g), "{lo} {hi:?} {q}: {g}");
        }
    }

    #[test]
    fn a_partition_is_cut_inside_only_when_allowed() {
        let giant = one_partition("tenant", 20_000);
        let split = |t: &Sorted, i: usize, rows: bool| {
            run(find_split(t, &t.0[i], None, None, None, None, None, rows)).unwrap()
        };
        assert_eq!(split(&giant, 999, false), None);
        assert_eq!(split(&giant, 999, true).unwrap().at.pk, "tenant");
        // With later partitions, the cut is between partitions either way.
        let sequential = sequential(20_000);
        let at = split(&sequential, 999, false).unwrap().at;
        assert!(at.rk.is_empty() && at.pk > sequential.0[999].pk, "{at:?}");
        // In the last partition, not any more.
        assert_eq!(split(&sequential, 19_600, false), None);
    }

    #[test]
    fn nothing_left_means_no_split() {
        let t = Sorted::new(vec![EntityKey::new("a", "1"), EntityKey::new("a", "2")]);
        assert_eq!(
            run(find_split(&t, &t.0[1], None, None, None, None, None, true)).unwrap(),
            None
        );
        let end = EntityKey::new("a", "2");
        assert_eq!(
            run(find_split(
                &t,
                &t.0[0],
                None,
                Some(&end),
                None,
                None,
                None,
                true
            ))
            .unwrap(),
            None
        );
    }

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

    fn key_unit() -> impl Strategy<Value = char> {
        prop_oneof![
            4 => prop::char::range('0', '9'),
            4 => prop::char::range('a', 'f'),
            1 => Just(' '),
            1 => Just('~'),
            1 => Just('\u{E000}'),
            1 => Just('\u{1F600}'),
            1 => Just('\u{FFFD}'),
            1 => prop::char::range('\u{A0}', '\u{3000}'),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        prop::collection::vec(key_unit(), 0..6).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Whatever the keys, a cut lies strictly inside the remainder, on a real key, and
        /// the probes stay bounded.
        #[test]
        fn cuts_fall_inside_the_remainder(
            keys in prop::collection::vec((key(), key()), 2..200),
            pick in 0usize..1000,
            end_pick in prop::option::of(0usize..1000),
            ceiling in prop::option::of((key(), key())),
            read in prop::option::of((0usize..1000, 0u64..100_000)),
            part in prop::option::of((key(), 0u64..5_000, any::<bool>())),
            planned in any::<bool>(),
            rows in any::<bool>(),
        ) {
            let t = Sorted::new(keys.into_iter().map(|(p, r)| EntityKey::new(p, r)).collect());
            let after = t.0[pick % t.0.len()].clone();
            let end = end_pick.map(|e| t.0[e % t.0.len()].clone()).filter(|e| *e > after);
            // Any ceiling, even a wrong one: it may cost balance, never correctness.
            let ceiling = ceiling.map(|(p, r)| EntityKey::new(p, r));
            // What was read, even nonsense (a first key after the last): only balance
            // depends on it.
            let first = read.map(|(f, _)| t.0[f % t.0.len()].clone());
            // And any reading of the current partition: a wrong one costs balance only.
            let part_rk = part.as_ref().map(|(rk, _, _)| rk.clone());
            let partition = part.as_ref().zip(part_rk.as_deref()).map(|((_, n, c), first_rk)| PartitionRead { first_rk, entities: *n, continues: *c });
            let read = first.as_ref().zip(read).map(|(first, (_, entities))| ReadSoFar { first, entities, partition, largest_partition: part.as_ref().map_or(0, |p| p.1), planned });
            let split = run(find_split(&t, &after, None, end.as_ref(), ceiling.as_ref(), read, None, rows)).unwrap();
            let remainder: Vec<&EntityKey> = t.0.iter()
                .filter(|k| **k > after && end.as_ref().is_none_or(|e| *k < e))
                .collect();
            match split {
                // A wrong ceiling (a key reaches it) is trusted: it may cost a split.
                None => prop_assert!(read.is_some() || remainder.len() <= 1 || remainder.iter().all(|k| k.pk == after.pk) || remainder.iter().all(|k| k.pk != after.pk)
                    || ceiling.as_ref().is_some_and(|c| t.0.iter().any(|k| k >= c)),
                    "no cut although {} keys remain", remainder.len()),
                Some(s) => {
                    prop_assert!(rows || s.at.pk != after.pk, "cut inside the partition");
                    prop_assert!(s.at > after);
                    prop_assert!(end.as_ref().is_none_or(|e| s.at < *e));
                    // A cut placed by value, from the density of what was read, may fall
                    // in a gap; a probed one lies on a key.
                    prop_assert!(read.is_some() || remainder.iter().any(|k| **k >= s.at), "the upper part holds a key");
                    prop_assert!(s.probes <= MAX_PROBES + 2);
                    prop_assert!(key_problem(&s.at.pk).is_none() && key_problem(&s.at.rk).is_none());
                    // A ceiling passed on is never reached by a key of the upper part
                    // (unless a wrong one was given).
                    prop_assert!(ceiling.is_some() || s.ceiling.as_ref().is_none_or(|c| remainder.iter().all(|k| *k < c)), "ceiling {:?} is reached", s.ceiling);
                    // Pieces go up from the cut, stay inside the remainder and are legal.
                    prop_assert!(s.pieces.is_empty() || read.is_some(), "pieces without a density");
                    prop_assert!((s.pieces.len() as u64) < MAX_PIECES - 1);
                    let mut below = &s.at;
                    for piece in &s.pieces {
                        prop_assert!(piece > below, "{piece:?} not above {below:?}");
                        prop_assert!(end.as_ref().is_none_or(|e| piece < e));
                        prop_assert!(rows || piece.pk != after.pk, "piece inside the partition");
                        prop_assert!(key_problem(&piece.pk).is_none() && key_problem(&piece.rk).is_none());
                        below = piece;
                    }
                }
            }
        }
    }
}
