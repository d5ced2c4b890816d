//! Asking the table where keys are: one `$top=1` question ([`Probe`]) at a time, through
//! the [`KeyProbe`] seam, and the searches built from them (a ceiling no key reaches, a
//! bisection by value), bounded by [`MAX_PROBES`] per split.

use std::cmp::Ordering;

use async_trait::async_trait;
use tablevault_azure::table::{Cmp, Filter};

use super::SAMPLE_KEYS;
use super::scale::{bump, point_below, point_by_characters, steps_up};
use super::share::cluster_bound;
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

    /// Up to `n` keys answering the probe, in key order, in one request: a sample of
    /// how densely keys lie there. `None` where the probe cannot sample (the split then
    /// only asks whether a key is there).
    async fn sample(
        &self,
        _probe: Probe<'_>,
        _n: usize,
    ) -> tablevault_azure::Result<Option<Sample>> {
        Ok(None)
    }
}

/// Keys a [`KeyProbe::sample`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The keys, in key order.
    pub keys: Vec<EntityKey>,
    /// Whether they are every key answering the probe.
    pub complete: bool,
}

#[async_trait]
impl<T: KeyProbe + ?Sized> KeyProbe for &T {
    async fn first_key(&self, probe: Probe<'_>) -> tablevault_azure::Result<Option<EntityKey>> {
        (**self).first_key(probe).await
    }

    async fn sample(&self, probe: Probe<'_>, n: usize) -> tablevault_azure::Result<Option<Sample>> {
        (**self).sample(probe, n).await
    }
}

/// A [`KeyProbe`] that counts the probes it passes on: whether a split search that
/// found no cut spent any.
pub struct CountingProbe<P> {
    /// Where the probes go.
    pub inner: P,
    sent: std::sync::atomic::AtomicUsize,
}

impl<P> CountingProbe<P> {
    /// Counts what `inner` answers.
    pub fn new(inner: P) -> Self {
        CountingProbe {
            inner,
            sent: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Probes passed on so far.
    pub fn sent(&self) -> usize {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait]
impl<P: KeyProbe> KeyProbe for CountingProbe<P> {
    async fn first_key(&self, probe: Probe<'_>) -> tablevault_azure::Result<Option<EntityKey>> {
        self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.first_key(probe).await
    }

    async fn sample(&self, probe: Probe<'_>, n: usize) -> tablevault_azure::Result<Option<Sample>> {
        let sample = self.inner.sample(probe, n).await?;
        if sample.is_some() {
            self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(sample)
    }
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
            keys_only: true,
            page_bytes: None,
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

    /// The first page that holds keys (empty pages with a continuation are skipped), up
    /// to `n` keys: one request, unless the service returned empty pages first. A page
    /// cut short by the service (at a partition server's boundary, or its time limit)
    /// is a sample too, only not `complete`.
    async fn sample(&self, probe: Probe<'_>, n: usize) -> tablevault_azure::Result<Option<Sample>> {
        let query = tablevault_azure::table::Query {
            filter: Some(probe.filter()),
            top: Some(u32::try_from(n).unwrap_or(u32::MAX)),
            keys_only: true,
            page_bytes: None,
        };
        let Some(page) = self
            .client
            .pages(self.table, query)
            .first_filled_page()
            .await?
        else {
            return Ok(Some(Sample {
                keys: Vec::new(),
                complete: true,
            }));
        };
        let complete = page.continuation.is_none();
        let keys = page
            .entities
            .into_iter()
            .take(n)
            .map(|e| EntityKey::new(e.partition_key, e.row_key))
            .collect();
        Ok(Some(Sample { keys, complete }))
    }
}

/// Most probes one split may send.
pub const MAX_PROBES: usize = 24;

/// One dimension to cut in: PartitionKeys (across partitions) or RowKeys (inside one).
pub(super) enum Dimension<'a> {
    Partitions {
        end: Option<&'a EntityKey>,
    },
    Rows {
        partition: &'a str,
        below: Option<&'a str>,
    },
}

impl Dimension<'_> {
    /// The probe for its first key at or above the value `from`, within its bound.
    fn from<'a>(&'a self, from: &'a str) -> Probe<'a> {
        match *self {
            Dimension::Partitions { end } => Probe::Partition { from, end },
            Dimension::Rows { partition, below } => Probe::Row {
                partition,
                from,
                exclusive: false,
                below,
            },
        }
    }

    /// A key's value in it: its PartitionKey across partitions, its RowKey inside one.
    fn value(&self, key: EntityKey) -> String {
        match self {
            Dimension::Partitions { .. } => key.pk,
            Dimension::Rows { .. } => key.rk,
        }
    }
}

/// Probes and counts them.
pub(super) struct Prober<'a> {
    pub(super) probe: &'a dyn KeyProbe,
    pub(super) sent: usize,
    /// The questions of this split answered so far, each asked once: the searches of
    /// one split can come to the same question (the class ladder below a cluster's
    /// bound asked one twice in a row), and the answer would be the same.
    answered: Vec<(String, Option<EntityKey>)>,
}

impl<'a> Prober<'a> {
    /// A prober that has sent nothing yet.
    pub(super) fn new(probe: &'a dyn KeyProbe) -> Self {
        Prober {
            probe,
            sent: 0,
            answered: Vec::new(),
        }
    }

    pub(super) async fn ask(
        &mut self,
        probe: Probe<'_>,
    ) -> tablevault_azure::Result<Option<EntityKey>> {
        if let Some(answer) = self.answer(&probe) {
            return Ok(answer);
        }
        let answer = self.probe.first_key(probe).await?;
        self.remember(&probe, &answer);
        Ok(answer)
    }

    /// Up to `n` keys of the dimension at or above `from` within its bound, as the
    /// dimension's values (a PartitionKey per entity across partitions); `None` where
    /// the probe cannot sample.
    pub(super) async fn sample_at(
        &mut self,
        dim: &Dimension<'_>,
        from: &str,
        n: usize,
    ) -> tablevault_azure::Result<Option<(Vec<String>, bool)>> {
        let sample = self.probe.sample(dim.from(from), n).await?;
        Ok(self.sampled_values(dim, from, sample))
    }

    /// [`Prober::sample_at`] from `from`, and, at once (two independent questions in
    /// one round trip's time), the first value of the dimension at or above
    /// `first_from` within its bound (`None` where `first_from` is `None`).
    pub(super) async fn sample_at_and_first(
        &mut self,
        dim: &Dimension<'_>,
        from: &str,
        n: usize,
        first_from: Option<&str>,
    ) -> tablevault_azure::Result<(Option<(Vec<String>, bool)>, Option<String>)> {
        let Some(first_from) = first_from else {
            return Ok((self.sample_at(dim, from, n).await?, None));
        };
        let question = dim.from(first_from);
        let known = self.answer(&question);
        let sample = self.probe.sample(dim.from(from), n);
        let (sample, first) = match known {
            Some(answer) => (sample.await?, answer),
            None => {
                let (sample, first) = futures::join!(sample, self.probe.first_key(question));
                let first = first?;
                self.remember(&question, &first);
                (sample?, first)
            }
        };
        Ok((
            self.sampled_values(dim, from, sample),
            first.map(|k| dim.value(k)),
        ))
    }

    /// What this split already learned of `probe`, if it was asked.
    fn answer(&self, probe: &Probe<'_>) -> Option<Option<EntityKey>> {
        let question = format!("{probe:?}");
        self.answered
            .iter()
            .find(|(q, _)| *q == question)
            .map(|(_, answer)| answer.clone())
    }

    /// Counts `probe` as sent and keeps its answer for the rest of the split.
    fn remember(&mut self, probe: &Probe<'_>, answer: &Option<EntityKey>) {
        self.sent += 1;
        self.answered.push((format!("{probe:?}"), answer.clone()));
    }

    /// A sample's keys as the dimension's values, counted as a probe sent.
    fn sampled_values(
        &mut self,
        dim: &Dimension<'_>,
        from: &str,
        sample: Option<Sample>,
    ) -> Option<(Vec<String>, bool)> {
        let probe = dim.from(from);
        if sample.is_some() {
            self.sent += 1;
        }
        sample.map(|s| {
            let values = s
                .keys
                .into_iter()
                .filter(|k| probe.matches(k))
                .map(|k| dim.value(k))
                .collect();
            (values, s.complete)
        })
    }

    /// The first value of the dimension at or above `from` within its bound.
    async fn first_at(
        &mut self,
        dim: &Dimension<'_>,
        from: &str,
    ) -> tablevault_azure::Result<Option<String>> {
        Ok(self.ask(dim.from(from)).await?.map(|k| dim.value(k)))
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
                let hit = self.reaches_value(dim, &c).await?;
                Ok((Some(c), hit))
            }
        }
    }

    /// Whether some value of the dimension is at or above `c`. A candidate at or past
    /// the dimension's end is known to be missed and costs no probe: on the emulator
    /// each probe is a filter of the whole table (a cluster's ceiling search asked
    /// three such questions in a row).
    async fn reaches_value(
        &mut self,
        dim: &Dimension<'_>,
        c: &str,
    ) -> tablevault_azure::Result<bool> {
        if dim.excludes(c) {
            return Ok(false);
        }
        Ok(self.first_at(dim, c).await?.is_some())
    }
}

impl Dimension<'_> {
    /// Whether no value at or above `c` lies inside the dimension's bound.
    fn excludes(&self, c: &str) -> bool {
        match *self {
            // Keys before `end`: PartitionKeys below its, or equal to it with a lower
            // RowKey when it has one.
            Dimension::Partitions { end: Some(e) } => match cmp_keys(c, &e.pk) {
                Ordering::Greater => true,
                Ordering::Equal => e.rk.is_empty(),
                Ordering::Less => false,
            },
            Dimension::Partitions { end: None } => false,
            Dimension::Rows { below, .. } => below.is_some_and(|b| cmp_keys(c, b).is_ge()),
        }
    }
}

/// Searches a dimension for a value no key reaches, just above the keys that exist
/// (`lo` is one of them): first the shortest prefix of `lo` whose successor some key
/// reaches (bisecting on the prefix length), then, at that position, how far up the
/// alphabet keys go (galloping, then bisecting). `None` when nothing tighter than the top
/// of the key space was found within the budget.
pub(super) async fn find_ceiling(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    lo: &str,
) -> tablevault_azure::Result<Option<String>> {
    find_ceiling_until(p, dim, lo, None, &|_| false).await
}

/// [`find_ceiling`], stopping at the first ceiling found where keys vary when
/// `settled` says it already decides what the ceiling is for: a tighter one only
/// shrinks the space above the keys (a remainder estimated too small to split against
/// it is smaller still). The rest of a partition of zero-padded RowKeys, 360 entities
/// after 639 read, cost three more probes to learn `00:` where `01` already said it was
/// too small to split.
///
/// `read_from` is a key read below `lo` in the dimension: where it differs from `lo`
/// at the first unit, keys spread there already, and the class ceilings
/// ([`class_ladder`]) are asked at once, without first asking whether keys reach the
/// unit after `lo`'s (a key found at a class's top answers that too): GUID RowKeys,
/// cut inside a partition, cost two probes where they cost three.
pub(super) async fn find_ceiling_until(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    lo: &str,
    read_from: Option<&str>,
    settled: &(dyn Fn(&str) -> bool + Sync),
) -> tablevault_azure::Result<Option<String>> {
    let units: Vec<u16> = lo.encode_utf16().collect();
    if units.is_empty() {
        return Ok(None);
    }
    let spread = read_from.is_some_and(|f| f.encode_utf16().next() != units.first().copied());
    let mut known = if spread {
        class_ladder(p, dim, &units, 0).await?
    } else {
        Ladder::None
    };
    if matches!(known, Ladder::Bracketed { .. } | Ladder::Above(_)) {
        return refined(p, dim, &units, 0, known, None).await;
    }
    // Candidates shrink as the position grows, so "reached" is false up to some
    // position and true from there on.
    let (first, hit) = p.reaches(dim, &units, 0, 1).await?;
    let mut coarse = None;
    let pos = if hit {
        0
    } else {
        // What the ladder learned at the first unit says nothing of later ones.
        known = Ladder::None;
        let (mut ok, mut ceiling) = (0usize, first);
        let mut reached_at = units.len();
        // Keys mostly vary a place or two before where the keys read differ from
        // `lo`: the search starts just before there and steps down, doubling, while
        // keys reach; then it bisects. Bisecting the whole length from the start cost
        // `customer-NNNNN` keys five probes to find the place, where this costs two.
        let mut guess = read_from
            .and_then(|f| first_difference(f, &units))
            .map(|d| d.saturating_sub(1));
        let mut down = usize::from(guess.is_some());
        while reached_at - ok > 1 && p.sent < MAX_PROBES {
            let mid = match guess.take() {
                Some(g) if g > ok && g < reached_at => g,
                _ => (ok + reached_at) / 2,
            };
            let (c, hit) = p.reaches(dim, &units, mid, 1).await?;
            if hit {
                reached_at = mid;
                if down > 0 {
                    guess = Some(mid.saturating_sub(down));
                    down *= 2;
                }
            } else {
                ok = mid;
                ceiling = c.or(ceiling);
                // Not before where the keys read differ: most likely there, where the
                // next guess goes (keys read of a partition of `00000`-`00999` differ
                // from `00640` where the partition's keys vary); then bisect.
                if down == 1 {
                    guess = Some(mid + 1);
                }
                down = 0;
            }
        }
        if reached_at >= units.len() || reached_at - ok > 1 {
            return Ok(ceiling);
        }
        if ceiling.as_deref().is_some_and(settled) {
            return Ok(ceiling);
        }
        coarse = ceiling;
        reached_at
    };
    refined(p, dim, &units, pos, known, coarse).await
}

/// The first place where `read` and `units` differ, in UTF-16 units (the shorter one's
/// length where one begins the other); `None` where they are equal.
fn first_difference(read: &str, units: &[u16]) -> Option<usize> {
    let read: Vec<u16> = read.encode_utf16().collect();
    let common = read.iter().zip(units).take_while(|(a, b)| a == b).count();
    (common < read.len().max(units.len())).then_some(common)
}

/// The ceiling where keys vary at `pos` (one step up is reached): climbed to
/// ([`gallop`], from what `known` says there), then, where keys reach just past `lo`'s
/// unit, one place finer. `coarse` where the climb finds nothing.
async fn refined(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    units: &[u16],
    pos: usize,
    known: Ladder,
    coarse: Option<String>,
) -> tablevault_azure::Result<Option<String>> {
    let Some((top, ceiling)) = gallop(p, dim, units, pos, known).await? else {
        return Ok(coarse);
    };
    if top > REFINE_WITHIN {
        return Ok(Some(ceiling));
    }
    // Keys reach just past `lo`'s unit there (`…0938`, `…1225`: the ceiling `…2` is
    // 10,000 above keys that end near 12,300): one place finer, among keys beginning
    // with the highest unit reached.
    let Some(reached) = bump(units, pos, top) else {
        return Ok(Some(ceiling));
    };
    Ok(Some(
        finer_ceiling(p, dim, &reached, units.get(pos + 1).copied())
            .await?
            .unwrap_or(ceiling),
    ))
}

/// How many steps above `lo`'s unit keys may reach at the position where they vary for
/// the ceiling to be searched for one place finer: within two steps, the highest
/// unit's keys may fill anything from none to half of the space below the ceiling.
const REFINE_WITHIN: usize = 2;

/// A ceiling one place finer than `reached`'s successor, among the keys that begin with
/// `reached`, in the character class of `like` (`lo`'s unit there: digits, lower or
/// upper case letters; no other class is searched). First one probe at the middle of
/// the class: keys that reach it fill at least half of the place, and the coarser
/// ceiling is kept (sequential numbers fill all ten digits: galloping up from the
/// bottom of the alphabet spent seven probes to learn that). Below it, a bisection
/// finds the first unit no key reaches.
///
/// Only a unit inside the class is returned: cuts are computed in the keys' own
/// classes, and a unit past one (`:` above digits, `{` above letters) made every
/// place of the space one unit wider (pieces half empty).
async fn finer_ceiling(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    reached: &str,
    like: Option<u16>,
) -> tablevault_azure::Result<Option<String>> {
    let class = match like.and_then(|u| char::from_u32(u as u32)) {
        Some('0'..='9') => ('0', '9'),
        Some('a'..='z') => ('a', 'z'),
        Some('A'..='Z') => ('A', 'Z'),
        _ => return Ok(None),
    };
    let with = |c: u32| {
        let mut s = reached.to_string();
        s.push(char::from_u32(c).expect("a unit of an ASCII class"));
        s
    };
    let (low, high) = (class.0 as u32, class.1 as u32);
    // Keys beginning with `reached` reach at least its first unit of the class (they
    // reach `reached` itself); the first unit no key reaches lies in (low, mid].
    let mid = (low + high).div_ceil(2);
    if p.sent >= MAX_PROBES || p.reaches_value(dim, &with(mid)).await? {
        return Ok(None);
    }
    let (mut hit_at, mut miss_at) = (low, mid);
    while miss_at - hit_at > 1 && p.sent < MAX_PROBES {
        let m = (hit_at + miss_at) / 2;
        if p.reaches_value(dim, &with(m)).await? {
            hit_at = m;
        } else {
            miss_at = m;
        }
    }
    Ok((miss_at - hit_at == 1).then(|| with(miss_at)))
}

/// Climbs the alphabet at `pos` (one step up is known to be reached): from the bracket
/// [`class_ladder`] finds (or `known`, where it was asked already), else by doubling
/// the steps from two, then bisects: the most steps reached and the first candidate no
/// key reaches. `None` when the budget ends first or keys reach the top of the alphabet
/// there.
async fn gallop(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    units: &[u16],
    pos: usize,
    known: Ladder,
) -> tablevault_azure::Result<Option<(usize, String)>> {
    let ladder = match known {
        Ladder::None => class_ladder(p, dim, units, pos).await?,
        known => known,
    };
    let (mut hit_at, mut miss_at) = match ladder {
        Ladder::Bracketed { hit, miss } => (hit, miss),
        ladder => {
            let (mut steps, mut last_hit, below) = match ladder {
                Ladder::Above(hit) => (2 * hit, hit, None),
                Ladder::Below(miss) => (2, 1, Some(miss)),
                _ => (2, 1, None),
            };
            // A tail of digits climbs by doubling (dates fill few digits of a place),
            // but not past `:`, just above them: where the doubling would step over
            // it, it is asked instead (keys that fill all ten digits cost two probes
            // above `8`, not four).
            let digits_top = units
                .get(pos)
                .filter(|_| class_rung(&units[pos..]) == Some(CLASS_CEILINGS[0]))
                .and_then(|&u| steps_up(u, CLASS_CEILINGS[0]));
            loop {
                if let Some(miss) = below.filter(|&m| steps >= m) {
                    break (last_hit, miss);
                }
                if p.sent >= MAX_PROBES {
                    return Ok(None);
                }
                let ask = match digits_top {
                    Some(top) if last_hit < top && steps > top => top,
                    _ => steps,
                };
                match p.reaches(dim, units, pos, ask).await? {
                    (None, _) => return Ok(None),
                    (Some(_), true) => {
                        last_hit = ask;
                        steps = 2 * ask;
                    }
                    (Some(_), false) => break (last_hit, ask),
                }
            }
        }
    };
    let Some(mut ceiling) = bump(units, pos, miss_at) else {
        return Ok(None);
    };
    // Tighten between the last step reached and the first missed.
    while miss_at - hit_at > 1 && p.sent < MAX_PROBES {
        let mid = (hit_at + miss_at) / 2;
        match p.reaches(dim, units, pos, mid).await? {
            (Some(_), true) => hit_at = mid,
            (Some(c), false) => {
                miss_at = mid;
                ceiling = c;
            }
            (None, _) => break,
        }
    }
    Ok(Some((hit_at, ceiling)))
}

/// The units just above the ASCII classes keys are written in: digits, upper-case hex
/// letters, upper-case letters, lower-case hex letters, lower-case letters.
const CLASS_CEILINGS: [u16; 5] = [
    b':' as u16,
    b'G' as u16,
    b'[' as u16,
    b'g' as u16,
    b'{' as u16,
];

/// What [`class_ladder`] learned of how far up the alphabet keys reach at a position,
/// in steps above the unit there (one step is known reached).
#[derive(Debug, PartialEq, Eq)]
enum Ladder {
    /// Keys reach `hit` steps up and not `miss`.
    Bracketed { hit: usize, miss: usize },
    /// Keys reach this many steps up: past every class ceiling above.
    Above(usize),
    /// Keys do not reach this many steps up; how far below, the gallop tells.
    Below(usize),
    /// Nothing asked.
    None,
}

/// Where keys vary at an ASCII letter or digit and `lo` is written in letters from
/// there on, how far up the alphabet they reach, asked first at the ceiling of the
/// class `lo`'s tail is written in ([`class_rung`]: a GUID's shows hex letters where
/// its first unit is a digit) and at that class's top unit, then up the ceilings of the
/// wider classes ([`CLASS_CEILINGS`]). Keys written in one class (GUIDs and hashes in
/// hex, ULIDs and base64 in letters and digits) fill it: doubling the steps up from the
/// unit spent seven probes and a bisection of five more to find that GUID RowKeys end
/// at `f`, for each cut inside a partition of them (each a whole-table filter on the
/// emulator; a first backup of 50,000 entities in partitions of GUID RowKeys sent 274
/// queries and ran slower than a plain export). Two or three probes here. Tails of
/// digits alone are left to the gallop: dates and times fill few of a place's digits,
/// and doubling finds that in one or two.
async fn class_ladder(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    units: &[u16],
    pos: usize,
) -> tablevault_azure::Result<Ladder> {
    let Some(&u) = units.get(pos) else {
        return Ok(Ladder::None);
    };
    let Some(class) = class_rung(&units[pos..]).filter(|&c| c != CLASS_CEILINGS[0]) else {
        return Ok(Ladder::None);
    };
    // Steps to each class ceiling above the unit, from the tail's class on.
    let rungs: Vec<usize> = CLASS_CEILINGS
        .iter()
        .filter(|&&c| c >= class)
        .filter_map(|&c| steps_up(u, c))
        .filter(|&s| s >= 2)
        .collect();
    let Some(&first) = rungs.first() else {
        return Ok(Ladder::None);
    };
    if p.sent + 2 > MAX_PROBES {
        return Ok(Ladder::None);
    }
    if !p.reaches(dim, units, pos, first).await?.1 {
        // Below the class's ceiling: at its top unit, or lower.
        let top = first - 1;
        if top > 1 && p.reaches(dim, units, pos, top).await?.1 {
            return Ok(Ladder::Bracketed {
                hit: top,
                miss: first,
            });
        }
        return Ok(Ladder::Below(if top > 1 { top } else { first }));
    }
    let mut hit = first;
    for &rung in &rungs[1..] {
        if p.sent >= MAX_PROBES {
            return Ok(Ladder::None);
        }
        if p.reaches(dim, units, pos, rung).await?.1 {
            hit = rung;
            continue;
        }
        // The top unit of the class below this ceiling, as above.
        let top = rung - 1;
        if top > hit && p.sent < MAX_PROBES {
            if p.reaches(dim, units, pos, top).await?.1 {
                return Ok(Ladder::Bracketed {
                    hit: top,
                    miss: rung,
                });
            }
            return Ok(Ladder::Bracketed { hit, miss: top });
        }
        return Ok(Ladder::Bracketed { hit, miss: rung });
    }
    Ok(Ladder::Above(hit))
}

/// The ceiling of the smallest class of [`CLASS_CEILINGS`] holding every ASCII letter
/// and digit of `tail` (digits; digits and upper-case hex letters; digits and upper-case
/// letters; digits and lower-case hex letters; any); `None` without one.
fn class_rung(tail: &[u16]) -> Option<u16> {
    let alnum: Vec<u8> = tail
        .iter()
        .filter_map(|&u| u8::try_from(u).ok())
        .filter(u8::is_ascii_alphanumeric)
        .collect();
    let all = |f: fn(&u8) -> bool| alnum.iter().all(f);
    if alnum.is_empty() {
        None
    } else if all(u8::is_ascii_digit) {
        Some(CLASS_CEILINGS[0])
    } else if all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(b)) {
        Some(CLASS_CEILINGS[1])
    } else if all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()) {
        Some(CLASS_CEILINGS[2])
    } else if all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) {
        Some(CLASS_CEILINGS[3])
    } else {
        Some(CLASS_CEILINGS[4])
    }
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
    // A key found at or above the bound (one a cluster's bound leaves out, or a
    // ceiling a key reaches after all) is no answer: the keys below it are looked for.
    let bound = hi.clone();
    while p.sent < MAX_PROBES {
        // The first probe goes where the caller wants the cut; when nothing lies at or
        // above it, the keys are lower, and halving finds them.
        let mid = point_by_characters(lo, hi.as_deref(), share);
        share = 0.5;
        if hi
            .as_deref()
            .is_some_and(|h| cmp_keys(&mid, h) != Ordering::Less)
        {
            return Ok(None);
        }
        match p.first_at(dim, &mid).await? {
            Some(found)
                if cmp_keys(&found, lo).is_gt()
                    && bound.as_deref().is_none_or(|b| cmp_keys(&found, b).is_lt()) =>
            {
                return Ok(Some(found));
            }
            _ => hi = Some(mid),
        }
    }
    Ok(None)
}

/// Times a cut of unknown size found to leave a sliver above it (fewer keys than one
/// sample holds, [`SAMPLE_KEYS`]) is halved lower.
const SLIVER_HALVINGS: usize = 2;

/// Where to cut a dimension between `lo` and `hi` a `share` of the way: at that value
/// itself when the density read is known (`by_value`) and it lies strictly between
/// the bounds (the key at it would divide the entities the same way), else at the
/// first value probes find there ([`bisect`]); when the density is not known, below
/// the bound of the cluster the last page read (`page`, see [`cluster_or`]), and, with
/// no bound at all, lower where a sample finds under a page of keys above the cut. A value
/// counts the characters of the key the read began at (`read_from`) in its alphabet.
#[allow(clippy::too_many_arguments)]
pub(super) async fn cut_value(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    lo: &str,
    hi: Option<String>,
    share: f64,
    by_value: bool,
    page: Option<(&str, u64)>,
    read_from: Option<&str>,
) -> tablevault_azure::Result<Option<String>> {
    if !by_value {
        let mut hi = cluster_or(p, dim, hi, page, lo).await?;
        let mut found = bisect(p, dim, lo, hi.clone(), share).await?;
        // With no bound known, the halving runs up to the top of the key space, and a
        // remainder whose keys crowd below its middle leaves the part above the cut a
        // sliver: keys of every script, read up to the astral characters, put 387
        // entities above U+F000 and 1,588 below it (a task of 2,588 of 2,975, the
        // split soak's seed 498). A sample from the cut that holds every key above
        // it, fewer than a page, says so, and the cut is halved lower. With a bound,
        // the halving stays among the keys; checking there cost the split model's
        // named and random shapes a probe or two each and balanced none better.
        let halvings = if hi.is_none() { SLIVER_HALVINGS } else { 0 };
        for _ in 0..halvings {
            let Some(at) = found.as_deref() else { break };
            if p.sent >= MAX_PROBES {
                break;
            }
            let Some((values, complete)) = p.sample_at(dim, at, SAMPLE_KEYS).await? else {
                break;
            };
            let within = values
                .iter()
                .filter(|v| hi.as_deref().is_none_or(|h| cmp_keys(v, h).is_lt()))
                .count();
            let whole = complete || within < values.len();
            if !whole || within >= SAMPLE_KEYS {
                break;
            }
            hi = found.clone();
            match bisect(p, dim, lo, hi.clone(), 0.5).await? {
                Some(lower) => found = Some(lower),
                None => break,
            }
        }
        return Ok(found);
    }
    if let Some(at) = hi
        .as_deref()
        .and_then(|h| point_below(lo, h, share, read_from.as_slice()))
    {
        return Ok(Some(at));
    }
    bisect(p, dim, lo, hi, share).await
}

/// Whether the dimension holds a value at or above `from` and below `below`: one probe.
pub(super) async fn holds_value_below(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    from: &str,
    below: &str,
) -> tablevault_azure::Result<bool> {
    Ok(p.first_at(dim, from)
        .await?
        .is_some_and(|v| cmp_keys(&v, below).is_lt()))
}

/// A value no key of the dimension reaches from `lo` up to `bound` (`lo` is one of its
/// keys, `bound` lies above): the ceiling of the cluster `lo` is in, when nothing lies
/// between `bound` and the next cluster. `bound` itself when no tighter one is found.
pub(super) async fn ceiling_below(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    lo: &str,
    bound: &str,
) -> tablevault_azure::Result<String> {
    let end = EntityKey::partition_start(bound);
    let inside = match *dim {
        Dimension::Partitions { .. } => Dimension::Partitions { end: Some(&end) },
        Dimension::Rows { partition, .. } => Dimension::Rows {
            partition,
            below: Some(bound),
        },
    };
    Ok(find_ceiling(p, &inside, lo)
        .await?
        .filter(|c| cmp_keys(c, lo).is_gt() && cmp_keys(c, bound).is_lt())
        .unwrap_or_else(|| bound.to_string()))
}

/// Where a cut's size is unknown, the bound to cut below: the bound of the cluster the
/// task is reading ([`cluster_bound`]: the keys that share a prefix with the last page),
/// tightened by probes to just above its keys, where it is below `hi`. Halving the
/// whole remainder by key value would give the cut to whatever lies beyond the
/// cluster, however few entities that holds.
async fn cluster_or(
    p: &mut Prober<'_>,
    dim: &Dimension<'_>,
    hi: Option<String>,
    page: Option<(&str, u64)>,
    reached: &str,
) -> tablevault_azure::Result<Option<String>> {
    let Some(bound) = cluster_bound(page, reached)
        .filter(|c| hi.as_deref().is_none_or(|h| cmp_keys(c, h).is_lt()))
    else {
        return Ok(hi);
    };
    // `bound` is below `hi`, so below the dimension's own end too.
    Ok(Some(ceiling_below(p, dim, reached, &bound).await?))
}
