//! A discrete-event simulation of tablevault against Azure Table Storage's published
//! scalability targets, run in virtual time: every run is a current-thread tokio
//! runtime on a paused clock that jumps to the next timer whenever all tasks wait, so a
//! 10-million-entity backup that takes minutes of virtual time takes seconds of real
//! time. `tablevault-bench simulate` prints the results.
//!
//! # The model
//!
//! * **Table** (`table.rs`): N entities over P partitions (default N / 10,000), numbered in
//!   key order. Partition `i` holds `n_i ∝ hot(i)·(1 + 3u_i³)` entities (seeded `u_i`;
//!   the first tenth of the key space 5× denser). Only the P + 1 prefix sums exist, so
//!   memory does not grow with N.
//! * **Service** (`service.rs`): a token bucket per partition (2,000 entities/s) and one for
//!   the account (20,000 entities/s), each holding one second's worth. A query page or
//!   batch of `n` entities is served iff both buckets hold `n` tokens, and takes them;
//!   otherwise it gets `503 ServerBusy` and takes nothing. Every answer takes 5–30 ms
//!   (uniform, seeded). No `Retry-After` unless configured (Azure is not known to send
//!   one). Queue and blob traffic goes to other services and is not limited.
//! * **Client** (`retry.rs`): every 503 is retried like the product's `RetryPolicy::default()`
//!   (200 ms doubling to 30 s, plus up to 100% jitter, 10 retries) within the 90 s
//!   operation deadline. An operation that runs out fails its task's attempt: the
//!   message comes back after 5 s × deliveries (at most 120 s) and is poisoned after 5
//!   deliveries, as in the product.
//! * **Workers**: each runs `tasks_per_worker` (4) tasks at once; an idle slot polls the
//!   queue again after 100 ms doubling to the product's `MAX_POLL_INTERVAL` (1 s), like
//!   the real poll loop.
//! * **Backup** (`backup.rs`): planned as the product plans it (`--plan`): a table's first
//!   backup is one task; later ones start from ranges of equal entity counts cut from
//!   the last backup (one per 10,000 entities, at most one per task slot of the workers
//!   that wrote it and at least 32); `probed` is `--ranges`
//!   (`8 × workers` ranges of equal key span, so of unequal size). Tasks are enqueued
//!   shuffled. A task reads its range in pages of ≤ 1,000 entities that also
//!   end at partition boundaries, one page at a time. **Dynamic splitting**, as the
//!   product does it: after a page that leaves more to read, at most every 200 ms (and
//!   right after a split), a task peeks at the queue; if no message waits and at least
//!   2,000 entities remain, it spends eight round trips on probes, then cuts the
//!   remainder where both tasks end with about as many entities (rounded to the
//!   nearest partition boundary when it spans several partitions), puts the upper part
//!   on the queue and stops there. The simulation knows the exact counts the product
//!   estimates from key density. `--split-after N` replaces this with a fixed rule:
//!   split the middle off after every N entities read while twice N remain.
//! * **Restore** (`restore.rs`): one task per block of 4,000 entities in key order,
//!   enqueued shuffled (generated lazily). A task sends its batches (≤ 100 entities of one
//!   partition) with up to 8 in flight (`--batches-in-flight`; the product's constant is
//!   16, with much the same results); every batch of a worker holds a unit of that
//!   worker's real [`tablevault_worker::limiter::AdaptiveLimit`] (8, 1, 64: the
//!   product's) across its retries, reports `success()`, and every retry reaches the
//!   limiter's `RetryObserver`, as in the product.
//! * **Policies**: `product` is the above, plus the product's rate pacing
//!   (`tablevault_worker::pacer`): before each page or batch (not each retry, which the
//!   client sends on its own) the task's pacer (1,900 entities/s) and the worker's account
//!   pacer (slow start, then growth scaled by its share of 20,000/s, ×0.7 per throttling
//!   episode, retries booked against it), held to its share of 95% of 20,000/s among
//!   the live workers: as a task starts and every 3 s while it runs, a worker whose last
//!   listing of the job's heartbeats is older than 3 s (while the count changes) or 25 s
//!   lists them again after one request's latency; a worker is live while it has a task
//!   in flight (its heartbeat is written at once then, and marked idle when its last
//!   task ends; the product waits 2 s for another task first, not modelled). `paced` (`pacer.rs`, a prototype) adds, in front
//!   of every try of backup reads and restore writes alike, a per-task pacer at 95% of
//!   the partition's 2,000 entities/s and a per-worker pacer at its share of 95% of the
//!   account's 20,000/s, in proportion to its tasks in flight among all workers'
//!   (re-counted every 5 s, as heartbeats could tell), both halved on a 503 and
//!   recovering to budget in 20 s.
//!
//! # What it leaves out
//!
//! Real Azure throttles on more than entity counts (request rate, bandwidth, partition
//! server load balancing that moves hot partitions) and may answer slowly instead of
//! with 503; its buckets' burst sizes are unpublished (one second here). Latency does
//! not grow with load. Blob uploads, block packing, decoding, queue limits, leases,
//! crashes and redelivery of live messages are not modelled; every entity is 1 KiB.
//!
//! # What it shows
//!
//! With the product policy, from 4 workers on, over seeds 1-3, restore runs at 91-95% of
//! the account's limit, a repeat backup at 92-94% and a first backup at 91-94%, with at
//! most 0.5% of requests answered 503 (the README has the table). What a first backup
//! loses at 64 workers is its ramp-up (work reaches workers only as tasks split, and
//! the fleet overshoots the account while its heartbeat counts catch up with its
//! growth) and its tail (the last large partitions are each read by one task at a
//! partition's rate).

mod backup;
mod engine;
mod pacer;
mod restore;
mod retry;
mod service;
mod table;

use std::fmt::Write as _;
use std::str::FromStr;
use tablevault_core::protocol::DEFAULT_WORKER_CONCURRENCY;

use serde::Serialize;

pub use backup::simulate_backup;
pub use pacer::PacerSettings;
pub use restore::simulate_restore;
pub use retry::Backoff;
pub use service::Limits;

/// How workers hold back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// As built: the real `AdaptiveLimit` of each worker (its account `RatePacer` started
    /// at the worker's seeded phase, and a fixed per-task partition pacer) paces every
    /// backup page and restore batch once per operation; 503s are retried by
    /// `RetryPolicy` and reported to the limiter as the client's `RetryObserver` does.
    Product,
    /// The prototype: the product plus rate pacers per task (the partition's budget)
    /// and per worker (a share of the account's budget).
    Paced,
}

impl FromStr for Policy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "product" => Ok(Policy::Product),
            "paced" => Ok(Policy::Paced),
            _ => Err(format!("unknown policy {s:?} (product or paced)")),
        }
    }
}

/// How the backup's tasks are planned: what the coordinator gives the workers to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Plan {
    /// The product's first backup of a table: one task for the whole table, which the
    /// workers split as they go.
    First,
    /// The product's next backups by a fleet of daemons that also wrote the last
    /// backup: ranges of equal entity counts from it, one per 10,000 entities, at most
    /// one per task slot (4 per worker; at least 32, at most 256;
    /// `plan::previous::task_count`).
    Repeat,
    /// `--ranges N` (probed planning): `8 × workers` ranges of equal key span, so of
    /// unequal size.
    Probed,
}

impl FromStr for Plan {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first" => Ok(Plan::First),
            "repeat" => Ok(Plan::Repeat),
            "probed" => Ok(Plan::Probed),
            _ => Err(format!("unknown plan {s:?} (first, repeat or probed)")),
        }
    }
}

impl Plan {
    fn name(self) -> &'static str {
        match self {
            Plan::First => "first backup",
            Plan::Repeat => "repeat backup",
            Plan::Probed => "probed ranges",
        }
    }
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::Product => "product",
            Policy::Paced => "paced",
        }
    }
}

/// One run's settings.
#[derive(Debug, Clone, Serialize)]
pub struct SimConfig {
    /// N.
    pub entities: u64,
    /// P.
    pub partitions: u32,
    /// Worker processes.
    pub workers: usize,
    /// Tasks each worker runs at once.
    pub tasks_per_worker: usize,
    /// Backup: how tasks are planned.
    pub plan: Plan,
    /// Backup: initial ranges per worker (`Plan::Probed`).
    pub ranges_per_worker: usize,
    /// Backup: most entities per query page.
    pub page_size: u64,
    /// Backup: when a task splits its unread remainder.
    pub split: SplitRule,
    /// Restore: entities per block (one task each).
    pub block_entities: u64,
    /// Restore: most entities per batch.
    pub batch_size: u64,
    /// Restore: batches one task keeps in flight.
    pub batches_in_flight: usize,
    /// Restore: the worker's `AdaptiveLimit` (initial, min, max).
    pub limiter: (usize, usize, usize),
    /// Product or prototype.
    pub policy: Policy,
    /// The service.
    pub limits: Limits,
    /// The client's retries.
    pub backoff: Backoff,
    /// Deliveries before a task is poisoned.
    pub max_attempts: u32,
    /// The job's `--max-rate`: most entities per second for the whole fleet.
    pub max_rate: Option<u32>,
    /// Paced: each worker's pacer.
    pub account_pacer: PacerSettings,
    /// Paced: each task's pacer.
    pub partition_pacer: PacerSettings,
    /// Paced: how often workers learn every worker's tasks in flight (heartbeats).
    pub share_every_seconds: u64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl SimConfig {
    /// The defaults for `entities` and `workers`.
    pub fn new(entities: u64, workers: usize, policy: Policy) -> Self {
        SimConfig {
            entities,
            partitions: (entities / 10_000).clamp(1, u64::from(u32::MAX)) as u32,
            workers,
            tasks_per_worker: DEFAULT_WORKER_CONCURRENCY,
            plan: Plan::First,
            ranges_per_worker: 8,
            page_size: 1_000,
            split: SplitRule::WhenIdle,
            block_entities: 4_000,
            batch_size: 100,
            batches_in_flight: 8,
            limiter: (8, 1, 64),
            policy,
            limits: Limits::default(),
            backoff: Backoff::product(),
            max_attempts: 5,
            max_rate: None,
            account_pacer: PacerSettings::account(),
            partition_pacer: PacerSettings::partition(),
            share_every_seconds: 5,
            seed: 1,
        }
    }
}

/// When a backup task splits its unread remainder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SplitRule {
    /// The product's: after a page that leaves more to read, at most every 200 ms (and
    /// right after a split), if a Peek Messages finds the queue empty, after the probes
    /// a split sends; the cut leaves both tasks about as many entities
    /// (`tablevault_core::split::balanced_share`), and a remainder under
    /// `MIN_SPLIT_ENTITIES` is kept.
    WhenIdle,
    /// After every this many entities read since the task started or last split, if
    /// the remainder is at least twice that; the cut is the middle.
    Every(u64),
}

/// Min, mean and max of a level.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Level {
    /// Lowest.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Highest.
    pub max: f64,
}

/// Ten virtual seconds of a run.
#[derive(Debug, Clone, Serialize)]
pub struct SeriesPoint {
    /// Virtual seconds since the start (end of the window).
    pub t: f64,
    /// Entities served in the window, per second.
    pub entities_per_second: f64,
    /// 503s per request in the window.
    pub busy_share: f64,
    /// The workers' limiter levels at `t`.
    pub limit: Option<Level>,
    /// The workers' pacer rates at `t` (paced only).
    pub rate: Option<Level>,
}

/// Backup specifics.
#[derive(Debug, Clone, Serialize)]
pub struct BackupDetails {
    /// Ranges planned.
    pub initial_tasks: u64,
    /// Ranges committed (planned + split off).
    pub tasks: u64,
    /// Splits.
    pub splits: u64,
    /// Query pages served.
    pub pages: u64,
    /// The largest committed task's share of the table.
    pub largest_task_share: f64,
    /// The largest planned range's share (what it would be without splitting).
    pub largest_initial_share: f64,
    /// Entities read, failed attempts included.
    pub entities_read: u64,
    /// Entities read by attempts that failed.
    pub wasted_reads: u64,
}

/// Restore specifics.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreDetails {
    /// Block tasks.
    pub tasks: u64,
    /// Batches written.
    pub batches: u64,
    /// Entities written, failed attempts included.
    pub entities_written: u64,
    /// Throttling signals the limiters received.
    pub limiter_throttles: u64,
}

/// One run's results.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// `backup` or `restore`.
    pub kind: &'static str,
    /// Policy.
    pub policy: Policy,
    /// Backup: how its tasks were planned.
    pub plan: Option<Plan>,
    /// Workers.
    pub workers: usize,
    /// N.
    pub entities: u64,
    /// P.
    pub partitions: u32,
    /// Virtual seconds until every task was done.
    pub virtual_seconds: f64,
    /// Entities backed up or restored (each once) per virtual second.
    pub entities_per_second: f64,
    /// Of the account's 20,000/s.
    pub account_fraction: f64,
    /// Table requests.
    pub requests: u64,
    /// 503s.
    pub busy: u64,
    /// 503s from a partition's bucket.
    pub busy_partition: u64,
    /// 503s from the account's bucket.
    pub busy_account: u64,
    /// 503s per request.
    pub busy_share: f64,
    /// Retries after 503.
    pub retries: u64,
    /// Operations whose retries ran out.
    pub gave_up: u64,
    /// Task attempts that failed.
    pub failed_attempts: u64,
    /// Tasks poisoned.
    pub poisoned: u64,
    /// Limiter level over the run (every worker, every virtual second).
    pub limit: Option<Level>,
    /// Pacer rate over the run (paced).
    pub rate: Option<Level>,
    /// Every 10 virtual seconds.
    pub series: Vec<SeriesPoint>,
    /// Backup specifics.
    pub backup: Option<BackupDetails>,
    /// Restore specifics.
    pub restore: Option<RestoreDetails>,
    /// Broken invariants (empty when the run is sound).
    pub problems: Vec<String>,
    /// Real seconds the simulation took.
    pub wall_seconds: f64,
}

impl RunReport {
    fn new<T: 'static>(
        kind: &'static str,
        e: &engine::Engine<T>,
        seconds: f64,
        done: u64,
        problems: Vec<String>,
    ) -> Self {
        let s = e.service.borrow().counts.clone();
        let c = e.counts.borrow().clone();
        let eps = done as f64 / seconds.max(1e-9);
        let mut problems = problems;
        if c.poisoned > 0 {
            problems.insert(
                0,
                format!("{} task(s) poisoned, {kind} incomplete", c.poisoned),
            );
        }
        RunReport {
            kind,
            policy: e.cfg.policy,
            plan: (kind == "backup").then_some(e.cfg.plan),
            workers: e.cfg.workers,
            entities: e.table.entities(),
            partitions: e.table.partitions(),
            virtual_seconds: seconds,
            entities_per_second: eps,
            account_fraction: eps / e.cfg.limits.account_per_second,
            requests: s.requests,
            busy: s.busy(),
            busy_partition: s.busy_partition,
            busy_account: s.busy_account,
            busy_share: s.busy() as f64 / s.requests.max(1) as f64,
            retries: c.retries,
            gave_up: c.gave_up,
            failed_attempts: c.failed_attempts,
            poisoned: c.poisoned,
            limit: (kind == "restore").then(|| e.limit_level()).flatten(),
            rate: e.rate_level(),
            series: e.series(),
            backup: None,
            restore: None,
            problems,
            wall_seconds: 0.0,
        }
    }

    /// Whether this run meets the product's goals: ≥ 90% of the account's rate (asked of
    /// 16 or more workers, where it is reachable) and fewer than 1% of requests 503.
    pub fn meets_goals(&self) -> bool {
        (self.workers < 16 || self.account_fraction >= 0.9) && self.busy_share < 0.01
    }
}

/// Peak RSS at one table size.
#[derive(Debug, Clone, Serialize)]
pub struct RssProbe {
    /// N.
    pub entities: u64,
    /// `VmHWM` after a backup and a restore of N entities, bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Whether the high-water mark was reset before the probe (`/proc/self/clear_refs`);
    /// if not, it is the process's peak so far (probes run smallest first).
    pub reset: bool,
}

/// What `tablevault-bench simulate` was asked for.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// N.
    pub entities: u64,
    /// P (default N / 10,000).
    pub partitions: Option<u32>,
    /// Worker counts.
    pub workers: Vec<usize>,
    /// Policies to compare.
    pub policies: Vec<Policy>,
    /// Backup plans to run.
    pub plans: Vec<Plan>,
    /// Tasks per worker.
    pub tasks_per_worker: usize,
    /// Restore batches in flight per task.
    pub batches_in_flight: usize,
    /// Backup: split every this many entities instead of the product's rule.
    pub split_after: Option<u64>,
    /// A `Retry-After` the service sends with every 503 (Azure: none known).
    pub retry_after: Option<std::time::Duration>,
    /// The share of the account other clients use throughout.
    pub production_load: f64,
    /// The job's `--max-rate`.
    pub max_rate: Option<u32>,
    /// Table sizes of the RSS probes (none: skip).
    pub rss_sizes: Vec<u64>,
    /// Seed.
    pub seed: u64,
    /// Print JSON.
    pub json: bool,
}

/// Everything one `simulate` command measured.
#[derive(Debug, Clone, Serialize)]
pub struct SimResults {
    /// The service model.
    pub limits: Limits,
    /// Every run.
    pub runs: Vec<RunReport>,
    /// Peak RSS by table size.
    pub rss: Vec<RssProbe>,
    /// Workers of the RSS probes.
    pub rss_workers: usize,
    /// Policy of the RSS probes.
    pub rss_policy: Policy,
}

impl SimOptions {
    fn config(&self, entities: u64, workers: usize, policy: Policy) -> SimConfig {
        let mut c = SimConfig::new(entities, workers, policy);
        if let Some(p) = self.partitions.filter(|_| entities == self.entities) {
            c.partitions = p;
        }
        c.tasks_per_worker = self.tasks_per_worker;
        c.batches_in_flight = self.batches_in_flight;
        c.split = self
            .split_after
            .map_or(SplitRule::WhenIdle, SplitRule::Every);
        c.limits.retry_after = self.retry_after;
        c.limits.production_load = self.production_load;
        c.max_rate = self.max_rate;
        c.seed = self.seed;
        c
    }
}

/// Runs the simulations and prints their results (a table, or JSON).
pub fn run(opts: &SimOptions) -> anyhow::Result<()> {
    // RSS first and smallest first, so a high-water mark that cannot be reset still
    // shows whether a larger table needs more memory.
    let mut rss = Vec::new();
    let probe_workers = opts.workers.iter().copied().max().unwrap_or(16).min(16);
    let probe_policy = opts.policies.first().copied().unwrap_or(Policy::Product);
    let mut sizes = opts.rss_sizes.clone();
    sizes.sort_unstable();
    for &size in &sizes {
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let cfg = opts.config(size, probe_workers, probe_policy);
        let b = simulate_backup(&cfg);
        let r = simulate_restore(&cfg);
        rss.push(RssProbe {
            entities: size,
            peak_rss_bytes: peak_rss_bytes(),
            reset,
        });
        if !opts.json {
            eprintln!(
                "rss probe: {size} entities: backup {:.0} + restore {:.0} virtual s in {:.1} s",
                b.virtual_seconds,
                r.virtual_seconds,
                b.wall_seconds + r.wall_seconds
            );
        }
    }
    let mut runs = Vec::new();
    for &policy in &opts.policies {
        let backups = opts.plans.iter().map(|&plan| ("backup", Some(plan)));
        for (kind, plan) in backups.chain([("restore", None)]) {
            for &w in &opts.workers {
                let mut cfg = opts.config(opts.entities, w, policy);
                let report = match plan {
                    Some(plan) => {
                        cfg.plan = plan;
                        simulate_backup(&cfg)
                    }
                    None => simulate_restore(&cfg),
                };
                if !opts.json {
                    eprintln!(
                        "{kind} {} {w} workers: {:.0} virtual s in {:.1} s",
                        policy.name(),
                        report.virtual_seconds,
                        report.wall_seconds
                    );
                }
                runs.push(report);
            }
        }
    }
    let results = SimResults {
        limits: opts.config(opts.entities, 1, Policy::Product).limits,
        runs,
        rss,
        rss_workers: probe_workers,
        rss_policy: probe_policy,
    };
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", render(&results));
    }
    Ok(())
}

/// Peak resident set size of this process (`VmHWM`), bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn pct(x: f64) -> String {
    if x > 0.0 && x < 0.001 {
        format!("{:.3}%", x * 100.0)
    } else {
        format!("{:.1}%", x * 100.0)
    }
}

fn level(l: Option<Level>, digits: usize) -> String {
    l.map_or("-".into(), |l| {
        format!("{:.d$}/{:.d$}/{:.d$}", l.min, l.mean, l.max, d = digits)
    })
}

/// The human-readable results.
pub fn render(results: &SimResults) -> String {
    let mut out = String::new();
    let l = &results.limits;
    let _ = writeln!(
        out,
        "Model: {:.0} entities/s per partition, {:.0}/s per account ({} s bursts), {}-{} ms per request, 503 beyond.",
        l.partition_per_second,
        l.account_per_second,
        l.burst_seconds,
        l.min_latency.as_millis(),
        l.max_latency.as_millis()
    );
    let mut groups: Vec<(&'static str, Policy, Option<Plan>)> = Vec::new();
    for r in &results.runs {
        if !groups.contains(&(r.kind, r.policy, r.plan)) {
            groups.push((r.kind, r.policy, r.plan));
        }
    }
    for (kind, policy, plan) in groups {
        let runs: Vec<&RunReport> = results
            .runs
            .iter()
            .filter(|r| r.kind == kind && r.policy == policy && r.plan == plan)
            .collect();
        let first = runs[0];
        let _ = writeln!(
            out,
            "\n{kind}{}, policy {}: {} entities over {} partitions",
            plan.map_or(String::new(), |p| format!(" ({})", p.name())),
            policy.name(),
            first.entities,
            first.partitions
        );
        let extra = if kind == "backup" {
            "tasks (split)  largest task"
        } else {
            "limit min/mean/max"
        };
        let _ = writeln!(
            out,
            "{:>7} {:>10} {:>10} {:>8} {:>9} {:>9} {:>8} {:>7} {:>12}  {extra}  rate/worker min/mean/max",
            "workers",
            "virtual s",
            "entities/s",
            "account",
            "503 share",
            "requests",
            "retries",
            "gave up",
            "failed (pois.)",
        );
        for r in &runs {
            let detail = match (&r.backup, &r.restore) {
                (Some(b), _) => format!(
                    "{:>5} ({:>4})  {} (planned {})",
                    b.tasks,
                    b.splits,
                    pct(b.largest_task_share),
                    pct(b.largest_initial_share)
                ),
                (_, Some(_)) => format!("{:>18}", level(r.limit, 1)),
                _ => String::new(),
            };
            let rate = format!("  {}", level(r.rate, 0));
            let _ = writeln!(
                out,
                "{:>7} {:>10.1} {:>10.0} {:>8} {:>9} {:>9} {:>8} {:>7} {:>12}  {detail}{rate}{}",
                r.workers,
                r.virtual_seconds,
                r.entities_per_second,
                pct(r.account_fraction),
                pct(r.busy_share),
                r.requests,
                r.retries,
                r.gave_up,
                format!("{} ({})", r.failed_attempts, r.poisoned),
                if r.problems.is_empty() {
                    String::new()
                } else {
                    format!("  PROBLEMS: {}", r.problems.join("; "))
                }
            );
        }
        if kind == "restore" {
            let _ = writeln!(
                out,
                "limiter level (mean over workers [min-max]) at t = 10 s, 20 s, ...; pacer rate per worker:",
            );
            for r in &runs {
                let step = r.series.len().div_ceil(24).max(1);
                let points: Vec<String> = r
                    .series
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| (i + 1).is_multiple_of(step))
                    .map(|(_, p)| {
                        let mut s = p.limit.map_or("-".into(), |l| {
                            format!("{:.1}[{:.0}-{:.0}]", l.mean, l.min, l.max)
                        });
                        if let Some(rate) = p.rate {
                            let _ = write!(s, "/{:.0}", rate.mean);
                        }
                        s
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "  {:>2} workers, every {} s: {}",
                    r.workers,
                    10 * step,
                    points.join(" ")
                );
            }
        }
        let verdicts: Vec<String> = runs
            .iter()
            .map(|r| {
                format!(
                    "{}w {}",
                    r.workers,
                    if r.meets_goals() { "ok" } else { "MISSED" }
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "goals (503 share < 1%; >= 90% of the account at >= 16 workers): {}",
            verdicts.join(", ")
        );
    }
    if !results.rss.is_empty() {
        let _ = writeln!(
            out,
            "\npeak RSS (VmHWM) after a backup and a restore ({} workers, policy {}):",
            results.rss_workers,
            results.rss_policy.name()
        );
        for p in &results.rss {
            let _ = writeln!(
                out,
                "  {:>10} entities: {}{}",
                p.entities,
                p.peak_rss_bytes
                    .map_or("?".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0)),
                if p.reset {
                    ""
                } else {
                    " (process peak so far)"
                }
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model's invariants on a small table, fast enough for debug builds.
    #[test]
    fn small_runs_keep_the_invariants() {
        for (policy, split, plan) in [
            (Policy::Product, SplitRule::WhenIdle, Plan::First),
            (Policy::Product, SplitRule::WhenIdle, Plan::Repeat),
            (Policy::Product, SplitRule::WhenIdle, Plan::Probed),
            (Policy::Product, SplitRule::Every(5_000), Plan::Probed),
            (Policy::Paced, SplitRule::Every(5_000), Plan::Probed),
        ] {
            let mut cfg = SimConfig::new(200_000, 4, policy);
            cfg.partitions = 40;
            cfg.split = split;
            cfg.plan = plan;

            let b = simulate_backup(&cfg);
            assert!(b.problems.is_empty(), "{:?}", b.problems);
            let d = b.backup.as_ref().unwrap();
            assert_eq!(b.failed_attempts, 0, "{b:?}");
            assert_eq!(d.entities_read, 200_000, "every entity read exactly once");
            assert!(d.splits > 0 && d.tasks == d.initial_tasks + d.splits);
            // The product's rule leaves a range of one partition whole (it is read at the
            // partition's rate either way), and that may be the largest.
            if split == SplitRule::WhenIdle {
                assert!(d.largest_task_share <= d.largest_initial_share, "{d:?}");
            } else {
                assert!(d.largest_task_share < d.largest_initial_share, "{d:?}");
            }
            assert!(b.busy_share < 0.6, "{policy:?} backup: {}", b.busy_share);

            let r = simulate_restore(&cfg);
            assert!(r.problems.is_empty(), "{:?}", r.problems);
            assert_eq!(r.failed_attempts, 0, "{r:?}");
            assert_eq!(r.restore.as_ref().unwrap().entities_written, 200_000);
            assert!(r.busy_share < 0.6, "{policy:?} restore: {}", r.busy_share);
            let limit = r.limit.expect("sampled");
            assert!(limit.min >= 1.0 && limit.max <= 64.0);
            if policy == Policy::Paced {
                assert!(b.busy_share < 0.05, "paced backup: {}", b.busy_share);
                assert!(r.busy_share < 0.05, "paced restore: {}", r.busy_share);
            }
        }
    }
}
