//! How hard a worker works one account: a request **rate** in entities per second (a
//! [`RatePacer`] that every Table request moving entities goes through: restore batches
//! and backup pages alike) and, for writes, a **concurrency** limit on the entity group
//! transactions in flight. Both back off when the service throttles (503 ServerBusy, 429,
//! 500 OperationTimedOut), at most once per cool-down, so a hot partition or a busy
//! account is eased off instead of hammered; the concurrency grows by one after a
//! limit's worth of successes, the rate as [`crate::pacer`] describes.
//!
//! One task also paces itself against the partition it works on
//! ([`AdaptiveLimit::task_pacer`]): a restore block and a backup page each mostly touch
//! one partition, whose target (2,000 entities/s) is a tenth of the account's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablevault_azure::Error;
use tablevault_azure::RetryObserver;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::fleet::FleetCount;
use crate::pacer::{ACCOUNT_BUDGET, PARTITION_RATE, PacerConfig, RatePacer, is_emulator};

#[derive(Debug)]
struct State {
    limit: usize,
    in_flight: usize,
    successes: usize,
    last_cut: Option<Instant>,
    throttles: u64,
}

/// A request rate and a write concurrency limit that adapt to throttling.
#[derive(Debug)]
pub struct AdaptiveLimit {
    state: Mutex<State>,
    released: Notify,
    min: usize,
    max: usize,
    cool_down: Duration,
    pacer: RatePacer,
    partition_rate: Option<f64>,
}

/// Holds one unit of concurrency until dropped.
pub struct LimitGuard<'a> {
    owner: &'a AdaptiveLimit,
}

impl AdaptiveLimit {
    /// A limit starting at `initial`, kept within `min..=max`, pacing as for an Azure
    /// account.
    pub fn new(initial: usize, min: usize, max: usize) -> Arc<Self> {
        Self::with_pacer(
            initial,
            min,
            max,
            RatePacer::new(PacerConfig::account(), None),
            Some(PARTITION_RATE),
        )
    }

    /// The limiter of one account endpoint (the product's: concurrency 8 within 1..=64):
    /// the emulator's starts at a high rate and paces no partition.
    pub fn for_endpoint(endpoint: &str) -> Arc<Self> {
        let emulator = is_emulator(endpoint);
        Self::with_pacer(
            8,
            1,
            64,
            RatePacer::new(PacerConfig::for_endpoint(endpoint), None),
            (!emulator).then_some(PARTITION_RATE),
        )
    }

    /// A limit starting at `initial`, kept within `min..=max`, with `pacer` for the
    /// account and tasks paced at `partition_rate` (none: not paced).
    pub fn with_pacer(
        initial: usize,
        min: usize,
        max: usize,
        pacer: RatePacer,
        partition_rate: Option<f64>,
    ) -> Arc<Self> {
        let min = min.max(1);
        let max = max.max(min);
        Arc::new(AdaptiveLimit {
            state: Mutex::new(State {
                limit: initial.clamp(min, max),
                in_flight: 0,
                successes: 0,
                last_cut: None,
                throttles: 0,
            }),
            released: Notify::new(),
            min,
            max,
            cool_down: Duration::from_millis(500),
            pacer,
            partition_rate,
        })
    }

    /// Waits for room under the current concurrency limit, then for the account's rate
    /// to allow a write of `entities`.
    pub async fn acquire_entities(&self, entities: u64) -> LimitGuard<'_> {
        let guard = self.acquire().await;
        self.pacer.acquire(entities).await;
        guard
    }

    /// Waits for the account's rate to allow a read of up to `entities`.
    pub async fn pace(&self, entities: u64) {
        self.pacer.acquire(entities).await;
    }

    /// A read moved fewer entities than it was paced for.
    pub fn refund(&self, entities: u64) {
        self.pacer.refund(entities);
    }

    /// Whether tasks are paced to a partition's rate (not on the emulator, which has
    /// none): then a partition read by two tasks is no faster than by one.
    pub fn paces_partitions(&self) -> bool {
        self.partition_rate.is_some()
    }

    /// A pacer for one task against the partition it works on (`None`: not paced).
    pub fn task_pacer(&self) -> Option<RatePacer> {
        self.partition_rate
            .map(|rate| RatePacer::new(PacerConfig::fixed(rate), Some(0.0)))
    }

    /// `fleet.live` workers (this one included) share the account now: this one keeps
    /// to its share of the account's target (less a margin), so a fleet does not
    /// overshoot the account together and then settle low; with `max_rate` (entities
    /// per second for the whole fleet, the user's), to its share of that if lower. The
    /// emulator has no target: there only `max_rate` holds it.
    pub fn set_fleet_size(&self, fleet: FleetCount, max_rate: Option<u32>) {
        let cap = max_rate.map(f64::from);
        let budget = match (self.paces_partitions(), cap) {
            (true, cap) => cap.map_or(ACCOUNT_BUDGET, |c| c.min(ACCOUNT_BUDGET)),
            (false, Some(cap)) => cap,
            (false, None) => return,
        };
        self.pacer
            .set_ceiling(budget / fleet.live.max(1) as f64, fleet.settled);
    }

    /// The current account rate, entities per second.
    pub fn rate(&self) -> f64 {
        self.pacer.rate()
    }

    /// Waits for room under the current concurrency limit (no rate).
    pub async fn acquire(&self) -> LimitGuard<'_> {
        loop {
            let notified = self.released.notified();
            {
                let mut s = self.state.lock().expect("limit lock");
                if s.in_flight < s.limit {
                    s.in_flight += 1;
                    return LimitGuard { owner: self };
                }
            }
            notified.await;
        }
    }

    /// The current limit.
    pub fn current(&self) -> usize {
        self.state.lock().expect("limit lock").limit
    }

    /// Throttling responses seen so far.
    pub fn throttles(&self) -> u64 {
        self.state.lock().expect("limit lock").throttles
    }

    /// The service pushed back: lower the rate and halve the limit (each at most once per
    /// cool-down). Returns when the retry may leave by the rate
    /// ([`RatePacer::throttled`]).
    pub fn throttled(&self) -> Instant {
        let retry_at = self.pacer.throttled();
        let mut s = self.state.lock().expect("limit lock");
        s.throttles += 1;
        let now = Instant::now();
        if s.last_cut
            .is_some_and(|t| now.duration_since(t) < self.cool_down)
        {
            return retry_at;
        }
        s.last_cut = Some(now);
        s.successes = 0;
        let new = (s.limit / 2).max(self.min);
        if new < s.limit {
            tracing::info!(
                from = s.limit,
                to = new,
                "service is throttling; lowering write concurrency"
            );
            s.limit = new;
        }
        retry_at
    }

    fn succeeded(&self) {
        let mut s = self.state.lock().expect("limit lock");
        s.successes += 1;
        if s.successes >= s.limit && s.limit < self.max {
            s.successes = 0;
            s.limit += 1;
            drop(s);
            self.released.notify_one();
        }
    }
}

impl LimitGuard<'_> {
    /// The request succeeded: counts towards raising the limit.
    pub fn success(self) {
        self.owner.succeeded();
    }
}

impl Drop for LimitGuard<'_> {
    fn drop(&mut self) {
        self.owner.state.lock().expect("limit lock").in_flight -= 1;
        self.owner.released.notify_one();
    }
}

/// Whether an error is the service asking us to slow down.
pub fn is_throttling(e: &Error) -> bool {
    matches!(e.status(), Some(429 | 503))
        || e.has_code("OperationTimedOut")
        || e.has_code("ServerBusy")
}

impl RetryObserver for AdaptiveLimit {
    fn on_retry(&self, _op: &'static str, error: &Error, delay: Duration) -> Duration {
        if is_throttling(error) {
            let wait = self.throttled().saturating_duration_since(Instant::now());
            delay.max(wait)
        } else {
            delay
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The service's answer `status` with error code `code`.
    fn answer(status: u16, code: &str) -> Error {
        Error::Service {
            op: "t",
            status,
            code: Some(code.into()),
            message: String::new(),
            retry_after: None,
        }
    }

    #[tokio::test]
    async fn grows_on_success_and_halves_on_throttling() {
        let l = AdaptiveLimit::new(4, 1, 16);
        for _ in 0..4 {
            l.acquire().await.success();
        }
        assert_eq!(l.current(), 5);
        l.throttled();
        assert_eq!(l.current(), 2);
        l.throttled(); // within the cool-down: no second cut
        assert_eq!(l.current(), 2);
        assert_eq!(l.throttles(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_retry_waits_for_the_rate_and_other_retries_do_not() {
        let l = AdaptiveLimit::new(4, 1, 16);
        l.set_fleet_size(FleetCount::settled(64), None);
        let share = ACCOUNT_BUDGET / 64.0;
        // Three pages booked: the pacer is busy for seconds at ~300 entities/s.
        for _ in 0..3 {
            l.pace(1_000).await;
        }
        let busy = answer(503, "ServerBusy");
        let backoff = Duration::from_millis(200);
        let wait = l.on_retry("t", &busy, backoff);
        assert!(
            wait >= Duration::from_secs_f64(1_000.0 / share) - Duration::from_millis(200),
            "a retry waits for a page's worth at the share: {wait:?}"
        );
        let again = l.on_retry("t", &busy, backoff);
        assert!(again > wait, "booked behind the first retry: {again:?}");
        // A failure that is not throttling is retried on the backoff's schedule.
        let reset = Error::Transport {
            op: "t",
            kind: tablevault_azure::error::TransportKind::Interrupted,
            detail: "connection reset".into(),
        };
        assert_eq!(l.on_retry("t", &reset, backoff), backoff);
        // The emulator has no rate: its retries keep the backoff too.
        let e = AdaptiveLimit::for_endpoint("http://127.0.0.1:10002/devstoreaccount1");
        assert!(e.on_retry("t", &busy, backoff) <= backoff + Duration::from_millis(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_max_rate_is_shared_like_the_account_and_holds_on_the_emulator_too() {
        // 4 workers under a cap of 8,000/s: 2,000 each, however long they run.
        let l = AdaptiveLimit::new(4, 1, 16);
        l.set_fleet_size(FleetCount::settled(4), Some(8_000));
        let t0 = tokio::time::Instant::now();
        for _ in 0..20 {
            l.pace(1_000).await;
        }
        assert_eq!(l.rate(), 2_000.0);
        let took = t0.elapsed().as_secs_f64();
        assert!(took >= 9.4, "20,000 entities at 2,000/s: {took} s");
        // A cap above the account's target leaves the target's share.
        l.set_fleet_size(FleetCount::settled(4), Some(1_000_000));
        for _ in 0..600 {
            l.pace(1_000).await;
        }
        assert!(
            (l.rate() - ACCOUNT_BUDGET / 4.0).abs() < 1e-6,
            "{}",
            l.rate()
        );
        // The emulator has no target, but a cap holds it.
        let e = AdaptiveLimit::for_endpoint("http://127.0.0.1:10002/devstoreaccount1");
        e.set_fleet_size(FleetCount::settled(2), Some(3_000));
        assert_eq!(e.rate(), 1_500.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_known_fleet_keeps_each_worker_to_its_share_of_the_account() {
        let l = AdaptiveLimit::new(4, 1, 16);
        l.set_fleet_size(FleetCount::settled(16), None);
        let share = ACCOUNT_BUDGET / 16.0;
        // A minute of full use: slow start would pass the share within seconds.
        for _ in 0..600 {
            l.pace(1_000).await;
        }
        assert!((l.rate() - share).abs() < 1e-6, "{} vs {share}", l.rate());
        // Workers leave: the share grows and the rate grows back to it.
        l.set_fleet_size(FleetCount::settled(4), None);
        for _ in 0..3_000 {
            l.pace(1_000).await;
        }
        assert!(
            l.rate() > share && l.rate() <= ACCOUNT_BUDGET / 4.0,
            "{}",
            l.rate()
        );
        // The emulator has no target: no share.
        let e = AdaptiveLimit::for_endpoint("http://127.0.0.1:10002/devstoreaccount1");
        let before = e.rate();
        e.set_fleet_size(FleetCount::settled(64), None);
        assert_eq!(e.rate(), before);
    }

    #[tokio::test]
    async fn never_exceeds_the_limit() {
        let l = AdaptiveLimit::new(2, 1, 2);
        let a = l.acquire().await;
        let b = l.acquire().await;
        let third = tokio::time::timeout(Duration::from_millis(50), l.acquire()).await;
        assert!(third.is_err(), "a third holder must wait");
        drop(a);
        let c = tokio::time::timeout(Duration::from_millis(50), l.acquire()).await;
        assert!(c.is_ok());
        drop(b);
    }

    #[test]
    fn recognizes_throttling() {
        let busy = answer(503, "ServerBusy");
        let timeout = answer(500, "OperationTimedOut");
        let bad = answer(400, "InvalidInput");
        assert!(is_throttling(&busy) && is_throttling(&timeout) && !is_throttling(&bad));
    }
}
