//! Civil dates as day numbers (days since 1970-01-01, proleptic Gregorian, UTC), both
//! ways: the keep policy buckets backups by calendar day, week, month and year, and
//! splits read dates written in keys as instants.

/// `(year, month 1-12, day 1-31)` of a day number (days since 1970-01-01).
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    // Howard Hinnant's algorithm.
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The day number of a date; days beyond the month's end run into the next.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days in `month` (1-12) of `year`.
pub fn days_in_month(year: i64, month: i64) -> i64 {
    days_from_civil(year, month + 1, 1) - days_from_civil(year, month, 1)
}
