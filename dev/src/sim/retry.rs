//! Retries as the product makes them: `RetryPolicy::default()`'s numbers and `backon`'s
//! exponential backoff with jitter, re-implemented on the simulation's seeded generator
//! (the real policy's jitter is unseeded), inside the client's per-operation deadline.

use std::time::Duration;

use serde::Serialize;
use tablevault_azure::RetryPolicy;
use tokio::time::Instant;

use super::table::Rng;

/// How patiently one operation is retried.
#[derive(Debug, Clone, Serialize)]
pub struct Backoff {
    /// Retries after the first try.
    pub max_retries: usize,
    /// Delay before the first retry, before jitter.
    pub min_delay: Duration,
    /// Cap of the exponential delay before jitter (and of a server-requested delay).
    pub max_delay: Duration,
    /// The whole operation, tries and sleeps, ends by then (`ClientOptions::deadline`).
    pub deadline: Duration,
}

impl Backoff {
    /// The product's defaults: `RetryPolicy::default()` and the 90 s `--deadline`.
    pub fn product() -> Self {
        let p = RetryPolicy::default();
        Backoff {
            max_retries: p.max_retries,
            min_delay: p.min_delay,
            max_delay: p.max_delay,
            deadline: Duration::from_secs(90),
        }
    }
}

/// One operation's retry state.
#[derive(Debug)]
pub struct Retrying {
    retries: usize,
    current: Option<Duration>,
    started: Instant,
}

impl Retrying {
    /// An operation whose first try starts at `now`.
    pub fn new(now: Instant) -> Self {
        Retrying {
            retries: 0,
            current: None,
            started: now,
        }
    }

    /// After a 503 at `now`: `Ok(delay)` before the next try, or `Err(wait)` when the
    /// operation fails after `wait` (retries spent: at once; the deadline would pass
    /// during the delay: when it passes).
    ///
    /// As `backon`: the base delay starts at `min_delay` and doubles up to `max_delay`;
    /// jitter adds a uniform fraction of it; a server-requested delay replaces a shorter
    /// one, capped at `max_delay`, and then the client's observer may lengthen it, up to
    /// `max_delay` (`RetryPolicy::run`'s `adjust`: `observe` stands for its
    /// `RetryObserver::on_retry`).
    pub fn after_busy(
        &mut self,
        policy: &Backoff,
        rng: &mut Rng,
        retry_after: Option<Duration>,
        now: Instant,
        observe: impl FnOnce(Duration) -> Duration,
    ) -> Result<Duration, Duration> {
        if self.retries >= policy.max_retries {
            return Err(Duration::ZERO);
        }
        self.retries += 1;
        let base = match self.current {
            None => policy.min_delay,
            Some(cur) => (cur * 2).min(policy.max_delay),
        };
        self.current = Some(base);
        let mut delay = base + base.mul_f64(rng.unit());
        if let Some(asked) = retry_after {
            delay = asked.max(delay).min(policy.max_delay);
        }
        delay = observe(delay).min(policy.max_delay).max(delay);
        let elapsed = now.saturating_duration_since(self.started);
        if elapsed + delay >= policy.deadline {
            return Err(policy.deadline.saturating_sub(elapsed));
        }
        Ok(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_with_jitter_then_gives_up() {
        let policy = Backoff::product();
        let mut rng = Rng::new(1);
        let t0 = Instant::now();
        let mut r = Retrying::new(t0);
        let mut at = t0;
        let mut delays = Vec::new();
        while let Ok(d) = r.after_busy(&policy, &mut rng, None, at, |d| d) {
            delays.push(d);
            at += d;
        }
        let base = [200u64, 400, 800, 1600];
        for (d, b) in delays.iter().zip(base) {
            let ms = d.as_millis() as u64;
            assert!((b..=2 * b).contains(&ms), "{ms} for base {b}");
        }
        // The 90 s deadline ends it before the tenth retry would.
        assert!(delays.len() < policy.max_retries, "{}", delays.len());
    }
}
