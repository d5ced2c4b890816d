//! The synthetic table: N entities over P partitions, never materialized.
//!
//! Entities are numbered `0..N` in key order (PartitionKey, then RowKey), so every key
//! range is an index range and partition `i` holds the indices
//! `prefix[i]..prefix[i + 1]`. Only the P + 1 prefix sums are stored.

/// A small, seeded, reproducible random number generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    pub fn below(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_u64() % (hi - lo)
        }
    }
}

/// The table: how many entities each partition holds.
#[derive(Debug, Clone)]
pub struct Table {
    /// `prefix[i]` = entities in partitions `0..i`; `prefix[P]` = N.
    prefix: Vec<u64>,
}

impl Table {
    /// `entities` over `partitions` (at most one partition per entity), sized by the
    /// formula `n_i ∝ hot(i) · (1 + 3·u_i³)`: `u_i` is a seeded uniform per partition
    /// (sizes vary 1–4×) and `hot(i)` is 5 for the first tenth of the key space, 1 after
    /// (a dense key prefix, as with sequential ids), so ranges of equal key span hold
    /// unequal numbers of entities. Every partition holds at least one entity.
    pub fn synthetic(entities: u64, partitions: u32, seed: u64) -> Table {
        let p = u64::from(partitions.max(1)).min(entities.max(1)) as usize;
        let hot_until = p.div_ceil(10);
        let mut rng = Rng::new(seed ^ 0x7ab1_e000);
        let weights: Vec<f64> = (0..p)
            .map(|i| {
                let u = rng.unit();
                let hot = if i < hot_until { 5.0 } else { 1.0 };
                hot * (1.0 + 3.0 * u * u * u)
            })
            .collect();
        let total: f64 = weights.iter().sum();
        // One entity each, the rest by weight; the rounding remainder goes to the first.
        let spare = entities.saturating_sub(p as u64);
        let mut sizes: Vec<u64> = weights
            .iter()
            .map(|w| u64::from(entities > 0) + (spare as f64 * w / total) as u64)
            .collect();
        let assigned: u64 = sizes.iter().sum();
        let mut left = entities - assigned;
        let mut i = 0;
        while left > 0 {
            sizes[i % p] += 1;
            left -= 1;
            i += 1;
        }
        let mut prefix = Vec::with_capacity(p + 1);
        prefix.push(0);
        let mut sum = 0;
        for s in sizes {
            sum += s;
            prefix.push(sum);
        }
        Table { prefix }
    }

    /// N.
    pub fn entities(&self) -> u64 {
        *self.prefix.last().expect("prefix sums")
    }

    /// P.
    pub fn partitions(&self) -> u32 {
        (self.prefix.len() - 1) as u32
    }

    /// Entities in partition `p`.
    pub fn size(&self, p: u32) -> u64 {
        self.prefix[p as usize + 1] - self.prefix[p as usize]
    }

    /// The partition of entity `index` (`index < N`).
    pub fn partition_of(&self, index: u64) -> u32 {
        (self.prefix.partition_point(|&s| s <= index) - 1) as u32
    }

    /// The first index after partition `p`.
    pub fn partition_end(&self, p: u32) -> u64 {
        self.prefix[p as usize + 1]
    }

    /// The entity index at key position `x` in `[0, P]`: partition `⌊x⌋`, a fraction
    /// `x - ⌊x⌋` into its RowKeys (row keys are assumed evenly spread).
    pub fn index_at(&self, x: f64) -> u64 {
        let p = self.partitions();
        if x >= f64::from(p) {
            return self.entities();
        }
        let i = x.floor().max(0.0) as u32;
        let frac = x - f64::from(i);
        self.prefix[i as usize] + (frac * self.size(i) as f64) as u64
    }

    /// `count` ranges of equal key span tiling `0..N` (the coordinator's plan when keys
    /// are evenly spread over the key space; here they are not, on purpose).
    pub fn equal_span_ranges(&self, count: usize) -> Vec<(u64, u64)> {
        let count = count.max(1);
        let p = f64::from(self.partitions());
        let bounds: Vec<u64> = (0..=count)
            .map(|r| self.index_at(p * r as f64 / count as f64))
            .collect();
        bounds.windows(2).map(|w| (w[0], w[1])).collect()
    }

    /// The next request of a reader or writer at `cursor` in `cursor..end`: its partition
    /// and where it stops. A request holds at most `max` entities and never crosses a
    /// partition boundary (the service ends query pages there, and an entity group
    /// transaction holds one partition).
    pub fn next_request(&self, cursor: u64, end: u64, max: u64) -> (u32, u64) {
        let p = self.partition_of(cursor);
        let stop = (cursor + max).min(end).min(self.partition_end(p));
        (p, stop)
    }

    /// Where a task splits its unread remainder `cursor..end`: the middle, rounded to
    /// the nearest partition boundary strictly inside when the remainder spans several
    /// partitions, else inside the one partition.
    pub fn split_point(&self, cursor: u64, end: u64) -> u64 {
        self.split_point_at(cursor, end, 0.5)
    }

    /// Like [`Table::split_point`], a fraction `share` of the way through the remainder.
    pub fn split_point_at(&self, cursor: u64, end: u64, share: f64) -> u64 {
        let mid = cursor + ((end - cursor) as f64 * share.clamp(0.0, 1.0)) as u64;
        let first = self.partition_of(cursor) as usize;
        let last = self.partition_of(end - 1) as usize;
        if first == last {
            return mid;
        }
        // Boundaries strictly inside are prefix[first + 1 ..= last].
        let j = self
            .prefix
            .partition_point(|&s| s < mid)
            .clamp(first + 1, last);
        let above = self.prefix[j];
        let below = self.prefix[(j - 1).max(first + 1)];
        if mid - below.min(mid) <= above.saturating_sub(mid) {
            below
        } else {
            above
        }
    }
}

/// The tasks of a restore in the coordinator's shuffled order, generated lazily by an
/// affine permutation `k ↦ (a·k + b) mod T` (no list of T tasks is kept).
#[derive(Debug, Clone)]
pub struct Shuffled {
    next: u64,
    count: u64,
    a: u64,
    b: u64,
}

impl Shuffled {
    /// A permutation of `0..count`.
    pub fn new(count: u64, seed: u64) -> Self {
        let mut rng = Rng::new(seed ^ 0x0005_4ff1);
        let mut a = ((count as f64 * 0.618_033_988_7) as u64).max(1);
        while gcd(a, count.max(1)) != 1 {
            a += 1;
        }
        Shuffled {
            next: 0,
            count,
            a,
            b: rng.below(0, count.max(1)),
        }
    }
}

impl Iterator for Shuffled {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.next >= self.count {
            return None;
        }
        let k = self.next;
        self.next += 1;
        Some(
            ((u128::from(self.a) * u128::from(k) + u128::from(self.b)) % u128::from(self.count))
                as u64,
        )
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_add_up_and_partitions_are_found() {
        let t = Table::synthetic(1_000_003, 97, 1);
        assert_eq!(t.entities(), 1_000_003);
        assert_eq!(t.partitions(), 97);
        assert!((0..97).all(|p| t.size(p) >= 1));
        for p in [0, 5, 96] {
            let start = t.partition_end(p) - t.size(p);
            assert_eq!(t.partition_of(start), p);
            assert_eq!(t.partition_of(t.partition_end(p) - 1), p);
        }
        let hot = t.size(0) + t.size(1);
        let cold = t.size(95) + t.size(96);
        assert!(hot > cold, "the first tenth is denser: {hot} vs {cold}");
    }

    #[test]
    fn requests_stop_at_partition_boundaries_and_splits_round_to_them() {
        let t = Table::synthetic(100_000, 10, 2);
        let end0 = t.partition_end(0);
        assert_eq!(t.next_request(end0 - 5, 100_000, 1000), (0, end0));
        assert_eq!(t.next_request(0, 10, 1000), (0, 10));
        let s = t.split_point(0, 100_000);
        assert!(
            (1..10).any(|p| t.partition_end(p - 1) == s),
            "{s} is a boundary"
        );
        let inside = t.split_point(10, end0 - 10);
        assert_eq!(inside, 10 + (end0 - 20) / 2);
    }

    #[test]
    fn equal_span_ranges_tile_and_the_shuffle_is_a_permutation() {
        let t = Table::synthetic(50_000, 7, 3);
        let r = t.equal_span_ranges(16);
        assert_eq!(r.first().unwrap().0, 0);
        assert_eq!(r.last().unwrap().1, 50_000);
        assert!(r.windows(2).all(|w| w[0].1 == w[1].0));
        for count in [1, 2, 10, 2500] {
            let mut seen: Vec<u64> = Shuffled::new(count, 9).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..count).collect::<Vec<_>>());
        }
    }
}
