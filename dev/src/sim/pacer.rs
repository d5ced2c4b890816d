//! A prototype policy, not in the product: pace requests by **rate** (entities per
//! second) within a budget taken from the published targets, instead of probing for
//! the limit with concurrency.
//!
//! Why the product's approach cannot meet "< 1% 503s": at 5–30 ms per request one
//! request in flight already carries ~5,700 entities/s of 100-entity batches (~57,000/s
//! of 1,000-entity pages), more than a partition's 2,000/s and more than a worker's
//! share of the account's 20,000/s once a few workers run. A concurrency limit cannot
//! go below one, so it bottoms out while the service still refuses most requests; only
//! retry sleeps slow the workers down. And any controller that finds the limit by
//! probing pays at least one 503 per probe: the whole account serves only 20 pages or
//! 200 batches a second, so 1% allows one 503 every 5 s (pages) or 0.5 s (batches)
//! for all workers together, far fewer than independent probing workers cause.
//!
//! So the budget is known instead of probed: each worker paces to its share of
//! `0.95 × 20,000` entities/s, in proportion to its tasks in flight among all workers'
//! (re-counted every few seconds, as heartbeats carrying that count would tell), and
//! each task to `0.95 × 2,000` entities/s for its partition. Each worker starts at a
//! random phase, so a fleet starting together does not send its first requests at
//! once. A 503 still halves both rates (at most once per cool-down: someone else may be
//! using the account, or several tasks share a partition); they grow back linearly to
//! the budget in 20 s.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

/// How one pacer behaves.
#[derive(Debug, Clone, Serialize)]
pub struct PacerSettings {
    /// The budget, entities per second (for the worker pacer: of the whole account,
    /// shared by the live workers).
    pub budget: f64,
    /// Lowest rate.
    pub floor: f64,
    /// Factor applied on a 503.
    pub decrease: f64,
    /// After a decrease the rate grows back by this fraction of the budget per second.
    pub recovery_per_second: f64,
    /// At most one decrease per this long (503s already in flight are one signal).
    pub cool_down: Duration,
}

impl PacerSettings {
    /// One per worker: its share of the account's 20,000 entities/s.
    pub fn account() -> Self {
        PacerSettings {
            budget: 0.95 * 20_000.0,
            floor: 10.0,
            decrease: 0.5,
            recovery_per_second: 0.05,
            cool_down: Duration::from_secs(1),
        }
    }

    /// One per task: its partition's 2,000 entities/s.
    pub fn partition() -> Self {
        PacerSettings {
            budget: 0.95 * 2_000.0,
            ..Self::account()
        }
    }
}

/// A rate limit that spaces requests by their entity count.
#[derive(Debug)]
pub struct Pacer {
    settings: PacerSettings,
    cap: f64,
    rate: f64,
    next_free: Instant,
    updated: Instant,
    last_cut: Option<Instant>,
}

impl Pacer {
    /// A pacer at its full budget.
    pub fn new(settings: PacerSettings, now: Instant) -> Self {
        Pacer {
            cap: settings.budget,
            rate: settings.budget,
            settings,
            next_free: now,
            updated: now,
            last_cut: None,
        }
    }

    /// The current rate, entities per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Takes `fraction` of the budget (a worker's share of the account).
    pub fn share(&mut self, fraction: f64, now: Instant) {
        self.recover(now);
        self.cap = (self.settings.budget * fraction).max(self.settings.floor);
        self.rate = self.rate.min(self.cap);
    }

    /// Sends nothing before `at` (a random phase at start).
    pub fn hold_until(&mut self, at: Instant) {
        self.next_free = self.next_free.max(at);
    }

    fn recover(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.updated).as_secs_f64();
        self.updated = now;
        let step = self.cap * self.settings.recovery_per_second * dt;
        self.rate = (self.rate + step).min(self.cap);
    }

    /// Books a request of `entities` and says when it may be sent: requests leave no
    /// closer than `entities / rate` apart (an idle pacer saves up nothing).
    pub fn reserve(&mut self, entities: u64, now: Instant) -> Instant {
        self.recover(now);
        let start = self.next_free.max(now);
        self.next_free = start + Duration::from_secs_f64(entities.max(1) as f64 / self.rate);
        start
    }

    /// The service answered 503.
    pub fn throttled(&mut self, now: Instant) {
        self.recover(now);
        if self
            .last_cut
            .is_some_and(|t| now.saturating_duration_since(t) < self.settings.cool_down)
        {
            return;
        }
        self.last_cut = Some(now);
        self.rate = (self.rate * self.settings.decrease).max(self.settings.floor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_requests_shares_the_budget_and_recovers() {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacerSettings::partition(), t0);
        assert_eq!(p.reserve(950, t0), t0);
        assert_eq!(p.reserve(950, t0), t0 + Duration::from_millis(500));
        p.throttled(t0);
        assert_eq!(p.rate(), 950.0);
        p.throttled(t0 + Duration::from_millis(100)); // within the cool-down
        assert!((p.rate() - 959.5).abs() < 1e-6, "{}", p.rate());
        p.reserve(1, t0 + Duration::from_secs(60));
        assert_eq!(p.rate(), 1900.0, "back to the budget, never above");
        let mut w = Pacer::new(PacerSettings::account(), t0);
        w.share(0.25, t0);
        assert_eq!(w.rate(), 4750.0);
    }
}
