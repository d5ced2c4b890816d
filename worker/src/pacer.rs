//! Rate pacing in entities per second: every Table request that moves `n` entities (a
//! restore batch, a backup page) books `n` entities' worth of time first, so requests
//! leave no faster than the rate allows whatever their latency.
//!
//! Azure's scalability targets are rates (about 2,000 entities/s per partition, 20,000/s
//! per account), and at a few milliseconds per request a single request in flight can
//! already exceed them, so a concurrency limit alone cannot hold a worker under them.
//!
//! A pacer is either fixed (one task's pace against the partition it reads or writes) or
//! adaptive (a worker's pace against one account): it starts at a modest, jittered rate
//! and grows multiplicatively while it is what holds requests back and the service has
//! never throttled (slow start, so a service that never throttles, such as the emulator,
//! is not held back for long); after the first throttle it grows slowly
//! (`increase` of the rate per second of full use) and is cut by `decrease` on
//! each throttling answer, at most once per cool-down (answers already in flight are one
//! signal). A worker that knows its share of the account never grows past it, and a cut
//! made while it sent more than the share of a fleet it had not yet counted in full is
//! forgiven once a listing confirms the count ([`RatePacer::set_ceiling`]).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};

/// How a pacer behaves.
#[derive(Debug, Clone)]
pub struct PacerConfig {
    /// Starting rate, entities per second.
    pub initial: f64,
    /// The starting rate is lowered by up to this fraction at random (and the first
    /// request delayed by up to one page's worth), so a fleet starting together spreads
    /// out.
    pub jitter: f64,
    /// Lowest rate.
    pub min: f64,
    /// Highest rate.
    pub max: f64,
    /// Whether the rate adapts (a fixed pacer keeps `initial`).
    pub adaptive: bool,
    /// Before the first throttle: growth per second of full use (1.0 doubles).
    pub slow_start: f64,
    /// After it: growth per second of full use, at a rate of `target` (scaled by
    /// `rate / target` below that; see [`RatePacer::reserve`]).
    pub increase: f64,
    /// The account's published target, entities per second.
    pub target: f64,
    /// Factor applied on a throttling answer.
    pub decrease: f64,
    /// At most one decrease per this long.
    pub cool_down: Duration,
    /// How much unused time an idle pacer saves up (a burst it lets through at once).
    pub burst: Duration,
}

/// The entities/s one partition serves (Azure's target), less a margin.
pub const PARTITION_RATE: f64 = 0.95 * 2_000.0;

/// The smallest share of the account growth assumes: a worker below it grows as if it
/// had this share, so a starved one recovers.
const MIN_SHARE: f64 = 0.02;

/// The entities/s one account serves (Azure's target).
pub const ACCOUNT_RATE: f64 = 20_000.0;

/// The part of the account's target a fleet that knows its size shares out.
pub const ACCOUNT_BUDGET: f64 = 0.95 * ACCOUNT_RATE;

impl PacerConfig {
    /// A worker's pace against one Azure account (20,000 entities/s shared with every
    /// other worker, whose number it does not know).
    pub fn account() -> Self {
        PacerConfig {
            initial: 300.0,
            jitter: 0.5,
            min: 100.0,
            max: 1_000_000.0,
            adaptive: true,
            slow_start: 1.0,
            increase: 0.1,
            target: ACCOUNT_RATE,
            decrease: 0.7,
            cool_down: Duration::from_secs(1),
            burst: Duration::from_millis(100),
        }
    }

    /// A fixed pace: one task's against the partition it works on.
    pub fn fixed(rate: f64) -> Self {
        PacerConfig {
            initial: rate,
            jitter: 0.0,
            min: rate,
            max: rate,
            adaptive: false,
            ..Self::account()
        }
    }

    /// The account pacer of an endpoint: the emulator (`devstoreaccount1`) does not
    /// throttle, so it starts high there.
    pub fn for_endpoint(endpoint: &str) -> Self {
        if is_emulator(endpoint) {
            PacerConfig {
                initial: 100_000.0,
                jitter: 0.0,
                ..Self::account()
            }
        } else {
            Self::account()
        }
    }
}

/// Whether an endpoint is the storage emulator's, which has no scalability targets.
pub fn is_emulator(endpoint: &str) -> bool {
    endpoint.contains(tablevault_azure::config::EMULATOR_ACCOUNT)
}

#[derive(Debug)]
struct State {
    rate: f64,
    next_free: Instant,
    last_cut: Option<Instant>,
    /// Entities granted since the last cut.
    granted: f64,
    /// Entities per request, on average (what a retry is booked as).
    request: f64,
    slow_start: bool,
    throttles: u64,
    /// Highest rate for now: the worker's share of the account once it knows how many
    /// workers share it (`config.max` until then).
    ceiling: f64,
    /// Whether `ceiling` is a share the worker was given (not the config's maximum).
    shared: bool,
    /// The rate the last cut was made from, until the cut is forgiven.
    cut_from: Option<f64>,
}

/// Spaces requests by the entities they move.
#[derive(Debug)]
pub struct RatePacer {
    config: PacerConfig,
    state: Mutex<State>,
}

impl RatePacer {
    /// A pacer; `phase` in `[0, 1)` picks the jitter (random when `None`).
    pub fn new(config: PacerConfig, phase: Option<f64>) -> Self {
        let u = phase.unwrap_or_else(random_unit).clamp(0.0, 1.0);
        let rate = (config.initial * (1.0 - config.jitter * u)).clamp(config.min, config.max);
        let delay = if config.jitter > 0.0 {
            Duration::from_secs_f64(u * 1_000.0 / rate)
        } else {
            Duration::ZERO
        };
        RatePacer {
            state: Mutex::new(State {
                rate,
                next_free: Instant::now() + delay,
                last_cut: None,
                granted: 0.0,
                request: 0.0,
                slow_start: config.adaptive,
                throttles: 0,
                ceiling: config.max,
                shared: false,
                cut_from: None,
            }),
            config,
        }
    }

    /// The current rate, entities per second.
    pub fn rate(&self) -> f64 {
        self.state.lock().expect("pacer lock").rate
    }

    /// Holds an adaptive pacer at or below `rate` (its share of the account); a fixed
    /// pacer keeps its rate. `settled`: the count of workers behind the share was
    /// confirmed by a listing that saw the fleet unchanged since the one before.
    pub fn set_ceiling(&self, rate: f64, settled: bool) {
        if !self.config.adaptive {
            return;
        }
        let mut s = self.state.lock().expect("pacer lock");
        let (rate_before, now) = (s.rate, Instant::now());
        let before = s.shared.then_some(s.ceiling);
        s.ceiling = rate.clamp(self.config.min, self.config.max);
        s.shared = true;
        if s.slow_start {
            // Never throttled: the share is a known-safe rate, so start there instead of
            // probing up to it.
            s.rate = s.ceiling;
        } else if settled && s.cut_from.is_some_and(|from| from > s.ceiling) {
            // The last cut was made while this worker sent more than its share of the
            // fleet as now counted: the throttle came from a fleet growing faster than
            // its members counted each other (a first backup's splits reach new workers
            // every few seconds), not from the account being busy with others. With the
            // count settled the share is safe, so the cut is forgiven instead of being
            // regained by additive growth, which at 64 workers takes minutes. A cut made
            // at or under the share is the account's answer and stays.
            s.rate = s.ceiling;
            s.cut_from = None;
        } else {
            // Backed off: keep the same fraction of the share. When workers leave, the
            // ones left take over their share at once, so the fleet's rate holds,
            // instead of regaining it through additive growth (minutes at 64 workers);
            // when workers join, the backed-off rate shrinks with the share.
            // A worker throttled before it knew any share has no fraction to keep.
            s.rate = match before {
                Some(before) => s.rate * s.ceiling / before,
                None => s.rate,
            }
            .clamp(self.config.min, s.ceiling);
        }
        // What is booked ahead was booked at the old rate: at a higher one it is served
        // sooner. Without this a worker left alone at a job's end, its share raised from
        // a sixty-fourth of the account to all of it, still waited out bookings made at
        // 300 entities/s, seconds per page: simulated at a million entities, repeat
        // backups by 64 workers reached 58-64% of the account, 72-74% with it. (At a
        // lower rate the bookings are left as made: stretched too, a first backup's
        // workers, whose counts of each other rise and fall as splits reach them, were
        // held back, 62-84% where they reached 69-82%.)
        if s.rate > rate_before && s.next_free > now {
            let booked = s.next_free.duration_since(now).as_secs_f64() * rate_before;
            s.next_free = now + Duration::from_secs_f64(booked / s.rate);
        }
    }

    /// Throttling answers seen.
    pub fn throttles(&self) -> u64 {
        self.state.lock().expect("pacer lock").throttles
    }

    /// Books `entities` and says when the request may leave.
    pub fn reserve(&self, entities: u64) -> Instant {
        let now = Instant::now();
        let mut s = self.state.lock().expect("pacer lock");
        let earliest = now.checked_sub(self.config.burst).unwrap_or(now);
        let start = s.next_free.max(earliest);
        let n = entities.max(1) as f64;
        s.next_free = start + Duration::from_secs_f64(n / s.rate);
        s.granted += n;
        s.request = if s.request == 0.0 {
            n
        } else {
            0.9 * s.request + 0.1 * n
        };
        if self.config.adaptive && start > now {
            // The pacer, not the work, is holding requests back: grow. Past slow start, in
            // proportion to the rate's share of the account's target too: a worker at
            // `rate` is about one of `target / rate` sharing the account, so the fleet as
            // a whole grows (and is throttled) at the same pace however many workers there
            // are, without any of them knowing how many.
            let gain = if s.slow_start {
                self.config.slow_start
            } else {
                self.config.increase
            };
            let share = (s.rate / self.config.target).clamp(MIN_SHARE, 1.0);
            let growth = gain * share;
            s.rate = (s.rate + growth * n).min(s.ceiling);
        }
        start
    }

    /// Waits until a request of `entities` may leave.
    pub async fn acquire(&self, entities: u64) {
        let at = self.reserve(entities);
        if at > Instant::now() {
            sleep_until(at).await;
        }
    }

    /// A request booked more than it moved (a short page): gives back the difference.
    pub fn refund(&self, entities: u64) {
        let now = Instant::now();
        let mut s = self.state.lock().expect("pacer lock");
        let back = Duration::from_secs_f64(entities as f64 / s.rate);
        let earliest = now.checked_sub(self.config.burst).unwrap_or(now);
        s.next_free = s.next_free.checked_sub(back).unwrap_or(now).max(earliest);
    }

    /// The service throttled and the request will be retried: book the retry (so later
    /// requests make room for it) and cut the rate (once per episode). Returns when the
    /// retry's booked time comes: the client waits for it as it waits out its backoff,
    /// so a worker's retries keep to its rate too. Without that, a fleet pressed against
    /// an account that other clients also use resends every refused request on the
    /// backoff's schedule alone, and its retries, not its paced requests, are most of
    /// what the account refuses.
    pub fn throttled(&self) -> Instant {
        let now = Instant::now();
        let mut s = self.state.lock().expect("pacer lock");
        s.throttles += 1;
        let mut retry_at = now;
        if self.config.adaptive && s.request > 0.0 {
            let retry = Duration::from_secs_f64(s.request / s.rate);
            let earliest = now.checked_sub(self.config.burst).unwrap_or(now);
            retry_at = s.next_free.max(earliest);
            s.next_free = retry_at + retry;
        }
        // One cut per episode: not within the cool-down, and not before requests paced at
        // the new rate (a cool-down's worth) could have been refused; until then the
        // refusals are of requests sent, or being retried, from before the cut.
        if !self.config.adaptive
            || s.last_cut.is_some_and(|t| {
                now.duration_since(t) < self.config.cool_down
                    || s.granted < s.rate * self.config.cool_down.as_secs_f64()
            })
        {
            return retry_at;
        }
        s.last_cut = Some(now);
        s.cut_from = Some(s.rate);
        s.granted = 0.0;
        s.slow_start = false;
        let new = (s.rate * self.config.decrease).max(self.config.min);
        if new < s.rate {
            tracing::debug!(
                from = s.rate,
                to = new,
                "service is throttling; lowering the request rate"
            );
            s.rate = new;
        }
        retry_at
    }
}

/// A uniform number in `[0, 1)` from the process's random source.
fn random_unit() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64;
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An adaptive pacer starting at `rate`, which is also the account's target (so
    /// growth is not scaled down by the share).
    fn fixed_start(rate: f64) -> PacerConfig {
        PacerConfig {
            initial: rate,
            jitter: 0.0,
            min: 10.0,
            target: rate,
            burst: Duration::ZERO,
            ..PacerConfig::account()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_pacer_never_exceeds_its_rate() {
        let p = RatePacer::new(PacerConfig::fixed(1_000.0), Some(0.0));
        let t0 = Instant::now();
        for _ in 0..20 {
            p.acquire(100).await;
        }
        // 2,000 entities at 1,000/s: the last leaves 1.9 s after the first (the burst of
        // 100 ms saved up at the start lets the first two go together).
        let elapsed = t0.elapsed();
        assert!(elapsed >= Duration::from_millis(1_800), "{elapsed:?}");
        assert!(elapsed <= Duration::from_millis(1_950), "{elapsed:?}");
        assert_eq!(p.rate(), 1_000.0);
        p.throttled();
        assert_eq!(p.rate(), 1_000.0, "a fixed pacer does not adapt");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_request_is_retried_at_its_booked_time_not_before() {
        let p = RatePacer::new(fixed_start(1_000.0), Some(0.0));
        // Two pages of 500 booked: the pacer is busy until 1 s from now.
        let t0 = Instant::now();
        p.reserve(500);
        p.reserve(500);
        // The first is refused: its retry goes after what was already booked (the second
        // page), and what is booked next goes after the retry.
        let retry_at = p.throttled();
        assert_eq!(retry_at - t0, Duration::from_secs(1), "behind both pages");
        let next = p.reserve(500);
        assert!(next > retry_at, "{:?}", next - t0);
        // Refused again and again: each retry is booked behind the last, so a worker's
        // retries keep to its (cut) rate instead of following the backoff alone.
        let again = p.throttled();
        assert!(
            again > retry_at,
            "{:?} then {:?}",
            retry_at - t0,
            again - t0
        );
        // A fixed pacer books nothing: its retry may go at once.
        let f = RatePacer::new(PacerConfig::fixed(1_000.0), Some(0.0));
        f.reserve(1_000);
        assert_eq!(f.throttled(), Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_share_the_rate() {
        let p = std::sync::Arc::new(RatePacer::new(PacerConfig::fixed(500.0), Some(0.0)));
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let p = p.clone();
                tokio::spawn(async move { p.acquire(100).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // 1,000 entities at 500/s: the tenth leaves 1.8 s in.
        assert_eq!(t0.elapsed(), Duration::from_millis(1_800));
    }

    #[tokio::test(start_paused = true)]
    async fn slow_start_grows_until_the_first_throttle_then_backs_off_and_recovers() {
        let p = RatePacer::new(fixed_start(1_000.0), Some(0.0));
        // Fully used for about a second: slow start grows the rate by half of it.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(1) {
            p.acquire(100).await;
        }
        let grown = p.rate();
        assert!(grown > 1_400.0, "slow start: {grown}");

        p.throttled();
        let cut = p.rate();
        assert!((cut - grown * 0.7).abs() < 1e-6, "{cut}");
        p.throttled(); // the same burst of answers: no second cut
        assert_eq!(p.rate(), cut);
        assert_eq!(p.throttles(), 2);
        tokio::time::advance(Duration::from_secs(2)).await;
        p.throttled(); // nothing sent at the new rate yet: still the same episode
        assert_eq!(p.rate(), cut);
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(1_500) {
            p.acquire(100).await;
        }
        let before = p.rate();
        assert!(before > cut, "growing again: {cut} -> {before}");
        p.throttled();
        let cut2 = p.rate();
        assert!((cut2 - before * 0.7).abs() < 1e-6, "{cut2}");

        // Past slow start, it recovers slowly: ~10% per second of full use at the target.
        let t1 = Instant::now();
        let mut sent = 0u64;
        while t1.elapsed() < Duration::from_secs(10) {
            p.acquire(100).await;
            sent += 100;
        }
        let recovered = p.rate();
        assert!(
            recovered > cut2 * 1.3 && recovered < cut2 * 3.0,
            "{cut2} -> {recovered}"
        );
        // And it never let more through than its (growing) rate allows.
        assert!(
            (sent as f64) <= recovered * 10.0 + 200.0,
            "{sent} in 10 s at most {recovered}/s"
        );
    }

    #[test]
    fn a_share_that_changes_moves_a_backed_off_rate_in_proportion() {
        let p = RatePacer::new(PacerConfig::account(), Some(0.0));
        p.set_ceiling(1_000.0, false);
        assert_eq!(p.rate(), 1_000.0, "never throttled: starts at its share");
        p.throttled();
        assert!((p.rate() - 700.0).abs() < 1e-6);
        // Half the workers left: twice the share, and the same 70% of it.
        p.set_ceiling(2_000.0, false);
        assert!((p.rate() - 1_400.0).abs() < 1e-6, "{}", p.rate());
        // Four times as many joined: a quarter of the share, still 70% of it.
        p.set_ceiling(500.0, false);
        assert!((p.rate() - 350.0).abs() < 1e-6, "{}", p.rate());
        // Never below the pacer's floor.
        p.set_ceiling(50.0, false);
        assert_eq!(p.rate(), 100.0);
    }

    /// A share that rises serves what was booked ahead at the new rate: a worker left
    /// alone at a job's end does not wait out bookings made at a sixty-fourth of the
    /// account. A share that falls leaves the bookings as made.
    #[tokio::test(start_paused = true)]
    async fn a_rising_share_serves_what_was_booked_at_the_new_rate() {
        let p = RatePacer::new(PacerConfig::account(), Some(0.0));
        p.set_ceiling(300.0, false);
        p.throttled();
        let t0 = Instant::now();
        // 3,000 entities booked at 210/s: the pacer is busy for about 14 s.
        for _ in 0..3 {
            p.reserve(1_000);
        }
        let busy = p.reserve(1) - t0;
        assert!(busy > Duration::from_secs(13), "{busy:?}");
        // Others ran out of work: the share is twenty times as large, and so is the
        // rate (about the same 70% of it, grown a little by the bookings); what was
        // booked now takes a twentieth as long.
        p.set_ceiling(6_000.0, false);
        assert!((4_200.0..4_400.0).contains(&p.rate()), "{}", p.rate());
        let next = p.reserve(1_000) - t0;
        assert!(next < Duration::from_millis(800), "{next:?}");
        // Workers join: the share falls, and the bookings stand.
        let booked = p.reserve(1) - t0;
        p.set_ceiling(600.0, false);
        let after = p.reserve(1) - t0;
        assert!(
            after >= booked && after < booked + Duration::from_millis(10),
            "{booked:?} then {after:?}"
        );
    }

    #[test]
    fn a_cut_made_above_a_settled_share_is_forgiven_and_one_within_it_is_not() {
        // A first backup spreading: this worker counted 8 workers and took their share,
        // but 32 were already sending; the account refused it twice.
        let p = RatePacer::new(PacerConfig::account(), Some(0.0));
        p.set_ceiling(ACCOUNT_BUDGET / 8.0, false);
        p.throttled();
        end_cool_down(&p);
        p.throttled();
        let cut = p.rate();
        assert!(cut < 0.5 * ACCOUNT_BUDGET / 8.0 + 1.0, "{cut}");
        // A listing still counting the fleet's growth: the cut stays, in proportion.
        let share = ACCOUNT_BUDGET / 32.0;
        p.set_ceiling(share, false);
        assert!(p.rate() < share, "{} vs {share}", p.rate());
        // The next listing finds the same fleet: the worker's cuts came from sending
        // more than this share, so it takes the share again.
        p.set_ceiling(share, true);
        assert_eq!(p.rate(), share);
        // Now the account refuses it within its share (another client is busy): that
        // cut is the account's answer, and a settled count does not undo it.
        end_cool_down(&p);
        p.throttled();
        let within = p.rate();
        assert!((within - 0.7 * share).abs() < 1e-6, "{within}");
        p.set_ceiling(share, true);
        assert_eq!(p.rate(), within);
        // Nor when workers leave: the same fraction of the larger share.
        p.set_ceiling(2.0 * share, true);
        assert!((p.rate() - 2.0 * within).abs() < 1e-6, "{}", p.rate());
    }

    /// Lets the next `throttled` cut again without waiting: books a cool-down's worth
    /// of requests and moves the last cut back past the cool-down.
    fn end_cool_down(p: &RatePacer) {
        let mut s = p.state.lock().unwrap();
        s.last_cut = s.last_cut.map(|t| t - p.config.cool_down);
        s.granted = s.rate * p.config.cool_down.as_secs_f64();
    }

    #[test]
    fn a_first_share_learned_after_a_throttle_caps_the_rate_without_scaling_it() {
        // Throttled before the fleet was ever counted (a listing failed): there was no
        // share to be a fraction of, so the first one only caps the rate.
        let p = RatePacer::new(PacerConfig::account(), Some(0.0));
        let before = p.rate();
        p.throttled();
        let cut = p.rate();
        assert!(cut < before);
        p.set_ceiling(1_000.0, false);
        assert_eq!(
            p.rate(),
            cut.min(1_000.0),
            "not scaled against an unknown share"
        );
        p.set_ceiling(100.0, false);
        assert_eq!(p.rate(), 100.0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_pacer_does_not_grow_or_save_up() {
        let p = RatePacer::new(fixed_start(1_000.0), Some(0.0));
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(1)).await;
            p.acquire(100).await;
        }
        assert_eq!(p.rate(), 1_000.0, "not the bottleneck: no growth");
        tokio::time::advance(Duration::from_secs(10)).await;
        let t0 = Instant::now();
        p.acquire(1_000).await;
        p.acquire(1_000).await;
        assert_eq!(
            t0.elapsed(),
            Duration::from_secs(1),
            "ten idle seconds saved nothing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn refunds_give_back_unused_time() {
        let p = RatePacer::new(PacerConfig::fixed(1_000.0), Some(0.0));
        let t0 = Instant::now();
        p.acquire(1_000).await;
        p.refund(900); // the page held 100
        p.acquire(100).await;
        assert!(
            t0.elapsed() <= Duration::from_millis(100),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn the_emulator_starts_high() {
        assert!(is_emulator("http://127.0.0.1:10002/devstoreaccount1"));
        assert!(!is_emulator("https://acct.table.core.windows.net"));
        let c = PacerConfig::for_endpoint("http://127.0.0.1:10002/devstoreaccount1");
        assert!(c.initial >= 100_000.0);
    }
}
