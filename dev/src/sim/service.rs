//! The simulated Table service: token buckets per partition and per account, 503
//! ServerBusy beyond them, and a random latency per answer.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::table::Rng;

/// The service's published targets and how the model applies them.
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    /// Entities per second one partition serves (Azure: up to 2,000 of 1 KiB).
    pub partition_per_second: f64,
    /// Entities per second the account serves (Azure: 20,000 transactions of 1 KiB).
    pub account_per_second: f64,
    /// Each bucket holds this many seconds of its rate (the burst it allows).
    pub burst_seconds: f64,
    /// Fastest answer.
    pub min_latency: Duration,
    /// Slowest answer.
    pub max_latency: Duration,
    /// A delay sent with every 503 (`Retry-After`); Azure is not known to send one.
    pub retry_after: Option<Duration>,
    /// The share of the account's rate other clients (the production application)
    /// use throughout, in `[0, 1)`: the backup or restore gets the rest.
    pub production_load: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            partition_per_second: 2_000.0,
            account_per_second: 20_000.0,
            burst_seconds: 1.0,
            min_latency: Duration::from_millis(5),
            max_latency: Duration::from_millis(30),
            retry_after: None,
            production_load: 0.0,
        }
    }
}

/// A token bucket: `rate` tokens per second, at most `capacity`.
#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    capacity: f64,
    rate: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: f64, burst: f64, now: Instant) -> Self {
        let capacity = (rate * burst).max(1.0);
        Bucket {
            tokens: capacity,
            capacity,
            rate,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
        self.at = now;
    }
}

/// Which target a 503 came from (the client cannot tell; the report can).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The partition's 2,000 entities/s.
    Partition,
    /// The account's 20,000 entities/s.
    Account,
}

/// The answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Served.
    Ok,
    /// 503 ServerBusy, with the server's requested delay if any.
    Busy {
        /// Which bucket was empty.
        scope: Scope,
        /// `Retry-After`.
        retry_after: Option<Duration>,
    },
}

/// Counts of what the service saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServiceCounts {
    /// Requests answered.
    pub requests: u64,
    /// Of those, 503 because a partition was over its target.
    pub busy_partition: u64,
    /// Of those, 503 because the account was over its target.
    pub busy_account: u64,
    /// Entities served (read or written).
    pub entities: u64,
}

impl ServiceCounts {
    /// All 503s.
    pub fn busy(&self) -> u64 {
        self.busy_partition + self.busy_account
    }
}

/// The account: one bucket for it, one per partition touched recently.
#[derive(Debug)]
pub struct Service {
    limits: Limits,
    account: Bucket,
    partitions: HashMap<u32, Bucket>,
    rng: Rng,
    /// What happened so far.
    pub counts: ServiceCounts,
}

impl Service {
    /// A rested account (every bucket full) at `now`.
    pub fn new(limits: Limits, seed: u64, now: Instant) -> Self {
        Service {
            account: Bucket::full(
                limits.account_per_second * (1.0 - limits.production_load.clamp(0.0, 0.99)),
                limits.burst_seconds,
                now,
            ),
            limits,
            partitions: HashMap::new(),
            rng: Rng::new(seed ^ 0x05e4_11ce),
            counts: ServiceCounts::default(),
        }
    }

    /// How long the next answer takes: uniform between the limits.
    pub fn latency(&mut self) -> Duration {
        let lo = self.limits.min_latency.as_micros() as u64;
        let hi = self.limits.max_latency.as_micros() as u64;
        Duration::from_micros(self.rng.below(lo, hi + 1))
    }

    /// A request for `entities` entities of `partition` (a query page or a batch)
    /// arriving at `now`: served iff both buckets hold that many tokens, which it then
    /// takes; a 503 takes nothing.
    pub fn request(&mut self, partition: u32, entities: u64, now: Instant) -> Answer {
        self.counts.requests += 1;
        if self.counts.requests.is_multiple_of(4096) {
            // A full bucket is the same as none: forget them, so memory follows the
            // partitions in use, not the table.
            self.partitions.retain(|_, b| {
                b.refill(now);
                b.tokens < b.capacity
            });
        }
        let n = entities as f64;
        let (rate, burst) = (self.limits.partition_per_second, self.limits.burst_seconds);
        let part = self
            .partitions
            .entry(partition)
            .or_insert_with(|| Bucket::full(rate, burst, now));
        part.refill(now);
        self.account.refill(now);
        let scope = if part.tokens < n {
            Some(Scope::Partition)
        } else if self.account.tokens < n {
            Some(Scope::Account)
        } else {
            None
        };
        match scope {
            Some(scope) => {
                match scope {
                    Scope::Partition => self.counts.busy_partition += 1,
                    Scope::Account => self.counts.busy_account += 1,
                }
                Answer::Busy {
                    scope,
                    retry_after: self.limits.retry_after,
                }
            }
            None => {
                part.tokens -= n;
                self.account.tokens -= n;
                self.counts.entities += entities;
                Answer::Ok
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refuse_beyond_their_rate_and_refill() {
        let t0 = Instant::now();
        let mut s = Service::new(Limits::default(), 1, t0);
        // One partition: a second's worth (2,000) is served, then 503.
        assert_eq!(s.request(7, 1000, t0), Answer::Ok);
        assert_eq!(s.request(7, 1000, t0), Answer::Ok);
        assert!(matches!(
            s.request(7, 100, t0),
            Answer::Busy {
                scope: Scope::Partition,
                ..
            }
        ));
        // Half a second later, 1,000 tokens are back.
        let later = t0 + Duration::from_millis(500);
        assert_eq!(s.request(7, 1000, later), Answer::Ok);
        // The account: 20,000 over many partitions, then 503.
        for p in 100..119 {
            assert_eq!(s.request(p, 1000, later), Answer::Ok);
        }
        assert!(matches!(
            s.request(200, 1000, later),
            Answer::Busy {
                scope: Scope::Account,
                ..
            }
        ));
        assert_eq!(s.counts.busy(), 2);
        let l = s.latency();
        assert!(l >= Duration::from_millis(5) && l <= Duration::from_millis(30));
    }

    #[test]
    fn production_load_leaves_the_rest_of_the_account() {
        let t0 = Instant::now();
        let limits = Limits {
            production_load: 0.3,
            ..Limits::default()
        };
        let mut s = Service::new(limits, 1, t0);
        // 14,000 of the 20,000 are left: 14 pages in distinct partitions, then 503.
        for p in 0..14 {
            assert_eq!(s.request(p, 1000, t0), Answer::Ok, "page {p}");
        }
        assert!(matches!(
            s.request(99, 1000, t0),
            Answer::Busy {
                scope: Scope::Account,
                ..
            }
        ));
        // And refilled at 14,000/s.
        let later = t0 + Duration::from_millis(500);
        for p in 100..107 {
            assert_eq!(s.request(p, 1000, later), Answer::Ok);
        }
        assert!(matches!(s.request(200, 1000, later), Answer::Busy { .. }));
    }
}
