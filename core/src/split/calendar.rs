//! Dates and times written in keys (`2026-01-15`, `20260115`, `log-2026-01-15T10:22`),
//! read as instants: the space a cut is placed in when a remainder's bounds differ
//! inside such a date.
//!
//! Read as characters, a date uses few of the values its places can hold: days `01` to
//! `31` of the hundred two digits can write, months `01` to `12`. A density read across
//! a month's end was off several times over, cuts by value fell on days no month has
//! (`2026-01-40`), and a table of 50,000 entities under daily PartitionKeys ended with a
//! task of 3 to 5 times the mean (split model). Read as instants, days lie evenly.
//!
//! The map from strings to instants is the smallest instant whose text is at or above
//! the string ([`Calendar::instant`]): any string has one (bounds and ceilings are often
//! cut short, `2026-03`, or not dates at all, `2026-0:`), and it keeps key order.

use super::scale::common_units;
use crate::civil::{civil_from_days, days_from_civil, days_in_month};
use crate::keys::cmp_keys;

/// The fields a key's date is written in, in order, each after its separator.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Format {
    /// Separators before the month, the day, and each time field present (`None`: the
    /// digits follow at once).
    seps: Vec<Option<char>>,
}

/// Years a date in a key is read in: numbers that happen to read as dates are seldom
/// this close to today.
const YEARS: std::ops::Range<i64> = 1900..2200;

/// Separators between a date's fields, and before its time.
const DATE_SEPS: [char; 4] = ['-', '_', '.', ' '];
const TIME_SEPS: [char; 5] = ['T', ' ', '_', '-', ':'];
const CLOCK_SEPS: [char; 4] = [':', '-', '_', '.'];

/// Seconds in each field's unit: day, hour, minute, second.
const UNIT_SECONDS: [i64; 4] = [86_400, 3_600, 60, 1];

impl Format {
    /// The format of the date `key` holds at character `at`, with its time down to the
    /// finest field written, and its length in characters; `None` unless a valid date
    /// (and time) is there.
    fn read(key: &[char], at: usize) -> Option<(Format, usize)> {
        let mut i = at;
        let digits = |i: &mut usize, n: usize| -> Option<i64> {
            let field = key.get(*i..*i + n)?;
            let mut v = 0i64;
            for c in field {
                v = v * 10 + i64::from(c.to_digit(10)?);
            }
            *i += n;
            Some(v)
        };
        let sep = |i: &mut usize, allowed: &[char]| -> Option<char> {
            let c = *key.get(*i)?;
            allowed.contains(&c).then(|| {
                *i += 1;
                c
            })
        };
        let year = digits(&mut i, 4)?;
        let date_sep = sep(&mut i, &DATE_SEPS);
        let month = digits(&mut i, 2)?;
        if date_sep.is_some() && sep(&mut i, &DATE_SEPS) != date_sep {
            return None;
        }
        let day = digits(&mut i, 2)?;
        if !YEARS.contains(&year)
            || !(1..=12).contains(&month)
            || !(1..=days_in_month(year, month)).contains(&day)
        {
            return None;
        }
        let mut seps = vec![date_sep, date_sep];
        let mut end = i;
        // The time, field by field while each is valid: right after a date written
        // without separators, or after one of TIME_SEPS.
        let before_hour = if key.get(i).is_some_and(char::is_ascii_digit) {
            date_sep.is_none().then_some(None)
        } else {
            sep(&mut i, &TIME_SEPS).map(Some)
        };
        let Some(before_hour) = before_hour.filter(|_| digits(&mut i, 2).is_some_and(|h| h < 24))
        else {
            return Some((Format { seps }, end - at));
        };
        seps.push(before_hour);
        end = i;
        let clock_sep = if key.get(i).is_some_and(char::is_ascii_digit) {
            None
        } else {
            sep(&mut i, &CLOCK_SEPS)
        };
        for _ in 0..2 {
            if clock_sep.is_some() && seps.len() > 3 && sep(&mut i, &CLOCK_SEPS) != clock_sep {
                break;
            }
            if digits(&mut i, 2).filter(|m| *m < 60).is_none() {
                break;
            }
            seps.push(clock_sep);
            end = i;
        }
        Some((Format { seps }, end - at))
    }

    /// Whether `s` is a date (and time) of this format, or the beginning of one, each
    /// field within the calendar (anything may follow), or such a beginning with a
    /// ceiling's last step past it, or a year and any month (`2000-14`, a ceiling above
    /// keys of the impossible month 13: it reads as the year's end). Read in
    /// characters instead, with keys of hours, such a remainder was cut on days no
    /// month has (`2028-12-68`, `2028-12-09WM`), pieces were empty and one task read
    /// 96% of a table (split soak, seeds 47 and 52). Where the months past the last
    /// real date are empty, the density carried over them is checked with a sample
    /// ([`super::decide`]); before that check, such a ceiling let a task keep four
    /// fifths of a table ending in November. A ceiling past a day or a time by more
    /// than a step (`2026-01-33`) lies above keys that are no dates, and is not read
    /// as one.
    fn admits(&self, s: &[char]) -> bool {
        // Each field: its separator, its width, and the most it can be (a day's most
        // is its month's). A field cut short is a ceiling's (`T3` above the hours of a
        // day), whatever its digit.
        let mut fields = vec![(None, 4, 9_999)];
        fields.extend(
            self.seps
                .iter()
                .zip([12, 31, 23, 59, 59])
                .map(|(&sep, most)| (sep, 2, most)),
        );
        let (mut i, mut values) = (0, Vec::new());
        for (sep, width, most) in fields {
            if let Some(sep) = sep {
                match s.get(i) {
                    None => return true,
                    Some(&c) if c == sep => i += 1,
                    // A ceiling one step past the separator (`2026-01.` above a month's
                    // days, `…01U` above a day's times).
                    Some(&c) => return s.len() == i + 1 && u32::from(c) == u32::from(sep) + 1,
                }
            }
            let mut v = 0;
            for k in 0..width {
                let Some(d) = s.get(i + k).and_then(|c| c.to_digit(10)) else {
                    // Cut short: a beginning of a date, and so is a ceiling one step
                    // past a `9` (`2026-0:`, the months from October); another
                    // character: none.
                    return s
                        .get(i + k)
                        .is_none_or(|&c| c == ':' && s.len() == i + k + 1);
                };
                v = v * 10 + i64::from(d);
            }
            i += width;
            let most = match values.as_slice() {
                [year, month] => days_in_month(*year, *month),
                _ => most,
            };
            // A ceiling may end one past a field's most (`T24` above hours up to 23),
            // and a month anywhere past December.
            let most = match (s.len() == i, values.len()) {
                (true, 1) => 99,
                (true, _) => most + 1,
                _ => most,
            };
            let least = i64::from(matches!(values.len(), 1 | 2));
            if v < least || v > most {
                return false;
            }
            values.push(v);
        }
        true
    }

    /// Seconds in the finest field's unit.
    fn unit(&self) -> i64 {
        UNIT_SECONDS[self.seps.len() - 2]
    }

    /// The text of `instant` (units since the first of [`YEARS`]).
    fn text(&self, instant: i64) -> String {
        let seconds = instant * self.unit() + days_from_civil(YEARS.start, 1, 1) * 86_400;
        let (y, m, d) = civil_from_days(seconds.div_euclid(86_400));
        let of_day = seconds.rem_euclid(86_400);
        let fields = [y, m, d, of_day / 3_600, of_day / 60 % 60, of_day % 60];
        let mut out = format!("{y:04}");
        for (sep, v) in self.seps.iter().zip(&fields[1..]) {
            out.extend(*sep);
            out.push_str(&format!("{v:02}"));
        }
        out
    }

    /// Instants the format can write in [`YEARS`].
    fn instants(&self) -> i64 {
        (days_from_civil(YEARS.end, 1, 1) - days_from_civil(YEARS.start, 1, 1)) * 86_400
            / self.unit()
    }
}

/// The instants between two bounds whose characters differ inside a date both begin
/// with at one place.
#[derive(Debug, Clone)]
pub(super) struct Calendar {
    /// What comes before the date.
    prefix: String,
    format: Format,
    /// The instants of the bounds.
    low: i64,
    high: i64,
}

impl Calendar {
    /// The calendar between `lo` and `hi`, when `lo` holds a date (and time) that
    /// begins within their common prefix and ends after it, and `hi` lies above `lo`
    /// within the years read. Where only a time differs, its fields must be written
    /// with `:` (numbers after a date, `2026-01-15-0042`, are not a time).
    pub(super) fn between(lo: &str, hi: Option<&str>) -> Option<Calendar> {
        let hi = hi?;
        let a: Vec<char> = lo.chars().collect();
        let h: Vec<char> = hi.chars().collect();
        let common = common_units(&a, &h);
        let (at, format, len) =
            (0..=common).find_map(|at| Format::read(&a, at).map(|(f, len)| (at, f, len)))?;
        let date_len = 10 - usize::from(format.seps[0].is_none()) * 2;
        let in_date = common < at + date_len;
        let in_clock = common < at + len && format.seps.get(3).is_some_and(|s| *s == Some(':'));
        if !(in_date || in_clock) || !format.admits(h.get(at..).unwrap_or_default()) {
            return None;
        }
        let mut calendar = Calendar {
            prefix: a[..at].iter().collect(),
            format,
            low: 0,
            high: 0,
        };
        calendar.low = calendar.instant(lo)?;
        calendar.high = calendar.instant(hi)?;
        (calendar.low < calendar.high && calendar.high < calendar.format.instants())
            .then_some(calendar)
    }

    /// The smallest instant whose text is at or above `key`; `None` when `key` does not
    /// begin with the prefix.
    pub(super) fn instant(&self, key: &str) -> Option<i64> {
        let rest = key.strip_prefix(self.prefix.as_str())?;
        let (mut lo, mut hi) = (0, self.format.instants());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if cmp_keys(&self.format.text(mid), rest).is_lt() {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }

    /// The key of `instant`.
    pub(super) fn key(&self, instant: i64) -> String {
        format!("{}{}", self.prefix, self.format.text(instant))
    }

    /// The bounds' instants.
    pub(super) fn bounds(&self) -> (i64, i64) {
        (self.low, self.high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(key: &str) -> Option<(Format, usize)> {
        Format::read(&key.chars().collect::<Vec<_>>(), 0)
    }

    #[test]
    fn dates_and_times_of_common_formats_are_read() {
        for (key, fields, len) in [
            ("2026-01-15", 3, 10),
            ("20260115", 3, 8),
            ("2026_01_15-x", 3, 10),
            ("2026.02.28", 3, 10),
            ("2026-01-15T10", 4, 13),
            ("2026-01-15T10:22", 5, 16),
            ("2026-01-15T10:22:01.123Z", 6, 19),
            ("2026-01-15 10:22:01", 6, 19),
            ("2026011510", 4, 10),
            ("20260115102201", 6, 14),
        ] {
            let (format, n) = read(key).unwrap_or_else(|| panic!("{key}"));
            assert_eq!((format.seps.len() + 1, n), (fields, len), "{key}");
            assert_eq!(format.text(0).len(), format.text(1).len(), "{key}");
        }
        for key in [
            "2026-13-01",
            "2026-02-29",
            "2026-01/15",
            "2026-01_15",
            "1800-01-01",
            "202601",
            "customer-00042",
            "00000042",
        ] {
            assert!(read(key).is_none(), "{key}");
        }
    }

    #[test]
    fn a_date_whose_digits_differ_between_the_bounds_is_a_calendar() {
        let c = Calendar::between("2026-01-30", Some("2026-03")).unwrap();
        let (lo, hi) = c.bounds();
        assert_eq!(hi - lo, 30, "January 30 to March 1");
        assert_eq!(c.instant("2026-02-01"), Some(lo + 2));
        // A bound cut short or past the last day: the next date up.
        assert_eq!(c.instant("2026-01-40"), Some(lo + 2));
        assert_eq!(c.instant("2026-0:"), c.instant("2026-10-01"));
        assert_eq!(c.key(lo + 2), "2026-02-01");
        // Under a prefix, and a time.
        let c = Calendar::between("log-2026-01-15T10:22", Some("log-2026-01-15T12")).unwrap();
        assert_eq!(c.bounds().1 - c.bounds().0, 98);
        assert_eq!(c.key(c.bounds().0 + 38), "log-2026-01-15T11:00");
        // A bound past the calendar by more than a step (day 33): keys that are no
        // dates lie below it; one cut short is a date's beginning. A month past
        // December, above keys of month 13, reads as the year's end.
        for hi in ["2000-14", "2000-99"] {
            let c = Calendar::between("2000-06-15", Some(hi)).unwrap();
            assert_eq!(c.bounds().1, c.instant("2001-01-01").unwrap(), "{hi}");
        }
        assert!(Calendar::between("20210624", Some("202114")).is_some());
        assert!(Calendar::between("2000-06-15", Some("2000-14-01")).is_none());
        assert!(Calendar::between("2026-01-15", Some("2026-01-33")).is_none());
        assert!(Calendar::between("2026-01-15", Some("2026-01-32-")).is_none());
        // Ceilings one step past a field or a separator.
        for hi in ["2026-01-32", "2026-01.", "2026-13"] {
            assert!(Calendar::between("2026-01-15", Some(hi)).is_some(), "{hi}");
        }
        assert!(Calendar::between("2026-01-15T10:22", Some("2026-01-15U")).is_some());
        assert!(Calendar::between("2026-01-15T10:22", Some("2026-01-15T24")).is_some());
        assert!(Calendar::between("2026-01-15", Some("2026-01-2")).is_some());
        assert!(Calendar::between("2026-01-15", Some("2026-0:")).is_some());
        assert!(Calendar::between("2026-01-15", Some("2026-0:1")).is_none());
        assert!(Calendar::between("log-1999-10-31", Some("log-21")).is_some());
        assert!(Calendar::between("2026-01-15T10", Some("2026-01-15T25")).is_none());
        assert!(Calendar::between("2026-01-15T10:22", Some("2026-01-15T3")).is_some());
        // Bounds that share the date, with numbers after it, or a date that begins after
        // they differ: no calendar.
        assert!(Calendar::between("2026-01-15-0042", Some("2026-01-15-0099")).is_none());
        assert!(Calendar::between("a-2026-01-15", Some("b")).is_none());
        assert!(Calendar::between("2026-01-15", None).is_none());
        // A bound above every year read.
        assert!(Calendar::between("2026-01-15", Some("3")).is_none());
    }

    proptest::proptest! {
        /// Between bounds that differ inside a date, points lie strictly between them
        /// and fractions keep key order, whatever the dates (valid or not, cut short).
        #[test]
        fn points_and_fractions_between_dates_hold(
            mut bounds in proptest::collection::vec(
                "(log-)?20[0-3][0-9](-[0-9][0-9](-[0-3][0-9](T[0-2][0-9](:[0-6][0-9])?)?)?)?",
                3,
            ),
            share in 0.0f64..=1.0,
        ) {
            bounds.sort_by(|a, b| cmp_keys(a, b));
            let [lo, mid, hi] = [&bounds[0], &bounds[1], &bounds[2]];
            if let Some(at) = super::super::scale::point_below(lo, hi, share, &[]) {
                proptest::prop_assert!(cmp_keys(&at, lo).is_gt() && cmp_keys(&at, hi).is_lt(), "{at}");
            }
            let f = |k: &str| super::super::scale::fraction(lo, Some(hi), k);
            proptest::prop_assert!((0.0..=1.0).contains(&f(mid)));
            proptest::prop_assert!(f(lo) <= f(mid) && f(mid) <= f(hi), "{} {} {}", f(lo), f(mid), f(hi));
        }

        /// Instants keep key order, and a date's own text is its instant.
        #[test]
        fn instants_keep_key_order(
            a in "20[0-9]{2}-[0-9:]{2}(-[0-9]{2}(T[0-9]{2}(:[0-9]{2})?)?)?",
            b in "20[0-9]{2}-[0-9:]{2}(-[0-9]{2}(T[0-9]{2}(:[0-9]{2})?)?)?",
            n in 0i64..3_000_000,
        ) {
            let c = Calendar::between("2026-01-15T10:22", Some("2027")).unwrap();
            if cmp_keys(&a, &b).is_le() {
                proptest::prop_assert!(c.instant(&a) <= c.instant(&b), "{a} {b}");
            }
            let n = n.min(c.format.instants() - 1);
            proptest::prop_assert_eq!(c.instant(&c.key(n)), Some(n));
            proptest::prop_assert!(cmp_keys(&c.key(n), &c.key(n + 1)).is_lt());
        }
    }
}
