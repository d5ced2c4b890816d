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

mod probe;
mod scale;
mod share;

pub use probe::{CountingProbe, KeyProbe, MAX_PROBES, Probe, TableProbe};
pub use scale::{fraction, increment, midpoint, point_at};
pub use share::{
    LARGE_PARTITION_READ, MAX_PIECES, MIN_SPLIT_ENTITIES, PIECE_ENTITIES, balanced_share,
    fan_out_shares,
};

use probe::{Dimension, Prober, cut_value, find_ceiling};
use share::{cut_share, fan_out, outreads};

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
async fn tighten(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    from: Option<&str>,
    reached: &str,
    hi: &str,
) -> tablevault_azure::Result<Option<String>> {
    let Some(from) = from else { return Ok(None) };
    if scale::measured_fraction(from, Some(hi), reached).is_some() {
        return Ok(None);
    }
    Ok(find_ceiling(p, dim, reached)
        .await?
        .filter(|found| cmp_keys(found, hi).is_lt() && cmp_keys(found, reached).is_gt()))
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
    let mut p = Prober { probe, sent: 0 };
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
            // The tighter of the end and a ceiling learned above the next partition.
            let known = learned
                .as_ref()
                .filter(|c| c.rk.is_empty() && cmp_keys(&c.pk, &next.pk).is_gt())
                .map(|c| c.pk.clone())
                .filter(|c| end.is_none_or(|e| cmp_keys(c, &e.pk).is_lt()))
                .or_else(|| end.map(|e| e.pk.clone()));
            let hi = match known {
                _ if !may_search => known,
                Some(bound) => {
                    let from = read.map(|r| r.first.pk.as_str());
                    let tighter = tighten(&mut p, &across, from, &next.pk, &bound).await?;
                    if let Some(t) = &tighter {
                        learned = Some(EntityKey::partition_start(t));
                    }
                    Some(tighter.unwrap_or(bound))
                }
                None => {
                    let found = find_ceiling(&mut p, &across, &next.pk).await?;
                    learned = found.as_ref().map(EntityKey::partition_start);
                    found
                }
            };
            // Partitions read so far span [first, next); the rest, [next, hi).
            // A large partition read says nothing of how densely the partitions after
            // it lie: the density is the rest's (Zipf-like sizes: counted in, it made
            // the last few hundred entities look like thousands, cut into tasks of 104
            // and 355).
            let read_from = read.filter(|r| r.first.pk != next.pk).and_then(|r| {
                let entities = if r.largest_partition >= LARGE_PARTITION_READ {
                    r.entities - r.largest_partition.min(r.entities)
                } else {
                    r.entities
                };
                (entities > 0).then_some((r.first.pk.as_str(), entities))
            });
            let page = read
                .and_then(|r| r.last_page)
                .and_then(|page| page.across(&next.pk));
            let Some(cut) = cut_share(
                read_from,
                page,
                hi.as_deref(),
                &next.pk,
                outweigh,
                task_read,
            ) else {
                return Ok(None);
            };
            // Pieces are cut by the density read: not when most of it is one large
            // partition (with Zipf-like sizes, a large partition made the sparse ones
            // after it look as dense: ten pieces of a few hundred entities each).
            let skewed = read.is_some_and(|r| {
                r.largest_partition >= LARGE_PARTITION_READ && 2 * r.largest_partition > r.entities
            });
            let allowed = unpaced && !skewed && pieces_allowed;
            if let Some((points, size)) =
                fan_out(read_from, &cut, &next.pk, hi.as_deref(), outweigh).filter(|_| allowed)
            {
                estimate = Some(size);
                let mut points = points.into_iter().map(EntityKey::partition_start);
                let at = points.next().expect("fan_out gives at least two points");
                pieces = points.collect();
                at
            } else {
                estimate = cut.upper();
                let pk = cut_value(&mut p, &across, &next.pk, hi, cut.share, cut.by_value, page)
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
                (None, _) if !may_search => return Ok(None),
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
            let page = read
                .and_then(|r| r.last_page)
                .and_then(|page| page.inside(&after.pk));
            let Some(cut) = cut_share(
                read_from,
                page,
                hi.as_deref(),
                &after.rk,
                outweigh,
                task_read,
            ) else {
                return Ok(None);
            };
            if let Some((points, size)) =
                fan_out(read_from, &cut, &after.rk, hi.as_deref(), outweigh)
                    .filter(|_| pieces_allowed)
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
                    cut.by_value,
                    page,
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

#[cfg(test)]
mod tests;
