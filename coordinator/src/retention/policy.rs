//! The keep policy, as pure functions of backup times: restic's `forget` rules
//! (`--keep-last/-hourly/-daily/-weekly/-monthly/-yearly/-within`) over UTC calendar
//! buckets. Nothing here reads storage or the clock.
//!
//! Backups are taken newest first. Each bucket rule keeps the newest backup of each of
//! its N most recent buckets that hold a backup (`last` puts every backup in its own
//! bucket), and, like restic since 0.17, also the oldest backup while it has counts
//! left, so a policy longer than the history keeps the history's start. `within D` keeps
//! every backup newer than the newest one minus D. A backup kept by any rule is kept;
//! the reasons name every rule that keeps it.

use std::fmt;

use tablevault_core::civil::{civil_from_days, days_from_civil};

/// How many buckets a rule keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Count {
    /// None (the rule is off).
    #[default]
    Off,
    /// The newest N buckets.
    Last(u32),
    /// Every bucket.
    Unlimited,
}

impl Count {
    fn is_on(self) -> bool {
        !matches!(self, Count::Off | Count::Last(0))
    }
}

impl std::str::FromStr for Count {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "unlimited" {
            return Ok(Count::Unlimited);
        }
        s.parse::<u32>()
            .map(Count::Last)
            .map_err(|_| format!("{s:?} is not a count (a number or `unlimited`)"))
    }
}

/// A calendar span in restic's form: `1y5m7d2h` (years, months, days, hours; `m` is
/// months). Subtracted in UTC, months and years by the calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// Years.
    pub years: i64,
    /// Months.
    pub months: i64,
    /// Days.
    pub days: i64,
    /// Hours.
    pub hours: i64,
}

impl std::str::FromStr for Span {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("{s:?} is not a duration like 7d, 12h, 1y6m or 2w (y, m = months, w, d, h)");
        let mut span = Span::default();
        let mut digits = String::new();
        for c in s.chars() {
            if c.is_ascii_digit() {
                digits.push(c);
                continue;
            }
            let n: i64 = digits.parse().map_err(|_| bad())?;
            digits.clear();
            match c {
                'y' => span.years += n,
                'm' => span.months += n,
                'w' => span.days += 7 * n,
                'd' => span.days += n,
                'h' => span.hours += n,
                _ => return Err(bad()),
            }
        }
        if !digits.is_empty() || s.is_empty() {
            return Err(bad());
        }
        Ok(span)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            (self.years, 'y'),
            (self.months, 'm'),
            (self.days, 'd'),
            (self.hours, 'h'),
        ];
        let mut any = false;
        for (n, unit) in parts {
            if n != 0 {
                write!(f, "{n}{unit}")?;
                any = true;
            }
        }
        if !any {
            f.write_str("0h")?;
        }
        Ok(())
    }
}

impl Span {
    /// `t` (Unix seconds, UTC) minus this span; day overflow normalizes like Go's
    /// `AddDate` (31 March minus one month is 3 March).
    pub fn before(&self, t: i64) -> i64 {
        let days = t.div_euclid(86_400);
        let secs = t.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let months = y * 12 + (m - 1) - (self.years * 12 + self.months);
        let (y, m) = (months.div_euclid(12), months.rem_euclid(12) + 1);
        let day = days_from_civil(y, m, 1) + (d - 1) - self.days;
        day * 86_400 + secs - self.hours * 3_600
    }
}

/// Which backups to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeepPolicy {
    /// The N newest.
    pub last: Count,
    /// One per hour (UTC).
    pub hourly: Count,
    /// One per day (UTC).
    pub daily: Count,
    /// One per ISO week (Monday to Sunday, UTC).
    pub weekly: Count,
    /// One per calendar month (UTC).
    pub monthly: Count,
    /// One per calendar year (UTC).
    pub yearly: Count,
    /// Everything newer than the newest backup minus this.
    pub within: Option<Span>,
}

impl KeepPolicy {
    /// Whether any rule is on (a policy keeping nothing is refused, as restic does).
    pub fn is_empty(&self) -> bool {
        self.within.is_none() && self.rules().iter().all(|(_, c)| !c.is_on())
    }

    fn rules(&self) -> [(Rule, Count); 6] {
        [
            (Rule::Last, self.last),
            (Rule::Hourly, self.hourly),
            (Rule::Daily, self.daily),
            (Rule::Weekly, self.weekly),
            (Rule::Monthly, self.monthly),
            (Rule::Yearly, self.yearly),
        ]
    }
}

/// A bucket rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// `--keep-last`.
    Last,
    /// `--keep-hourly`.
    Hourly,
    /// `--keep-daily`.
    Daily,
    /// `--keep-weekly`.
    Weekly,
    /// `--keep-monthly`.
    Monthly,
    /// `--keep-yearly`.
    Yearly,
}

impl Rule {
    /// The rule's name in reasons.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Last => "last",
            Rule::Hourly => "hourly",
            Rule::Daily => "daily",
            Rule::Weekly => "weekly",
            Rule::Monthly => "monthly",
            Rule::Yearly => "yearly",
        }
    }

    /// The bucket of a backup taken at `t` (Unix seconds, UTC); `nr` is its rank, newest
    /// first, which is the bucket of `last`.
    pub fn bucket(self, t: i64, nr: usize) -> i64 {
        let days = t.div_euclid(86_400);
        let (y, m, _) = civil_from_days(days);
        match self {
            Rule::Last => nr as i64,
            Rule::Hourly => t.div_euclid(3_600),
            Rule::Daily => days,
            Rule::Weekly => {
                let (wy, w) = iso_week(days);
                wy * 100 + w
            }
            Rule::Monthly => y * 12 + m,
            Rule::Yearly => y,
        }
    }

    /// The bucket as people read it: `daily 2026-11-20`, `weekly 2026-W47`, `last 1`.
    pub fn label(self, t: i64, nr: usize) -> String {
        let days = t.div_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let name = self.name();
        match self {
            Rule::Last => format!("{name} {}", nr + 1),
            Rule::Hourly => format!(
                "{name} {y:04}-{m:02}-{d:02}T{:02}",
                t.rem_euclid(86_400) / 3_600
            ),
            Rule::Daily => format!("{name} {y:04}-{m:02}-{d:02}"),
            Rule::Weekly => {
                let (wy, w) = iso_week(days);
                format!("{name} {wy:04}-W{w:02}")
            }
            Rule::Monthly => format!("{name} {y:04}-{m:02}"),
            Rule::Yearly => format!("{name} {y:04}"),
        }
    }
}

/// For backups taken at `times` (Unix seconds, UTC; any order), why each is kept: an
/// empty list means the policy does not keep it.
pub fn apply(policy: &KeepPolicy, times: &[i64]) -> Vec<Vec<String>> {
    let mut order: Vec<usize> = (0..times.len()).collect();
    // Newest first; equal times keep their input order.
    order.sort_by(|a, b| times[*b].cmp(&times[*a]).then(a.cmp(b)));
    let mut reasons = vec![Vec::new(); times.len()];
    let Some(&newest) = order.first() else {
        return reasons;
    };
    let within_after = policy.within.map(|s| (s.before(times[newest]), s));
    // Per rule: counts left (`None`: unlimited) and the last bucket kept.
    let mut rules: Vec<(Rule, Option<u32>, Option<i64>)> = policy
        .rules()
        .into_iter()
        .filter(|(_, c)| c.is_on())
        .map(|(r, c)| match c {
            Count::Last(n) => (r, Some(n), None),
            _ => (r, None, None),
        })
        .collect();
    let oldest = order.len() - 1;
    for (nr, &i) in order.iter().enumerate() {
        let t = times[i];
        if let Some((after, span)) = within_after
            && t > after
        {
            reasons[i].push(format!("within {span}"));
        }
        for (rule, left, last) in &mut rules {
            if *left == Some(0) {
                continue;
            }
            let bucket = rule.bucket(t, nr);
            if Some(bucket) != *last {
                reasons[i].push(rule.label(t, nr));
            } else if nr == oldest {
                // restic keeps the oldest backup while a rule has counts left.
                reasons[i].push(format!("oldest {}", rule.name()));
            } else {
                continue;
            }
            *last = Some(bucket);
            if let Some(n) = left {
                *n -= 1;
            }
        }
    }
    reasons
}

/// ISO 8601 `(week-based year, week 1-53)` of a day number.
pub fn iso_week(days: i64) -> (i64, i64) {
    // 1970-01-01 was a Thursday; weeks run Monday (0) to Sunday (6).
    let weekday = (days + 3).rem_euclid(7);
    let thursday = days - weekday + 3;
    let (year, _, _) = civil_from_days(thursday);
    (year, (thursday - days_from_civil(year, 1, 1)) / 7 + 1)
}

/// Unix seconds of an RFC 3339 UTC time as tablevault writes it (`2026-11-22T11:46:00Z`,
/// fractions allowed).
pub fn parse_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || !s.ends_with('Z') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3_600 + mi * 60 + se)
}

/// Unix seconds as `2026-11-22T11:46:00Z`.
pub fn format_time(t: i64) -> String {
    let (y, m, d) = civil_from_days(t.div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3_600,
        s % 3_600 / 60,
        s % 60
    )
}

/// The planning time in a backup id (`20261122T114600Z-1a2b3c4d`).
pub fn time_of_id(id: &str) -> Option<i64> {
    let stamp = id.get(..16)?;
    let b = stamp.as_bytes();
    if b[8] != b'T' || b[15] != b'Z' || !stamp[..8].bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    parse_time(&format!(
        "{}-{}-{}T{}:{}:{}Z",
        &stamp[0..4],
        &stamp[4..6],
        &stamp[6..8],
        &stamp[9..11],
        &stamp[11..13],
        &stamp[13..15]
    ))
}

#[cfg(test)]
mod tests;
