//! Key arithmetic for cutting by value: strings read as numbers in the rank space of the
//! alphabet their bounds are written in, so a share of the way between two keys is a
//! string, and a string is a share of the way. Pure functions; only their results'
//! order against real keys matters, and callers check it.

use super::calendar::Calendar;
use crate::keys::cmp_keys;

/// Code units a probe position is made of, in key order: printable ASCII (less the four
/// characters keys cannot hold), then anchors spread over the rest of the BMP. Most keys
/// are ASCII, so bisecting over this dense alphabet converges in a few probes where
/// bisecting raw 16-bit code units would spend most probes far above every key.
fn alphabet() -> &'static [u16] {
    static ALPHABET: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    ALPHABET.get_or_init(|| {
        let mut a: Vec<u16> = (0x20u16..=0x7E)
            .filter(|c| !matches!(c, 0x23 | 0x2F | 0x3F | 0x5C))
            .collect();
        a.extend([
            0xA0, 0x100, 0x400, 0x800, 0x1000, 0x2000, 0x3000, 0x4E00, 0x6000, 0x8000, 0xA000,
            0xAC00, 0xE000, 0xF000, 0xFFFD,
        ]);
        a
    })
}

/// Index of the largest unit of `alphabet` at or below `u`.
fn rank_in<T: Ord + Copy>(alphabet: &[T], u: T) -> u64 {
    alphabet.partition_point(|&a| a <= u).saturating_sub(1) as u64
}

/// Index of the largest [`alphabet`] unit at or below `u`.
fn rank(u: u16) -> u64 {
    rank_in(alphabet(), u)
}

/// How many [`alphabet`] steps `to` lies above `u` (as [`bump`] counts them), when `to`
/// is a unit of the alphabet above `u`.
pub(super) fn steps_up(u: u16, to: u16) -> Option<usize> {
    let a = alphabet();
    let to_at = a.binary_search(&to).ok()?;
    let above = a.partition_point(|&x| x <= u);
    (to_at >= above).then(|| to_at + 1 - above)
}

/// A character's place in the order the service compares keys in (UTF-16 code units),
/// as a number: astral characters, written as surrogate pairs, sort between U+D7FF and
/// U+E000. The spaces cuts are computed in are made of these, one per character, so
/// that a digit is never half a pair.
fn ord(c: char) -> u32 {
    let c = c as u32;
    match c {
        0..=0xD7FF => c,
        0x10000.. => ASTRAL_FIRST + (c - 0x10000),
        _ => c - 0xE000 + ASTRAL_FIRST + ASTRAL_CHARS,
    }
}

/// The character at an [`ord`].
fn char_at(o: u32) -> char {
    let c = match o {
        0..ASTRAL_FIRST => o,
        _ if o < ASTRAL_FIRST + ASTRAL_CHARS => o - ASTRAL_FIRST + 0x10000,
        _ => o - ASTRAL_FIRST - ASTRAL_CHARS + 0xE000,
    };
    char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The [`ord`] of the first astral character, and how many there are.
const ASTRAL_FIRST: u32 = 0xD800;
const ASTRAL_CHARS: u32 = 0x10_0000;

/// A string's characters as [`ord`]s.
fn ords(s: &str) -> Vec<u32> {
    s.chars().map(ord).collect()
}

/// The dense [`alphabet`] as [`ord`]s (it holds no surrogates).
fn dense_ords() -> &'static [u32] {
    static ORDS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    ORDS.get_or_init(|| {
        alphabet()
            .iter()
            .map(|&u| ord(char::from_u32(u.into()).expect("no surrogates")))
            .collect()
    })
}

/// The alphabet the differing tails of two bounds are written in: the character classes
/// their characters belong to (digits, hex letters, letters, each punctuation mark, the
/// non-ASCII anchors, the letters of another script). Keys are usually drawn from such
/// a class (hex digests, numbers, names), and bisecting in its rank space keeps halves
/// even where the global alphabet has gaps no key uses (between `9` and `a` in hex, say).
///
/// A character of the upper bound's tail (`high`) just above a class the other tails use
/// (`g` above hex digits, `G` above upper-case ones) adds only itself: it is a ceiling
/// found just above hex keys, and counting every letter up to `z` below it would make
/// the hex space look two and a quarter times as wide as it is.
fn local_alphabet(tails: &[&[u32]], high: &[u32]) -> Vec<u32> {
    let mut set = std::collections::BTreeSet::new();
    let range = |a: u8, b: u8| u32::from(a)..=u32::from(b);
    let mut units: Vec<u32> = tails.iter().flat_map(|t| t.iter().copied()).collect();
    let uses = |class: std::ops::RangeInclusive<u32>| units.iter().any(|u| class.contains(u));
    // `g` (`G`) above hex digits the other tails use, and no letter past `f` (`F`).
    let sentinels: Vec<u32> = high
        .iter()
        .copied()
        .filter(|&u| match u {
            0x67 => uses(0x61..=0x66) && !uses(0x67..=0x7A),
            0x47 => uses(0x41..=0x46) && !uses(0x47..=0x5A),
            _ => false,
        })
        .collect();
    set.extend(sentinels.iter().copied());
    let letters = script_letters(&units);
    if !letters.is_empty() {
        set.extend(letters);
        // The upper bound's character where it differs from the keys, so that it lies
        // above them in the letters' space too.
        set.extend(high.first().copied().filter(|&u| u > 0xA0));
    }
    // The upper bound's first unit, where it is the ceiling of an ASCII class (`:`
    // above digits, `[` above upper-case letters, `{` above lower-case ones): the keys
    // reach into that class, though those the bounds and reads show may not (a ceiling
    // `{` above base64 keys read only as far as `1`: the lower-case letters all counted
    // as `Z`, and the top piece of a first backup held a third of the table).
    let below_ceiling = match high.first() {
        Some(0x3A) => Some(0x39),
        Some(0x5B) => Some(0x5A),
        Some(0x7B) => Some(0x7A),
        _ => None,
    };
    units.extend(below_ceiling);
    units.extend(high.iter().copied().filter(|u| !sentinels.contains(u)));
    for u in units {
        match u {
            0x30..=0x39 => set.extend(range(b'0', b'9')),
            0x61..=0x66 => set.extend(range(b'a', b'f')),
            0x67..=0x7A => set.extend(range(b'a', b'z')),
            0x41..=0x46 => set.extend(range(b'A', b'F')),
            0x47..=0x5A => set.extend(range(b'A', b'Z')),
            0x20..=0x7E => {
                set.insert(u);
            }
            _ => set.extend(dense_ords().iter().copied().filter(|&a| a >= 0xA0)),
        }
    }
    set.into_iter().collect()
}

/// Characters of another script than ASCII closer together than this in the keys are
/// taken for letters of one alphabet.
const LETTER_GAP: u32 = 32;

/// The letters of the script the keys' non-ASCII characters are written in, when they
/// are (three or more characters): for emoji of one of [`EMOJI_BLOCKS`], the block; for
/// ideographs, syllables and pictographs (all in one of [`LARGE_SCRIPTS`]),
/// [`MAX_LETTERS`] characters spread evenly over the block; for a
/// small alphabet (Cyrillic, Greek, accented Latin), characters each less than
/// [`LETTER_GAP`] above the one before, every character of their span, widened for
/// letters not seen yet. The dense alphabet has one anchor for all of them, so every
/// key from `а` to `я` read as the same place, no density was measured, and the first
/// backup of a table of Cyrillic names was cut page after page by probes alone, in
/// tasks of about 1,000 entities (20,000 entities: 167 queries for 20 pages, at 0.86x
/// the Python SDK's export; in the split model, 193 probes for Hangul names, 466 for
/// emoji). Other characters far apart (a few scattered ones, or several scripts mixed)
/// are left to the anchors: a space spanned between them holds mostly characters no
/// key uses, and cuts placed by value there fall where no key lies.
fn script_letters(units: &[u32]) -> Vec<u32> {
    let mut seen: Vec<u32> = units.iter().copied().filter(|&u| u > 0xA0).collect();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() < MIN_LETTERS {
        return Vec::new();
    }
    // Emoji of one block: every one of them. Measured in a sample of all 2,048
    // pictographs, names drawn from the 80 emoticons left the space above them
    // looking 25 times as large as it was; and few such keys lie within LETTER_GAP of
    // each other (four of them seldom do), so a run of letters was found when a cut
    // was measured and not when it was placed.
    if let Some((first, last)) = block_holding(&seen, &EMOJI_BLOCKS) {
        return (first..=last).collect();
    }
    // Ideographs, syllables, pictographs: all in one large block, whose characters
    // keys of such names spread over; it is sampled evenly.
    if let Some((first, last)) = block_holding(&seen, &LARGE_SCRIPTS) {
        let step = (last - first).div_ceil(MAX_LETTERS as u32);
        return (first..=last).step_by(step as usize).collect();
    }
    one_alphabet(&seen).unwrap_or_default()
}

/// The first of `blocks` (first and last character) that holds every one of `seen`
/// (sorted), as ords.
fn block_holding(seen: &[u32], blocks: &[(char, char)]) -> Option<(u32, u32)> {
    let (&lo, &hi) = (seen.first()?, seen.last()?);
    blocks
        .iter()
        .map(|&(first, last)| (ord(first), ord(last)))
        .find(|(first, last)| *first <= lo && hi <= *last)
}

/// The letters of one alphabet, when `seen` (sorted, distinct) are: each character less
/// than [`LETTER_GAP`] above the one before, every character of their span, widened for
/// letters not seen yet, at most [`MAX_LETTERS`]. Characters of several scripts mixed in
/// the keys (keys of every region) are no alphabet: a density read in one of them says
/// nothing of the space between.
fn one_alphabet(seen: &[u32]) -> Option<Vec<u32>> {
    if !seen.windows(2).all(|w| w[1] - w[0] < LETTER_GAP) {
        return None;
    }
    let (lo, hi) = (seen[0], seen[seen.len() - 1]);
    // Letters not seen yet lie beyond the ends, about as far as the seen ones lie apart
    // and at least LETTER_REACH: a few keys' characters seldom include an alphabet's
    // last letters, and measured without them, the rest of a table of 5,990 entities
    // under names in one alphabet (split soak seed 0) looked too small to split: one
    // task read it all.
    let spread = (hi - lo).div_ceil(seen.len() as u32 - 1).max(LETTER_REACH);
    let mut from = lo.saturating_sub(spread).max(0xA1);
    let mut to = (hi + spread).min(ord('\u{FFFF}'));
    // Where the seen letters lie in one known alphabet, all of its letters: widening
    // alone still left a first page of Armenian names (`ա` to `է` read, letters to
    // `ֆ` to come) measuring a third of the space up to the ceiling, so the rest of
    // 6,009 entities was estimated at 1,800, under the 2,000 worth a split, and one
    // task read the whole table (split soak seed 30).
    if let Some((first, last)) = block_holding(seen, &SMALL_SCRIPTS) {
        from = from.min(first);
        to = to.max(last);
    }
    (((to - from) as usize) < MAX_LETTERS).then(|| (from..=to).collect())
}

/// The letters of small alphabets keys are written in, the first holding all
/// the letters seen is used: a script's lower or upper case before both (lower-case
/// Cyrillic names measured with the upper case beside them, or the letters beside the
/// basic 32, had the rest of a page estimated at half as much again, and cut too
/// high: a table of 3,500 kept three quarters with its first task in half the model's
/// seeds). Latin-1's letters, Latin Extended-A, Greek, Cyrillic, Armenian, Hebrew,
/// Arabic, Devanagari, Thai, Hiragana, Katakana.
const SMALL_SCRIPTS: [(char, char); 19] = [
    ('\u{C0}', '\u{DE}'),
    ('\u{DF}', '\u{FF}'),
    ('\u{C0}', '\u{FF}'),
    ('\u{100}', '\u{17F}'),
    ('\u{386}', '\u{3AB}'),
    ('\u{3AC}', '\u{3CE}'),
    ('\u{386}', '\u{3CE}'),
    ('\u{410}', '\u{42F}'),
    ('\u{430}', '\u{44F}'),
    ('\u{410}', '\u{44F}'),
    ('\u{400}', '\u{45F}'),
    ('\u{531}', '\u{556}'),
    ('\u{561}', '\u{587}'),
    ('\u{531}', '\u{587}'),
    ('\u{5D0}', '\u{5EA}'),
    ('\u{620}', '\u{64A}'),
    ('\u{904}', '\u{97F}'),
    ('\u{E01}', '\u{E5B}'),
    ('\u{3041}', '\u{30FA}'),
];

/// Most letters [`script_letters`] adds (a large block's sample, one more): with
/// printable ASCII, the anchors and the upper bound's character, a local alphabet's base
/// stays under 566, so [`FRACTION_PLACES`] places of it fit in a u64. Small alphabets
/// have far fewer (Cyrillic upper and lower case: 64).
const MAX_LETTERS: usize = 256;

/// Blocks of thousands of characters that keys in one script spread over: CJK unified
/// ideographs, Hangul syllables, the pictographs of emoji (from Miscellaneous Symbols
/// and Pictographs to Symbols and Pictographs Extended-A), CJK extension B.
const LARGE_SCRIPTS: [(char, char); 4] = [
    ('\u{4E00}', '\u{9FFF}'),
    ('\u{AC00}', '\u{D7A3}'),
    ('\u{1F300}', '\u{1FAFF}'),
    ('\u{20000}', '\u{2A6DF}'),
];

/// Blocks of emoji small enough to be a script's letters whole: Emoticons, Transport
/// and Map Symbols, Supplemental Symbols and Pictographs, Symbols and Pictographs
/// Extended-A.
const EMOJI_BLOCKS: [(char, char); 4] = [
    ('\u{1F600}', '\u{1F64F}'),
    ('\u{1F680}', '\u{1F6FF}'),
    ('\u{1F900}', '\u{1F9FF}'),
    ('\u{1FA70}', '\u{1FAFF}'),
];

/// Fewest characters [`one_alphabet`] widens a run of letters by at either end.
const LETTER_REACH: u32 = 8;

/// Fewest characters for [`script_letters`] to take them for a script's letters: two
/// close characters among scattered ones (CJK, or a few classes of characters) are
/// chance.
const MIN_LETTERS: usize = 3;

const DIGITS: usize = 4;

/// A string between `lo` and `hi` (or the top of the key space), by key value: the common
/// prefix, then the midpoint of the next four positions in the rank space of the
/// alphabet the bounds use (their character classes; a dense alphabet of printable ASCII and BMP anchors without `hi`).
/// Only used as a probe position, so it need not be a key anyone stored; it is always
/// legal and always above `lo`.
pub fn midpoint(lo: &str, hi: Option<&str>) -> String {
    point_by_characters(lo, hi, 0.5)
}

/// The number space [`point_at`] and [`fraction`] work in between two bounds: their
/// common prefix dropped, then `places` characters (as [`ord`]s) read as digits, each
/// place in its own alphabet: the letters of the alphabet the tails use (their
/// character classes; the dense alphabet without `hi`) that the tails' characters at
/// that place stand for ([`place_alphabet`]). Digit 0 means "no character".
struct Scale {
    lo: Vec<u32>,
    common: usize,
    /// Each place's alphabet.
    alphas: Vec<std::borrow::Cow<'static, [u32]>>,
    /// The value of `hi`, or the top of the space.
    high: u64,
}

impl Scale {
    /// `also`: keys known to lie between the bounds, or read below them, whose tails'
    /// classes count too where they share the bounds' common prefix (a key under
    /// another prefix says nothing of the places after this one).
    fn new(lo: &str, hi: Option<&str>, places: usize, also: &[&str]) -> Self {
        let a = ords(lo);
        let b: Option<Vec<u32>> = hi.map(ords);
        let common = b.as_ref().map_or(0, |b| common_units(&a, b));
        let alphas = match &b {
            Some(b) => {
                // A few digits of a hex key seldom show a letter: its tail's next places
                // count too, for hex letters only (other letters further on are more
                // often another field, a ULID-like key's random part after its time).
                let tail = |v: &[u32]| {
                    v[common..]
                        .iter()
                        .take(places.max(FRACTION_PLACES))
                        .enumerate()
                        .filter(|&(i, &u)| i < places || matches!(u, 0x41..=0x46 | 0x61..=0x66))
                        .map(|(_, &u)| u)
                        .collect::<Vec<_>>()
                };
                let mut tails: Vec<Vec<u32>> = also
                    .iter()
                    .map(|k| ords(k))
                    .filter(|k| k.starts_with(&a[..common]))
                    .map(|k| tail(&k))
                    .collect();
                tails.push(tail(&a));
                let slices: Vec<&[u32]> = tails.iter().map(Vec::as_slice).collect();
                let high_tail = tail(b);
                let local = local_alphabet(&slices, &high_tail);
                tails.push(high_tail);
                if local.is_empty() {
                    vec![std::borrow::Cow::Borrowed(dense_ords()); places]
                } else {
                    (0..places)
                        .map(|i| {
                            let seen: Vec<u32> =
                                tails.iter().filter_map(|t| t.get(i).copied()).collect();
                            std::borrow::Cow::Owned(place_alphabet(&local, &seen))
                        })
                        .collect()
                }
            }
            None => vec![std::borrow::Cow::Borrowed(dense_ords()); places],
        };
        let mut scale = Scale {
            lo: a,
            common,
            alphas,
            high: 0,
        };
        scale.high = match &b {
            Some(b) => scale.value(b),
            None => (0..places).map(|i| scale.base(i)).product::<u64>() - 1,
        };
        scale
    }

    /// The radix of place `i`.
    fn base(&self, i: usize) -> u64 {
        self.alphas[i].len() as u64 + 1
    }

    /// The value of the `places` characters after the common prefix.
    fn value(&self, v: &[u32]) -> u64 {
        (0..self.alphas.len()).fold(0u64, |acc, i| {
            let alpha = &self.alphas[i];
            let digit = v
                .get(self.common + i)
                .map_or(0, |&u| (rank_in(alpha, u) + 1).min(alpha.len() as u64));
            acc * self.base(i) + digit
        })
    }

    fn low(&self) -> u64 {
        self.value(&self.lo)
    }
}

/// The letters of `local` (an alphabet of tails) that a place can hold, given the
/// characters tails have there (`seen`): all of its ASCII letters and digits where any
/// seen is one (a few keys seldom show every digit or hex letter a place takes: hex
/// places read as digits alone sent the split model's Zipf shape from 43 probes to
/// 64), each ASCII punctuation mark seen, and, where any seen is beyond ASCII, its
/// letters beyond ASCII. One alphabet for every place made keys of a fixed format look
/// spread over values none can take: the place after `2026-02` holds `-` in every
/// date, and read as one of eleven characters, a cut by value between `2026-02-02` and
/// `2026-03` fell at `2026-02122`, above every key of February.
fn place_alphabet(local: &[u32], seen: &[u32]) -> Vec<u32> {
    // Past every tail's end, the whole alphabet: fractions count steps of the last
    // place they read ([`MEASURED_STEPS`]).
    if seen.is_empty() {
        return local.to_vec();
    }
    let ascii = |u: u32| u <= 0x7E;
    let beyond = seen.iter().any(|&u| !ascii(u));
    let alnum = |u: u32| char::from_u32(u).is_some_and(|c| c.is_ascii_alphanumeric());
    let letters = seen.iter().any(|&u| alnum(u));
    local
        .iter()
        .copied()
        .filter(|&a| {
            if alnum(a) {
                letters
            } else if ascii(a) {
                seen.contains(&a)
            } else {
                beyond
            }
        })
        .collect()
}

/// Like [`midpoint`], but the point a fraction `share` (0 to 1) of the way from `lo` to
/// `hi`.
///
/// Where the bounds differ inside a date, the point is a date too, the share of the way
/// in time (`split::calendar`).
pub fn point_at(lo: &str, hi: Option<&str>, share: f64) -> String {
    point_in_time(lo, hi, share).unwrap_or_else(|| point_by_characters(lo, hi, share))
}

/// [`point_at`] in the characters' space alone, never in time: where probes search for
/// keys ([`midpoint`], `probe::bisect`). Ceilings are found a place at a time in
/// characters, so they can lie far above keys in time (`log-21`, the year 2100, above
/// keys of 1999 and 2000), and halving time from there spent the probes in empty
/// decades: the search ended at the first key above its last probe, a task of 141
/// entities split off a table of 5,863 (split soak, seed 6).
pub(super) fn point_by_characters(lo: &str, hi: Option<&str>, share: f64) -> String {
    point_by_characters_among(lo, hi, share, &[])
}

/// [`point_by_characters`], with keys read below `lo` (`also`) whose characters after
/// the bounds' common prefix count in the alphabet too.
fn point_by_characters_among(lo: &str, hi: Option<&str>, share: f64, also: &[&str]) -> String {
    let scale = Scale::new(lo, hi, DIGITS, also);
    let (low, high) = (scale.low(), scale.high);
    let share = unit_share(share);
    let mut mid = low + (high.saturating_sub(low) as f64 * share) as u64;
    let mut tail = Vec::with_capacity(DIGITS);
    for i in (0..DIGITS).rev() {
        tail.push(mid % scale.base(i));
        mid /= scale.base(i);
    }
    tail.reverse();
    let mut m: String = scale.lo[..scale.common]
        .iter()
        .map(|&o| char_at(o))
        .collect();
    for (i, d) in tail.into_iter().enumerate() {
        // Digit 0 ("no character") can only be followed by more zeros in a valid
        // midpoint; stop there.
        if d == 0 {
            break;
        }
        m.push(char_at(scale.alphas[i][(d - 1) as usize]));
    }
    // Ranks are floors, so between two anchors the midpoint can land at or below `lo`;
    // the smallest step above `lo` is still a useful probe.
    if cmp_keys(&m, lo).is_le() {
        format!("{lo} ")
    } else {
        m
    }
}

/// `share` as a share of the way: clamped to 0 to 1, a half when it is no number.
fn unit_share(share: f64) -> f64 {
    if share.is_finite() {
        share.clamp(0.0, 1.0)
    } else {
        0.5
    }
}

/// The date (and time) a `share` of the way from `lo` to `hi` in time, when the bounds
/// differ inside a date ([`Calendar::between`]) and it lies strictly between them.
fn point_in_time(lo: &str, hi: Option<&str>, share: f64) -> Option<String> {
    let calendar = Calendar::between(lo, hi)?;
    let (low, high) = calendar.bounds();
    let share = unit_share(share);
    let at = calendar.key(low + ((high - low) as f64 * share) as i64);
    (cmp_keys(&at, lo).is_gt() && hi.is_some_and(|hi| cmp_keys(&at, hi).is_lt())).then_some(at)
}

/// How many units (or characters) two keys share from their start.
pub(super) fn common_units<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Places [`fraction`] reads: seven of a ~100-letter alphabet stay within a u64 and an
/// f64's exact integers.
const FRACTION_PLACES: usize = 7;

/// Where `key` lies between `lo` (0) and `hi` (1; `None` is the top of the key space),
/// in the space [`point_at`] cuts in, read to more places. Keys outside are clamped.
pub fn fraction(lo: &str, hi: Option<&str>, key: &str) -> f64 {
    match steps(lo, hi, key) {
        Steps::Below => 0.0,
        Steps::Above => 1.0,
        Steps::Between { up, span, .. } => (up as f64 / span as f64).clamp(0.0, 1.0),
    }
}

/// Fewest steps of the last place [`fraction`] reads that a key must lie above `lo` for
/// its fraction to measure a density: below that, rounding in the last place is most
/// of the distance (keys that share a long prefix, far below the bound, read as 0 or a
/// few steps, and a thousand entities over them as trillions in the rest).
const MEASURED_STEPS: u64 = 64;

/// [`fraction`], when it is fine enough to extrapolate a density from: `None` when
/// `key` lies within [`MEASURED_STEPS`] of `lo` in the space it reads.
pub(super) fn measured_fraction(lo: &str, hi: Option<&str>, key: &str) -> Option<f64> {
    match steps(lo, hi, key) {
        Steps::Between {
            up,
            span,
            measured: true,
        } => Some((up as f64 / span as f64).clamp(0.0, 1.0)),
        Steps::Above => Some(1.0),
        _ => None,
    }
}

/// Of the space from `lo` to `hi`, the share between keys `a` and `b` (`a` below `b`,
/// both between the bounds), read in one scale for both (each key's own [`fraction`]
/// can read in another alphabet: a ceiling `g` above keys showing no hex letter counts
/// every letter); `None` when they lie fewer than [`MEASURED_STEPS`] apart, too close
/// to measure a density between.
pub(super) fn measured_between(lo: &str, hi: &str, a: &str, b: &str) -> Option<f64> {
    let scale = Scale::new(lo, Some(hi), FRACTION_PLACES, &[a, b]);
    let prefix = &scale.lo[..scale.common];
    let (ka, kb) = (ords(a), ords(b));
    if !ka.starts_with(prefix) || !kb.starts_with(prefix) {
        return None;
    }
    let (low, high) = (scale.low(), scale.high);
    let clamp = |v: u64| v.clamp(low, high);
    let (va, vb) = (clamp(scale.value(&ka)), clamp(scale.value(&kb)));
    if high <= low || vb < va + MEASURED_STEPS {
        return None;
    }
    // Where the bounds differ inside a date, shares of time.
    if let Some(calendar) = Calendar::between(lo, Some(hi)) {
        let (first, last) = calendar.bounds();
        let at = |k: &str| calendar.instant(k).map(|i| i.clamp(first, last));
        let (ia, ib) = (at(a)?, at(b)?);
        return (ib > ia).then(|| (ib - ia) as f64 / (last - first) as f64);
    }
    Some((vb - va) as f64 / (high - low) as f64)
}

/// Where a key lies in the space [`fraction`] reads between two bounds.
enum Steps {
    /// At or below `lo`, outside the bounds' common prefix.
    Below,
    /// Above the bounds, or they leave no room.
    Above,
    /// `up` steps above `lo`, of `span` to `hi`; `measured`: far enough along to
    /// extrapolate a density from ([`MEASURED_STEPS`]).
    Between { up: u64, span: u64, measured: bool },
}

fn steps(lo: &str, hi: Option<&str>, key: &str) -> Steps {
    let scale = Scale::new(lo, hi, FRACTION_PLACES, &[key]);
    let k = ords(key);
    let prefix = &scale.lo[..scale.common];
    if !k.starts_with(prefix) {
        return if cmp_keys(key, lo).is_le() {
            Steps::Below
        } else {
            Steps::Above
        };
    }
    let (low, high) = (scale.low(), scale.high);
    if high <= low {
        return Steps::Above;
    }
    let up = scale.value(&k).saturating_sub(low);
    // Where the bounds differ inside a date, the share of the way in time; whether it
    // is far enough along to measure is still read in characters, so a bound far
    // above the keys (years above them) is tightened first.
    match Calendar::between(lo, hi).and_then(|c| Some((c.instant(key)?, c.bounds()))) {
        Some((at, (first, last))) => Steps::Between {
            up: (at.clamp(first, last) - first) as u64,
            span: (last - first) as u64,
            measured: up >= MEASURED_STEPS && at > first,
        },
        None => Steps::Between {
            up,
            span: high - low,
            measured: up >= MEASURED_STEPS,
        },
    }
}

/// Adds `amount` units at position `pos` of `s`, read as a number in the dense alphabet's rank
/// space, carrying leftwards. `None` when the result passes the top of the key space.
pub fn increment(s: &str, pos: usize, amount: u64) -> Option<String> {
    let units: Vec<u16> = s.encode_utf16().collect();
    let base = alphabet().len() as u64 + 1;
    let mut digits: Vec<u64> = (0..=pos)
        .map(|i| units.get(i).map_or(0, |&u| rank(u) + 1))
        .collect();
    let mut carry = amount;
    for d in digits.iter_mut().rev() {
        let v = *d + carry;
        *d = v % base;
        carry = v / base;
        if carry == 0 {
            break;
        }
    }
    if carry > 0 {
        return None;
    }
    // Digit 0 is "no character"; after a carry it can only appear where nothing follows.
    let out: Vec<u16> = digits
        .iter()
        .map(|&d| alphabet()[d.saturating_sub(1) as usize])
        .collect();
    Some(String::from_utf16_lossy(&out))
}

/// Steps [`bump`] takes through the blocks of 1,024 astral characters above one (each
/// a high surrogate raised by one) before going on from U+E000.
const ASTRAL_STEPS: usize = 4;

/// `s` cut after position `pos`, with the unit there raised `steps` places in the
/// alphabet: a value above every string that starts with `s[..=pos]`. `None` when no
/// alphabet unit lies that far above (the top of the key space). An astral character
/// (a surrogate pair) is raised as a whole: the first [`ASTRAL_STEPS`] steps go
/// through the blocks of 1,024 characters above it, more up the alphabet from
/// U+E000. The alphabet holds no surrogates, and a pair's first unit cannot stand
/// alone (it went out as U+FFFD); with U+E000 the first step up, above every astral
/// character, the ceiling of emoji keys measured their space as 25 times as wide as
/// it was (a task read six times the mean in the split model), or, for emoji of two
/// blocks, 2.9 times. Every block of 1,024 as a step cost the galloping search up to
/// ten more probes where keys reach past the astral characters.
pub(super) fn bump(s: &[u16], pos: usize, steps: usize) -> Option<String> {
    let pos = match (pos.checked_sub(1).and_then(|p| s.get(p)), s.get(pos)) {
        (Some(0xD800..=0xDBFF), Some(0xDC00..=0xDFFF)) => pos - 1,
        _ => pos,
    };
    let mut u = *s.get(pos)?;
    let mut steps = steps.max(1);
    let mut out = s[..pos].to_vec();
    if (0xD800..=0xDBFF).contains(&u) {
        let highs = ASTRAL_STEPS.min(usize::from(0xDBFF - u));
        if steps <= highs {
            out.extend([u + steps as u16, 0xDC00]);
            return Some(String::from_utf16_lossy(&out));
        }
        steps -= highs;
        u = 0xDFFF;
    }
    let above = alphabet().partition_point(|&a| a <= u);
    let next = *alphabet().get(above + steps - 1)?;
    out.push(next);
    Some(String::from_utf16_lossy(&out))
}

/// The point a `share` of the way from `lo` to `hi`, when it lies strictly between them,
/// in the alphabet of the bounds and of keys read below `lo` that share their common
/// prefix (`read`).
pub(super) fn point_below(lo: &str, hi: &str, share: f64, read: &[&str]) -> Option<String> {
    let at = point_in_time(lo, Some(hi), share)
        .unwrap_or_else(|| point_by_characters_among(lo, Some(hi), share, read));
    (cmp_keys(&at, lo).is_gt() && cmp_keys(&at, hi).is_lt()).then_some(at)
}

/// Whether how densely keys lie from `from` on can be carried over to the rest of the
/// space, from `reached` up to `hi`: only when the units [`fraction`] reads of the three
/// (after the bounds' common prefix) all lie in one region of the rank space, printable
/// ASCII (with the anchor just above it, a ceiling found above such keys) or the rest.
/// A `from` that is the common prefix itself lies at the bottom, in the first; the top
/// of the key space (`hi` is `None`), in the second. The dense alphabet gives each
/// printable ASCII character a rank and the rest of the BMP a few anchors, so a count
/// read in one region says nothing of the other: keys beginning with ASCII and with
/// other characters alike made the remainder look almost empty once the ASCII part was
/// read, and a table of thousands was never split; so did keys sharing a prefix whose
/// next unit was ASCII in some and CJK or astral in others.
pub(super) fn one_region(from: &str, reached: &str, hi: Option<&str>) -> bool {
    let a: Vec<u16> = from.encode_utf16().collect();
    let b: Option<Vec<u16>> = hi.map(|h| h.encode_utf16().collect());
    let common = b.as_ref().map_or(0, |b| common_units(&a, b));
    let r: Vec<u16> = reached.encode_utf16().collect();
    let low = |u: &u16| *u <= 0xA0;
    let mut regions = [Some(&a), Some(&r), b.as_ref()]
        .into_iter()
        .flatten()
        .flat_map(|t| t.iter().skip(common).take(FRACTION_PLACES))
        .map(low)
        .chain((a.len() <= common).then_some(true))
        .chain(b.is_none().then_some(false));
    let Some(first) = regions.next() else {
        return true;
    };
    regions.all(|region| region == first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(keys: &[&str]) -> Vec<u32> {
        keys.iter().flat_map(|k| ords(k)).collect()
    }

    #[test]
    fn the_letters_of_one_small_alphabet_are_found() {
        let letters = script_letters(&units(&["бичаг", "вттго", "юъад"]));
        let (lo, hi) = (letters[0], *letters.last().unwrap());
        assert!(lo <= 0x431 && hi >= 0x44E, "{lo:#x}-{hi:#x}");
        assert!(hi < 0x460, "widened by a few letters only: {hi:#x}");
        assert_eq!(
            letters.len(),
            (hi - lo) as usize + 1,
            "every character of the span"
        );
    }

    #[test]
    fn scattered_or_mixed_units_are_no_alphabet() {
        // Two characters; CJK with a Hangul syllable (two blocks); scripts mixed; an
        // emoji among CJK; none.
        for keys in [
            vec!["ab\u{FF01}\u{FFFD}"],
            vec!["\u{4E05}\u{6A00}\u{AC20}"],
            vec!["Çä\u{4E00}\u{E005}"],
            vec!["\u{4E05}\u{6A00}😀"],
            vec!["plain ascii"],
        ] {
            assert!(script_letters(&units(&keys)).is_empty(), "{keys:?}");
        }
    }

    #[test]
    fn ideographs_syllables_and_pictographs_sample_their_whole_block() {
        for (keys, block) in [
            (["東京都", "大阪府"], LARGE_SCRIPTS[0]),
            (["서울", "부산광역"], LARGE_SCRIPTS[1]),
            (["😀🌭", "🍕🚀"], LARGE_SCRIPTS[2]),
            (["𠀋𠂢", "\u{2A600}"], LARGE_SCRIPTS[3]),
        ] {
            let letters = script_letters(&units(&keys));
            let (first, last) = (ord(block.0), ord(block.1));
            assert_eq!(letters.first(), Some(&first));
            let step = (last - first).div_ceil(MAX_LETTERS as u32);
            assert!(
                letters
                    .last()
                    .is_some_and(|&u| u + step > last && u <= last)
            );
            assert!(letters.len() <= MAX_LETTERS + 1, "{}", letters.len());
        }
    }

    #[test]
    fn a_run_too_long_for_the_number_space_is_no_alphabet() {
        // Units 30 apart over 600: each near the last, but no small alphabet.
        let long: String = (0..20)
            .map(|i| char::from_u32(0x400 + 30 * i).unwrap())
            .collect();
        assert!(script_letters(&units(&[&long])).is_empty());
    }

    #[test]
    fn the_widest_local_alphabet_keeps_its_places_in_a_u64() {
        // Every printable ASCII character, the longest run of letters kept, an upper
        // bound's unit besides.
        let ascii: Vec<u32> = (0x20..=0x7E).collect();
        let run: Vec<u32> = (0..)
            .map(|i| 0x400 + 31 * i)
            .take_while(|&u| u < 0x400 + MAX_LETTERS as u32 - 64)
            .collect();
        assert!(!script_letters(&run).is_empty());
        let alphabet = local_alphabet(&[&ascii, &run], &[0x7000]);
        let base = alphabet.len() as u64 + 1;
        assert!(
            base.checked_pow(FRACTION_PLACES as u32).is_some(),
            "base {base}"
        );
    }

    /// Regression: dates as keys. With one alphabet for every place, the place after
    /// `2026-02` (a `-` in every date) read as one of eleven characters, so a cut
    /// between `2026-02-02` and `2026-03` fell above every date of February (at
    /// `2026-02122`).
    #[test]
    fn a_separator_every_key_has_at_one_place_is_that_place_alone() {
        for share in [0.1, 0.3, 0.5, 0.7, 0.9] {
            let at = point_at("2026-02-02", Some("2026-03"), share);
            assert!(at.starts_with("2026-02-"), "{share}: {at:?}");
        }
        // Where a place holds letters in one key and a separator in another, both.
        assert_eq!(
            place_alphabet(
                &local_alphabet(&[&ords("ab-c"), &ords("abcd")], &[]),
                &[0x2D, 0x63]
            ),
            local_alphabet(&[&ords("ab-c"), &ords("abcd")], &[])
        );
    }

    /// Regression: dates read as characters. Days use `01`-`31` of a hundred values
    /// and months `01`-`12`, so halfway from January 15 to March 1 fell at `2026-02`,
    /// February 1, 17 of the 45 days.
    #[test]
    fn dates_are_cut_and_measured_in_time() {
        assert_eq!(point_at("2026-01-15", Some("2026-03"), 0.5), "2026-02-06");
        let f = fraction("2026-01-15", Some("2026-03"), "2026-02-01");
        assert!((f - 17.0 / 45.0).abs() < 1e-9, "{f}");
        // Hours, under a prefix and without separators.
        assert_eq!(
            point_at("log-2026011522", Some("log-20260117"), 0.25),
            "log-2026011604"
        );
    }

    #[test]
    fn letters_above_the_astral_characters_are_found() {
        // Fullwidth Latin, U+FF21 on: above every astral character in the service's
        // order, so the highest ords of all (widening once ran past the top).
        let letters = script_letters(&units(&["ＡＢＣ", "ＸＹＺ"]));
        assert_eq!(letters.first(), Some(&(ord('Ａ') - LETTER_REACH)));
        assert!(letters.contains(&ord('Ｚ')));
        let top = script_letters(&units(&["\u{FFF0}\u{FFF5}\u{FFFD}"]));
        assert_eq!(top.last(), Some(&ord('\u{FFFF}')));
    }

    #[test]
    fn emoji_of_one_block_are_its_letters() {
        let letters = script_letters(&units(&["😀🙏", "😂😎", "😺"]));
        assert_eq!(
            (letters.first(), letters.last()),
            (Some(&ord('😀')), Some(&ord('🙏')))
        );
        assert_eq!(letters.len(), 80);
    }

    #[test]
    fn astral_characters_are_raised_whole() {
        let s: Vec<u16> = "😀😃".encode_utf16().collect();
        // At either unit of the first pair: the next block of 1,024 characters.
        assert_eq!(bump(&s, 0, 1).as_deref(), Some("\u{1F800}"));
        assert_eq!(bump(&s, 1, 1).as_deref(), Some("\u{1F800}"));
        assert_eq!(bump(&s, 3, 2).as_deref(), Some("😀\u{1FC00}"));
        // Past ASTRAL_STEPS blocks: the alphabet above every astral character.
        assert_eq!(bump(&s, 0, ASTRAL_STEPS + 1).as_deref(), Some("\u{E000}"));
        // Past the end: nothing to raise.
        assert_eq!(bump(&s, 9, 1), None);
        // The last block has no next one.
        assert_eq!(bump(&[0xDBFF, 0xDC05], 1, 1).as_deref(), Some("\u{E000}"));
    }

    proptest::proptest! {
        /// Characters read as ords keep the order the service compares keys in, and
        /// come back as themselves.
        #[test]
        fn ords_keep_the_services_order(a in ".{0,6}", b in ".{0,6}") {
            proptest::prop_assert_eq!(ords(&a).cmp(&ords(&b)), cmp_keys(&a, &b));
            for c in a.chars() {
                proptest::prop_assert_eq!(char_at(ord(c)), c);
            }
        }

        /// Whatever characters keys hold, their letters are few enough for the number
        /// space and come back as characters.
        #[test]
        fn letters_of_any_keys_fit_the_number_space(keys in proptest::collection::vec(".{0,8}", 1..4)) {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let letters = script_letters(&units(&keys));
            proptest::prop_assert!(letters.len() <= MAX_LETTERS + 1);
            proptest::prop_assert!(letters.windows(2).all(|w| w[0] < w[1]));
            for &o in &letters {
                proptest::prop_assert_eq!(ord(char_at(o)), o);
            }
        }

        /// A raised prefix lies above every string that begins with it, astral
        /// characters whole.
        #[test]
        fn a_raised_prefix_lies_above_everything_it_begins(
            s in "[a-z0-9\u{A0}-\u{3000}\u{E000}-\u{FFFD}\u{10000}-\u{10FFFF}]{1,6}",
            at in 0usize..12,
            steps in 1usize..10,
        ) {
            let units: Vec<u16> = s.encode_utf16().collect();
            let pos = at % units.len();
            // The prefix through the whole character at `pos`, and before it.
            let start = if (0xDC00..0xE000).contains(&units[pos]) { pos - 1 } else { pos };
            let end = if (0xD800..0xDC00).contains(&units[start]) { start + 2 } else { start + 1 };
            let prefix = &units[..end];
            if let Some(r) = bump(&units, pos, steps) {
                let r: Vec<u16> = r.encode_utf16().collect();
                proptest::prop_assert!(r.starts_with(&units[..start]), "{r:x?} {units:x?}");
                proptest::prop_assert!(r.as_slice() > prefix && !r.starts_with(prefix), "{r:x?} {prefix:x?}");
            }
        }

        /// Keys written in letters of any span (emoji and other astral characters
        /// too), with any bound, give points strictly between the bounds and
        /// fractions in [0, 1].
        #[test]
        fn points_and_fractions_hold_for_keys_in_any_letters(
            base in proptest::prop_oneof![0xA1u32..0xD000, 0xE000u32..0xFA00, 0x10000u32..0x10F000],
            picks in proptest::collection::vec((0u32..600, 1usize..8), 3),
            hi_unit in proptest::prop_oneof![0xA1u32..0xD7FF, 0xE000u32..0xFFFE, 0x10000u32..0x10FFFF],
        ) {
            let key = |(at, len): (u32, usize)| -> String {
                (0..len).map(|j| char::from_u32(base + (at + 7 * j as u32) % 600).unwrap_or('a')).collect()
            };
            let mut keys: Vec<String> = picks.into_iter().map(key).collect();
            keys.sort_by(|a, b| cmp_keys(a, b));
            let hi: String = char::from_u32(hi_unit).unwrap_or('z').to_string();
            let (lo, mid) = (&keys[0], &keys[1]);
            if cmp_keys(lo, &hi).is_lt() {
                let f = fraction(lo, Some(&hi), mid);
                proptest::prop_assert!((0.0..=1.0).contains(&f), "{f}");
                if let Some(p) = point_below(lo, &hi, 0.5, &[]) {
                    proptest::prop_assert!(cmp_keys(&p, lo).is_gt() && cmp_keys(&p, &hi).is_lt());
                }
            }
        }
    }

    /// Regression: a hex key whose first differing places are digits is still cut in
    /// hex. Between `3981a5c2…` and `4`, the places read (`3981`) were digits alone and
    /// the point was cut in decimal (`399…`): every key from `39a` up to `3fff` lay
    /// above it. In the split model's random shapes of GUID and hex keys, pieces came
    /// out empty or twice the size of the others (15 empty of 31 tasks).
    #[test]
    fn hex_keys_with_digits_first_are_cut_in_hex() {
        let at = point_at("3981a5c2d0e4", Some("4"), 0.5);
        assert!(
            cmp_keys(&at, "3c").is_gt() && cmp_keys(&at, "3d").is_lt(),
            "halfway from 0x3981 to 0x4000 is 0x3cc0: {at}"
        );
        // Letters past `f` further on are another field: the places stay decimal.
        let at = point_at("0065548163OZTV", Some("00657"), 0.5);
        assert!(at[4..].chars().all(|c| c.is_ascii_digit()), "{at}");
    }

    /// Regression: the remainder of ULID-like keys (a time in hex, then random letters)
    /// was cut in decimal where its bounds showed digits alone (`0065548163OZTV` to
    /// `00657`), while the density that sized its pieces was read in hex from the key
    /// the read began at: in the split model, the largest task held 3.01 times the
    /// mean. The characters of that key now count in the cut's alphabet too.
    #[test]
    fn cuts_count_the_characters_of_the_key_the_read_began_at() {
        let read = ["006553F100QWERTYUIOP"];
        let at = point_below("0065548163OZTV", "00657", 0.5, &read).expect("a point");
        // Halfway from 0x5481 to 0x7000 (each place also holding "no character") is
        // `61C0`; read in decimal it was `6190`.
        assert_eq!(at, "006561C0");
        // A key read under another prefix says nothing of the places after this one.
        let other = ["zz-ABCDEF"];
        let at = point_below("0065548163OZTV", "00657", 0.5, &other).expect("a point");
        assert!(at[4..].chars().all(|c| c.is_ascii_digit()), "{at}");
    }
}
