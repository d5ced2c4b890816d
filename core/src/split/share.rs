//! How much of a remainder to give away: the share that leaves both tasks with about as
//! many entities, from the density read so far, and the equal pieces a large planned
//! remainder is cut into for idle workers.

use super::scale::{bump, common_units, measured_fraction, one_region, point_below};
use crate::keys::cmp_keys;

/// A partition an attempt has read this many entities of is large: the density read
/// leaves it out when it measures the partitions after it, and a read mostly of it is
/// not cut into pieces by that density.
pub const LARGE_PARTITION_READ: u64 = PIECE_ENTITIES / 2;

/// Where partitions are not paced, a partition an attempt has read this many entities
/// of, with the page read ahead still in it, is cut inside (the part above the cut
/// keeps the partitions after it): cutting after it would leave all of a large
/// partition with one task (with Zipf-like partition sizes, a task of a quarter of the
/// table beside tasks of a few thousand entities). That is [`LARGE_PARTITION_READ`]
/// where the attempt began in the partition, and this where it entered it from an
/// earlier one: with a full page ([`MAX_PAGE_SIZE`](tablevault_azure::table::MAX_PAGE_SIZE)) ahead, the partition is known to hold
/// `LARGE_PARTITION_READ`. At `LARGE_PARTITION_READ` alone, a partition of 4,005 entered
/// at its 227th entity was cut only after it, where the partitions left held too few
/// to split, and one task read 39% of a table of 20,000 (the split model's random
/// shape 97); Zipf sizes falling with the key gave a task of 2.41 times the mean, 1.87
/// with this bound. Where the attempt began in the partition, its first split's probe
/// for the next one learns whether later partitions follow, and a ceiling found inside
/// the partition is passed on only then: cut inside from 1,000 read, one partition
/// of 50,000 cost 25 probes where it cost 12.
pub const INSIDE_PARTITION_READ: u64 =
    LARGE_PARTITION_READ - tablevault_azure::table::MAX_PAGE_SIZE as u64;

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
    match remainder_estimate(read, read_span, rest_span) {
        Some(rest) => share_of_rest(read, rest),
        None => Some(0.5),
    }
}

/// [`balanced_share`] of a remainder of `rest` entities, however it was estimated.
fn share_of_rest(read: u64, rest: f64) -> Option<f64> {
    (rest >= MIN_SPLIT_ENTITIES as f64)
        .then(|| (0.5 - read as f64 / (2.0 * rest)).clamp(MIN_SHARE, 0.5))
}

/// Whether a task that has read `task_read` entities, with a remainder of `rest`
/// (`None`: unknown), would end short of one and a half times the estimate of the task
/// waiting (`outweigh`): then it does not split beside it.
pub(super) fn short_of_waiting(outweigh: Option<u64>, task_read: u64, rest: Option<f64>) -> bool {
    outweigh.is_some_and(|w| !rest.is_some_and(|r| task_read as f64 + r >= 1.5 * w as f64))
}

/// Entities left in `rest_span` of the key space if keys lie there as densely as the
/// `read` ones did over `read_span`; `None` when that cannot be told.
fn remainder_estimate(read: u64, read_span: f64, rest_span: f64) -> Option<f64> {
    (read_span > 0.0 && rest_span.is_finite()).then(|| read as f64 * rest_span / read_span)
}

/// Where to cut a remainder, and what is known of its size.
pub(super) struct CutShare {
    /// The share of the remainder the splitter keeps.
    pub(super) share: f64,
    /// Entities the remainder is estimated to hold, when the density read says.
    pub(super) rest: Option<f64>,
    /// Whether the share comes from the density read, so that a point that far along
    /// by value divides the entities as a key found there would.
    pub(super) by_value: bool,
}

impl CutShare {
    /// A half, of a remainder whose size nothing measures: the cut is halved by probes,
    /// not placed by value.
    pub(super) fn unknown() -> CutShare {
        CutShare {
            share: 0.5,
            rest: None,
            by_value: false,
        }
    }

    /// Entities the upper part is estimated to hold.
    pub(super) fn upper(&self) -> Option<u64> {
        self.rest.map(|r| (r * (1.0 - self.share)).round() as u64)
    }
}

/// The share of the remainder to cut at ([`balanced_share`]) when `read` entities were
/// read from `from` up to `reached` in a dimension bounded by `hi` (a half when nothing
/// is known), and the remainder's estimated size. With `outweigh` (a waiting task's
/// estimate), `None` unless the task would end at one and a half times that: what it
/// has read (`task_read`) and the remainder estimated. Where nothing measures the
/// remainder, only once the task has read as much as the waiting one holds: a task
/// whose ceiling is far (the next letter above a tenant's keys) cannot measure what is
/// left of a tenant, and without this read a large one alone while the pieces cut
/// before it waited (modelled: 10,150 of 50,000 entities, three times the mean task).
/// (A remainder of twice the waiting task's, the rule before, let a task that had read
/// 3,000 of a large partition beside tasks of 2,900 finish its 2,200 alone.)
///
/// Where the whole read says the remainder is too small to split, the last page read
/// (`recent`: where it began, how many entities it held) may say otherwise: keys can
/// lie far denser further on than where the read began (a small tenant's keys, then a
/// large one's; unpadded numbers, ten times as dense under `1` as under `5`), and then
/// a task would read the rest alone, its estimate falling as it reads on
/// ([`recent_cut`]). Either density counts only where [`one_region`] says it carries
/// over to the rest.
pub(super) fn cut_share(
    read: Option<(&str, u64)>,
    recent: Option<(&str, u64)>,
    hi: Option<&str>,
    reached: &str,
    outweigh: Option<u64>,
    task_read: u64,
) -> Option<CutShare> {
    let outread = outweigh.is_some_and(|w| outreads(task_read, w));
    // A density is carried over only within one region of the rank space.
    let carries = |(from, _): &(&str, u64)| one_region(from, reached, hi);
    let (read, recent) = (read.filter(carries), recent.filter(carries));
    // What was read measures a density only if the position reached lies far enough
    // along in the space cut in.
    let Some(((_, entities), at)) =
        read.and_then(|(from, n)| Some(((from, n), measured_fraction(from, hi, reached)?)))
    else {
        return (outweigh.is_none() || outread).then(CutShare::unknown);
    };
    let rest = remainder_estimate(entities, at, 1.0 - at);
    if short_of_waiting(outweigh, task_read, rest) {
        return None;
    }
    match (balanced_share(entities, at, 1.0 - at), rest) {
        // Placed by value only where the density is known.
        (Some(share), Some(_)) => Some(CutShare {
            share,
            rest,
            by_value: true,
        }),
        (Some(_), None) => Some(CutShare::unknown()),
        (None, _) => recent_cut(recent, hi, reached, entities, outweigh, task_read),
    }
}

/// The cut for a remainder measured at `rest` entities some other way than by the
/// density read (a sample further on, the last page), after `read` entities: `None`
/// when that is too small to split, or, beside a waiting task's estimate `outweigh`,
/// too small for a task that has read `task_read` to end at one and a half times that.
pub(super) fn resized(
    read: u64,
    rest: f64,
    outweigh: Option<u64>,
    task_read: u64,
) -> Option<CutShare> {
    if short_of_waiting(outweigh, task_read, Some(rest)) {
        return None;
    }
    Some(CutShare {
        share: share_of_rest(read, rest)?,
        rest: Some(rest),
        by_value: true,
    })
}

/// Where the whole read says the remainder is too small to split, the cut the last page
/// read (`recent`) asks for: by its density, when it measures the remainder at enough
/// to split (and, beside a waiting task's estimate `outweigh`, at enough for this task
/// to end at one and a half times that); [`CutShare::unknown`] (halved by probes) when
/// the page is too short to measure, as dense as it gets, and no task waits.
fn recent_cut(
    recent: Option<(&str, u64)>,
    hi: Option<&str>,
    reached: &str,
    read: u64,
    outweigh: Option<u64>,
    task_read: u64,
) -> Option<CutShare> {
    let (from, _) = recent?;
    if measured_fraction(from, hi, reached).is_none() {
        return outweigh.is_none().then(CutShare::unknown);
    }
    resized(read, rest_after(recent?, hi, reached)?, outweigh, task_read)
}

/// Whether the `read` entities measure the remainder from `lo` up to `hi` (one region,
/// far enough along) and find it too small for a task that has read `task_read` to end
/// at one and a half times the waiting task's `outweigh` ([`cut_share`]). The
/// remainder from any higher key is smaller still, so no cut above `lo` would be made.
pub(super) fn rest_cannot_outweigh(
    read: Option<(&str, u64)>,
    hi: Option<&str>,
    lo: &str,
    outweigh: Option<u64>,
    task_read: u64,
) -> bool {
    let measured = read.is_some_and(|(from, _)| {
        one_region(from, lo, hi) && measured_fraction(from, hi, lo).is_some()
    });
    measured && outweigh.is_some() && cut_share(read, None, hi, lo, outweigh, task_read).is_none()
}

/// Whether a task that has read `task_read` entities has read as much as a waiting task
/// estimated at `waiting` (and enough to split at all): it is then likely the larger.
pub(super) fn outreads(task_read: u64, waiting: u64) -> bool {
    task_read >= waiting.max(MIN_SPLIT_ENTITIES)
}

/// Where a cut's size is unknown, an upper bound that keeps a probed cut inside the
/// cluster the task is reading: the successor of the prefix the last page's first key
/// (`recent`) shares with `reached`, when the page covered so little of that prefix's
/// space that enough to split lies ahead inside it. Without it the cut halves the
/// whole remainder by key value: with a large tenant's keys below a small one's in
/// another script, it fell at the small tenant, and one task read the large one alone.
pub(super) fn cluster_bound(recent: Option<(&str, u64)>, reached: &str) -> Option<String> {
    let (from, entities) = recent?;
    let r: Vec<u16> = reached.encode_utf16().collect();
    let common = common_units(&from.encode_utf16().collect::<Vec<_>>(), &r);
    let bound = bump(&r, common.checked_sub(1)?, 1)?;
    rest_after((from, entities), Some(&bound), reached)
        .is_some_and(|rest| rest >= MIN_SPLIT_ENTITIES as f64)
        .then_some(bound)
}

/// Entities left between `reached` and `hi` if keys lie there as densely as the
/// `entities` read from `from` up to `reached` did ([`remainder_estimate`] in the space
/// [`measured_fraction`] measures).
pub(super) fn rest_after(
    (from, entities): (&str, u64),
    hi: Option<&str>,
    reached: &str,
) -> Option<f64> {
    let at = measured_fraction(from, hi, reached)?;
    remainder_estimate(entities, at, 1.0 - at)
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
///
/// With `waiting` (the estimate of a task waiting for a worker, which this one has
/// outread), pieces are cut to about that size instead of to what was read: the
/// splitter stops soon after its cut, so no task ends much larger than those waiting.
/// Cut in two, a task that had read 4,000 while pieces of 2,600 waited kept half of
/// the rest too and ended at 6,400.
pub fn fan_out_shares(read: u64, rest: f64, waiting: Option<u64>) -> Option<(Vec<f64>, u64)> {
    fan_out_shares_after(read, None, rest, waiting)
}

/// [`fan_out_shares`], where the task has read `done` entities in all (the density
/// leaves large partitions out of `read`) and may stop right where the remainder
/// starts: once it has read a piece's worth, it keeps none of the remainder (the first
/// share is 0). Keeping a fifth of a piece, with the rest of the partition it was
/// reading and the partitions below the cut, a task of Zipf sizes falling with the key
/// that had read four partitions of 1,000-1,800 ended at 5,590 entities beside pieces
/// of 1,700-2,000 (on the emulator, 50,000 entities: 2.35 times the mean).
pub fn fan_out_shares_after(
    read: u64,
    done: Option<u64>,
    rest: f64,
    waiting: Option<u64>,
) -> Option<(Vec<f64>, u64)> {
    if !rest.is_finite() || rest <= 0.0 {
        return None;
    }
    let total = read as f64 + rest;
    // A task that read much before it split ends at least that large: pieces as large
    // keep the tasks even (or as large as those waiting).
    let piece = (PIECE_ENTITIES as f64)
        .max(total / MAX_PIECES as f64)
        .max(waiting.map_or(read as f64, |w| w as f64));
    let kept = match done {
        Some(done) if done as f64 >= piece => 0.0,
        _ => (piece - read as f64).max(MIN_SHARE * piece),
    };
    let upper = rest - kept;
    // Beside waiting tasks, pieces a little smaller than theirs beat one cut in two,
    // which leaves the splitter half of the rest on top of what it read.
    let whole = upper / piece;
    let pieces = if waiting.is_some() {
        whole.round()
    } else {
        whole.floor()
    }
    .min((MAX_PIECES - 1) as f64);
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
fn fan_out_points(lo: &str, hi: &str, shares: &[f64], read: &[&str]) -> Option<Vec<String>> {
    let mut points: Vec<String> = Vec::with_capacity(shares.len());
    for &share in shares {
        let at = if share == 0.0 {
            Some(lo.to_string())
        } else {
            point_below(lo, hi, share, read)
        };
        if let Some(at) = at
            && points.last().is_none_or(|p| cmp_keys(&at, p).is_gt())
        {
            points.push(at);
        }
    }
    (points.len() >= 2).then_some(points)
}

/// With both bounds of the remainder `[reached, hi)` known and its size estimated from
/// what `read_from` read (`cut`), the points where its pieces for idle workers start
/// ([`fan_out_shares`]), and each piece's estimate.
pub(super) fn fan_out(
    read_from: Option<(&str, u64)>,
    cut: &CutShare,
    reached: &str,
    hi: Option<&str>,
    waiting: Option<u64>,
    done: Option<u64>,
) -> Option<(Vec<String>, u64)> {
    let (from, read) = read_from?;
    let (shares, size) = fan_out_shares_after(read, done, cut.rest?, waiting)?;
    Some((fan_out_points(reached, hi?, &shares, &[from])?, size))
}
