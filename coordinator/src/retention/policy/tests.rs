use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

fn t(s: &str) -> i64 {
    parse_time(s).unwrap()
}

#[test]
fn calendar() {
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(
        days_from_civil(2026, 11, 22),
        t("2026-11-22T00:00:00Z") / 86_400
    );
    assert_eq!(
        format_time(t("2026-11-22T11:46:09Z")),
        "2026-11-22T11:46:09Z"
    );
    assert_eq!(t("2026-11-22T11:46:09.123Z"), t("2026-11-22T11:46:09Z"));
    assert_eq!(parse_time("2026-13-01T00:00:00Z"), None);
    assert_eq!(parse_time("yesterday"), None);
    let week = |s: &str| iso_week(t(s) / 86_400);
    assert_eq!(week("2026-11-22T00:00:00Z"), (2026, 47)); // a Sunday
    assert_eq!(week("2026-11-23T00:00:00Z"), (2026, 48)); // the Monday after
    assert_eq!(week("2021-01-03T00:00:00Z"), (2020, 53));
    assert_eq!(week("2024-12-30T00:00:00Z"), (2025, 1));
    assert_eq!(
        time_of_id("20261122T114600Z-1a2b3c4d"),
        Some(t("2026-11-22T11:46:00Z"))
    );
    assert_eq!(time_of_id("archive"), None);
    assert_eq!(time_of_id("2026112xT114600Z-1a2b3c4d"), None);
}

#[test]
fn spans() {
    let s: Span = "1y2m3d4h".parse().unwrap();
    assert_eq!(
        s,
        Span {
            years: 1,
            months: 2,
            days: 3,
            hours: 4
        }
    );
    assert_eq!(s.to_string(), "1y2m3d4h");
    assert_eq!("2w".parse::<Span>().unwrap().days, 14);
    for bad in ["", "7", "d", "7x", "-1d", "1.5d"] {
        assert!(bad.parse::<Span>().is_err(), "{bad}");
    }
    let one_month: Span = "1m".parse().unwrap();
    assert_eq!(
        format_time(one_month.before(t("2026-03-31T10:00:00Z"))),
        "2026-03-03T10:00:00Z"
    );
    let day_and_hour: Span = "1d1h".parse().unwrap();
    assert_eq!(
        format_time(day_and_hour.before(t("2026-01-01T00:30:00Z"))),
        "2025-12-30T23:30:00Z"
    );
}

#[test]
fn counts() {
    assert_eq!("3".parse::<Count>().unwrap(), Count::Last(3));
    assert_eq!("unlimited".parse::<Count>().unwrap(), Count::Unlimited);
    assert!("-1".parse::<Count>().is_err());
    assert!(KeepPolicy::default().is_empty());
    let zero = KeepPolicy {
        daily: Count::Last(0),
        ..Default::default()
    };
    assert!(zero.is_empty());
}

#[test]
fn restic_example() {
    // Two backups a day for five days, newest first in the reasons' ranks.
    let times: Vec<i64> = (0..10)
        .map(|i| t("2026-11-16T06:00:00Z") + i / 2 * 86_400 + i % 2 * 6 * 3_600)
        .collect();
    let policy = KeepPolicy {
        last: Count::Last(1),
        daily: Count::Last(3),
        ..Default::default()
    };
    let reasons = apply(&policy, &times);
    let kept: Vec<(String, Vec<String>)> = reasons
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.is_empty())
        .map(|(i, r)| (format_time(times[i]), r.clone()))
        .collect();
    assert_eq!(
        kept,
        [
            (
                "2026-11-18T12:00:00Z".to_string(),
                vec!["daily 2026-11-18".to_string()]
            ),
            (
                "2026-11-19T12:00:00Z".into(),
                vec!["daily 2026-11-19".into()]
            ),
            (
                "2026-11-20T12:00:00Z".into(),
                vec!["last 1".into(), "daily 2026-11-20".into()]
            ),
        ]
    );
    // More days asked for than there are: every day, and the oldest backup too.
    let policy = KeepPolicy {
        daily: Count::Last(7),
        weekly: Count::Last(1),
        ..Default::default()
    };
    let reasons = apply(&policy, &times);
    assert_eq!(reasons[0], ["oldest daily"]);
    assert_eq!(reasons[1], ["daily 2026-11-16"]);
    assert_eq!(reasons[9], ["daily 2026-11-20", "weekly 2026-W47"]);
    assert_eq!(reasons.iter().filter(|r| !r.is_empty()).count(), 6);
    // Within is measured from the newest backup, not from now.
    let policy = KeepPolicy {
        within: Some("1d".parse().unwrap()),
        ..Default::default()
    };
    let reasons = apply(&policy, &times);
    let kept: Vec<usize> = (0..10).filter(|i| !reasons[*i].is_empty()).collect();
    assert_eq!(kept, [8, 9], "strictly newer than a day before the newest");
    assert_eq!(reasons[9], ["within 1d"]);
}

/// The rules written out the obvious way: per rule, group by bucket, keep the newest of
/// the N newest buckets, and the oldest backup if there were fewer than N buckets.
fn reference(policy: &KeepPolicy, times: &[i64]) -> BTreeSet<usize> {
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by(|a, b| times[*b].cmp(&times[*a]).then(a.cmp(b)));
    let mut kept = BTreeSet::new();
    if order.is_empty() {
        return kept;
    }
    if let Some(span) = policy.within {
        let after = span.before(times[order[0]]);
        kept.extend(order.iter().copied().filter(|i| times[*i] > after));
    }
    for (rule, count) in policy.rules() {
        let n = match count {
            Count::Off | Count::Last(0) => continue,
            Count::Last(n) => n as usize,
            Count::Unlimited => usize::MAX,
        };
        // Buckets newest first, each with its newest backup (the first one met).
        let mut buckets: Vec<(i64, usize)> = Vec::new();
        for (nr, &i) in order.iter().enumerate() {
            let b = rule.bucket(times[i], nr);
            if !buckets.iter().any(|(seen, _)| *seen == b) {
                buckets.push((b, i));
            }
        }
        kept.extend(buckets.iter().take(n).map(|(_, i)| *i));
        if buckets.len() < n {
            kept.insert(*order.last().unwrap());
        }
    }
    kept
}

fn kept(reasons: &[Vec<String>]) -> BTreeSet<usize> {
    (0..reasons.len())
        .filter(|i| !reasons[*i].is_empty())
        .collect()
}

fn count() -> impl Strategy<Value = Count> {
    prop_oneof![
        2 => Just(Count::Off),
        5 => (0u32..6).prop_map(Count::Last),
        1 => Just(Count::Unlimited),
    ]
}

fn policy() -> impl Strategy<Value = KeepPolicy> {
    (
        (count(), count(), count()),
        (count(), count(), count()),
        proptest::option::of((0i64..2, 0i64..3, 0i64..20, 0i64..48)),
    )
        .prop_map(
            |((last, hourly, daily), (weekly, monthly, yearly), within)| KeepPolicy {
                last,
                hourly,
                daily,
                weekly,
                monthly,
                yearly,
                within: within.map(|(years, months, days, hours)| Span {
                    years,
                    months,
                    days,
                    hours,
                }),
            },
        )
}

/// Backup times over about three years, clustered so buckets hold several.
fn times() -> impl Strategy<Value = Vec<i64>> {
    let start = 1_767_225_600; // 2026-01-01
    prop::collection::vec(
        prop_oneof![
            (0i64..3 * 366 * 86_400).prop_map(move |s| start + s),
            (0i64..10 * 86_400).prop_map(move |s| start + 400 * 86_400 + s),
        ],
        0..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn agrees_with_the_reference(policy in policy(), times in times()) {
        let reasons = apply(&policy, &times);
        prop_assert_eq!(kept(&reasons), reference(&policy, &times));
    }

    #[test]
    fn keeps_the_newest_and_at_most_n_per_rule(policy in policy(), times in times()) {
        let reasons = apply(&policy, &times);
        let bucket_rule_on = policy.rules().iter().any(|(_, c)| c.is_on());
        if let Some(newest) = (0..times.len()).max_by(|a, b| times[*a].cmp(&times[*b]).then(b.cmp(a)))
            && bucket_rule_on
        {
            prop_assert!(!reasons[newest].is_empty(), "newest not kept");
        }
        for (rule, count) in policy.rules() {
            let n = reasons
                .iter()
                .flatten()
                .filter(|r| r.starts_with(&format!("{} ", rule.name())) || **r == format!("oldest {}", rule.name()))
                .count();
            match count {
                Count::Off => prop_assert_eq!(n, 0),
                Count::Last(max) => prop_assert!(n <= max as usize, "{} kept {}", rule.name(), n),
                Count::Unlimited => {}
            }
        }
    }

    #[test]
    fn pruning_the_kept_set_again_removes_nothing(policy in policy(), times in times()) {
        let reasons = apply(&policy, &times);
        let kept_times: Vec<i64> = kept(&reasons).into_iter().map(|i| times[i]).collect();
        let again = apply(&policy, &kept_times);
        prop_assert!(again.iter().all(|r| !r.is_empty()), "{:?}", again);
    }
}
