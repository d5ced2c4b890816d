//! The backup simulation: range tasks scanned page by page, split while they run.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant as WallInstant};

use tablevault_core::split::balanced_share;

use tokio::task::LocalSet;
use tokio::time::Instant;

use super::engine::{Engine, Msg, Worker, paused_runtime};
use super::pacer::Pacer;
use super::table::{Rng, Table};
use super::{BackupDetails, Plan, Policy, RunReport, SimConfig, SplitRule};
use tablevault_coordinator::backup::default_ranges;
use tablevault_coordinator::plan::previous::task_count;

/// A range task: entities `lo..hi`.
#[derive(Debug, Clone, Copy)]
struct RangeTask {
    lo: u64,
    hi: u64,
}

/// What the backup's tasks did.
#[derive(Debug, Default)]
struct Progress {
    /// Committed ranges and the entities their committing attempt read.
    committed: Vec<(u64, u64, u64)>,
    /// Entities read by any attempt.
    read: u64,
    /// Entities read by attempts that failed.
    wasted: u64,
    pages: u64,
    splits: u64,
}

/// Runs one backup of `cfg.entities` with `cfg.workers` workers in virtual time.
pub fn simulate_backup(cfg: &SimConfig) -> RunReport {
    let wall = WallInstant::now();
    let cfg = cfg.clone();
    let mut report = paused_runtime().block_on(LocalSet::new().run_until(run(cfg)));
    report.wall_seconds = wall.elapsed().as_secs_f64();
    report
}

async fn run(cfg: SimConfig) -> RunReport {
    let table = Table::synthetic(cfg.entities, cfg.partitions, cfg.seed);
    let n = table.entities();
    let mut ranges = match cfg.plan {
        Plan::First => vec![(0, n)],
        Plan::Repeat => {
            // A fleet of daemons (the coordinator does not know its size) that also
            // wrote the last backup. The coordinator cuts at block starts; blocks are
            // small enough next to these ranges that exact counts change nothing.
            let tasks = task_count(n, default_ranges(0), false, cfg.workers);
            (0..tasks)
                .map(|k| (k * n / tasks, (k + 1) * n / tasks))
                .collect()
        }
        Plan::Probed => table.equal_span_ranges(cfg.ranges_per_worker.max(1) * cfg.workers.max(1)),
    };
    // The coordinator enqueues in shuffled order.
    let mut rng = Rng::new(cfg.seed ^ 0x0bac_c0de);
    for i in (1..ranges.len()).rev() {
        ranges.swap(i, rng.below(0, i as u64 + 1) as usize);
    }
    let initial = ranges.len();
    let largest_initial = ranges.iter().map(|(lo, hi)| hi - lo).max().unwrap_or(0);
    let fresh = Box::new(ranges.into_iter().map(|(lo, hi)| RangeTask { lo, hi }));
    let engine = Rc::new(Engine::new(cfg.clone(), table, fresh, initial as u64));
    let progress = Rc::new(RefCell::new(Progress::default()));
    let workers = Worker::fleet(&cfg, cfg.page_size);
    let (e, p) = (engine.clone(), progress.clone());
    let seconds = engine
        .drive(&workers, move |w, m| scan(e.clone(), w, p.clone(), m))
        .await;

    let p = progress.borrow();
    let mut problems = Vec::new();
    let mut committed = p.committed.clone();
    committed.sort_unstable();
    let mut at = 0;
    for &(lo, hi, read) in &committed {
        if lo != at {
            problems.push(format!(
                "committed ranges do not tile: {at} then {lo}..{hi}"
            ));
        }
        if read != hi - lo {
            problems.push(format!("task {lo}..{hi} read {read} entities"));
        }
        at = hi;
    }
    if at != n {
        problems.push(format!("committed ranges end at {at}, not {n}"));
    }
    let committed_reads: u64 = committed.iter().map(|c| c.2).sum();
    if committed_reads != n {
        problems.push(format!("committed attempts read {committed_reads} of {n}"));
    }
    let largest = committed
        .iter()
        .map(|(lo, hi, _)| hi - lo)
        .max()
        .unwrap_or(0);
    let mut report = RunReport::new("backup", &engine, seconds, p.read - p.wasted, problems);
    report.backup = Some(BackupDetails {
        initial_tasks: initial as u64,
        tasks: committed.len() as u64,
        splits: p.splits,
        pages: p.pages,
        largest_task_share: largest as f64 / n as f64,
        largest_initial_share: largest_initial as f64 / n as f64,
        entities_read: p.read,
        wasted_reads: p.wasted,
    });
    report
}

/// How often a task may peek at the queue to decide on a split, as the product's where
/// partitions are paced (on the emulator it looks at every page).
const SPLIT_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Round trips a split's `$top=1` probes take: the product probes only for what the
/// page read ahead does not show (whether a partition follows the current one) once
/// its task knows the table's ceiling.
const SPLIT_PROBES: usize = 1;

/// One attempt at one range task: page by page, splitting its unread remainder by
/// `cfg.split`.
async fn scan(
    e: Rc<Engine<RangeTask>>,
    worker: Rc<Worker>,
    progress: Rc<RefCell<Progress>>,
    m: Msg<RangeTask>,
) {
    let RangeTask { lo, mut hi } = m.task;
    let cfg = &e.cfg;
    let paced = cfg.policy == Policy::Paced;
    let stream =
        paced.then(|| RefCell::new(Pacer::new(cfg.partition_pacer.clone(), Instant::now())));
    // The product: the scanner paces each page (as a full one) by the task's pacer and
    // the worker's limiter, once per operation (retries happen inside the client), and
    // gives back what a short page did not read; the client reports retries.
    let task_pacer = (!paced).then(|| worker.limiter.task_pacer()).flatten();
    let last = e.table.entities() - 1;
    let mut cursor = lo;
    let mut read = 0;
    let mut since_split = 0;
    let mut last_look: Option<Instant> = None;
    loop {
        // An empty range still costs one (empty) query.
        let (partition, end) = if cursor < hi {
            e.table.next_request(cursor, hi, cfg.page_size)
        } else {
            (e.table.partition_of(lo.min(last)), cursor)
        };
        if !paced {
            if let Some(p) = &task_pacer {
                p.acquire(cfg.page_size).await;
            }
            worker.limiter.pace(cfg.page_size).await;
        }
        let ok = e
            .send(&worker, stream.as_ref(), partition, end - cursor, !paced)
            .await;
        if !paced {
            let unused = cfg
                .page_size
                .saturating_sub(if ok { end - cursor } else { 0 });
            if let Some(p) = &task_pacer {
                p.refund(unused);
            }
            worker.limiter.refund(unused);
        }
        if !ok {
            // The attempt fails; its (possibly shrunk) range is read again later.
            progress.borrow_mut().wasted += read;
            e.fail_task(Msg {
                task: RangeTask { lo, hi },
                deliveries: m.deliveries,
            });
            return;
        }
        {
            let mut p = progress.borrow_mut();
            p.pages += 1;
            p.read += end - cursor;
        }
        read += end - cursor;
        since_split += end - cursor;
        cursor = end;
        if cursor >= hi {
            break;
        }
        let at = match cfg.split {
            SplitRule::Every(n) => {
                (since_split >= n && hi - cursor >= 2 * n).then(|| e.table.split_point(cursor, hi))
            }
            SplitRule::WhenIdle => {
                if last_look.is_some_and(|t: Instant| t.elapsed() < SPLIT_CHECK_INTERVAL) {
                    None
                } else {
                    last_look = Some(Instant::now());
                    // The product's look peeks at the queue first and, finding it
                    // empty, has its fleet listed every growing period
                    // (`FleetWatch::queue_seen_empty`). Its peek overlaps the page
                    // read ahead, so here it costs no time.
                    if !e.queue.borrow_mut().has_waiting(Instant::now()) {
                        worker.drained.set(Some(Instant::now()));
                    }
                    // Tasks are paced to their partition's rate here, so the rest of one
                    // partition is not cut (the product's `find_split` rule then).
                    let one_partition =
                        e.table.partition_of(cursor) == e.table.partition_of(hi - 1);
                    // As the product where partitions are paced: split only when
                    // nothing waits (it does not split a range holding twice what
                    // waits there, which the emulator's workers do).
                    match balanced_share(read, read as f64, (hi - cursor) as f64) {
                        Some(share) if !one_partition && !e.queue_has_waiting().await => {
                            e.round_trips(SPLIT_PROBES).await;
                            Some(e.table.split_point_at(cursor, hi, share))
                        }
                        _ => None,
                    }
                }
            }
        };
        if let Some(at) = at.filter(|&at| at > cursor && at < hi) {
            e.add_task(RangeTask { lo: at, hi });
            hi = at;
            since_split = 0;
            last_look = None;
            progress.borrow_mut().splits += 1;
        }
    }
    progress.borrow_mut().committed.push((lo, hi, read));
    e.finish_task();
}
