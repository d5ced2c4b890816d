//! The restore simulation: block tasks replayed as entity group transactions through
//! each worker's real `AdaptiveLimit`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant as WallInstant;

use futures::StreamExt;
use tokio::task::LocalSet;
use tokio::time::Instant;

use super::engine::{Engine, Msg, Worker, paused_runtime};
use super::pacer::Pacer;
use super::table::{Shuffled, Table};
use super::{Policy, RestoreDetails, RunReport, SimConfig};

/// What the restore's tasks did.
#[derive(Debug, Default)]
struct Progress {
    /// One bit per block: done (N / 4,000 bits, not per entity).
    done: Vec<u64>,
    done_twice: u64,
    /// Entities in blocks done.
    restored: u64,
    /// Entities written by any attempt (a failed attempt's are written again).
    written: u64,
    batches: u64,
}

/// Runs one restore of `cfg.entities` with `cfg.workers` workers in virtual time.
pub fn simulate_restore(cfg: &SimConfig) -> RunReport {
    let wall = WallInstant::now();
    let cfg = cfg.clone();
    let mut report = paused_runtime().block_on(LocalSet::new().run_until(run(cfg)));
    report.wall_seconds = wall.elapsed().as_secs_f64();
    report
}

async fn run(cfg: SimConfig) -> RunReport {
    let table = Table::synthetic(cfg.entities, cfg.partitions, cfg.seed);
    let n = table.entities();
    let blocks = n.div_ceil(cfg.block_entities.max(1));
    let fresh = Box::new(Shuffled::new(blocks, cfg.seed));
    let engine = Rc::new(Engine::new(cfg.clone(), table, fresh, blocks));
    let progress = Rc::new(RefCell::new(Progress {
        done: vec![0; blocks.div_ceil(64) as usize],
        ..Progress::default()
    }));
    let workers = Worker::fleet(&cfg, cfg.batch_size);
    let (e, p) = (engine.clone(), progress.clone());
    let seconds = engine
        .drive(&workers, move |w, m| replay(e.clone(), w, p.clone(), m))
        .await;

    let p = progress.borrow();
    let mut problems = Vec::new();
    let done: u64 = p.done.iter().map(|w| u64::from(w.count_ones())).sum();
    if done != blocks || p.done_twice > 0 {
        problems.push(format!(
            "{done} of {blocks} blocks done, {} twice",
            p.done_twice
        ));
    }
    if p.restored != n {
        problems.push(format!("{} of {n} entities restored", p.restored));
    }
    let mut report = RunReport::new("restore", &engine, seconds, p.restored, problems);
    report.restore = Some(RestoreDetails {
        tasks: blocks,
        batches: p.batches,
        entities_written: p.written,
        limiter_throttles: workers.iter().map(|w| w.limiter.throttles()).sum(),
    });
    report
}

/// One attempt at one block: its batches (≤ 100 entities, one partition each), up to
/// `batches_in_flight` at a time, each within the worker's limiter; a batch whose
/// retries run out fails the attempt once the others have finished (as the product).
async fn replay(
    e: Rc<Engine<u64>>,
    worker: Rc<Worker>,
    progress: Rc<RefCell<Progress>>,
    m: Msg<u64>,
) {
    let cfg = &e.cfg;
    let lo = m.task * cfg.block_entities;
    let hi = (lo + cfg.block_entities).min(e.table.entities());
    let paced = cfg.policy == Policy::Paced;
    let stream =
        paced.then(|| RefCell::new(Pacer::new(cfg.partition_pacer.clone(), Instant::now())));
    // The product: each batch waits for the task's pacer, then the limiter (a unit of
    // concurrency and the account's rate), once per operation.
    let task_pacer = (!paced).then(|| worker.limiter.task_pacer()).flatten();
    let table = &e.table;
    let batches = std::iter::successors(Some(lo), |&c| {
        let (_, end) = table.next_request(c, hi, cfg.batch_size);
        (end < hi).then_some(end)
    })
    .filter(|&c| c < hi)
    .map(|c| {
        let (partition, end) = table.next_request(c, hi, cfg.batch_size);
        (partition, end - c)
    });
    let (e2, w2, s2, t2) = (&e, &worker, stream.as_ref(), task_pacer.as_ref());
    let failed = futures::stream::iter(batches)
        .map(|(partition, n)| async move {
            let guard = if paced {
                w2.limiter.acquire().await
            } else {
                if let Some(p) = t2 {
                    p.acquire(n).await;
                }
                w2.limiter.acquire_entities(n).await
            };
            let ok = e2.send(w2, s2, partition, n, true).await;
            if ok {
                guard.success();
            }
            (ok, n)
        })
        .buffer_unordered(cfg.batches_in_flight.max(1))
        .fold(0u64, |failed, (ok, n)| {
            let mut p = progress.borrow_mut();
            if ok {
                p.written += n;
                p.batches += 1;
            }
            async move { failed + u64::from(!ok) }
        })
        .await;
    if failed > 0 {
        e.fail_task(m);
        return;
    }
    let mut p = progress.borrow_mut();
    let (word, bit) = ((m.task / 64) as usize, m.task % 64);
    if p.done[word] & (1 << bit) != 0 {
        p.done_twice += 1;
    }
    p.done[word] |= 1 << bit;
    p.restored += hi - lo;
    drop(p);
    e.finish_task();
}
