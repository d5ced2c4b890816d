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

mod calendar;
mod probe;
mod scale;
mod share;
mod window;

pub use probe::{CountingProbe, KeyProbe, MAX_PROBES, Probe, Sample, TableProbe};
pub use scale::{fraction, increment, midpoint, point_at};
pub use share::{
    INSIDE_PARTITION_READ, LARGE_PARTITION_READ, MAX_PIECES, MIN_SPLIT_ENTITIES, PIECE_ENTITIES,
    balanced_share, fan_out_shares,
};
pub use window::{PageTally, PageWindow, RECENT_PAGES};

use probe::{
    Dimension, Prober, ceiling_below, cut_value, find_ceiling, find_ceiling_until,
    holds_value_below,
};
use share::{CutShare, cut_share, fan_out, outreads, rest_cannot_outweigh, short_of_waiting};

use crate::keys::{EntityKey, cmp_keys};

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
    /// The last page read, when it is a fair sample of how densely keys lie there.
    pub last_page: Option<PageRead<'a>>,
    /// Where the last page alone lies mostly in one partition: the fewest last pages
    /// (up to [`RECENT_PAGES`]) that do not, when some do ([`PageWindow::recent`]).
    /// Pages of one partition each (a cluster of partitions of a thousand or more)
    /// measured no density across partitions, and the whole read's spread a cluster's
    /// entities over the sparse keys around it: in the split model, one task read
    /// 25,149 of 25,900 entities.
    pub recent_pages: Option<PageRead<'a>>,
    /// Whether its range was planned, not split off another task with an estimate. With
    /// no task waiting, only a planned range, nobody's estimate yet, is cut into pieces
    /// ([`Split::pieces`]): a piece is cut in two as idle workers ask, so an estimate
    /// thrown off by a large partition (Zipf-like sizes) cannot hand out ten pieces of a
    /// few hundred entities. Beside a waiting task that it has outread, any range is.
    pub planned: bool,
}

/// The last page an attempt read.
#[derive(Debug, Clone, Copy)]
pub struct PageRead<'a> {
    /// Its first key.
    pub first: &'a EntityKey,
    /// Its entities.
    pub entities: u64,
    /// The most of them in one partition.
    pub largest_partition: u64,
}

impl<'a> PageRead<'a> {
    /// Where the page began and how many it held, across partitions: only when no one
    /// partition held half of it (a large partition packs a page into a sliver of the
    /// PartitionKey space, which says nothing of the partitions after it).
    fn across(&self, next: &str) -> Option<(&'a str, u64)> {
        (self.first.pk != next && 2 * self.largest_partition < self.entities)
            .then_some((self.first.pk.as_str(), self.entities))
    }

    /// Where the page began and how many it held, inside `partition`: only when it lay
    /// in it whole.
    fn inside(&self, partition: &str) -> Option<(&'a str, u64)> {
        (self.first.pk == partition).then_some((self.first.rk.as_str(), self.entities))
    }
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
    /// Whether it holds entities past the last one read (the first one read ahead is
    /// in it).
    pub more: bool,
    /// That first entity's RowKey, when the page read ahead is at hand: the search
    /// for a ceiling inside the partition starts there without a probe to find it.
    pub next_rk: Option<&'a str>,
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

/// A ceiling tighter than `hi` when what was read from `from` up to `reached` lies too
/// close to `from`, against the space up to `hi`, to measure a density in it
/// ([`scale::measured_fraction`]); `None` when it measures, or no tighter one is found.
///
/// A ceiling is inherited from the first split of a table, found where keys first vary:
/// above a small tenant's `acme-` and a large one's `zeta-`, it is `{`. Against it the
/// large tenant's keys measure nothing, so every later split of the top task was a
/// probed cut of unknown size (10-24 probes each, each a whole-table sort on the
/// emulator), placed just above the position reached: 20 tasks, some of 100 entities.
///
/// `hi` is the range's `end` PartitionKey or a ceiling learned below it. The search runs
/// below it: what lies at or above is known, and asks nothing (tenants under a ceiling
/// of `{` asked `{` again on every search for a tighter one).
async fn tighten(
    p: &mut Prober<'_>,
    end: Option<&EntityKey>,
    from: Option<&str>,
    reached: &str,
    hi: &str,
) -> tablevault_azure::Result<Option<String>> {
    let Some(from) = from else { return Ok(None) };
    if scale::measured_fraction(from, Some(hi), reached).is_some() {
        return Ok(None);
    }
    let hi_start = EntityKey::partition_start(hi);
    let below_hi = Dimension::Partitions {
        end: Some(end.filter(|e| e.pk == hi).unwrap_or(&hi_start)),
    };
    Ok(find_ceiling(p, &below_hi, reached)
        .await?
        .filter(|found| cmp_keys(found, hi).is_lt() && cmp_keys(found, reached).is_gt()))
}

/// How many times [`decide`] narrows the bound to a cluster found below a gap, and
/// weighs its cut again.
const MAX_NARROWINGS: usize = 3;

/// A cut placed by a density carried this many times past the entities it was read
/// from is checked with a probe ([`decide`]).
const CHECKED_EXTRAPOLATION: f64 = 8.0;

/// Keys the check of a doubtful density (carried far, or not holding) samples: a page.
const SAMPLE_KEYS: usize = 1_000;

/// What a sample of the remainder from `lo` up to `hi` says against the `read`
/// estimate of it (the density read, carried over it).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sampled {
    /// They agree within twice, or its keys lie too close together to measure.
    Agrees,
    /// A better estimate of the remainder.
    Rest(f64),
    /// It holds every key from its first up to `hi`, under half as many as the read
    /// puts there: the keys read are a cluster, what lies above it sparse.
    Sparse,
}

/// What the `values` a sample found in the remainder from `lo` up to `hi` say of it
/// against the `read` estimate ([`Sampled`]). Measured from the first value found, not
/// from the point asked at: points can hold characters no key does (`717g` between
/// hex keys), which would widen the scale.
///
/// * `complete` (the sample holds every key up to `hi`): the keys above the first are
///   counted, and those below it are the read's estimate of that part; or, where the
///   count is under half the read's, the keys read are taken for a cluster and cut
///   as below a gap ([`decide`]). Carried down over the whole remainder, the 15 keys
///   of an impossible date at the end of a table of dates (`1997-13-01`) estimated it
///   at a few hundred, and a task read all 6,051 entities of the split soak's seed
///   10; left to the read, below them, they made a remainder of 1,000 entities look
///   like 1.6 million, and the pieces cut in it by value were empty (seed 47).
/// * Otherwise, the density the sample lies at need not hold where the read was
///   either (the middle can mislead as much as the start: unpadded numbers, ten times
///   as dense under `4` as under `5`). Where they disagree by more than twice, the
///   read's estimate is brought to within twice the sample's. In the split model
///   over 200 random table shapes this beat the sample's estimate alone and the two's
///   geometric mean.
fn sampled(lo: &str, hi: &str, read: f64, values: &[String], complete: bool) -> Sampled {
    let Some(first) = values.first() else {
        return Sampled::Agrees;
    };
    let n = values.len() as f64;
    let disagree = |other: f64| other < read / 2.0 || other > read * 2.0;
    let rest = if complete {
        let below = scale::fraction(lo, Some(hi), first);
        if n < read * (1.0 - below) / 2.0 {
            return Sampled::Sparse;
        }
        let rest = read * below + n;
        disagree(rest).then_some(rest)
    } else {
        sample_rest(lo, hi, values)
            .filter(|&sampled| disagree(sampled))
            .map(|sampled| read.clamp(sampled / 2.0, sampled * 2.0))
    };
    rest.filter(|r| r.is_finite())
        .map_or(Sampled::Agrees, Sampled::Rest)
}

/// Entities in the remainder from `lo` up to `hi` if keys lie there as densely as the
/// sample's `values` do (measured from its first value to its last,
/// [`scale::measured_between`]); `None` when they lie too close together to measure.
fn sample_rest(lo: &str, hi: &str, values: &[String]) -> Option<f64> {
    let (first, last) = (values.first()?, values.last()?);
    scale::measured_between(lo, hi, first, last)
        .map(|covered| (values.len() as f64 - 1.0) / covered)
}

/// What a split needs to know to decide its cut, besides the bound above.
struct CutInputs<'a> {
    /// Where the density was read from and how many entities it counts.
    read_from: Option<(&'a str, u64)>,
    /// The last page read, where it began and how many it held.
    page: Option<(&'a str, u64)>,
    /// The first value of the remainder (the next partition, or the RowKey reached).
    lo: &'a str,
    /// The estimate of a task waiting for a worker.
    outweigh: Option<u64>,
    /// Entities the task has read.
    task_read: u64,
    /// Whether the remainder may go out in pieces.
    pieces_allowed: bool,
    /// Whether a remainder the read measures too small to split is checked with a
    /// sample ([`checked_small`]).
    check_small: bool,
}

/// A cut [`decide`] placed.
struct Cut {
    /// Where the upper part starts; `None` when probes found no value to cut at.
    at: Option<String>,
    /// Entities the upper part (each piece, with `pieces`) is estimated to hold.
    estimate: Option<u64>,
    /// Where further pieces start, above `at`.
    pieces: Vec<String>,
}

/// Decides where to cut the remainder from `input.lo` up to `hi`, by the density read
/// ([`cut_share`], [`fan_out`], [`cut_value`]); `None` when it is not worth cutting.
///
/// Where the cut extrapolates that density far ([`CHECKED_EXTRAPOLATION`]), or the last
/// page read measures the remainder more than twice away from it (partition sizes
/// falling with the key: the read's density put 45,000 entities where 3,800 were, and
/// pieces cut to that went out nearly empty; every-region keys in the split model gave
/// a task of 3.37 times the mean, 2.27 with the check), one probe asks whether it
/// carries over: the middle piece of a fan-out (the first one let a
/// cluster that reached into it pass, the pieces above it empty: a task of 5,821 of
/// 6,117 in the split model, one of 5,827 in the split soak), or the lower half of the
/// upper part (a cut in two by value), must hold a key; with the middle piece of a
/// fan-out, the first piece above the part kept is asked too, at once (tenants whose
/// partitions interleave left it empty while the middle held another tenant's
/// keys). Keys read
/// in a cluster, the rest of the remainder a gap up to another (a tenant's
/// `F-00050`-`F-00449` below another's `z-`), measured millions of entities in the
/// gap: the part kept held every key of the cluster and the pieces above it none, so
/// one task read 4,000 of 4,500 entities while fourteen empty ones came and went, and
/// the upper part's estimate kept other tasks from splitting beside it. Where the
/// probe finds the gap, the cluster's own ceiling is searched for below it
/// ([`ceiling_below`]), and the density measured against that: the remainder is cut
/// inside the cluster (the last part holding the clusters above), or, when the
/// cluster's rest is too small to cut, at its ceiling.
///
/// Where the probe can sample ([`KeyProbe::sample`]), it asks for a page of keys there
/// instead of one, at the cost of one query all the same, and where they hold a key
/// below the checked part's end they also measure the remainder ([`sampled`]).
/// A density read at the start of a remainder need not hold in its middle: with a
/// large partition first and small ones after it, pieces of 300,000 went to the queue
/// from a remainder of 10,000, and every other task weighed its splits against them.
/// Where the two disagree by more than twice, the read's estimate is brought to
/// within twice the sample's, or, where the sample holds every key up to `hi`, they
/// are counted.
async fn decide(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    hi: Option<String>,
    input: &CutInputs<'_>,
) -> tablevault_azure::Result<Option<Cut>> {
    let share = |hi: Option<&str>| {
        cut_share(
            input.read_from,
            input.page,
            hi,
            input.lo,
            input.outweigh,
            input.task_read,
        )
    };
    // Between partitions a cut may fall at `lo` itself (the next partition, which the
    // task need not read): then a task that has read a piece's worth keeps none of the
    // remainder ([`share::fan_out_shares_after`]), nor one that has read enough to
    // split where nothing measures the remainder (below). Not inside a partition,
    // where `lo` is the last key read.
    let stop_at_lo = matches!(dim, Dimension::Partitions { .. });
    let fan = |cut: &CutShare, hi: Option<&str>| {
        fan_out(
            input.read_from,
            cut,
            input.lo,
            hi,
            input.outweigh,
            stop_at_lo.then_some(input.task_read),
        )
        .filter(|_| input.pieces_allowed)
    };
    let read = input.read_from.map_or(0, |r| r.1).max(1) as f64;
    let read_from = input.read_from.map(|(from, _)| from);
    let read_keys = read_from.as_slice();
    // A cluster below a gap can hold clusters of its own, sparse keys between them: each
    // gap found narrows the bound, and the cut is weighed again, a few times.
    let mut hi = hi;
    let mut narrowed = 0;
    let (fanned, cut, hi) = loop {
        let Some(cut) = share(hi.as_deref()) else {
            return match hi {
                Some(hi) if narrowed > 0 => Ok(Some(Cut {
                    at: Some(hi),
                    estimate: None,
                    pieces: Vec::new(),
                })),
                Some(hi) if input.check_small => checked_small(p, dim, hi, input).await,
                _ => Ok(None),
            };
        };
        let fanned = fan(&cut, hi.as_deref());
        // The last page read measures the remainder more than twice away from the whole
        // read: the density is not holding where the read ends.
        let shifting = |rest: f64| {
            input
                .page
                .and_then(|page| share::rest_after(page, hi.as_deref(), input.lo))
                .is_some_and(|recent| recent * 2.0 < rest || recent > 2.0 * rest)
        };
        // After the last narrowing, or with the probes spent, the cut stands unchecked.
        let may_check = narrowed == 0 || (narrowed < MAX_NARROWINGS && p.sent < MAX_PROBES);
        let doubtful = may_check
            && cut.by_value
            && cut
                .rest
                .is_some_and(|rest| rest > CHECKED_EXTRAPOLATION * read || shifting(rest));
        let checked = match (&fanned, hi.as_deref()) {
            _ if !doubtful => None,
            (Some((points, _)), _) if points.len() >= 2 => {
                let i = (points.len() - 1) / 2;
                Some((points[i].clone(), points[i + 1].clone()))
            }
            (None, Some(hi)) => scale::point_below(input.lo, hi, cut.share, read_keys).map(|at| {
                let half =
                    scale::point_below(&at, hi, 0.5, read_keys).unwrap_or_else(|| hi.to_string());
                (at, half)
            }),
            _ => None,
        };
        // A value the check found nothing from, up to where it looked; or, where it found
        // keys and could sample them, the remainder measured by how densely they lie.
        //
        // With the middle piece of a fan-out, the first piece above the part kept is
        // asked at once: keys read in a cluster at the bottom of their prefix, other
        // clusters higher up, hold keys in the middle piece while the pieces just
        // above the part kept are empty (a task of tenant 0's keys, which stop at
        // `t0-004999`, with tenant 1's `t1-…` above them and an end of `t2-`: one task
        // read 9,850 of 50,000).
        let first_piece = match &fanned {
            Some((points, _)) if checked.is_some() && points.len() >= 3 => {
                Some((points[0].as_str(), points[1].as_str()))
            }
            _ => None,
        };
        let (gap, sampled) = match checked {
            Some((from, below)) => match p
                .sample_at_and_first(dim, &from, SAMPLE_KEYS, first_piece.map(|(f, _)| f))
                .await?
            {
                (_, first_value)
                    if first_piece.is_some_and(|(_, below)| {
                        !first_value
                            .as_ref()
                            .is_some_and(|v| cmp_keys(v, below).is_lt())
                    }) =>
                {
                    (first_piece.map(|(f, _)| f.to_string()), None)
                }
                (Some((values, complete)), _) => {
                    if values.first().is_some_and(|v| cmp_keys(v, &below).is_lt()) {
                        let says = hi
                            .as_deref()
                            .zip(cut.rest)
                            .map(|(hi, read)| sampled(input.lo, hi, read, &values, complete));
                        match says {
                            Some(Sampled::Sparse) => (values.into_iter().next(), None),
                            Some(Sampled::Rest(rest)) => (None, Some(rest)),
                            _ => (None, None),
                        }
                    } else {
                        (Some(from), None)
                    }
                }
                (None, _) => (
                    (!holds_value_below(p, dim, &from, &below).await?).then_some(from),
                    None,
                ),
            },
            None => (None, None),
        };
        match gap {
            // The density read near the remainder's start does not hold in its middle (a
            // large partition first and small ones after it; four-digit numbers, with
            // five-digit ones among them only under `1`).
            None if let Some(rest) = sampled => {
                let Some(cut) = share::resized(read as u64, rest, input.outweigh, input.task_read)
                else {
                    return Ok(None);
                };
                break (fan(&cut, hi.as_deref()), cut, hi);
            }
            None => break (fanned, cut, hi),
            // The keys read are a cluster below the gap.
            Some(from) => {
                hi = Some(ceiling_below(p, dim, input.lo, &from).await?);
                narrowed += 1;
            }
        }
    };
    Ok(Some(match fanned {
        Some((points, size)) => {
            let mut points = points.into_iter();
            Cut {
                at: Some(points.next().expect("fan_out gives at least two points")),
                estimate: Some(size),
                pieces: points.collect(),
            }
        }
        // Nothing measures the remainder (what was read lies mostly in large
        // partitions) and no task waits: a task that has read enough to split hands
        // all of it on from the next partition, with no probe. Halved by probes, the
        // cut spent up to ten of them and still left the splitter the partitions
        // below it, however large: in the split model over 200 random table shapes,
        // 13 had a task of over a quarter of the table, 6 with this cut.
        None if stop_at_lo
            && !cut.by_value
            && cut.rest.is_none()
            && input.outweigh.is_none()
            && input.task_read >= MIN_SPLIT_ENTITIES =>
        {
            Cut {
                at: Some(input.lo.to_string()),
                estimate: None,
                pieces: Vec::new(),
            }
        }
        None => cut_in_two(p, dim, input, hi, &cut).await?,
    }))
}

/// Where the read measures the remainder from `input.lo` up to `hi` too small to
/// split, but leaves a large partition out of its density and the task is worth
/// splitting (`input.check_small`), the cut a sample of the remainder's keys asks for:
/// one query. Left out, a large partition says nothing of the large ones that may
/// follow: in the split model's random shapes (partitions of up to 5,000 among ones of
/// a few entities) the small partitions read measured a few hundred entities where
/// thousands were left, and tasks read 40-42% of their tables (24-26% with the check).
/// A sample that reaches `hi` holds every key left, fewer than a split needs; one that
/// ends in a partition holding most of it cuts at that partition's start
/// ([`large_partition_sampled`]); otherwise it measures the remainder by how densely
/// its keys lie ([`scale::measured_between`]), at least as many as it holds, or, where
/// they lie too close together to measure (all in one partition), leaves it unknown:
/// halved by probes.
async fn checked_small(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    hi: String,
    input: &CutInputs<'_>,
) -> tablevault_azure::Result<Option<Cut>> {
    let Some((values, _)) = p.sample_at(dim, input.lo, SAMPLE_KEYS).await? else {
        return Ok(None);
    };
    let values: Vec<String> = values
        .into_iter()
        .filter(|v| cmp_keys(v, &hi).is_lt())
        .collect();
    if values.len() < SAMPLE_KEYS {
        return Ok(None);
    }
    if let Some(large) = large_partition_sampled(input.lo, &values) {
        return Ok(Some(Cut {
            at: Some(large),
            estimate: None,
            pieces: Vec::new(),
        }));
    }
    let read = input.read_from.map_or(0, |r| r.1);
    let cut = match sample_rest(input.lo, &hi, &values) {
        Some(rest) => share::resized(
            read,
            rest.max(values.len() as f64),
            input.outweigh,
            input.task_read,
        ),
        None => Some(CutShare::unknown()),
    };
    let Some(cut) = cut else { return Ok(None) };
    Ok(Some(cut_in_two(p, dim, input, Some(hi), &cut).await?))
}

/// The partition a sample of the remainder from `lo` on (`values`, one per entity) ends
/// in, where it holds half of them or more and is not the first: that
/// partition continues past the sample, so its size is not known, and the keys before
/// it measure nothing of it. Cut at its start, the large partition goes to a task of
/// its own. Measured by how densely the sample's keys lie, the few small partitions
/// before it made the remainder look too small to split, and in the split model's
/// random shapes (partitions of up to 5,000 among ones of a few entities) one task read
/// four large partitions, 56% of a table of 20,000.
fn large_partition_sampled(lo: &str, values: &[String]) -> Option<String> {
    let last = values.last()?;
    let run = values.iter().rev().take_while(|v| *v == last).count() as u64;
    (2 * run >= values.len() as u64 && cmp_keys(last, lo).is_gt()).then(|| last.clone())
}

/// The partition after `after` within `end`, where a sample from it finds a split's
/// worth of keys ([`SAMPLE_KEYS`]) before `end`. A task inside a large partition
/// measures its remainder by the rest of that partition alone; when that is too small
/// to split, the partitions after it (which the upper part of a cut inside would keep
/// too) were never measured, and in the split model's random shapes one task read the
/// rest of one large partition and then three more of thousands each.
async fn next_partition_worth_a_task(
    p: &mut Prober<'_>,
    after: &str,
    end: Option<&EntityKey>,
) -> tablevault_azure::Result<Option<String>> {
    let Some(next) = p.ask(Probe::NextPartition { after, end }).await? else {
        return Ok(None);
    };
    let across = Dimension::Partitions { end };
    let Some((values, _)) = p.sample_at(&across, &next.pk, SAMPLE_KEYS).await? else {
        return Ok(None);
    };
    Ok((values.len() >= SAMPLE_KEYS).then_some(next.pk))
}

/// The cut in two at `cut`'s share of the remainder from `input.lo` up to `hi`
/// ([`cut_value`]), with the upper part's estimate.
async fn cut_in_two(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    input: &CutInputs<'_>,
    hi: Option<String>,
    cut: &CutShare,
) -> tablevault_azure::Result<Cut> {
    Ok(Cut {
        at: cut_value(
            p,
            dim,
            input.lo,
            hi,
            cut.share,
            cut.by_value,
            input.page,
            input.read_from.map(|(from, _)| from),
        )
        .await?,
        estimate: cut.upper(),
        pieces: Vec::new(),
    })
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
/// under [`MIN_SPLIT_ENTITIES`], or, with `outweigh` (the estimate of a task already
/// waiting for a worker), when what was read and the remainder together are under one
/// and a half times that (a range is worth splitting while another waits only if it
/// would end far larger; where nothing measures the rest, only once the task has read
/// as much as the waiting one holds).
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
/// Where partitions are not paced, in a planned range (`read.planned`) with no task
/// waiting (`outweigh` is `None`), or in any range that has read as much as the task
/// waiting holds, with both bounds and the density known, and the density not mostly
/// one large partition, a remainder holding several pieces' worth is cut into pieces of
/// one size at once ([`fan_out_shares`], [`Split::pieces`]; beside a waiting task, of its
/// size), all placed by value. Where they are paced, the pieces made the ramp of a large fleet overshoot the
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
    let mut p = Prober::new(probe);
    let task_read = read.map_or(0, |r| r.entities);
    let outread = outweigh.is_some_and(|w| outreads(task_read, w));
    // Pieces go to idle workers from a planned range with nothing waiting, or from any
    // range beside a waiting task it has outread.
    let pieces_allowed = read.is_some_and(|r| r.planned && outweigh.is_none()) || outread;
    // Beside a waiting task it has not outread, a task splits only where what it knows
    // already measures a remainder large enough: searching for bounds then costs
    // probes (each a whole-table filter on the emulator) that mostly end in no split.
    let may_search = outweigh.is_none() || outread;
    let mut learned = ceiling.cloned();
    let estimate;
    let pieces;
    let seen_next =
        seen_next.filter(|k| cmp_keys(&k.pk, &after.pk).is_gt() && end.is_none_or(|e| *k < e));
    // A range ending inside the current partition, or below a ceiling found inside it,
    // holds no later partition.
    let last_partition = end.is_some_and(|e| e.pk == after.pk)
        || learned
            .as_ref()
            .is_some_and(|c| c.pk == after.pk && !c.rk.is_empty());
    // A large partition is cut inside even when later ones follow: one the task began
    // in from `LARGE_PARTITION_READ` read, one it entered from `INSIDE_PARTITION_READ`.
    let inside_large = unpaced
        && read.is_some_and(|r| {
            r.partition.is_some_and(|p| {
                let entered = r.first.pk != after.pk;
                let large = if entered {
                    INSIDE_PARTITION_READ
                } else {
                    LARGE_PARTITION_READ
                };
                p.continues && p.entities >= large
            })
        });
    // What was read measures the partitions after it by: not a large partition's
    // entities (see below), and nothing when all of it lies in `from_pk`'s partition,
    // or in the partition it is still reading (counted as if that partition ended
    // where the read did, three partitions of 2,000 measured the two after the first
    // at 500 and one task read all 6,000).
    let partitions_read = |from_pk: &str| {
        let only_current =
            |r: &ReadSoFar<'_>| r.first.pk == after.pk && r.partition.is_some_and(|p| p.more);
        read.filter(|r| r.first.pk != from_pk && !only_current(r))
            .and_then(|r| {
                let entities = if r.largest_partition >= LARGE_PARTITION_READ {
                    r.entities - r.largest_partition.min(r.entities)
                } else {
                    r.entities
                };
                (entities > 0).then_some((r.first.pk.as_str(), entities))
            })
    };
    // The tighter of the end and a ceiling learned above partition `pk`.
    let known_above = |learned: Option<&EntityKey>, pk: &str| {
        learned
            .filter(|c| c.rk.is_empty() && cmp_keys(&c.pk, pk).is_gt())
            .map(|c| c.pk.clone())
            .filter(|c| end.is_none_or(|e| cmp_keys(c, &e.pk).is_lt()))
            .or_else(|| end.map(|e| e.pk.clone()))
    };
    let next = match seen_next {
        _ if inside_large => None,
        Some(k) => Some(k.clone()),
        None if last_partition => None,
        // Beside a waiting task this one has not outread, a cut between partitions
        // needs a remainder measured large enough; measured from the partition being
        // read, it is at least as large as from the next one, so where even that is
        // too small, the probe for the next partition is not sent (in the split model,
        // 7 of Zipf-like sizes' 50 probes each found a partition only to split nothing).
        None if !may_search
            && rest_cannot_outweigh(
                partitions_read(&after.pk),
                known_above(learned.as_ref(), &after.pk).as_deref(),
                &after.pk,
                outweigh,
                task_read,
            ) =>
        {
            None
        }
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
            // Partitions read so far span [first, next); the rest, [next, hi).
            // A large partition read says nothing of how densely the partitions after
            // it lie: the density is the rest's (Zipf-like sizes: counted in, it made
            // the last few hundred entities look like thousands, cut into tasks of 104
            // and 355).
            let read_from = partitions_read(&next.pk);
            let page = read.and_then(|r| {
                r.last_page
                    .and_then(|page| page.across(&next.pk))
                    .or_else(|| r.recent_pages.and_then(|pages| pages.across(&next.pk)))
            });
            let known = known_above(learned.as_ref(), &next.pk);
            let hi = match known {
                _ if !may_search => known,
                Some(bound) => {
                    let from = read.map(|r| r.first.pk.as_str());
                    let tighter = tighten(&mut p, end, from, &next.pk, &bound).await?;
                    if let Some(t) = &tighter {
                        learned = Some(EntityKey::partition_start(t));
                    }
                    Some(tighter.unwrap_or(bound))
                }
                None => {
                    let too_small = |c: &str| {
                        cut_share(read_from, page, Some(c), &next.pk, outweigh, task_read).is_none()
                    };
                    let found = find_ceiling_until(
                        &mut p,
                        &across,
                        &next.pk,
                        read_from.map(|(from, _)| from),
                        &too_small,
                    )
                    .await?;
                    learned = found.as_ref().map(EntityKey::partition_start);
                    found
                }
            };
            // Pieces are cut by the density read: not when most of it is one large
            // partition (with Zipf-like sizes, a large partition made the sparse ones
            // after it look as dense: ten pieces of a few hundred entities each).
            let skewed = read.is_some_and(|r| {
                r.largest_partition >= LARGE_PARTITION_READ && 2 * r.largest_partition > r.entities
            });
            // The density read leaves a large partition out, and so says nothing of
            // the large partitions that may follow: where it finds the rest too small
            // for a task worth splitting, a sample checks ([`checked_small`]).
            let check_small = read.is_some_and(|r| r.largest_partition >= LARGE_PARTITION_READ)
                && task_read >= MIN_SPLIT_ENTITIES
                && !short_of_waiting(outweigh, task_read, Some(0.0));
            let input = CutInputs {
                read_from,
                page,
                lo: &next.pk,
                outweigh,
                task_read,
                pieces_allowed: unpaced && !skewed && pieces_allowed,
                check_small,
            };
            let Some(cut) = decide(&mut p, &across, hi, &input).await? else {
                return Ok(None);
            };
            estimate = cut.estimate;
            pieces = cut
                .pieces
                .into_iter()
                .map(EntityKey::partition_start)
                .collect();
            EntityKey::partition_start(cut.at.unwrap_or(next.pk))
        }
        None if !unpaced => return Ok(None),
        None => 'inside: {
            // Only the rest of the current partition is left (and, at most, the head of
            // the end's, which stays with this task), or it is large: then the part
            // above the cut keeps the partitions after it too.
            let below = end.filter(|e| e.pk == after.pk).map(|e| e.rk.as_str());
            let inside = Dimension::Rows {
                partition: &after.pk,
                below,
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
            let page = read
                .and_then(|r| r.last_page)
                .and_then(|page| page.inside(&after.pk));
            let hi = match (below, &learned) {
                (Some(b), _) => Some(b.to_string()),
                (None, Some(c)) if c.pk == after.pk && cmp_keys(&c.rk, &after.rk).is_gt() => {
                    Some(c.rk.clone())
                }
                (None, _) if !may_search => return Ok(None),
                (None, _) => {
                    // The page read ahead tells whether the partition holds more rows
                    // (its first entity is the next one), sparing a probe that asks.
                    let lo = match read.and_then(|r| r.partition) {
                        Some(part) if !part.more => return Ok(None),
                        Some(PartitionRead {
                            next_rk: Some(next),
                            ..
                        }) => next.to_string(),
                        _ => {
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
                            first.rk
                        }
                    };
                    let too_small = |c: &str| {
                        cut_share(read_from, page, Some(c), &after.rk, outweigh, task_read)
                            .is_none()
                    };
                    let found = find_ceiling_until(
                        &mut p,
                        &inside,
                        &lo,
                        read_from.map(|(from, _)| from),
                        &too_small,
                    )
                    .await?;
                    // Unless later partitions may follow, nothing reaches (partition,
                    // found).
                    if !inside_large {
                        learned = found.as_ref().map(|rk| EntityKey::new(&after.pk, rk));
                    }
                    found
                }
            };
            let input = CutInputs {
                read_from,
                page,
                lo: &after.rk,
                outweigh,
                task_read,
                pieces_allowed,
                check_small: false,
            };
            let Some(cut) = decide(&mut p, &inside, hi, &input).await? else {
                // The rest of a large partition too small to split, with partitions
                // after it: they go to a task of their own, if a sample finds enough.
                let more = inside_large
                    && !last_partition
                    && may_search
                    && task_read >= MIN_SPLIT_ENTITIES;
                if !more {
                    return Ok(None);
                }
                let Some(next) = next_partition_worth_a_task(&mut p, &after.pk, end).await? else {
                    return Ok(None);
                };
                estimate = None;
                pieces = Vec::new();
                break 'inside EntityKey::partition_start(&next);
            };
            let Some(rk) = cut.at else {
                return Ok(None);
            };
            estimate = cut.estimate;
            pieces = cut
                .pieces
                .into_iter()
                .map(|rk| EntityKey::new(&after.pk, rk))
                .collect();
            EntityKey::new(&after.pk, rk)
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

#[cfg(test)]
mod tests;
