use super::*;
use crate::keys::key_problem;
use async_trait::async_trait;
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

    async fn sample(&self, probe: Probe<'_>, n: usize) -> tablevault_azure::Result<Option<Sample>> {
        let keys: Vec<EntityKey> = self
            .0
            .iter()
            .filter(|k| probe.matches(k))
            .take(n + 1)
            .cloned()
            .collect();
        let complete = keys.len() <= n;
        Ok(Some(Sample {
            keys: keys.into_iter().take(n).collect(),
            complete,
        }))
    }
}

/// A table that answers probes but cannot sample: splits as they were before samples.
struct Unsampled<'a>(&'a Sorted);

#[async_trait]
impl KeyProbe for Unsampled<'_> {
    async fn first_key(&self, probe: Probe<'_>) -> tablevault_azure::Result<Option<EntityKey>> {
        self.0.first_key(probe).await
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

/// A tenant's `n` keys: PartitionKeys `<name>-NNNNN`, `per` entities each, RowKeys
/// numbered from 0.
fn tenant(name: &str, n: usize, per: usize) -> Vec<EntityKey> {
    (0..n)
        .map(|i| EntityKey::new(format!("{name}-{:05}", i / per), format!("{i:05}")))
        .collect()
}

/// Two tenants' keys, in key order: `large` with `n` entities and `small` with `m`,
/// `per` to a partition.
fn two_tenants(large: &str, small: &str, (n, m): (usize, usize), per: usize) -> Sorted {
    let mut keys = tenant(large, n, per);
    keys.extend(tenant(small, m, per));
    Sorted::new(keys)
}

/// `n` entities under `customer-NNNNN` PartitionKeys, 500 each.
fn sequential(n: u64) -> Sorted {
    Sorted::new(
        (0..n)
            .map(|i| EntityKey::new(format!("customer-{:05}", i / 500), format!("order-{i:010}")))
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
fn balanced(t: &Sorted, from: usize, i: usize, end: Option<&EntityKey>) -> Option<(usize, usize)> {
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
        last_page: None,
        recent_pages: None,
        planned: true,
    }
}

/// The split of a range with no end and no ceiling known, with no task waiting, where
/// partitions are not paced: read up to `after`, `next` seen ahead, `read` so far.
fn unbounded_split(
    probe: &dyn KeyProbe,
    after: &EntityKey,
    next: Option<&EntityKey>,
    read: ReadSoFar<'_>,
) -> Option<Split> {
    run(find_split(
        probe,
        after,
        next,
        None,
        None,
        Some(read),
        None,
        true,
    ))
    .unwrap()
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

/// What a task read of a table that begins with 100 entities in partition `a`: them
/// and the first 2,000 of partition `b`, which `continues` past the page read ahead
/// or ends on it.
fn read_100_of_a_and_2000_of_b(t: &Sorted, continues: bool) -> ReadSoFar<'_> {
    ReadSoFar {
        first: &t.0[0],
        entities: 2_100,
        partition: Some(PartitionRead {
            first_rk: "00000",
            entities: 2_000,
            continues,
            more: continues,
            next_rk: None,
        }),
        largest_partition: 2_000,
        last_page: None,
        recent_pages: None,
        planned: true,
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
        let read = read_100_of_a_and_2000_of_b(&t, continues);
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
            last_page: None,
            recent_pages: None,
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

/// A task that has read a piece's worth, some of it in a large partition the density
/// leaves out, hands idle workers all of the remainder from the next partition on: it
/// kept a fifth of a piece more, and on the emulator such a task (Zipf sizes falling
/// with the key) ended at 2.35 times the mean.
#[test]
fn a_task_that_has_read_a_piece_keeps_none_of_the_rest() {
    let t = guid_partitions(40_000);
    let split_after = |entities: u64, largest_partition: u64| {
        let read = ReadSoFar {
            first: &t.0[0],
            entities,
            partition: None,
            largest_partition,
            last_page: None,
            recent_pages: None,
            planned: true,
        };
        let after = &t.0[entities as usize - 1];
        let split = run(find_split(
            &t,
            after,
            None,
            Some(&t.0[39_000]),
            None,
            Some(read),
            None,
            true,
        ))
        .unwrap()
        .expect("a split");
        let next = EntityKey::partition_start(&t.0[entities as usize].pk);
        (split, next)
    };
    // 4,000 read, 1,500 of them in one partition: the density counts 2,500, a piece.
    let (split, next) = split_after(4_000, 1_500);
    assert_eq!(split.at, next, "{split:?}");
    assert!(split.pieces.len() >= 2, "{split:?}");
    assert!(split.pieces.iter().all(|p| *p > split.at), "{split:?}");
    // Short of a piece, the task keeps some of the rest.
    let (split, next) = split_after(1_000, 1);
    assert!(split.at > next, "{split:?}");
    assert!(!split.pieces.is_empty(), "{split:?}");
}

/// A task that has read 2,500 entities, all of one partition that has ended, with no
/// task waiting: nothing measures the partitions after it, and the rest goes on from
/// the next one, which the page read ahead shows, with no probe. Halved by probes, the
/// cut sent several and left the splitter the partitions below it.
#[test]
fn a_remainder_nothing_measures_goes_on_from_the_next_partition() {
    let mut keys: Vec<EntityKey> = (0..2_500)
        .map(|i| EntityKey::new("a", format!("{i:05}")))
        .collect();
    keys.extend((0..20_000).map(|i| EntityKey::new(format!("b{i:05}"), "r")));
    let t = Sorted::new(keys);
    let end = EntityKey::partition_start("c");
    let split_after = |entities: usize, outweigh: Option<u64>| {
        let read = ReadSoFar {
            first: &t.0[0],
            entities: entities as u64,
            partition: Some(PartitionRead {
                first_rk: "00000",
                entities: entities as u64,
                continues: false,
                more: false,
                next_rk: None,
            }),
            largest_partition: entities as u64,
            last_page: None,
            recent_pages: None,
            planned: true,
        };
        run(find_split(
            &t,
            &t.0[entities - 1],
            Some(&t.0[2_500]),
            Some(&end),
            None,
            Some(read),
            outweigh,
            true,
        ))
        .unwrap()
    };
    let split = split_after(2_500, None).expect("a split");
    assert_eq!(split.at, EntityKey::partition_start("b00000"), "{split:?}");
    assert_eq!(split.probes, 0, "{split:?}");
    // Beside a waiting task, the splitter does not hand on what nothing measures.
    assert!(
        split_after(2_500, Some(1_000)).is_none_or(|s| s.at > EntityKey::partition_start("b00000"))
    );
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
        let Some((shares, size)) = fan_out_shares(1_000, rest, None) else {
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
    assert_eq!(fan_out_shares(40_000, 3_000.0, None), None);
    assert_eq!(fan_out_shares(10_000, 10_000.0, None), None);
    // A task that read much first hands out pieces as large as what it read.
    let (shares, size) = fan_out_shares(5_000, 15_000.0, None).unwrap();
    assert_eq!((shares.len(), size), (2, 7_000));
    for nonsense in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(fan_out_shares(1_000, nonsense, None), None);
    }
}

/// Beside a waiting task of 2,600 entities, a task that has read 4,000 with 8,300 left
/// hands the rest out in pieces of about that size and keeps little more itself. Cut in
/// two, as before, it kept half of the rest too and ended at 6,400.
#[test]
fn beside_a_waiting_task_pieces_are_cut_to_its_size() {
    let rest = 8_300.0;
    let (shares, size) = fan_out_shares(4_000, rest, Some(2_600)).expect("pieces");
    assert_eq!(shares.len(), 3, "{shares:?}");
    assert!((2_300..=3_000).contains(&size), "pieces of {size}");
    let kept = shares[0] * rest;
    assert!(kept <= 0.25 * size as f64, "the splitter keeps {kept} more");
    assert_eq!(
        fan_out_shares(4_000, rest, None),
        None,
        "pieces of what was read"
    );
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
        eprintln!("DBG {name}: ceiling {ceiling:?} split {split:?}");
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
                last_page: None,
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
        let given =
            t.0.iter().filter(|k| **k >= split.at && **k < end).count() / (1 + split.pieces.len());
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
fn a_cut_by_value_that_would_fall_in_a_gap_is_measured_against_the_cluster() {
    // Two clusters of partitions far apart, the range ending where the second starts.
    // The density of the thousand keys read, carried over the span up to the end, put
    // the cut by value in the gap between them: it handed out an empty range with an
    // estimate of millions, and the splitter kept the whole cluster. One probe now
    // finds the part above the cut empty; the cluster's ceiling is searched for, and
    // the remainder cut by the density measured against it.
    let keys: Vec<EntityKey> = (0..10_000)
        .map(|i| EntityKey::new(format!("a{i:05}"), ""))
        .chain((0..10).map(|i| EntityKey::new(format!("z{i:05}"), "")))
        .collect();
    let t = Sorted::new(keys);
    let end = EntityKey::partition_start("z");
    let read = plain_read(&t.0[0], 1_000);
    let split = run(find_split(
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
    // The parts: what the task keeps, then each piece, the last up to the end.
    let mut bounds = vec![t.0[1_000].clone(), split.at.clone()];
    bounds.extend(split.pieces.iter().cloned());
    bounds.push(end.clone());
    let parts: Vec<usize> = bounds
        .windows(2)
        .map(|w| t.0.iter().filter(|k| **k >= w[0] && **k < w[1]).count())
        .collect();
    assert!(
        parts.iter().all(|&n| (1_500..=6_000).contains(&n)),
        "parts of the 9,000 left: {parts:?}, {split:?}"
    );
    let estimate = split
        .estimate
        .expect("measured against the cluster's ceiling") as usize;
    assert!(
        parts[1..]
            .iter()
            .all(|&n| n / 2 <= estimate && estimate <= n * 2),
        "estimate {estimate} for {parts:?}"
    );
    assert!(split.probes <= 16, "{split:?}");
    // A cut by value in a cluster the read measures truly is not checked: no probe.
    let near = EntityKey::partition_start("a05000");
    let plain = run(find_split(
        &t,
        &t.0[999],
        Some(&t.0[1_000]),
        Some(&near),
        None,
        Some(read),
        None,
        true,
    ))
    .unwrap()
    .unwrap();
    assert_eq!(plain.probes, 0, "{plain:?}");
}

/// Answers from a sorted table and notes every question asked, with the value a
/// PartitionKey probe asked from.
struct Recording<'a> {
    table: &'a Sorted,
    asked: std::sync::Mutex<Vec<(String, Option<String>)>>,
}

impl<'a> Recording<'a> {
    fn new(table: &'a Sorted) -> Self {
        Recording {
            table,
            asked: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Every question, in the order asked.
    fn questions(&self) -> Vec<String> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .map(|(q, _)| q.clone())
            .collect()
    }

    /// The values PartitionKey probes asked from, in order.
    fn partition_froms(&self) -> Vec<String> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, f)| f.clone())
            .collect()
    }
}

#[async_trait]
impl KeyProbe for Recording<'_> {
    async fn first_key(&self, probe: Probe<'_>) -> tablevault_azure::Result<Option<EntityKey>> {
        let from = match probe {
            Probe::Partition { from, .. } => Some(from.to_string()),
            _ => None,
        };
        self.asked
            .lock()
            .unwrap()
            .push((format!("{probe:?}"), from));
        self.table.first_key(probe).await
    }
}

/// The searches of one split can come to the same question: the first split of names
/// of four to eight emoji asked whether keys reach `🠀` and `😁🠀` twice each (8 probes,
/// in the split model). Each question is now sent once, and the cut is the same.
#[test]
fn one_split_asks_each_question_once() {
    let t = names_in(0x1F600, 80, 50_000);
    let after = &t.0[999];
    let next = t.0[1000..].iter().find(|k| k.pk != after.pk).unwrap();
    let recording = Recording::new(&t);
    let split = run(find_split(
        &recording,
        after,
        Some(next),
        None,
        None,
        Some(plain_read(&t.0[0], 1000)),
        None,
        true,
    ))
    .unwrap()
    .expect("49,000 left are cut");
    let asked = recording.questions();
    let mut once = asked.clone();
    once.sort();
    once.dedup();
    assert_eq!(
        once.len(),
        asked.len(),
        "a question asked twice: {asked:#?}"
    );
    assert_eq!(split.probes, asked.len());
    assert!(split.at > *next, "{split:?}");
}

/// A table whose sample and first-key questions each wait until the other kind has
/// been asked too: answered only where both are in flight at once.
struct BothAtOnce<'a> {
    table: &'a Sorted,
    both: tokio::sync::Barrier,
}

#[async_trait]
impl KeyProbe for BothAtOnce<'_> {
    async fn first_key(&self, probe: Probe<'_>) -> tablevault_azure::Result<Option<EntityKey>> {
        self.both.wait().await;
        self.table.first_key(probe).await
    }

    async fn sample(&self, probe: Probe<'_>, n: usize) -> tablevault_azure::Result<Option<Sample>> {
        self.both.wait().await;
        self.table.sample(probe, n).await
    }
}

/// The check of a fan-out's middle piece and the question about its first piece are
/// independent, so they go out together: one round trip's wait, not two. Each counts
/// as a probe, and a question the split has answered already is not sent again.
#[test]
fn a_sample_and_a_first_key_are_asked_at_once() {
    let t = Sorted::new(
        (0..100)
            .map(|p| EntityKey::new(format!("cust-{p:03}"), "r"))
            .collect(),
    );
    let probe = BothAtOnce {
        table: &t,
        both: tokio::sync::Barrier::new(2),
    };
    let dim = probe::Dimension::Partitions { end: None };
    let mut p = probe::Prober::new(&probe);
    let timed = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (sample, first) = timed
        .block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                p.sample_at_and_first(&dim, "cust-050", 5, Some("cust-0205")),
            )
            .await
            .expect("both questions in flight at once")
        })
        .unwrap();
    let (values, complete) = sample.expect("the table samples");
    assert_eq!(
        values,
        ["cust-050", "cust-051", "cust-052", "cust-053", "cust-054"]
    );
    assert!(!complete);
    assert_eq!(first.as_deref(), Some("cust-021"));
    assert_eq!(p.sent, 2);
    // Asked again, the first key is known: only the sample is sent, and it waits for
    // no other question.
    let mut p = probe::Prober::new(&t);
    run(p.sample_at_and_first(&dim, "cust-050", 5, Some("cust-0205"))).unwrap();
    let (_, again) = run(p.sample_at_and_first(&dim, "cust-060", 5, Some("cust-0205"))).unwrap();
    assert_eq!(again.as_deref(), Some("cust-021"));
    assert_eq!(p.sent, 3);
}

/// The split of an unbounded range of `t` under `ceiling`, by a task that read `read`
/// keys from key `from`, the page read ahead showing the next partition.
fn split_unbounded(
    probe: &dyn KeyProbe,
    t: &Sorted,
    from: usize,
    read: usize,
    ceiling: &EntityKey,
    outweigh: Option<u64>,
) -> Option<Split> {
    let i = from + read - 1;
    let next = t.0[i + 1..].iter().find(|k| k.pk != t.0[i].pk).unwrap();
    run(find_split(
        probe,
        &t.0[i],
        Some(next),
        None,
        Some(ceiling),
        Some(plain_read(&t.0[from], read as u64)),
        outweigh,
        true,
    ))
    .unwrap()
}

/// A task reading a large tenant under a far ceiling (the next letter above its keys,
/// inherited from the table's first split) measured no density against it. While
/// split-off tasks waited it did not split at all, and read the rest alone (a model
/// backup of a small tenant then a large one ended with one task of 10,150 of 50,000
/// entities, three times the mean); with none waiting, each split was a probed cut of
/// unknown size just above the position reached. Now, with none waiting or once it has
/// read as much as the one waiting, it looks for a tighter ceiling once, passes it on,
/// and cuts by the density read. Before that, beside a waiting task, it sends no probe:
/// the search mostly ended in no split, and each probe is a whole-table filter on the
/// emulator.
#[test]
fn a_far_inherited_ceiling_is_tightened_before_the_rest_is_measured() {
    let t = Sorted::new(tenant("zzz", 47_500, 50));
    let far = EntityKey::partition_start("{");
    let from = 20_000;
    let split = |read: usize, outweigh| {
        let counting = CountingProbe::new(&t);
        let found = split_unbounded(&counting, &t, from, read, &far, outweigh);
        (found, counting.sent())
    };
    for (read, outweigh) in [(2_000, None), (2_500, Some(2_500))] {
        let cut = split(read, outweigh).0.expect("24,500 left outweigh 2,500");
        let ceiling = cut.ceiling.clone().expect("a ceiling passed on");
        assert!(ceiling < far && ceiling > t.0[t.0.len() - 1], "{ceiling}");
        let upper = t.0.len() - t.0.partition_point(|k| *k < cut.at);
        let estimate = cut.estimate.expect("an estimate") as f64 * (1 + cut.pieces.len()) as f64;
        assert!(
            // The ceiling is where keys stop at one digit ("zzz-00:"), so the estimate
            // counts the empty "zzz-0095".."zzz-00:" too.
            (estimate - upper as f64).abs() <= 0.5 * upper as f64,
            "{outweigh:?}: estimated {estimate}, gave {upper}"
        );
    }
    assert_eq!(
        split(2_000, Some(2_500)),
        (None, 0),
        "beside a waiting task of 2,500 it has not outread, nothing measures the rest: no probe"
    );
    assert_eq!(
        split(2_500, Some(30_000)).0,
        None,
        "2,500 read and 24,000 left do not make one and a half times 30,000"
    );
}

/// The search for a ceiling tighter than the one a task inherited asked again whether
/// keys reach the inherited one (`{`, above tenants under `aaa-` and `zzz-`), whose
/// answer is known: no key does. In the split model that was one probe of every
/// such search (tenants of dates: 42 probes, 38 without them). Now it asks nothing
/// at or above it, and finds the same ceiling.
#[test]
fn a_search_below_an_inherited_ceiling_asks_nothing_at_or_above_it() {
    let t = two_tenants("aaa", "zzz", (2_500, 47_500), 50);
    let far = EntityKey::partition_start("{");
    let recording = Recording::new(&t);
    let counting = CountingProbe::new(&recording);
    let cut = split_unbounded(&counting, &t, 10_000, 2_000, &far, None)
        .expect("the large tenant's rest is cut");
    let asked = recording.partition_froms();
    assert!(
        asked.iter().all(|v| v.as_str() < "{"),
        "asked at or above the inherited ceiling: {asked:?}"
    );
    let ceiling = cut.ceiling.expect("a tighter ceiling passed on");
    assert!(ceiling < far && ceiling > t.0[t.0.len() - 1], "{ceiling:?}");
}

/// The ceiling a search finds above `lo` among the RowKeys of partition `p` of `t`
/// (stopping where `settled` says), and the probes it sent.
fn row_ceiling(
    t: &Sorted,
    lo: &str,
    settled: &(dyn Fn(&str) -> bool + Sync),
) -> (Option<String>, usize) {
    let mut p = probe::Prober::new(t);
    let dim = probe::Dimension::Rows {
        partition: "p",
        below: None,
    };
    let found = run(probe::find_ceiling_until(&mut p, &dim, lo, None, settled)).unwrap();
    (found, p.sent)
}

/// A ceiling is searched for where keys first vary above `lo`. Rows numbered 7,380 to
/// 12,259 vary at the ten-thousands: the ceiling found there, `…2`, is 7,700 above
/// the last row, and a split's pieces placed by value up to it were mostly empty. Keys
/// reaching just past `lo`'s unit there are searched one place finer. A finer ceiling
/// past the keys' class (`:` above digits) is not taken: cuts are computed in the
/// keys' classes, and it would widen every place of the space by one unit.
#[test]
fn a_ceiling_just_past_where_keys_vary_is_searched_one_place_finer() {
    let t = Sorted::new(
        (7_380..12_260)
            .map(|i| EntityKey::new("p", format!("order-{i:010}")))
            .collect(),
    );
    let ceiling = |t: &Sorted, lo: &str| row_ceiling(t, lo, &|_| false).0;
    assert_eq!(
        ceiling(&t, "order-0000009381").as_deref(),
        Some("order-0000013")
    );
    // Rows 0 to 19,999: one place finer, keys reach `9`; the ceiling stays `0002`.
    assert_eq!(
        ceiling(&one_partition("p", 20_000), "00001000").as_deref(),
        Some("0002")
    );
}

/// A ceiling search inside a bound (the cluster a task is reading, below a small
/// tenant's keys far above) asked whether keys reach values at or past that bound: `b`,
/// `aaa-1` and `aaa-001` below an end of `aaa-001`, three whole-table filters on the
/// emulator whose answer the bound already gave. Now no probe asks at or past it.
#[test]
fn a_ceiling_search_asks_nothing_its_bound_already_answers() {
    let t = two_tenants("zzz", "aaa", (47_500, 2_500), 50);
    let end = EntityKey::partition_start("aaa-001");
    let recording = Recording::new(&t);
    let mut p = probe::Prober::new(&recording);
    let dim = probe::Dimension::Partitions { end: Some(&end) };
    let found = run(probe::find_ceiling(&mut p, &dim, "aaa-00020")).unwrap();
    assert_eq!(found.as_deref(), Some("aaa-0005"));
    let sent = p.sent;
    let asked = recording.partition_froms();
    assert!(
        asked.iter().all(|from| from.as_str() < "aaa-001"),
        "asked at or past the end: {asked:?}"
    );
    assert!(sent <= 6, "{sent} probes: {asked:?}");
}

/// Keys numbered without gaps fill every digit one place finer: the search for a
/// finer ceiling there galloped up from the bottom of the alphabet and spent seven
/// probes to keep the coarse one. It now asks once, at the middle of the keys' class.
#[test]
fn a_finer_ceiling_costs_one_probe_where_keys_fill_the_place() {
    let t = one_partition("p", 20_000);
    let (coarse, all) = row_ceiling(&t, "00001000", &|_| false);
    assert_eq!(coarse.as_deref(), Some("0002"));
    // The same search with keys that stop at the coarse ceiling's unit: the finer
    // step is all that differs.
    let fewer = Sorted::new(
        t.0.iter()
            .filter(|k| k.rk.as_str() < "00015")
            .cloned()
            .collect(),
    );
    let (finer, sent) = row_ceiling(&fewer, "00001000", &|_| false);
    assert_eq!(finer.as_deref(), Some("00015"));
    assert!(all <= 6, "{all} probes to keep the coarse ceiling");
    assert!(sent <= 9, "{sent} probes for the finer one");
}

/// A remainder the coarse ceiling already measures too small to split needs no finer
/// one: the rest of a partition of zero-padded RowKeys, 360 entities after 639 read,
/// cost three more probes (`008`, `00:`, `009`) to learn `00:` where `01` had said
/// as much; four such searches made a first backup of the shared-prefix shape send
/// 71 probes in the split model, over its budget.
#[test]
fn a_ceiling_that_settles_the_split_is_not_refined() {
    let t = Sorted::new(
        (0..1000)
            .map(|i| EntityKey::new("p", format!("{i:05}")))
            .collect(),
    );
    let (finer, all) = row_ceiling(&t, "00640", &|_| false);
    let (coarse, fewer) = row_ceiling(&t, "00640", &|_| true);
    assert_eq!(finer.as_deref(), Some("00:"));
    assert_eq!(coarse.as_deref(), Some("01"));
    assert!(fewer + 3 <= all, "{fewer} probes against {all}");
    // And the split that asks it stops there, with no split.
    let so_far = ReadSoFar {
        first: &t.0[0],
        entities: 640,
        partition: Some(PartitionRead {
            first_rk: &t.0[0].rk,
            entities: 640,
            continues: true,
            more: true,
            next_rk: None,
        }),
        largest_partition: 640,
        last_page: None,
        recent_pages: None,
        planned: false,
    };
    let counting = CountingProbe::new(&t);
    let end = EntityKey::partition_start("q");
    let split = run(find_split(
        &counting,
        &t.0[639],
        None,
        Some(&end),
        None,
        Some(so_far),
        None,
        true,
    ))
    .unwrap();
    assert_eq!(split, None);
    assert!(counting.sent() <= fewer + 2, "{} probes", counting.sent());
}

/// A large partition read says nothing of how densely the partitions after it lie.
/// Counted in, 3,000 entities of one partition among ten of 10 made 90 small
/// partitions look like 27,000 entities, and the few hundred left were cut into tasks
/// (Zipf-like sizes: tasks of 104 and 355 entities in the model).
#[test]
fn a_large_partition_read_does_not_make_the_small_ones_after_it_look_dense() {
    let t = Sorted::new(
        (0..100)
            .flat_map(|p| {
                let n = if p == 2 { 3_000 } else { 10 };
                (0..n).map(move |r| EntityKey::new(format!("p{p:03}"), format!("{r:05}")))
            })
            .collect(),
    );
    let next = EntityKey::partition_start("p010");
    let i = t.0.partition_point(|k| *k < next) - 1;
    let ceiling = EntityKey::partition_start("p1");
    let read = ReadSoFar {
        largest_partition: 3_000,
        planned: false,
        ..plain_read(&t.0[0], (i + 1) as u64)
    };
    let split = run(find_split(
        &t,
        &t.0[i],
        Some(&next),
        None,
        Some(&ceiling),
        Some(read),
        None,
        true,
    ))
    .unwrap();
    assert_eq!(split, None, "900 entities are left");
}

/// A read that lies all in the partition it is still reading measures no density of
/// the partitions after it: counted as if that partition ended where the read did, a
/// table of three partitions of 2,000 measured 1,000 entities from `events` to `jobs`
/// and estimated the partitions above at 500, too few to split, and one task read all
/// 6,000 (split soak, ISO times as RowKeys). The rest is cut in two by probes.
/// Whether the page read ahead ends in the partition or past it makes no difference:
/// only whether the partition goes on past the read.
#[test]
fn a_partition_still_being_read_does_not_measure_the_ones_after_it() {
    // Partitions of 2,000 (the page read ahead still in the first), and of 1,500 (it
    // holds the first's last 500 and the next one's start, as on Azurite).
    for size in [2_000, 1_500] {
        let t = Sorted::new(
            ["events", "jobs", "logs", "runs"]
                .iter()
                .flat_map(|pk| (0..size).map(move |r| EntityKey::new(*pk, format!("{r:05}"))))
                .collect(),
        );
        let next = t.0.iter().take(2_000).find(|k| k.pk != "events");
        let read = ReadSoFar {
            partition: Some(PartitionRead {
                first_rk: &t.0[0].rk,
                entities: 1_000,
                continues: next.is_none(),
                more: true,
                next_rk: None,
            }),
            largest_partition: 1_000,
            ..plain_read(&t.0[0], 1_000)
        };
        let split = unbounded_split(&t, &t.0[999], next, read)
            .unwrap_or_else(|| panic!("partitions of {size}: no split"));
        assert!(split.at.pk.as_str() > "events", "{split:?}");
        assert_eq!(split.estimate, None, "nothing measures them");
    }
}

/// Probes search for keys in characters, not in time: a ceiling found a place at a
/// time (`log-21`) lies a century above keys of 1999 and 2000, and halving time from
/// there spent the probes in empty decades, so the search ended at the first key above
/// its last probe, a date no calendar has past all the others (`log-2000-13-01`): a
/// task of 141 entities split off a table of 5,863 (split soak, seed 6).
#[test]
fn probes_for_a_cut_between_dates_search_in_characters() {
    let mut keys: Vec<EntityKey> = (0..260u64)
        .flat_map(|d| {
            let pk = format!("log-{}", date_and_time_after((1999, 10, 8), d, 0).0);
            (0..40).map(move |r| EntityKey::new(pk.clone(), format!("{r:04}")))
        })
        .collect();
    keys.extend((0..50).map(|r| EntityKey::new("log-2000-13-01", format!("{r:04}"))));
    let t = Sorted::new(keys);
    assert_eq!(t.0[0].pk, "log-1999-10-08");
    let ceiling = EntityKey::partition_start("log-21");
    let split = run(find_split(
        &t,
        &t.0[999],
        Some(&t.0[1000]),
        None,
        Some(&ceiling),
        Some(plain_read(&t.0[0], 1_000)),
        None,
        true,
    ))
    .unwrap()
    .expect("9,450 entities are left");
    let above = t.0.iter().filter(|k| **k >= split.at).count();
    assert!(above >= 2_000, "{above} above {:?}", split.at);
}

/// Pieces cut by a density carried far are checked in the middle, not at the first:
/// hourly keys of two weeks with one impossible date far above them (`2000-13-01T06`,
/// past December) have a ceiling in 2001 (`2000-14`). The first piece held keys, so
/// the check passed; eleven of the others held none, and one 5,821 of 6,117 (split
/// soak, seed 13: the first task kept 5,827 of 6,047). Checked in the middle, the gap
/// is found and the keys are measured against their own ceiling: 2,571 at most.
#[test]
fn pieces_carried_far_are_checked_in_the_middle() {
    let mut next = below(3);
    let mut keys = Vec::new();
    let mut hour = 0;
    while keys.len() < 6_000 {
        let (d, t) = date_and_time_after((2000, 6, 13), 0, hour * 3_600);
        let pk = format!("{d}T{}", &t[..2]);
        keys.extend((0..1 + next(150)).map(|r| EntityKey::new(&pk, format!("{r:04}"))));
        hour += 1 + next(7);
    }
    keys.extend((0..50).map(|r| EntityKey::new("2000-13-01T06", format!("{r:04}"))));
    let t = Sorted::new(keys);
    let (tasks, _) = backup_model(&t, 4);
    let largest = *tasks.iter().max().unwrap();
    assert!(2 * largest <= t.0.len(), "{tasks:?}");
}

/// Where nothing measures the rest, a task splits while another waits only once it
/// has read that one's worth itself: it is then likely the larger.
#[test]
fn an_unmeasured_rest_outweighs_a_waiting_task_once_as_much_was_read() {
    // Read from "zzz-00400" up to "zzz-00420", against a ceiling of "{": too fine to
    // measure.
    let read = Some(("zzz-00400", 1_000));
    let cut =
        |task_read| share::cut_share(read, None, Some("{"), "zzz-00420", Some(2_500), task_read);
    assert!(cut(2_000).is_none());
    let unknown = cut(2_500).expect("a cut of unknown size");
    assert_eq!(
        (unknown.share, unknown.rest, unknown.by_value),
        (0.5, None, false)
    );
    assert!(share::cut_share(read, None, Some("{"), "zzz-00420", None, 0).is_some());
}

/// Regression: where the whole read says the rest is too small to split, the last page
/// read measures it, beside a waiting task too. Unpadded numbers (`0` to `4999`, ten
/// entities each) lie ten times as densely under `1` as under `5`, and the empty space
/// between `0` and `1` counted in the whole read: a task that had read 4,000 entities
/// from `0` up to `1357` put the 1,860 left below `1543` at a few hundred and, with a
/// task of 1,941 waiting, read them alone (in the split model, 6,060 entities, 2.55
/// times the mean task). The last page, `1267` to `1357`, measures them at about 2,000.
#[test]
fn the_last_page_measures_a_rest_the_whole_read_finds_too_small_beside_a_waiting_task() {
    let whole = Some(("0", 4_000));
    let page = Some(("1267", 1_000));
    let cut = |outweigh| share::cut_share(whole, page, Some("1543"), "1358", outweigh, 4_000);
    assert!(
        share::cut_share(whole, None, Some("1543"), "1358", Some(1_941), 4_000).is_none(),
        "the whole read alone finds the rest too small"
    );
    let found = cut(Some(1_941)).expect("the last page measures enough to split");
    let rest = found.rest.expect("an estimate");
    assert!(found.by_value);
    assert!(
        (1_500.0..3_000.0).contains(&rest),
        "estimated {rest}, about 2,020 left"
    );
    assert!(found.upper().unwrap() > 1_000, "most of the rest goes");
    assert!(
        cut(Some(10_000)).is_none(),
        "4,000 and about 2,000 do not outweigh 10,000"
    );
}

#[test]
fn a_range_is_split_while_a_task_waits_only_if_it_would_end_at_one_and_a_half_times_as_much() {
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
    assert!(
        split(Some(4_000)).is_some(),
        "2,000 and 10,000 outweigh 4,000"
    );
    assert!(
        split(Some(7_000)).is_some(),
        "2,000 and 10,000 outweigh 7,000"
    );
    assert_eq!(
        split(Some(10_000)),
        None,
        "2,000 and 10,000 do not outweigh 10,000"
    );
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

/// Beside a waiting task it cannot outweigh, a task whose page ended inside a
/// partition sends no probe for the next one: the remainder measured from the
/// partition it is in is already too small, and from the next one it is smaller. The
/// probe used to be sent and the split then declined (7 of the split model's 50 probes
/// with Zipf-like partition sizes).
#[test]
fn a_task_that_cannot_outweigh_a_waiting_one_does_not_look_for_the_next_partition() {
    let t = sequential(20_000);
    // Read keys 0..2,200, stopping inside a partition of 500 whose end the page did not
    // show; about 9,800 are left before the end.
    let (i, end) = (2_199, t.0[12_000].clone());
    let read = plain_read(&t.0[0], 2_200);
    let split = |outweigh| {
        let counting = CountingProbe::new(&t);
        let found = run(find_split(
            &counting,
            &t.0[i],
            None,
            Some(&end),
            None,
            Some(read),
            outweigh,
            true,
        ))
        .unwrap();
        (found, counting.sent())
    };
    assert_eq!(
        split(Some(10_000)),
        (None, 0),
        "2,200 and 9,800 do not outweigh 10,000"
    );
    let (found, probes) = split(Some(4_000));
    assert!(found.is_some(), "2,200 and 9,800 outweigh 4,000");
    assert!(probes >= 1, "the next partition is probed for");
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
        1 => prop::char::range('\u{1F300}', '\u{1F6FF}'),
        1 => prop::char::range('\u{10000}', '\u{10FFFF}'),
        1 => Just('\u{FFFD}'),
        1 => prop::char::range('\u{A0}', '\u{3000}'),
    ]
}

/// Keys of the units above, or dates and times (valid or not, under a prefix or
/// written without separators), which cuts read in time.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(key_unit(), 0..6).prop_map(|v| v.into_iter().collect()),
        1 => "(a-)?20[0-2][0-9]-[01][0-9]-[0-3][0-9](T[0-2][0-9](:[0-5][0-9](:[0-5][0-9])?)?)?",
        1 => "20[0-2][0-9][01][0-9][0-3][0-9]([0-2][0-9])?",
    ]
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
        page in prop::option::of((0usize..1000, 0u64..2_000, 0u64..2_000)),
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
        let partition = part.as_ref().zip(part_rk.as_deref()).map(|((_, n, c), first_rk)| PartitionRead { first_rk, entities: *n, continues: *c, more: *c, next_rk: None });
        // And any last page.
        let page_first = page.map(|(f, _, _)| t.0[f % t.0.len()].clone());
        let last_page = page_first.as_ref().zip(page).map(|(first, (_, entities, largest_partition))| PageRead { first, entities, largest_partition });
        let read = first.as_ref().zip(read).map(|(first, (_, entities))| ReadSoFar { first, entities, partition, largest_partition: part.as_ref().map_or(0, |p| p.1), last_page, recent_pages: None, planned });
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

/// A pseudo-random draw below its argument, from a linear congruential generator seeded
/// with `seed`: the model's key shapes are fixed by their seeds.
fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed;
    move |n: u64| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) % n
    }
}

/// `n` entities or a few more under PartitionKeys of one to five units drawn from
/// printable ASCII, Latin-1, CJK, private use, the top of the BMP and astral planes
/// (1-120 rows each), from a fixed seed.
fn keys_of_every_region(n: usize) -> Sorted {
    let mut next = below(12345);
    let mut keys = Vec::new();
    while keys.len() < n {
        let pk: String = (0..1 + next(5))
            .map(|_| crate::testing::key_char(&mut next))
            .collect();
        for r in 0..1 + next(120) {
            keys.push(EntityKey::new(pk.clone(), format!("{r:04}")));
        }
    }
    Sorted::new(keys)
}

/// About `n` entities under PartitionKeys that share a prefix (`Q丅`) and go on with
/// up to three units, ASCII or not (`z`, `~`, U+FF01, U+FFFD, astral ones), 1,000
/// RowKeys each at most, from a fixed seed.
fn shared_prefix_then_every_region(n: u64) -> Sorted {
    let mut next = below(777);
    let units = ['\u{FF01}', '\u{FFFD}', '\u{1F600}', '\u{10000}', 'z', '~'];
    Sorted::new(
        (0..n)
            .map(|i| {
                let tail: String = (0..next(4)).map(|_| units[next(6) as usize]).collect();
                EntityKey::new(format!("Q\u{4E05}{tail}"), format!("{:05}", i % 1000))
            })
            .collect(),
    )
}

/// Regression: keys beginning with ASCII and with other characters alike. Read in
/// the dense alphabet's rank space, where printable ASCII has a rank per character and
/// the rest of the BMP a few, the first thousand entities (ASCII and Latin-1) seemed
/// to leave under 200, so a table of 3,500 was read by one task. A density is now
/// carried over only within one region; across them the cut is probed. So with keys
/// that share a prefix and go on in either region (the thousand entities read up to
/// `Q丅z` seemed to be 63% of the way to the ceiling `Q怀`).
#[test]
fn a_table_whose_keys_begin_in_every_region_is_split() {
    // With an empty PartitionKey first, what was read starts at the bottom of the key
    // space, below the ASCII it went through.
    let mut with_empty = keys_of_every_region(3500).0;
    with_empty.push(EntityKey::new("", "0000"));
    for t in [
        keys_of_every_region(3500),
        Sorted::new(with_empty),
        shared_prefix_then_every_region(3500),
    ] {
        split_at_every_page(&t);
    }
}

/// A table's first task splitting after it read the first `read` keys of `t`, as the
/// worker calls it: the first key of another partition among the next 1,000 (the page
/// read ahead), and, with `page_largest`, the last 1,000 keys read as its last page, at
/// most that many of them in one partition. Returns the split and how many of the
/// remaining keys lie at or above its cut.
fn split_after(t: &Sorted, read: usize, page_largest: Option<u64>) -> Option<(Split, usize)> {
    let after = &t.0[read - 1];
    let so_far = ReadSoFar {
        first: &t.0[0],
        entities: read as u64,
        partition: None,
        largest_partition: 10,
        last_page: page_largest.map(|largest_partition| PageRead {
            first: &t.0[read - 1000],
            entities: 1000,
            largest_partition,
        }),
        recent_pages: None,
        planned: true,
    };
    let ahead = &t.0[read..(read + 1000).min(t.0.len())];
    let next = ahead.iter().find(|k| k.pk != after.pk);
    let split = unbounded_split(t, after, next, so_far)?;
    let above = t.0[read..].iter().filter(|k| **k >= split.at).count();
    Some((split, above))
}

fn split_at_every_page(t: &Sorted) {
    for read in [1000usize, 1500, 2000, 2500] {
        let (_, above) = split_after(t, read, None)
            .unwrap_or_else(|| panic!("no split after {read} of {}", t.0.len()));
        let rest = t.0.len() - read;
        assert!(
            above * 10 >= rest,
            "after {read}: the upper part holds {above} of {rest}"
        );
    }
}

/// Regression: keys far denser further on than where the read began. A table of two
/// tenants, 1,000 entities under `aaa-…` and 20,000 under `zzz-…`: read from `aaa-`,
/// the tenant of 20,000 was a sliver at the top of the key space, estimated at a few
/// entities, so one task read it all, its estimate falling as it read on. The last
/// page read now says how densely keys lie where the task is.
#[test]
fn a_dense_tenant_after_a_sparse_one_is_split() {
    let mut keys: Vec<EntityKey> = (0..1000)
        .map(|i| EntityKey::new(format!("aaa-{:05}", i / 10), format!("{i:06}")))
        .collect();
    keys.extend(
        (0..20_000).map(|i| EntityKey::new(format!("zzz-{:05}", i / 10), format!("{i:06}"))),
    );
    let t = Sorted::new(keys);
    for read in [2000usize, 5000, 10_000] {
        let (_, above) =
            split_after(&t, read, Some(10)).unwrap_or_else(|| panic!("no split after {read}"));
        let rest = t.0.len() - read;
        assert!(
            above * 5 >= rest,
            "after {read}: the upper part holds {above} of {rest}"
        );
        // A last page mostly of one partition says nothing of those after it.
        assert_eq!(split_after(&t, read, Some(600)), None);
    }
}

/// Regression: a large tenant's keys below a small tenant's in another script (so the
/// density read is not carried over, and the cut is probed). Halving the whole
/// remainder by key value found the small tenant's first key: each split gave away
/// the small tenant, and one task read the large one alone. The cut now falls inside
/// the cluster the last page read (the keys sharing its prefix).
#[test]
fn a_large_tenant_below_a_small_one_is_cut_inside() {
    let mut keys: Vec<EntityKey> = (0..4000)
        .map(|i| EntityKey::new(format!("j😊-{:05}", i / 10), format!("{i:05}")))
        .collect();
    keys.extend((0..500).map(|i| EntityKey::new(format!("丟＞-{:05}", i / 10), format!("{i:05}"))));
    let t = Sorted::new(keys);
    for read in [2000usize, 3000] {
        let (split, above) =
            split_after(&t, read, Some(10)).unwrap_or_else(|| panic!("no split after {read}"));
        assert!(
            split.at.pk.starts_with("j😊"),
            "after {read}: cut at {:?}",
            split.at
        );
        let rest = t.0.len() - read;
        assert!(
            above * 10 >= rest * 4,
            "after {read}: the upper part holds {above} of {rest}"
        );
    }
}

/// How many entities a table's first task reads when it splits at every page (as if
/// workers were always idle): pages of 1,000, the last page passed on.
fn first_task_reads(t: &Sorted) -> (usize, Vec<EntityKey>) {
    let mut end: Option<EntityKey> = None;
    let mut cuts = Vec::new();
    let mut read = 0usize;
    let mut ceiling: Option<EntityKey> = None;
    loop {
        let in_range = |k: &EntityKey| end.as_ref().is_none_or(|e| k < e);
        let page_end = (read + 1000).min(t.0.len());
        let page: Vec<&EntityKey> = t.0[read..page_end].iter().filter(|k| in_range(k)).collect();
        if page.is_empty() {
            return (read, cuts);
        }
        let page_first = page[0].clone();
        read += page.len();
        if read >= t.0.len() || !in_range(&t.0[read]) {
            return (read, cuts);
        }
        let after = t.0[read - 1].clone();
        let mut largest = 0;
        let mut run_len = 0;
        let mut last_pk: Option<&str> = None;
        for k in &page {
            if last_pk != Some(k.pk.as_str()) {
                run_len = 0;
            }
            run_len += 1;
            largest = largest.max(run_len);
            last_pk = Some(&k.pk);
        }
        let so_far = ReadSoFar {
            first: &t.0[0],
            entities: read as u64,
            partition: None,
            largest_partition: largest as u64,
            last_page: Some(PageRead {
                first: &page_first,
                entities: page.len() as u64,
                largest_partition: largest as u64,
            }),
            recent_pages: None,
            planned: true,
        };
        let seen_next = t.0[read..(read + 1000).min(t.0.len())]
            .iter()
            .find(|k| k.pk != after.pk && in_range(k))
            .cloned();
        if let Some(split) = run(find_split(
            t,
            &after,
            seen_next.as_ref(),
            end.as_ref(),
            ceiling.as_ref(),
            Some(so_far),
            None,
            true,
        ))
        .unwrap()
        {
            ceiling = split.ceiling.clone().or(ceiling);
            end = Some(split.at.clone());
            cuts.push(split.at);
        }
    }
}

/// Splitting at every page (as if workers were always idle), a table's first task
/// reads a bounded share of it, whatever the shape: sequential, GUID and one-partition
/// keys, keys from every region, and two tenants either way round (in one script and
/// in two).
#[test]
fn the_first_task_reads_a_bounded_share_of_every_shape() {
    let tenants = |large: &str, small: &str| two_tenants(large, small, (20_000, 1_000), 10);
    for (name, t, share) in [
        ("sequential", sequential(21_000), 0.15),
        ("guid", guid_partitions(21_000), 0.15),
        ("one partition", one_partition("p", 21_000), 0.15),
        ("every region", keys_of_every_region(21_000), 0.15),
        ("large tenant below", tenants("aaa", "zzz"), 0.2),
        ("large tenant above", tenants("zzz", "aaa"), 0.25),
        (
            "large tenant below, two scripts",
            tenants("j😊", "丟"),
            0.15,
        ),
        (
            "large tenant above, two scripts",
            tenants("丟", "j😊"),
            0.25,
        ),
    ] {
        let (read, cuts) = first_task_reads(&t);
        assert!(
            read as f64 <= share * t.0.len() as f64,
            "{name}: the first task read {read} of {} ({} cuts: {cuts:?})",
            t.0.len(),
            cuts.len()
        );
    }
}

/// A task of [`backup_model`]: its range, what it read, and how it was made.
struct SimTask {
    start: Option<EntityKey>,
    end: Option<EntityKey>,
    ceiling: Option<EntityKey>,
    /// What the task that split it off expected it to hold; `None` when planned.
    estimate: Option<u64>,
    /// Index of the next key to read.
    at: usize,
    first: Option<usize>,
    read: usize,
    /// Its last pages, as the worker keeps them.
    window: PageWindow,
    largest_partition: u64,
    /// Searches that sent probes and found no cut with no task waiting, and looks
    /// still to skip after the last one (as the worker backs off).
    fruitless: u32,
    skip: u32,
}

/// Entities per task of a backup of `t` by `workers` workers, modelled on the product:
/// one planned task for the whole table; in each round every busy worker reads a page of
/// 1,000 of its task and, as the worker does, splits the rest while no task waits, or
/// when the one waiting was split off with an estimate this rest outweighs (upper
/// parts queued, the top one with the ceiling); idle workers take queued tasks. Also
/// returns the probes its splits sent, whether they split or not.
///
/// Workers read in step, which real ones do not: on the emulator which task looks
/// first, and against which waiting estimate, varies run to run. With
/// `TABLEVAULT_SPLIT_MODEL_JITTER=<seed>` each busy worker reads its next page in a
/// round with probability two in three, drawn from the seed: the named shapes' bounds
/// are for workers in step, and some shapes exceed them out of step (docs/BENCHMARKS.md,
/// "Workers out of step").
fn backup_model(t: &Sorted, workers: usize) -> (Vec<usize>, usize) {
    let m = backup_model_probing(t, workers, &CountingProbe::new(t));
    (m.tasks, m.probes)
}

/// What [`backup_model_probing`] modelled.
struct Modelled {
    /// Entities per task.
    tasks: Vec<usize>,
    /// Probes the splits sent.
    probes: usize,
}

/// [`backup_model`], its splits probing through `counting`.
fn backup_model_probing<P: KeyProbe>(
    t: &Sorted,
    workers: usize,
    counting: &CountingProbe<P>,
) -> Modelled {
    let new_task = |start, end, ceiling, estimate| SimTask {
        start,
        end,
        ceiling,
        estimate,
        at: 0,
        first: None,
        read: 0,
        window: PageWindow::default(),
        largest_partition: 0,
        fruitless: 0,
        skip: 0,
    };
    let mut queue = std::collections::VecDeque::from([new_task(None, None, None, None)]);
    let mut running: Vec<SimTask> = Vec::new();
    let mut done = Vec::new();
    // Workers out of step (see `backup_model`).
    let mut jitter = std::env::var("TABLEVAULT_SPLIT_MODEL_JITTER")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(below);
    while !queue.is_empty() || !running.is_empty() {
        while running.len() < workers {
            let Some(mut task) = queue.pop_front() else {
                break;
            };
            task.at = task
                .start
                .as_ref()
                .map_or(0, |s| t.0.partition_point(|k| k < s));
            running.push(task);
        }
        let mut still = Vec::new();
        for mut task in running.drain(..) {
            if jitter.as_mut().is_some_and(|next| next(3) == 0) {
                still.push(task);
                continue;
            }
            let in_range = |i: usize, end: &Option<EntityKey>| {
                i < t.0.len() && end.as_ref().is_none_or(|e| t.0[i] < *e)
            };
            let page_start = task.at;
            while task.at < page_start + 1000 && in_range(task.at, &task.end) {
                task.at += 1;
            }
            let n = task.at - page_start;
            if n > 0 {
                let task_first = *task.first.get_or_insert(page_start);
                task.read += n;
                // As the worker counts it: a partition's entities across pages.
                let mut partition_run = (task_first..page_start)
                    .rev()
                    .take_while(|&j| t.0[j].pk == t.0[page_start].pk)
                    .count();
                let mut tally = PageTally::default();
                for i in page_start..task.at {
                    let same = i > task_first && t.0[i].pk == t.0[i - 1].pk;
                    partition_run = if same { partition_run + 1 } else { 1 };
                    task.largest_partition = task.largest_partition.max(partition_run as u64);
                    tally.note(&t.0[i]);
                }
                task.window.push(tally);
            }
            if !in_range(task.at, &task.end) || n < 1000 {
                if std::env::var("SPLIT_TRACE").is_ok() {
                    eprintln!(
                        "DONE {} est {:?} start {:?} end {:?}",
                        task.read,
                        task.estimate,
                        task.start.as_ref().map(|k| &k.pk),
                        task.end.as_ref().map(|k| &k.pk)
                    );
                }
                done.push(task.read);
                continue;
            }
            // The page read ahead, inside the range.
            let ahead = &t.0[task.at
                ..(task.at..(task.at + 1000).min(t.0.len()))
                    .find(|&i| !in_range(i, &task.end))
                    .unwrap_or((task.at + 1000).min(t.0.len()))];
            // As the worker: a page read ahead that ends the range (less than a page
            // of it left) holds all of its rest, and no look is made.
            if ahead.len() < 1000 {
                still.push(task);
                continue;
            }
            // As the worker: after its n-th fruitless search it skips the next
            // 2^n - 1 looks, one per full page.
            if task.skip > 0 {
                task.skip -= 1;
                still.push(task);
                continue;
            }
            // As the worker: with no task waiting, split; with one waiting that was
            // split off with an estimate, split only what outweighs it.
            let outweigh = match queue.front() {
                None => Some(None),
                Some(SimTask {
                    estimate: Some(e), ..
                }) => Some(Some(*e)),
                Some(_) => None,
            };
            if let Some(outweigh) = outweigh {
                let after = &t.0[task.at - 1];
                let next = ahead.iter().find(|k| k.pk != after.pk);
                // What it read of the partition it is in.
                let task_first = task.first.unwrap();
                let mut part_first = task.at - 1;
                while part_first > task_first && t.0[part_first - 1].pk == after.pk {
                    part_first -= 1;
                }
                let so_far = ReadSoFar {
                    first: &t.0[task_first],
                    entities: task.read as u64,
                    partition: Some(PartitionRead {
                        first_rk: &t.0[part_first].rk,
                        entities: (task.at - part_first) as u64,
                        // As the worker reads them: of the page read ahead, its
                        // last entity and its first.
                        continues: ahead.last().is_some_and(|k| k.pk == after.pk),
                        more: ahead.first().is_some_and(|k| k.pk == after.pk),
                        next_rk: ahead
                            .first()
                            .filter(|k| k.pk == after.pk)
                            .map(|k| k.rk.as_str()),
                    }),
                    largest_partition: task.largest_partition.max((task.at - part_first) as u64),
                    last_page: task.window.last(),
                    recent_pages: task.window.recent(),
                    planned: task.estimate.is_none(),
                };
                let sent_before = counting.sent();
                let found = run(find_split(
                    &counting,
                    after,
                    next,
                    task.end.as_ref(),
                    task.ceiling.as_ref(),
                    Some(so_far),
                    outweigh,
                    true,
                ))
                .unwrap();
                if std::env::var("SPLIT_TRACE").is_ok() {
                    eprintln!(
                        "TRACE [{}] read {} after {:?} end {:?} outweigh {:?} -> {:?}",
                        counting.sent() - sent_before,
                        task.read,
                        after,
                        task.end.as_ref().map(|e| &e.pk),
                        outweigh,
                        found.as_ref().map(|s| (
                            &s.at,
                            s.probes,
                            s.estimate,
                            s.pieces.len(),
                            &s.ceiling
                        ))
                    );
                }
                if found.is_none() && outweigh.is_none() && counting.sent() > sent_before {
                    task.fruitless += 1;
                    task.skip = (1 << task.fruitless) - 1;
                }
                if let Some(split) = found {
                    let starts: Vec<EntityKey> = std::iter::once(split.at.clone())
                        .chain(split.pieces.clone())
                        .collect();
                    for (i, start) in starts.iter().enumerate() {
                        let top = i + 1 == starts.len();
                        let end = if top {
                            task.end.clone()
                        } else {
                            Some(starts[i + 1].clone())
                        };
                        queue.push_back(new_task(
                            Some(start.clone()),
                            end,
                            if top { split.ceiling.clone() } else { None },
                            split.estimate,
                        ));
                    }
                    task.end = Some(split.at);
                    task.ceiling = None;
                }
            }
            still.push(task);
        }
        running = still;
    }
    Modelled {
        tasks: done,
        probes: counting.sent(),
    }
}

/// A backup of every shape by four workers, modelled on the product ([`backup_model`]):
/// its tasks read the whole table once (they tile it), none reads a quarter of it, the
/// largest reads at most about twice the mean, and its splits send at most
/// [`MODEL_PROBES`] probes in all. Each probe is a whole-table filter and sort on the
/// emulator, and a first backup's probes were what made it slower than a plain scan
/// there: 68 to 139 in this model for two tenants, 82 for Zipf sizes.
/// Two tenants either way round and in one or two scripts, Zipf-like partition sizes,
/// sequential, GUID and one-partition keys, keys from every region, keys sharing a
/// prefix, names in Cyrillic, Greek, accented Latin, CJK, Hangul and emoji (one block
/// of them, and two), one partition of emoji RowKeys, tenants under CJK and Hangul
/// prefixes, [`application_shapes`] and [`time_shapes`]; 50,000 entities each (GUID
/// and emoji RowKeys 20,000).
const MODEL_PROBES: usize = 45;

#[test]
fn four_workers_share_every_shape() {
    let tenants = |large: &str, small: &str| two_tenants(large, small, (47_500, 2_500), 50);
    let zipf = zipf_table(50_000);
    // The issue's goal is a largest task at most twice the mean. With keys of every
    // region, densities carry over nowhere and cuts placed by value fall in empty
    // gaps: 2.27 (3.37 before densities that stop holding where the read ends were
    // checked by a sample).
    for (name, t, most_over_mean) in [
        ("tenants, small first", tenants("zzz", "aaa"), 2.0),
        ("tenants, large first", tenants("aaa", "zzz"), 2.0),
        (
            "tenants, large first, two scripts",
            tenants("j😊", "丟"),
            2.0,
        ),
        (
            "tenants, small first, two scripts",
            tenants("丟", "j😊"),
            2.0,
        ),
        (
            "tenants, one-letter prefixes, large first",
            two_tenants("F", "z", (47_500, 2_500), 50),
            2.0,
        ),
        (
            "tenants, one-letter prefixes, small partitions",
            two_tenants("F", "z", (40_000, 5_000), 10),
            2.0,
        ),
        ("zipf", zipf, 2.0),
        (
            "Zipf sizes falling with the key",
            zipf_sizes(50_000, |rank| format!("customer-{rank:06}")),
            2.0,
        ),
        ("sequential", sequential(50_000), 2.0),
        ("guid", guid_partitions(20_000), 2.0),
        ("one partition", one_partition("p", 50_000), 2.0),
        ("every region", keys_of_every_region(50_000), 2.0),
        (
            "shared prefix",
            shared_prefix_then_every_region(50_000),
            2.0,
        ),
        ("Cyrillic names", names_in(0x430, 32, 50_000), 2.0),
        ("Greek names", names_in(0x3B1, 25, 50_000), 2.0),
        ("accented Latin names", names_in(0xE0, 31, 50_000), 2.0),
        ("CJK names", names_in(0x4E00, 20_992, 50_000), 2.0),
        ("Hangul names", names_in(0xAC00, 11_172, 50_000), 2.0),
        ("emoji names", names_in(0x1F600, 80, 50_000), 2.0),
        (
            "emoji names, two blocks",
            names_in(0x1F300, 0x350, 50_000),
            2.0,
        ),
        ("emoji RowKeys, one partition", emoji_rows(20_000), 2.0),
        ("CJK tenants", tenants("東京都", "大阪府"), 2.0),
        ("Hangul tenants", tenants("서울", "부산광역"), 2.0),
    ]
    .into_iter()
    .chain(application_shapes(50_000))
    .chain(time_shapes(50_000))
    {
        // One shape alone, to trace it (with `SPLIT_TRACE`).
        if std::env::var("TABLEVAULT_SPLIT_MODEL_ONLY").is_ok_and(|only| only != name) {
            continue;
        }
        let (tasks, probes) = backup_model(&t, 4);
        let total: usize = tasks.iter().sum();
        let largest = *tasks.iter().max().unwrap();
        assert_eq!(total, t.0.len(), "{name}: every key read once");
        assert!(
            largest * 4 < total,
            "{name}: a task read {largest} of {total} ({} tasks: {tasks:?})",
            tasks.len()
        );
        let over_mean = (largest * tasks.len()) as f64 / total as f64;
        eprintln!(
            "MODEL {name}: {} tasks, {probes} probes, {over_mean:.2}: {tasks:?}",
            tasks.len()
        );
        // Zipf sizes falling with the key: the largest partition is 15% of the table
        // (2.2 times a mean task), the next ones 7% and 5%, all read first; the
        // density read across them says little of the small ones after, and cuts of
        // unknown size are probed (1.87 times the mean in 76 probes, with partitions
        // entered cut inside from 250 read, `INSIDE_PARTITION_READ`; 2.41 in 73 from
        // 1,250, before ceilings were asked at the classes' ceilings; 42, where 64
        // had been, since a page that ends the range is not searched; 1.81 since a
        // splitter that has read a piece's worth keeps none of the rest). Every region:
        // samples where the last page's density is not the read's (58 probes; 3.37
        // times the mean in 50 without them). GUID RowKeys in customers' partitions: 16
        // tasks, nine of them cut inside a partition of 100-5,000, at two or three
        // probes each (36; 54 searching pages that end the range, 147 when each cut
        // galloped up from the last GUID read). Before pages that end the range went
        // unsearched, shapes were held to 60 probes (shared prefixes sent 47, now 31).
        // Since a remainder nothing measures goes on from the next partition, every
        // region makes 25 tasks, not 17, each searching its own cuts: 90 probes where
        // 58 were, its largest task 1.70 times the mean, not 2.14.
        let most_probes = match name {
            "every region" => 96,
            "Zipf sizes falling with the key" => 50,
            _ => MODEL_PROBES,
        };
        assert!(
            probes <= most_probes,
            "{name}: the splits sent {probes} probes"
        );
        assert!(
            over_mean <= most_over_mean,
            "{name}: the largest task read {over_mean:.2} times the mean ({tasks:?})"
        );
    }
}

/// About `n` entities under PartitionKeys of three to eight letters drawn from the
/// `letters` units from `first` (one script: Cyrillic, Greek, accented Latin, CJK,
/// Hangul), 1-20 rows each, from a fixed seed.
fn names_in(first: u32, letters: u32, n: usize) -> Sorted {
    let mut next = below(u64::from(first));
    let mut keys = Vec::new();
    while keys.len() < n {
        let pk: String = (0..3 + next(6))
            .map(|_| char::from_u32(first + next(u64::from(letters)) as u32).expect("a letter"))
            .collect();
        for r in 0..1 + next(20) {
            keys.push(EntityKey::new(pk.clone(), format!("{r:04}")));
        }
    }
    Sorted::new(keys)
}

/// `n` entities in one partition under RowKeys of two to six emoticons and a number
/// (`😄😁😛-566`): one script's letters mixed with ASCII in every key, so no density
/// read carries over to the rest ([`one_region`](super::scale::one_region)) and every
/// cut is probed.
fn emoji_rows(n: usize) -> Sorted {
    let mut next = below(7);
    let mut rows = std::collections::BTreeSet::new();
    while rows.len() < n {
        let emoji: String = (0..2 + next(5))
            .map(|_| char::from_u32(0x1F600 + next(80) as u32).expect("an emoticon"))
            .collect();
        rows.insert(format!("{emoji}-{}", next(1000)));
    }
    Sorted::new(
        rows.into_iter()
            .map(|rk| EntityKey::new("emoji-tenant", rk))
            .collect(),
    )
}

/// `n` entities under GUID PartitionKeys whose sizes follow 1/rank over `n / 100`
/// partitions (the benchmark's Zipf shape).
fn zipf_table(n: u64) -> Sorted {
    zipf_sizes(n, |rank| guid(1_000_000 + rank))
}

/// `n` entities in partitions of Zipf-like sizes (rank `r` holds about `n / (r * H)`),
/// under the PartitionKey `pk` gives each rank.
fn zipf_sizes(n: u64, pk: impl Fn(u64) -> String) -> Sorted {
    let parts = n / 100;
    let h: f64 = (1..=parts).map(|r| 1.0 / r as f64).sum();
    Sorted::new(
        (0..n)
            .map(|i| {
                let target = (i as f64 + 0.5) / n as f64 * h;
                let mut acc = 0.0;
                let mut rank = parts;
                for r in 1..=parts {
                    acc += 1.0 / r as f64;
                    if acc >= target {
                        rank = r;
                        break;
                    }
                }
                EntityKey::new(pk(rank), format!("order-{i:010}"))
            })
            .collect(),
    )
}

/// A large tenant under a one-letter prefix, a small one far above it (`F-` and `z-`,
/// drawn by the split soak's seed 36): the first split's density, read from a thousand
/// `F-` keys, measured millions of entities up to the ceiling above `z-`. Its pieces
/// all fell between the tenants: one task read 4,000 of the 4,500 entities while
/// fourteen empty tasks came and went.
#[test]
fn a_large_tenant_far_below_a_small_one_is_shared_out() {
    let keys: Vec<EntityKey> = (0..4_500u32)
        .map(|i| {
            let tenant = if i < 500 { "z" } else { "F" };
            EntityKey::new(format!("{tenant}-{:05}", i / 10), format!("{i:05}"))
        })
        .collect();
    let t = Sorted::new(keys);
    let (tasks, probes) = backup_model(&t, 4);
    let largest = *tasks.iter().max().unwrap();
    assert!(largest * 4 <= 4_500 * 3, "{tasks:?}");
    assert!(
        tasks.iter().all(|&n| n > 0),
        "no task is cut where no key lies: {tasks:?}"
    );
    assert!(probes <= MODEL_PROBES, "{probes} probes");
}

/// Regression (split soak seed 30): a first page of Armenian names, `ա` to `է`, with
/// the letters up to `ֆ` still to come. Its letters, widened by their spacing, ended
/// near `ճ`, so the page measured a third of the space up to the ceiling (U+0800), the
/// rest of 6,000 entities was estimated at 1,800, under the 2,000 worth a split, and the
/// worker, backing off after that fruitless search, read the whole table as one task.
/// Letters lying in one known alphabet now count all of its letters.
#[test]
fn a_first_page_of_names_measures_their_whole_alphabet() {
    // Names of three to eight of the 38 lower-case letters, 1-20 rows each, from a
    // seed whose first page shows letters up to `է` alone.
    let mut next = below(268);
    let mut keys = Vec::new();
    while keys.len() < 6_000 {
        let name: String = (0..3 + next(6))
            .map(|_| char::from_u32(0x561 + next(38) as u32).expect("an Armenian letter"))
            .collect();
        for r in 0..1 + next(20) {
            keys.push(EntityKey::new(name.clone(), format!("{r:03}")));
        }
    }
    let t = Sorted::new(keys);
    let (split, above) = split_after(&t, 1000, Some(20)).expect("the rest is split");
    assert!(
        split.estimate.is_some_and(|e| e >= 1_500),
        "estimated {:?}",
        split.estimate
    );
    assert!(above >= 1_500, "the upper part holds {above}");
}

/// Key shapes common in applications, `n` entities each, from a fixed seed: base64
/// PartitionKeys of 22 characters, one entity each; e-mail addresses as RowKeys of one
/// partition; reverse-tick RowKeys (19 digits, newest first) in one partition;
/// upper-case hex RowKeys; ULID-like PartitionKeys (`01J`, a time in ten upper-case hex
/// digits, ten random letters); unpadded numbers as PartitionKeys, ten entities each;
/// customers' partitions of mixed sizes under GUID RowKeys.
fn application_shapes(n: u64) -> Vec<(&'static str, Sorted, f64)> {
    let mut next = below(99);
    let b64: Vec<char> = ('A'..='Z')
        .chain('a'..='z')
        .chain('0'..='9')
        .chain(['+', '='])
        .collect();
    let mut word = |from: usize, of: u64, len: u64| -> String {
        (0..len).map(|_| b64[from + next(of) as usize]).collect()
    };
    let base64 = (0..n)
        .map(|_| EntityKey::new(word(0, 64, 22), "r"))
        .collect();
    let ulid = (0..n)
        .map(|i| {
            EntityKey::new(
                format!("01J{:010X}{}", 1_700_000_000 + i * 37, word(0, 26, 10)),
                "r",
            )
        })
        .collect();
    let mut next = below(98);
    let domains = ["gmail", "outlook", "contoso", "yahoo"];
    let emails = (0..n)
        .map(|_| {
            let name: String = (0..3 + next(8))
                .map(|_| b64[26 + next(26) as usize])
                .collect();
            let at = format!("{name}{}@{}.com", next(100), domains[next(4) as usize]);
            EntityKey::new("users", at)
        })
        .collect();
    let ticks = (0..n)
        .map(|i| {
            EntityKey::new(
                "log",
                format!("{:019}", 2_519_000_000_000_000_000 - i * 9_876_543_211),
            )
        })
        .collect();
    let hex = (0..n)
        .map(|i| {
            EntityKey::new(
                "p",
                format!("{:016X}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            )
        })
        .collect();
    let numbers = (0..n)
        .map(|i| EntityKey::new(format!("{}", i / 10), format!("{i}")))
        .collect();
    // ULID-like keys hold hex digits where the bounds of a remainder show only decimal
    // ones, and letters past `f` further on: cut by the bounds alone, the places were
    // decimal while the density was read in hex, and the largest task came out at 3.01
    // times the mean, until cuts counted the characters of the key the read began at
    // (`cuts_count_the_characters_of_the_key_the_read_began_at`). Dates, which had the
    // same fault, are read in time ([`time_shapes`]). Unpadded numbers lie ten times as
    // densely under `1` as under `5`; the last page read measures what the whole read
    // cannot (`the_last_page_measures_a_rest_the_whole_read_finds_too_small_beside_a_waiting_task`).
    vec![
        ("base64 ids", Sorted::new(base64), 2.0),
        ("e-mail RowKeys", Sorted::new(emails), 2.0),
        ("reverse-tick RowKeys", Sorted::new(ticks), 2.0),
        ("upper-case hex RowKeys", Sorted::new(hex), 2.0),
        ("ULID-like ids", Sorted::new(ulid), 2.0),
        ("unpadded numbers", Sorted::new(numbers), 2.0),
        ("GUID RowKeys in customers", customer_guid_rows(n), 2.0),
    ]
}

/// About `n` entities of customers with GUID RowKeys: most partitions 1-20 entities,
/// one in ten 100-5,000 (the benchmark's `guid-rows` shape).
fn customer_guid_rows(n: u64) -> Sorted {
    let mut rows = Vec::new();
    for p in 0.. {
        let size = if p % 10 == 9 {
            100 + (p * 7_919) % 4_901
        } else {
            1 + (p * 31) % 20
        };
        for _ in 0..size {
            let g = guid(rows.len() as u64);
            let rk = format!(
                "{}-{}-{}-{}-{}",
                &g[..8],
                &g[8..12],
                &g[12..16],
                &g[16..20],
                &g[20..]
            );
            rows.push(EntityKey::new(format!("customer-{p:05}"), rk));
        }
        if rows.len() as u64 >= n {
            break;
        }
    }
    rows.truncate(n as usize);
    Sorted::new(rows)
}

/// The date `d` days after 2026-01-01 and the time `s` seconds into it, as
/// `YYYY-MM-DD` and `HH:MM:SS`.
fn date_and_time(d: u64, s: u64) -> (String, String) {
    date_and_time_after((2026, 1, 1), d, s)
}

/// [`date_and_time`], `d` days after the date `(year, month, day)`.
fn date_and_time_after((y, m, day): (i64, i64, i64), d: u64, s: u64) -> (String, String) {
    let (y, m, day) = crate::civil::civil_from_days(
        crate::civil::days_from_civil(y, m, day) + (d + s / 86_400) as i64,
    );
    let s = s % 86_400;
    (
        format!("{y:04}-{m:02}-{day:02}"),
        format!("{:02}:{:02}:{:02}", s / 3_600, s / 60 % 60, s % 60),
    )
}

/// Dates and times as keys, `n` entities each: daily PartitionKeys (`2026-01-15`) of
/// 100, 250, 500 and 1,000 entities, written without separators (`20260115`), under a
/// prefix (`log-2026-01-15`), every 17th day, and with a number after the date
/// (`2026-01-15-0042`); hourly (`2026-01-15T10`, `2026011510`) and per-minute
/// (`2026-01-15 10:22`) PartitionKeys; two tenants of daily keys (`acme-`, `zeta-`);
/// ISO times as RowKeys in one partition, and in daily partitions of 28,800. Days
/// written as characters use 31 of a hundred values and months 12: before cuts read
/// dates in time ([`super::calendar`]), daily keys ended at 2.0 to 4.2 times the mean
/// task, hourly ones at 5.5.
fn time_shapes(n: u64) -> Vec<(&'static str, Sorted, f64)> {
    let keys = |f: &dyn Fn(u64) -> (String, String)| {
        Sorted::new(
            (0..n)
                .map(|i| {
                    let (pk, rk) = f(i);
                    EntityKey::new(pk, rk)
                })
                .collect(),
        )
    };
    let daily = |per: u64| keys(&|i| (date_and_time(i / per, 0).0, format!("{i:06}")));
    let hour = |i: u64, per: u64| date_and_time(0, i / per * 3_600);
    vec![
        ("dates, 100 a day", daily(100), 2.0),
        ("dates, 250 a day", daily(250), 2.0),
        ("dates, 500 a day", daily(500), 2.0),
        ("dates, 1,000 a day", daily(1_000), 2.0),
        (
            "dates without separators",
            keys(&|i| {
                (
                    date_and_time(i / 500, 0).0.replace('-', ""),
                    format!("{i:06}"),
                )
            }),
            2.0,
        ),
        (
            "dates under a prefix",
            keys(&|i| {
                (
                    format!("log-{}", date_and_time(i / 300, 0).0),
                    format!("{i:06}"),
                )
            }),
            2.0,
        ),
        (
            "every 17th day",
            keys(&|i| (date_and_time(i / 50 * 17, 0).0, format!("{i:06}"))),
            2.0,
        ),
        (
            "dates, then a number",
            keys(&|i| {
                let pk = format!("{}-{:04}", date_and_time(i / 5_000, 0).0, i % 5_000 / 10);
                (pk, format!("{i:06}"))
            }),
            2.0,
        ),
        (
            "hours",
            keys(&|i| {
                let (d, t) = hour(i, 200);
                (format!("{d}T{}", &t[..2]), format!("{i:06}"))
            }),
            2.0,
        ),
        (
            "hours without separators",
            keys(&|i| {
                let (d, t) = hour(i, 100);
                (
                    format!("{}{}", d.replace('-', ""), &t[..2]),
                    format!("{i:06}"),
                )
            }),
            2.0,
        ),
        (
            "minutes",
            keys(&|i| {
                let (d, t) = date_and_time(0, i / 40 * 60);
                (format!("{d} {}", &t[..5]), format!("{i:06}"))
            }),
            2.0,
        ),
        (
            "tenants of dates",
            keys(&|i| match i < n * 9 / 10 {
                true => (
                    format!("acme-{}", date_and_time(i / 450, 0).0),
                    format!("{i:06}"),
                ),
                false => {
                    let day = (i - n * 9 / 10) / 50;
                    (
                        format!("zeta-{}", date_and_time(day, 0).0),
                        format!("{i:06}"),
                    )
                }
            }),
            2.0,
        ),
        (
            "ISO times, one partition",
            keys(&|i| {
                let (d, t) = date_and_time(0, 1_000_000 + i * 7);
                ("events".to_string(), format!("{d}T{t}.000Z-{i}"))
            }),
            2.0,
        ),
        // A large partition with others after it: before a read of the partition it
        // is still in stopped measuring the partitions after it, the task above the
        // first one's pieces read the rest of it and far into the next (2.64, 71
        // probes; 3.43 before cuts read dates in time).
        (
            "ISO times, daily partitions",
            keys(&|i| {
                let (d, t) = date_and_time(0, i * 3);
                (d.clone(), format!("{d}T{t}Z"))
            }),
            2.0,
        ),
    ]
}

/// Regression: a density carried far is checked by a sample of the middle piece, and
/// where the two disagree by more than twice the estimate comes to within twice the
/// sample's. Two partitions of 1,000 entities, then 10,000 of one each: read from the
/// first two, the rest measured 5 million entities, and pieces of 300,000 each went to
/// the queue, where every other task weighed its own splits against them and none
/// split (in the split model, falling partition sizes gave a task of 31% of a table;
/// now 11%).
#[test]
fn a_density_carried_far_is_checked_by_a_sample() {
    let mut keys: Vec<EntityKey> = (0..2_000)
        .map(|i| EntityKey::new(format!("cust-{:06}", i / 1_000), format!("{i:05}")))
        .collect();
    keys.extend((2..10_002).map(|p| EntityKey::new(format!("cust-{p:06}"), "00000")));
    let t = Sorted::new(keys);
    let read = ReadSoFar {
        largest_partition: 1_000,
        ..plain_read(&t.0[0], 2_000)
    };
    let split = |probe: &dyn KeyProbe| {
        let s = unbounded_split(probe, &t.0[1_999], Some(&t.0[2_000]), read).expect("a split");
        s.estimate.expect("an estimate") * (1 + s.pieces.len() as u64)
    };
    let unsampled = split(&Unsampled(&t));
    let sampled = split(&t);
    assert!(unsampled > 1_000_000, "before: {unsampled}");
    assert!(
        (2_500..=40_000).contains(&sampled),
        "10,000 left, estimated {sampled} (unsampled {unsampled})"
    );
}

/// What a sample says of a remainder, against the read's estimate of it: where it does
/// not hold every key up to the bound, the density it lies at, to which the read's
/// estimate is brought within twice where they disagree more; where it does, its keys
/// counted and the read's estimate for the part below its first key, or, where they
/// are under half what the read puts above it, that the keys read are a cluster.
#[test]
fn a_sample_measures_the_remainder_by_how_densely_its_keys_lie() {
    let values = |from: u32, n: u32| -> Vec<String> {
        (from..from + n).map(|p| format!("cust-{p:05}")).collect()
    };
    let says = |read: f64, values: &[String], complete: bool| {
        sampled("cust-00100", "cust-10000", read, values, complete)
    };
    let rest = |says: Sampled| match says {
        Sampled::Rest(r) => r,
        other => panic!("{other:?}"),
    };
    // One key a step, 9,900 left. Each place of the character space can also hold no
    // character, one value more than the digits it holds, so the sample reads a fifth
    // too dense: 12,118.
    let middle = values(5_000, 1_000);
    assert_eq!(
        says(10_000.0, &middle, false),
        Sampled::Agrees,
        "within twice"
    );
    let brought = rest(says(1_000_000.0, &middle, false));
    assert!((20_000.0..25_000.0).contains(&brought), "{brought}");
    let raised = rest(says(100.0, &middle, false));
    assert!((5_000.0..6_500.0).contains(&raised), "{raised}");
    // The last 1,000 keys, every one: at least those are left.
    let last = values(9_000, 1_000);
    let counted = rest(says(100.0, &last, true));
    assert!((1_000.0..1_100.0).contains(&counted), "{counted}");
    // A read that puts 180,000 above them: the keys read are a cluster.
    assert_eq!(says(1_000_000.0, &last, true), Sampled::Sparse);
    // Where the read puts about as many above them, they say nothing of the rest.
    assert_eq!(says(10_000.0, &last, true), Sampled::Agrees);
    // Keys that differ only past the places read lie too close to measure.
    let close: Vec<String> = (0..10).map(|i| format!("cust-0500000{i}")).collect();
    assert_eq!(says(1_000_000.0, &close, false), Sampled::Agrees);
}

/// A table shape drawn at random from `seed`, for
/// [`four_workers_share_random_shapes`], named by what was drawn: 20,000 or 50,000
/// entities; PartitionKeys (`pk`) of one of nine formats: 0 `cust-` and a number padded
/// to 5-10 digits, 1 unpadded numbers, 2 GUIDs, 3 upper-case hex, 4 words of 3-10
/// random letters, 5 days from 2020-01-01, 6 two to five tenants taking turns at
/// numbered partitions (`tenant3-000042`), 7 one partition, 8 ULIDs (Crockford's
/// base 32, time rising 1-5,000 ms a partition); partition sizes (`size`) of one of
/// four laws: 0 all `per`, 1 uniform up to twice `per`, 2 falling with the key (the
/// first a twentieth of the table, then a share in inverse proportion to its place,
/// one entity at least), 3 mostly 1-20 with one in ten of up to 5,000; RowKeys (`rk`)
/// padded numbers, GUIDs or unpadded numbers; numbers from `start`.
fn random_shape(seed: u64) -> (String, Sorted) {
    let mut next = below(10_000 + seed);
    let n = [20_000u64, 50_000][next(2) as usize];
    let pk_kind = next(9);
    let size_kind = next(4);
    let rk_kind = next(3);
    let tenants = 2 + next(4);
    let start = [0u64, 1, 1000, 12345, 500_000][next(5) as usize];
    let width = 5 + next(6) as usize;
    let per = [1u64, 10, 100, 1000][next(4) as usize];
    let crockford: Vec<char> = "0123456789ABCDEFGHJKMNPQRSTVWXYZ".chars().collect();
    let mut keys = Vec::new();
    let (mut p, mut i, mut clock) = (0u64, 0u64, 1_700_000_000_000u64);
    while (keys.len() as u64) < n {
        let size = match size_kind {
            0 => per,
            1 => 1 + next(2 * per),
            2 => (n as f64 / 20.0 / (1 + p) as f64).ceil() as u64,
            _ if next(10) == 0 => 1 + next(5_000),
            _ => 1 + next(20),
        };
        let pk = match pk_kind {
            0 => format!("cust-{:0width$}", start + p),
            1 => format!("{}", start + p),
            2 => guid(seed * 1_000_000 + p),
            3 => format!(
                "{:016X}",
                (seed * 1_000_000 + p).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ),
            4 => (0..3 + next(8))
                .map(|_| char::from(b'a' + next(26) as u8))
                .collect(),
            5 => {
                let (y, m, d) = crate::civil::civil_from_days(
                    crate::civil::days_from_civil(2020, 1, 1) + p as i64,
                );
                format!("{y:04}-{m:02}-{d:02}")
            }
            6 => format!("tenant{}-{p:06}", next(tenants)),
            7 => "only".to_string(),
            _ => {
                clock += 1 + next(5_000);
                let time: String = (0..10)
                    .rev()
                    .map(|place| crockford[((clock >> (5 * place)) & 31) as usize])
                    .collect();
                let random: String = (0..16).map(|_| crockford[next(32) as usize]).collect();
                format!("{time}{random}")
            }
        };
        for _ in 0..size {
            let rk = match rk_kind {
                0 => format!("{i:010}"),
                1 => guid(i + 7),
                _ => format!("{i}"),
            };
            keys.push(EntityKey::new(pk.clone(), rk));
            i += 1;
        }
        p += 1;
    }
    keys.truncate(n as usize);
    let name = format!(
        "seed {seed}: {n} entities, pk {pk_kind}, size {size_kind} (per {per}), rk {rk_kind}, from {start}"
    );
    (name, Sorted::new(keys))
}

/// Backups of table shapes drawn at random ([`random_shape`]), modelled with and
/// without samples (`TABLEVAULT_SPLIT_MODEL_SHAPES` of them, 40 unless set; the README
/// gives 200's figures). Every backup's tasks tile its table. Against the same shapes
/// split without samples, sampling where a density is carried far leaves no more
/// tasks over a quarter of their table and a mean largest / mean task no larger: its
/// estimates, carried in the queue and weighed against by other tasks' splits, were
/// off by up to a thousand times where the density near a remainder's start did not
/// hold in its middle. Each shape's line is printed with `--nocapture` (`SHAPE`).
#[test]
fn four_workers_share_random_shapes() {
    let shapes: u64 = std::env::var("TABLEVAULT_SPLIT_MODEL_SHAPES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    // One shape alone, to trace it (with `SPLIT_TRACE`).
    let only: Option<u64> = std::env::var("TABLEVAULT_SPLIT_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    // Per shape, sampled and then not: largest over mean, largest share of the table,
    // probes.
    let mut outcomes: Vec<[(f64, f64, usize); 2]> = Vec::new();
    let (mut tasks, mut empty) = (0, 0);
    for seed in only.map_or(0..shapes, |s| s..s + 1) {
        let (name, t) = random_shape(seed);
        let mut outcome = [(0.0, 0.0, 0); 2];
        let sampled = backup_model_probing(&t, 4, &CountingProbe::new(&t));
        let unsampled = backup_model_probing(&t, 4, &CountingProbe::new(Unsampled(&t)));
        let sampled_tasks = sampled.tasks.len();
        let sampled_empty = sampled.tasks.iter().filter(|&&n| n == 0).count();
        (tasks, empty) = (tasks + sampled_tasks, empty + sampled_empty);
        for (k, m) in [sampled, unsampled].into_iter().enumerate() {
            let total: usize = m.tasks.iter().sum();
            assert_eq!(total, t.0.len(), "{name}: every key read once");
            let largest = *m.tasks.iter().max().unwrap();
            outcome[k] = (
                (largest * m.tasks.len()) as f64 / total as f64,
                largest as f64 / total as f64,
                m.probes,
            );
        }
        let [(over, share, probes), (was_over, was_share, was_probes)] = outcome;
        eprintln!(
            "SHAPE {name}: largest / mean {over:.2} (unsampled {was_over:.2}), share {share:.2} \
             ({was_share:.2}), probes {probes} ({was_probes}), tasks {sampled_tasks} \
             ({sampled_empty} empty)"
        );
        outcomes.push(outcome);
    }
    let count = |k: usize, f: &dyn Fn(&(f64, f64, usize)) -> bool| {
        outcomes.iter().filter(|o| f(&o[k])).count()
    };
    let mean_of = |k: usize, f: &dyn Fn(&(f64, f64, usize)) -> f64| {
        outcomes.iter().map(|o| f(&o[k])).sum::<f64>() / outcomes.len() as f64
    };
    let mean = |k: usize| mean_of(k, &|o| o.0);
    let over_quarter = |k| count(k, &|o| o.1 > 0.25);
    eprintln!(
        "SHAPES {shapes}: largest over twice the mean {} (unsampled {}), over a quarter {} ({}), \
         mean largest / mean {:.2} ({:.2}), most probes {} ({}), mean probes {:.1} ({:.1}), \
         {empty} of {tasks} tasks empty",
        count(0, &|o| o.0 > 2.0),
        count(1, &|o| o.0 > 2.0),
        over_quarter(0),
        over_quarter(1),
        mean(0),
        mean(1),
        outcomes.iter().map(|o| o[0].2).max().unwrap_or(0),
        outcomes.iter().map(|o| o[1].2).max().unwrap_or(0),
        mean_of(0, &|o| o.2 as f64),
        mean_of(1, &|o| o.2 as f64),
    );
    assert!(over_quarter(0) <= over_quarter(1));
    assert!(mean(0) <= mean(1));
}

/// Backups of tables dumped as `PartitionKey<TAB>RowKey` lines to the file named by
/// `TABLEVAULT_SPLIT_MODEL_FILE` (or to each file in the directory it names), modelled
/// by four workers ([`backup_model`]), with their tasks and probes printed: to replay in
/// the model a table a soak or a user met (with `SPLIT_TRACE` for each split). Ignored:
/// it has no table of its own.
#[test]
#[ignore = "models the tables dumped to TABLEVAULT_SPLIT_MODEL_FILE"]
fn four_workers_share_dumped_tables() {
    let path = std::path::PathBuf::from(
        std::env::var("TABLEVAULT_SPLIT_MODEL_FILE")
            .expect("TABLEVAULT_SPLIT_MODEL_FILE names a file of PartitionKey<TAB>RowKey lines"),
    );
    let mut files = match std::fs::read_dir(&path) {
        Ok(dir) => dir
            .map(|e| e.expect("the directory lists").path())
            .collect(),
        Err(_) => vec![path],
    };
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("the dumped table reads");
        let t = Sorted::new(
            text.lines()
                .filter_map(|l| l.split_once('\t'))
                .map(|(pk, rk)| EntityKey::new(pk, rk))
                .collect(),
        );
        let (tasks, probes) = backup_model(&t, 4);
        let total: usize = tasks.iter().sum();
        assert_eq!(total, t.0.len(), "{}: every key read once", file.display());
        let largest = *tasks.iter().max().unwrap_or(&0);
        eprintln!(
            "DUMPED {}: {total} entities, {} tasks, largest {largest} ({:.2} of the table, \
             {:.2} times the mean), probes {probes}",
            file.display(),
            tasks.len(),
            largest as f64 / total.max(1) as f64,
            (largest * tasks.len()) as f64 / total.max(1) as f64,
        );
    }
}

/// The tasks a backup of `t` by four workers ends with ([`backup_model`]), checked to
/// read every key once, and the largest.
fn modelled_tasks(t: &Sorted) -> (Vec<usize>, usize) {
    let (tasks, _) = backup_model(t, 4);
    assert_eq!(
        tasks.iter().sum::<usize>(),
        t.0.len(),
        "every key read once"
    );
    let largest = *tasks.iter().max().unwrap_or(&0);
    (tasks, largest)
}

/// Regression: tenants whose partitions interleave (`tenant2-000001`, `tenant0-000002`,
/// …: a tenant's id, then a sequence shared by all), ten entities each. A task of
/// `tenant0-000659` up to an end of `tenant2-` read 2,000 entities of tenant 0, whose
/// keys stop at `tenant0-004999`, and fanned the remainder out by their density over
/// the whole of `tenant0-` and `tenant1-`. The check of the middle piece found tenant
/// 1's keys there; the pieces just above the part kept were empty, ten of 22 tasks
/// were, and one read 9,850 of the 50,000 entities, 4.3 times the mean (the random
/// shapes' seed 12). The first piece is now asked too: 17 tasks, the largest 3,740
/// (1.27 times the mean).
#[test]
fn interleaved_tenants_are_cut_inside_the_tenant_read() {
    let mut next = below(12);
    let mut keys = Vec::new();
    let mut p = 0;
    while keys.len() < 50_000 {
        let pk = format!("tenant{}-{p:06}", next(4));
        keys.extend((0..10).map(|r| EntityKey::new(pk.clone(), format!("{}", p * 10 + r))));
        p += 1;
    }
    let t = Sorted::new(keys);
    let (tasks, largest) = modelled_tasks(&t);
    let total = t.0.len();
    assert!(
        largest * tasks.len() <= 2 * total,
        "a task read {largest} of {total}, over twice the mean ({tasks:?})"
    );
}

/// Regression: keys of every script, read in key order up to the astral characters.
/// The first task read 1,000 ASCII keys; above them lay astral ones, then private-use
/// and full-width ones, up to U+FFxx. Its search for a ceiling gave up where its climb
/// from U+D800 stepped past the top of its alphabet, the density read in ASCII carries
/// over to nothing above it, and the rest was halved by value up to the top of the key
/// space: at U+F000, with only the full-width keys above (the split soak's seed 498 on
/// Azurite: one task of 2,588 of 2,975; here 2,340 of 2,620). A sample from such a cut
/// that holds every key above it, under a page, now halves it lower: 1,520 and 1,100.
#[test]
fn a_cut_with_no_bound_that_leaves_a_sliver_is_halved_lower() {
    let mut keys = Vec::new();
    let mut partition = |pk: String, n: usize| {
        keys.extend((0..n).map(|r| EntityKey::new(pk.clone(), format!("{r:03}"))));
    };
    for c in 'a'..='j' {
        partition(c.to_string(), 100);
    }
    for c in ['\u{10000}', '\u{10400}', '\u{1F600}', '\u{1F64F}'] {
        for tail in ['a', 'k', 'z'] {
            partition(format!("{c}{tail}"), 100);
        }
    }
    for c in [
        '\u{E001}', '\u{E00A}', '\u{FF0A}', '\u{FF21}', '\u{FF41}', '\u{FFDE}',
    ] {
        partition(c.to_string(), 70);
    }
    let t = Sorted::new(keys);
    let (tasks, largest) = modelled_tasks(&t);
    let total = t.0.len();
    assert!(
        largest * 3 <= total * 2,
        "a task read {largest} of {total} ({tasks:?})"
    );
}

/// Regression: hourly PartitionKeys (`2028-12-05T04`) over a month, a few keys of the
/// impossible month 13 last. The table's ceiling, `2028-14`, lay past the calendar, so
/// the remainder was read in characters: cuts fell on days no month has
/// (`2028-12-68`, `2028-12-09WM`), fourteen pieces were empty, and one task read 96% of
/// the table (the split soak's seed 52 on Azurite; 5,821 of 6,073 in this model).
#[test]
fn a_ceiling_past_the_months_splits_dates_by_time() {
    let mut next = below(52);
    let mut keys = Vec::new();
    let first = crate::civil::days_from_civil(2028, 11, 30) * 24;
    let mut hour = 0;
    while keys.len() < 6_000 {
        let (y, m, d) = crate::civil::civil_from_days((first + hour).div_euclid(24));
        let pk = format!("{y:04}-{m:02}-{d:02}T{:02}", (first + hour).rem_euclid(24));
        for r in 0..1 + next(150) {
            keys.push(EntityKey::new(pk.clone(), format!("{r:04}")));
        }
        hour += 1 + next(5) as i64;
    }
    keys.extend((0..15).map(|r| EntityKey::new("2028-13-01T03", format!("{r:04}"))));
    let t = Sorted::new(keys);
    let (tasks, largest) = modelled_tasks(&t);
    let total = t.0.len();
    assert!(
        largest * 2 <= total,
        "a task read {largest} of {total} ({tasks:?})"
    );
}

/// Regression: a read that leaves a large partition out of its density says nothing of
/// the large partitions after it. Partitions of 10, one of 3,000 among them, then more
/// of 10 and, further on, two of 5,000: read up to the thirteenth, the density of the
/// small ones measured a few hundred entities left where 10,000 were, and the task kept
/// them all (in the split model's random shapes, tasks of up to 42% of a table). A
/// sample of the remainder now checks it: this one ends inside partition 50, which
/// holds most of it, so the cut goes at that partition's start and the large
/// partitions go to a task that measures them as it reads.
#[test]
fn a_remainder_measured_without_a_large_partition_is_checked_by_a_sample() {
    let pk = |p: usize| format!("cust-{p:06}");
    let mut keys = Vec::new();
    for p in 0..100 {
        let size = match p {
            10 => 3_000,
            50 | 80 => 5_000,
            _ => 10,
        };
        keys.extend((0..size).map(|r| EntityKey::new(pk(p), format!("{r:05}"))));
    }
    let t = Sorted::new(keys);
    // Read: partitions 0-12, the large one among them.
    let read_to = t.0.iter().position(|k| k.pk == pk(13)).unwrap();
    let read = ReadSoFar {
        largest_partition: 3_000,
        ..plain_read(&t.0[0], read_to as u64)
    };
    let split =
        |probe: &dyn KeyProbe| unbounded_split(probe, &t.0[read_to - 1], Some(&t.0[read_to]), read);
    assert!(split(&Unsampled(&t)).is_none(), "unsampled: no cut");
    let s = split(&t).expect("a cut");
    assert_eq!(s.at, EntityKey::partition_start(pk(50)), "{s:?}");
    assert_eq!(s.estimate, None, "the large partition's size is not known");
}

/// Regression: a sample of the remainder that ends in a partition holding most of it
/// measured the remainder by the few small partitions before that one, too small to
/// split, and one task read on through four large partitions (in the split model's
/// random shapes, 56% of a table of 20,000). The cut now goes at that partition's
/// start; a sample that ends in small partitions, or in the first one, measures as
/// before.
#[test]
fn a_sample_ending_in_a_large_partition_cuts_at_its_start() {
    let values = |runs: &[(&str, usize)]| -> Vec<String> {
        runs.iter()
            .flat_map(|&(v, n)| std::iter::repeat_n(v.to_string(), n))
            .collect()
    };
    let ending_large = values(&[("b", 10), ("c", 10), ("d", 980)]);
    assert_eq!(
        super::large_partition_sampled("b", &ending_large).as_deref(),
        Some("d")
    );
    let small_ones = values(&[("b", 400), ("c", 200), ("d", 400)]);
    assert_eq!(super::large_partition_sampled("b", &small_ones), None);
    let first_large = values(&[("b", 1000)]);
    assert_eq!(super::large_partition_sampled("b", &first_large), None);
}

/// `a` entities in partition "a", `b` in "b", then `cs` in partitions "c00", "c01", …
/// of `per_c` each; RowKeys numbered from 0 in each part.
fn a_b_then_cs(a: u32, b: u32, cs: u32, per_c: u32) -> Sorted {
    Sorted::new(
        (0..a)
            .map(|i| EntityKey::new("a", format!("{i:05}")))
            .chain((0..b).map(|i| EntityKey::new("b", format!("{i:05}"))))
            .chain((0..cs).map(|i| EntityKey::new(format!("c{:02}", i / per_c), format!("{i:05}"))))
            .collect(),
    )
}

/// Regression: a partition of 4,005 among small ones, entered at its 227th entity, was
/// cut inside only once 1,250 of it were read (`LARGE_PARTITION_READ`). At 1,227 read,
/// with the page read ahead still in it, the cut was sought after it, where the
/// partitions left held too few to split, and the task read the rest alone: 39% of a
/// table of 20,000 (the split model's random shape 97). A partition entered from an
/// earlier one with a page ahead in it is cut inside from 250 read
/// (`INSIDE_PARTITION_READ`).
#[test]
fn a_partition_entered_with_a_page_ahead_in_it_is_cut_inside() {
    // "a" holds 1,000 entities, "b" 4,005, then 900 in nine small partitions.
    let t = a_b_then_cs(1_000, 4_005, 900, 100);
    let split_after = |read_of_b: u64| {
        let after = EntityKey::new("b", format!("{:05}", read_of_b - 1));
        let read = ReadSoFar {
            first: &t.0[0],
            entities: 1_000 + read_of_b,
            partition: Some(PartitionRead {
                first_rk: "00000",
                entities: read_of_b,
                continues: true,
                more: true,
                next_rk: None,
            }),
            largest_partition: read_of_b.max(1_000),
            last_page: None,
            recent_pages: None,
            planned: false,
        };
        run(find_split(
            &t,
            &after,
            None,
            None,
            None,
            Some(read),
            None,
            true,
        ))
        .unwrap()
        .map(|s| (after, s))
    };
    for read_of_b in [250, 1_227] {
        let (after, s) = split_after(read_of_b).expect("a cut inside b");
        assert_eq!(s.at.pk, "b", "{read_of_b} read: {s:?}");
        assert!(s.at > after, "{s:?}");
    }
    // Under that, it is not known to be large.
    assert!(split_after(200).is_none_or(|(_, s)| s.at.pk != "b"));
}

/// Regression: a task inside a large partition measured its remainder by the rest of
/// that partition alone, and where that was too small to split it read on through
/// the partitions after it, which the upper part of a cut inside would have kept
/// too, never measured (in the split model's random shapes, a task read the rest of
/// one large partition and three more of thousands each). A sample from the next
/// partition now sends them to a task of their own when it finds a split's worth.
#[test]
fn partitions_after_a_large_one_go_to_a_task_of_their_own() {
    // "b" holds 2,100 entities, 2,000 of them read; 5,000 in partitions after it.
    let t = a_b_then_cs(100, 2_100, 5_000, 1_000);
    let after = EntityKey::new("b", "01999");
    let split_with = |probe: &dyn KeyProbe| {
        unbounded_split(probe, &after, None, read_100_of_a_and_2000_of_b(&t, true))
    };
    let s = split_with(&t).expect("a cut");
    assert_eq!(s.at, EntityKey::partition_start("c00"), "{s:?}");
    // Without a sample, no cut: the rest of "b" alone is too small.
    assert!(split_with(&Unsampled(&t)).is_none());
}

/// Regression: a density falling across the read is checked by a sample. Partition
/// sizes falling with the key (2,000 / place): read over the first thirty, the whole
/// read's density put about 45,000 entities in the 3,800 left, and the pieces cut to
/// that estimate went to the queue nearly empty, where other tasks weighed their own
/// splits against them (in the split model's random shapes, falling sizes under dates
/// gave a task of 26% of a table beside eleven of 200-500 entities). The last page,
/// three times sparser than the read, says the density is not holding; a sample now
/// measures the remainder.
#[test]
fn a_density_falling_across_the_read_is_checked_by_a_sample() {
    let pk = |p: u64| format!("cust-{p:06}");
    let keys: Vec<EntityKey> = (0..200u64)
        .flat_map(|p| {
            (0..2_000u64.div_ceil(p + 1)).map(move |r| EntityKey::new(pk(p), format!("{r:05}")))
        })
        .collect();
    let t = Sorted::new(keys);
    let read_to = t.0.iter().position(|k| k.pk == pk(30)).unwrap();
    let page_from = read_to - 1_000;
    let page_largest = t.0[page_from..read_to]
        .chunk_by(|a, b| a.pk == b.pk)
        .map(|run| run.len() as u64)
        .max()
        .unwrap();
    let read = ReadSoFar {
        largest_partition: 2_000,
        last_page: Some(PageRead {
            first: &t.0[page_from],
            entities: 1_000,
            largest_partition: page_largest,
        }),
        ..plain_read(&t.0[0], read_to as u64)
    };
    let left = (t.0.len() - read_to) as u64;
    let s = unbounded_split(&t, &t.0[read_to - 1], Some(&t.0[read_to]), read).expect("a cut");
    let estimated = s.estimate.expect("an estimate") * (1 + s.pieces.len() as u64);
    assert!(
        estimated <= 3 * left,
        "{left} left, the upper parts estimated at {estimated} ({s:?})"
    );
}

/// Regression (twelfth audit): a dense cluster of partitions of 1,000 each, among
/// sparse keys around it (25,000 entities under `m000100b00`-`m000100b24`, about 900
/// under `m000000`-`m001199`). Each page held one partition, so no page measured a
/// density across partitions; the whole read's spread the cluster over the sparse
/// keys, pieces cut by value fell above it, and one task read 25,149 of 25,900. The
/// last pages together measure it ([`PageWindow`]), and a gap found above the cluster
/// narrows the bound again ([`MAX_NARROWINGS`]): 12,135.
#[test]
fn a_cluster_of_partitions_among_sparse_keys_is_shared() {
    let mut keys = Vec::new();
    for j in (0..1200u64).step_by(3) {
        keys.push(EntityKey::new(format!("m{j:06}"), format!("x{j}")));
    }
    for j in 0..500u64 {
        keys.push(EntityKey::new(format!("m{j:06}a"), format!("gap{j}")));
    }
    for j in 0..25_000u64 {
        keys.push(EntityKey::new(
            format!("m000100b{:02}", j / 1000),
            format!("{j:06}"),
        ));
    }
    let t = Sorted::new(keys);
    let (tasks, probes) = backup_model(&t, 4);
    let total: usize = tasks.iter().sum();
    let largest = *tasks.iter().max().unwrap();
    assert_eq!(total, t.0.len());
    assert!(
        largest * 5 < total * 3,
        "a task read {largest} of {total} ({probes} probes): {tasks:?}"
    );
}

/// Keys written in one ASCII class fill it, and the ceiling above them is asked at the
/// class's ceiling and top unit: GUID RowKeys (hex, lower or upper case), ULIDs
/// (Crockford's base 32: digits and upper case), base64 (both cases and digits) and
/// lower-case words. Doubling the steps up from the unit where keys vary, a partition
/// of GUID RowKeys cost 12 probes to learn `g` (13 for each cut inside such a
/// partition, counting the probe for the next row; a first backup of 50,000 entities
/// in partitions of them sent 274 queries on the emulator, and ran no faster than a
/// plain export); 10-12 for each class here, three now. Every ceiling found lies
/// just above the keys: the unit after the highest one where they vary.
#[test]
fn a_ceiling_above_keys_of_one_class_costs_a_few_probes() {
    let mut next = below(4242);
    let mut word = |alphabet: &[u8], len: usize| -> String {
        (0..len)
            .map(|_| char::from(alphabet[next(alphabet.len() as u64) as usize]))
            .collect()
    };
    let hex_lower = b"0123456789abcdef";
    let hex_upper = b"0123456789ABCDEF";
    let crockford = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let base64: Vec<u8> = (b'A'..=b'Z')
        .chain(b'a'..=b'z')
        .chain(b'0'..=b'9')
        .chain(*b"-_")
        .collect();
    let lower: Vec<u8> = (b'a'..=b'z').collect();
    for (name, alphabet, was) in [
        ("GUIDs", &hex_lower[..], 12),
        ("upper-case GUIDs", &hex_upper[..], 10),
        ("ULIDs", &crockford[..], 10),
        ("base64url", &base64[..], 12),
        ("lower-case words", &lower[..], 10),
    ] {
        let t = Sorted::new(
            (0..3_000)
                .map(|_| EntityKey::new("p", word(alphabet, 20)))
                .collect(),
        );
        // From a key a third of the way in, as a split inside the partition starts.
        let lo = t.0[1_000].rk.clone();
        let (found, sent) = row_ceiling(&t, &lo, &|_| false);
        let found = found.unwrap_or_else(|| panic!("{name}: no ceiling"));
        let top = t.0.iter().map(|k| k.rk.as_str()).max().unwrap();
        assert!(found.as_str() > top, "{name}: {found} is not above {top}");
        let top_unit = u32::from(top.as_bytes()[0]);
        let found_unit = found.chars().next().map(u32::from).unwrap();
        assert!(
            found.chars().count() == 1 && found_unit == top_unit + 1,
            "{name}: {found} is not the unit above {top}"
        );
        assert!(
            sent <= 3,
            "{name}: {sent} probes to find {found} (doubling the steps sent {was})"
        );
    }
}

/// Regression: a cut inside a partition of GUID RowKeys. It starts from the RowKey the
/// page read ahead holds, without a probe for it, and finds the ceiling above the
/// partition's keys in two probes (the keys read of the partition vary at the first
/// unit already, so the class ceilings are asked at once), where it sent 13; the cut
/// is where it was.
#[test]
fn a_cut_inside_a_partition_of_guid_row_keys_costs_two_probes() {
    let mut keys: Vec<EntityKey> = (0..5_000).map(|i| EntityKey::new("m", guid(i))).collect();
    keys.extend((0..300).map(|i| EntityKey::new(format!("a{i:03}"), guid(100_000 + i))));
    keys.extend((0..300).map(|i| EntityKey::new(format!("z{i:03}"), guid(200_000 + i))));
    let t = Sorted::new(keys);
    let first = t.0.iter().position(|k| k.pk == "m").unwrap();
    let at = first + 2_000;
    let after = &t.0[at - 1];
    let ahead = &t.0[at..at + 1_000];
    let read = ReadSoFar {
        first: &t.0[first - 100],
        entities: 2_100,
        partition: Some(PartitionRead {
            first_rk: &t.0[first].rk,
            entities: 2_000,
            continues: true,
            more: true,
            next_rk: Some(&ahead[0].rk),
        }),
        largest_partition: 2_000,
        last_page: None,
        recent_pages: None,
        planned: false,
    };
    let next = ahead.iter().find(|k| k.pk != after.pk);
    let split = unbounded_split(&t, after, next, read).expect("a cut");
    assert_eq!(split.at, EntityKey::new("m", "84fa"));
    assert_eq!(split.probes, 2, "{split:?}");
    // The page read ahead ending the partition tells it holds no more rows: no probe.
    let last = t.0.iter().rposition(|k| k.pk == "m").unwrap();
    let ended = ReadSoFar {
        partition: Some(PartitionRead {
            more: false,
            next_rk: None,
            continues: false,
            ..read.partition.unwrap()
        }),
        ..read
    };
    let none = run(find_split(
        &t,
        &t.0[last],
        Some(&t.0[last + 1]),
        Some(&t.0[last + 1]),
        None,
        Some(ended),
        None,
        true,
    ))
    .unwrap();
    assert!(none.is_none(), "{none:?}");
}

/// Regression: a ceiling `{` above base64 keys read only as far as `1` counts the
/// lower-case letters below it. Counted as `Z`, the ceiling class's letters were no
/// place of the space, and a first backup's top piece held a third of the table (in
/// the split model, once ceilings were found at `{`: largest / mean 2.08).
#[test]
fn a_ceiling_above_lower_case_keys_counts_their_letters() {
    let read = ["0FRBp7txVMrM1cZHAXQSqF"];
    let at = scale::point_below("2", "{", 0.75, &read).unwrap();
    assert!(
        at.as_str() > "a",
        "three quarters of the way to `{{` is {at}"
    );
    let at = scale::point_below("2", "[", 0.75, &read).unwrap();
    assert!(at.as_str() > "G" && at.as_str() < "[", "{at}");
}

/// A ceiling above keys that share a long prefix (`customer-NNNNN`, 500 entities each,
/// the first page read spanning `customer-00000` and `…01`). Keys mostly vary a place
/// or two before where the keys read differ from the next one, so the search for that
/// place starts there: two probes after the first, where bisecting the whole length
/// cost four (eight in all, where it cost twelve). Where keys fill all ten digits there, `:` is asked where doubling would
/// step past it: two probes above `8`, where it cost four. The ceiling is the same.
#[test]
fn a_ceiling_above_keys_of_a_long_prefix_starts_where_the_keys_read_vary() {
    let t = sequential(50_000);
    let mut p = probe::Prober::new(&t);
    let dim = probe::Dimension::Partitions { end: None };
    let found = run(probe::find_ceiling_until(
        &mut p,
        &dim,
        "customer-00002",
        Some("customer-00000"),
        &|_| false,
    ))
    .unwrap();
    assert_eq!(found.as_deref(), Some("customer-000:"));
    assert!(p.sent <= 8, "{} probes (12 before)", p.sent);
    // Without keys read, the same ceiling, by bisection (two probes fewer than before,
    // above the digits).
    let mut p = probe::Prober::new(&t);
    let found = run(probe::find_ceiling(&mut p, &dim, "customer-00002")).unwrap();
    assert_eq!(found.as_deref(), Some("customer-000:"));
    assert!(p.sent <= 10, "{} probes (12 before)", p.sent);
}

/// Digits that fill few of a place (dates: months `01`-`12`) still climb by doubling;
/// the cap at `:` only applies where doubling would step past it.
#[test]
fn a_ceiling_above_dates_is_where_it_was() {
    let days: Vec<EntityKey> = (0..400u32)
        .map(|d| {
            let (y, rest) = (2026 + d / 360, d % 360);
            EntityKey::new(
                format!("{y}-{:02}-{:02}", rest / 30 + 1, rest % 30 + 1),
                "r",
            )
        })
        .collect();
    let t = Sorted::new(days);
    let dim = probe::Dimension::Partitions { end: None };
    for read_from in [None, Some("2026-01-01")] {
        let mut p = probe::Prober::new(&t);
        let found = run(probe::find_ceiling_until(
            &mut p,
            &dim,
            "2026-01-11",
            read_from,
            &|_| false,
        ))
        .unwrap();
        let found = found.expect("a ceiling");
        assert!(
            found.as_str() > "2027-02-10",
            "{found} is not above the keys"
        );
        assert!(found.as_str() <= "2028", "{found} is far above the keys");
        assert!(p.sent <= 8, "{read_from:?}: {} probes", p.sent);
    }
}
