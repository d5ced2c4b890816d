//! The worker's Prometheus metrics: one registry per process, shared by every worker the
//! process runs, rendered in the text exposition format by [`crate::serve`].
//!
//! Tasks are counted by kind where they are settled, so the committed counters add up to
//! a job's report; every HTTP attempt is seen through the pipeline's
//! [`RequestObserver`] seam; the limiters' levels are read at scrape time.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tablevault_azure::{AttemptOutcome, RequestObserver, Service};
use tablevault_core::protocol::TaskKind;

use crate::limiter::AdaptiveLimit;

/// What a task does.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Kind {
    /// Reads a key range of a table into blobs.
    Backup,
    /// Writes a blob or block back into a table.
    Restore,
    /// A message that could not be decoded.
    Unknown,
}

impl EncodeLabelValue for Kind {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder,
    ) -> std::fmt::Result {
        use std::fmt::Write;
        encoder.write_str(match self {
            Kind::Backup => "backup",
            Kind::Restore => "restore",
            Kind::Unknown => "unknown",
        })
    }
}

impl Kind {
    /// The kind of a decoded task.
    pub fn of(kind: &TaskKind) -> Kind {
        match kind {
            TaskKind::Backup { .. } | TaskKind::Tables { .. } => Kind::Backup,
            TaskKind::Restore { .. } => Kind::Restore,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: Kind,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    service: &'static str,
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    service: &'static str,
    op: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabel {
    endpoint: String,
}

type LatencyFamily = Family<LatencyLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 5 ms to about 20 s: a point query to a throttled 4 MiB block upload.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.005, 2.0, 13,
    ))
}

/// Every metric a worker process exports.
pub struct WorkerMetrics {
    registry: Registry,
    claimed: Family<KindLabel, Counter>,
    committed: Family<KindLabel, Counter>,
    failed: Family<KindLabel, Counter>,
    poisoned: Family<KindLabel, Counter>,
    in_flight: Family<KindLabel, Gauge>,
    committed_entities: Family<KindLabel, Counter>,
    committed_bytes: Family<KindLabel, Counter>,
    entities: Family<KindLabel, Counter>,
    splits: Counter,
    requests: Family<RequestLabels, Counter>,
    throttled: Family<RequestLabels, Counter>,
    request_failures: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
    lease_renewals: Counter,
    leases_lost: Counter,
    limiter_concurrency: Family<EndpointLabel, Gauge>,
    limiter_rate: Family<EndpointLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    limiter_throttles: Family<EndpointLabel, Gauge>,
    limiters: Mutex<Vec<(String, Weak<AdaptiveLimit>)>>,
}

impl std::fmt::Debug for WorkerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkerMetrics")
    }
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerMetrics {
    /// A fresh registry with every metric registered (under the `tablevault_` prefix).
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tablevault");
        let mut m = WorkerMetrics {
            registry: Registry::default(),
            claimed: Family::default(),
            committed: Family::default(),
            failed: Family::default(),
            poisoned: Family::default(),
            in_flight: Family::default(),
            committed_entities: Family::default(),
            committed_bytes: Family::default(),
            entities: Family::default(),
            splits: Counter::default(),
            requests: Family::default(),
            throttled: Family::default(),
            request_failures: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            lease_renewals: Counter::default(),
            leases_lost: Counter::default(),
            limiter_concurrency: Family::default(),
            limiter_rate: Family::default(),
            limiter_throttles: Family::default(),
            limiters: Mutex::new(Vec::new()),
        };
        let r = &mut registry;
        r.register(
            "tasks_claimed",
            "Task messages claimed from the queue (every delivery), by kind",
            m.claimed.clone(),
        );
        r.register(
            "tasks_committed",
            "Tasks this process finished (its commit or restore record was written), by kind",
            m.committed.clone(),
        );
        r.register(
            "tasks_failed",
            "Task attempts that failed and were given back for a retry, by kind",
            m.failed.clone(),
        );
        r.register(
            "tasks_poisoned",
            "Tasks moved to the poison queue (they will not be retried), by kind",
            m.poisoned.clone(),
        );
        r.register(
            "tasks_in_flight",
            "Tasks being worked on now, by kind",
            m.in_flight.clone(),
        );
        r.register(
            "committed_entities",
            "Entities in the tasks this process committed, by kind",
            m.committed_entities.clone(),
        );
        r.register(
            "committed_bytes",
            "Stored (compressed) bytes of the backup tasks this process committed",
            m.committed_bytes.clone(),
        );
        r.register(
            "entities",
            "Entities read (backup) or written (restore) by all attempts, abandoned ones included",
            m.entities.clone(),
        );
        r.register(
            "tasks_split",
            "Backup ranges split while scanning to give idle workers work",
            m.splits.clone(),
        );
        r.register(
            "requests",
            "HTTP attempts to Azure Storage, by service and status (\"transport\": no answer)",
            m.requests.clone(),
        );
        r.register(
            "requests_throttled",
            "HTTP attempts the service refused as too busy (503, 429), by service and status",
            m.throttled.clone(),
        );
        r.register(
            "requests_failed",
            "HTTP attempts that failed (status 400 or more, or no answer), by service and status",
            m.request_failures.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Duration of HTTP attempts to Azure Storage, by service and operation",
            m.latency.clone(),
        );
        r.register(
            "lease_renewals",
            "Visibility extensions of claimed task messages",
            m.lease_renewals.clone(),
        );
        r.register(
            "leases_lost",
            "Task messages lost mid-task (extension refused or too late); another worker has them",
            m.leases_lost.clone(),
        );
        r.register(
            "limiter_concurrency",
            "The adaptive limiter's current number of concurrent requests, per Table endpoint",
            m.limiter_concurrency.clone(),
        );
        r.register(
            "limiter_rate_entities_per_second",
            "The adaptive limiter's current entity rate (0: unpaced), per Table endpoint",
            m.limiter_rate.clone(),
        );
        r.register(
            "limiter_throttles",
            "Throttling answers the adaptive limiter has seen, per Table endpoint",
            m.limiter_throttles.clone(),
        );
        // Every task counter exists from the start at 0, for both kinds: a counter that
        // first appears at 1 has no earlier sample, so `increase(...[30m]) > 0` missed a
        // worker's first poisoned task, usually its only one.
        for kind in [Kind::Backup, Kind::Restore] {
            let l = KindLabel { kind };
            for family in [
                &m.claimed,
                &m.committed,
                &m.failed,
                &m.poisoned,
                &m.committed_entities,
                &m.committed_bytes,
                &m.entities,
            ] {
                let _ = family.get_or_create(&l);
            }
            let _ = m.in_flight.get_or_create(&l);
        }
        m.registry = registry;
        m
    }

    /// A task message was claimed.
    pub fn claimed(&self, kind: Kind) {
        self.claimed.get_or_create(&KindLabel { kind }).inc();
    }

    /// A task was committed by this process with `entities` and `stored_bytes`.
    pub fn committed(&self, kind: Kind, entities: u64, stored_bytes: u64) {
        let l = KindLabel { kind };
        self.committed.get_or_create(&l).inc();
        self.committed_entities.get_or_create(&l).inc_by(entities);
        self.committed_bytes.get_or_create(&l).inc_by(stored_bytes);
    }

    /// An attempt failed and its task was given back for a retry.
    pub fn failed(&self, kind: Kind) {
        self.failed.get_or_create(&KindLabel { kind }).inc();
    }

    /// A task was poisoned.
    pub fn poisoned(&self, kind: Kind) {
        self.poisoned.get_or_create(&KindLabel { kind }).inc();
    }

    /// Entities read or written by an attempt.
    pub fn entities(&self, kind: Kind, n: u64) {
        self.entities.get_or_create(&KindLabel { kind }).inc_by(n);
    }

    /// `n` ranges were split off while scanning.
    pub fn split(&self, n: u64) {
        self.splits.inc_by(n);
    }

    /// A message's visibility was extended.
    pub fn lease_renewed(&self) {
        self.lease_renewals.inc();
    }

    /// A message was lost mid-task.
    pub fn lease_lost(&self) {
        self.leases_lost.inc();
    }

    /// Marks a task of `kind` as running until the guard drops.
    pub fn in_flight(self: &Arc<Self>, kind: Kind) -> InFlight {
        self.in_flight.get_or_create(&KindLabel { kind }).inc();
        InFlight {
            metrics: self.clone(),
            kind,
        }
    }

    /// Reports this limiter's level at every scrape while it lives.
    pub fn watch_limiter(&self, endpoint: &str, limiter: &Arc<AdaptiveLimit>) {
        self.limiters
            .lock()
            .expect("limiters lock")
            .push((endpoint.to_string(), Arc::downgrade(limiter)));
    }

    /// The text exposition of every metric, limiter levels read now.
    pub fn render(&self) -> String {
        {
            let mut limiters = self.limiters.lock().expect("limiters lock");
            limiters.retain(|(_, l)| l.strong_count() > 0);
            for (endpoint, limiter) in limiters.iter() {
                let Some(limiter) = limiter.upgrade() else {
                    continue;
                };
                let l = EndpointLabel {
                    endpoint: endpoint.clone(),
                };
                self.limiter_concurrency
                    .get_or_create(&l)
                    .set(limiter.current() as i64);
                self.limiter_rate.get_or_create(&l).set(limiter.rate());
                self.limiter_throttles
                    .get_or_create(&l)
                    .set(limiter.throttles() as i64);
            }
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// Counts a task as in flight while it lives.
pub struct InFlight {
    metrics: Arc<WorkerMetrics>,
    kind: Kind,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics
            .in_flight
            .get_or_create(&KindLabel { kind: self.kind })
            .dec();
    }
}

fn service_label(service: Service) -> &'static str {
    match service {
        Service::Blob => "blob",
        Service::Queue => "queue",
        Service::Table => "table",
    }
}

impl RequestObserver for WorkerMetrics {
    fn on_attempt(
        &self,
        service: Service,
        op: &'static str,
        outcome: AttemptOutcome,
        elapsed: Duration,
    ) {
        let service = service_label(service);
        let labels = RequestLabels {
            service,
            status: match outcome {
                AttemptOutcome::Status(s) => s.to_string(),
                AttemptOutcome::Transport => "transport".into(),
            },
        };
        self.requests.get_or_create(&labels).inc();
        if outcome.is_throttled() {
            self.throttled.get_or_create(&labels).inc();
        }
        if outcome.is_failure() {
            self.request_failures.get_or_create(&labels).inc();
        }
        self.latency
            .get_or_create(&LatencyLabels { service, op })
            .observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads one sample's value from an exposition.
    pub(crate) fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
    }

    /// Regression: task counters appeared only at their first event, so an alert on
    /// `increase(tablevault_tasks_poisoned_total[30m]) > 0` never saw a first poisoning.
    #[test]
    fn task_counters_start_at_zero_for_both_kinds() {
        let text = WorkerMetrics::new().render();
        for kind in ["backup", "restore"] {
            for name in ["claimed", "committed", "failed", "poisoned"] {
                assert_eq!(
                    sample(
                        &text,
                        &format!("tablevault_tasks_{name}_total{{kind=\"{kind}\"}}")
                    ),
                    Some(0.0),
                    "{name} {kind}"
                );
            }
        }
    }

    #[test]
    fn counts_render_with_kind_service_and_status_labels() {
        let m = Arc::new(WorkerMetrics::new());
        m.claimed(Kind::Backup);
        m.claimed(Kind::Backup);
        m.committed(Kind::Backup, 120, 4096);
        m.poisoned(Kind::Restore);
        {
            let _running = m.in_flight(Kind::Restore);
            let text = m.render();
            assert_eq!(
                sample(&text, "tablevault_tasks_in_flight{kind=\"restore\"}"),
                Some(1.0)
            );
        }
        m.on_attempt(
            Service::Table,
            "Query Entities",
            AttemptOutcome::Status(503),
            Duration::from_millis(20),
        );
        m.on_attempt(
            Service::Blob,
            "Put Block",
            AttemptOutcome::Status(201),
            Duration::from_millis(8),
        );
        m.on_attempt(
            Service::Queue,
            "Get Messages",
            AttemptOutcome::Transport,
            Duration::from_millis(1),
        );
        let limiter = AdaptiveLimit::new(4, 1, 64);
        m.watch_limiter("http://127.0.0.1:10002/acct", &limiter);
        let text = m.render();
        let v = |s: &str| sample(&text, s);
        assert_eq!(
            v("tablevault_tasks_claimed_total{kind=\"backup\"}"),
            Some(2.0)
        );
        assert_eq!(
            v("tablevault_committed_entities_total{kind=\"backup\"}"),
            Some(120.0)
        );
        assert_eq!(
            v("tablevault_tasks_poisoned_total{kind=\"restore\"}"),
            Some(1.0)
        );
        assert_eq!(v("tablevault_tasks_in_flight{kind=\"restore\"}"), Some(0.0));
        assert_eq!(
            v("tablevault_requests_throttled_total{service=\"table\",status=\"503\"}"),
            Some(1.0)
        );
        assert_eq!(
            v("tablevault_requests_failed_total{service=\"queue\",status=\"transport\"}"),
            Some(1.0)
        );
        assert_eq!(
            v("tablevault_requests_failed_total{service=\"blob\",status=\"201\"}"),
            None
        );
        assert_eq!(
            v("tablevault_request_duration_seconds_count{service=\"blob\",op=\"Put Block\"}"),
            Some(1.0)
        );
        assert_eq!(
            v("tablevault_limiter_concurrency{endpoint=\"http://127.0.0.1:10002/acct\"}"),
            Some(4.0)
        );
        drop(limiter);
        assert_eq!(
            sample(
                &m.render(),
                "tablevault_limiter_concurrency{endpoint=\"http://127.0.0.1:10002/acct\"}"
            ),
            Some(4.0),
            "a dropped limiter's last level stays (a gauge is not removed)"
        );
    }
}
