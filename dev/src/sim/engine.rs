//! The machinery both simulations share: the paused runtime, the queue, workers and
//! their task slots, one request with its retries, and the sampler of limiter levels.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tablevault_azure::{Error, RetryObserver};
use tablevault_worker::MAX_POLL_INTERVAL;
use tablevault_worker::fleet::{FleetCount, GROWING_PERIOD, listing_period};
use tablevault_worker::limiter::AdaptiveLimit;
use tablevault_worker::pacer::{PARTITION_RATE, PacerConfig, RatePacer};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep, sleep_until};

use super::pacer::Pacer;
use super::retry::Retrying;
use super::service::{Answer, Service};
use super::table::{Rng, Table};
use super::{Level, Policy, SeriesPoint, SimConfig};

/// A current-thread runtime on tokio's paused clock: whenever every task waits on a
/// timer, time jumps to the next deadline, so virtual hours take real seconds.
pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a tokio runtime")
}

/// A queue message.
#[derive(Debug, Clone)]
pub(crate) struct Msg<T> {
    pub task: T,
    /// Times delivered, this delivery included once claimed.
    pub deliveries: u32,
}

/// The task queue: the coordinator's messages (generated lazily, in its shuffled order),
/// then messages put by workers (splits) and given back after failures, in the order
/// they become visible.
pub(crate) struct Queue<T> {
    fresh: std::iter::Peekable<Box<dyn Iterator<Item = T>>>,
    ready: VecDeque<Msg<T>>,
    delayed: Vec<(Instant, Msg<T>)>,
}

impl<T> Queue<T> {
    pub fn new(fresh: Box<dyn Iterator<Item = T>>) -> Self {
        Queue {
            fresh: fresh.peekable(),
            ready: VecDeque::new(),
            delayed: Vec::new(),
        }
    }

    /// Get Messages for one slot.
    pub fn claim(&mut self, now: Instant) -> Option<Msg<T>> {
        if !self.delayed.is_empty() {
            self.delayed.sort_by_key(|(at, _)| *at);
            while self.delayed.first().is_some_and(|(at, _)| *at <= now) {
                let (_, m) = self.delayed.remove(0);
                self.ready.push_back(m);
            }
        }
        let mut m = match self.fresh.next() {
            Some(task) => Msg {
                task,
                deliveries: 0,
            },
            None => self.ready.pop_front()?,
        };
        m.deliveries += 1;
        Some(m)
    }

    /// Peek Messages: whether a message is visible.
    pub fn has_waiting(&mut self, now: Instant) -> bool {
        self.fresh.peek().is_some()
            || !self.ready.is_empty()
            || self.delayed.iter().any(|(at, _)| *at <= now)
    }

    /// Put Message (a split's upper half).
    pub fn put(&mut self, task: T) {
        self.ready.push_back(Msg {
            task,
            deliveries: 0,
        });
    }

    /// Gives a message back, visible again at `at`.
    fn give_back(&mut self, m: Msg<T>, at: Instant) {
        self.delayed.push((at, m));
    }
}

/// Client-side counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientCounts {
    /// 503s followed by a retry.
    pub retries: u64,
    /// Operations whose retries ran out (or whose deadline passed).
    pub gave_up: u64,
    /// Task attempts that failed (given back or poisoned).
    pub failed_attempts: u64,
    /// Tasks poisoned after `max_attempts` deliveries.
    pub poisoned: u64,
}

/// One worker process: its limiter of the account (the product's, with its rate pacer
/// started at the worker's seeded phase) and, with the paced policy, the prototype's
/// pacer.
pub(crate) struct Worker {
    pub limiter: Arc<AdaptiveLimit>,
    pub pacer: Option<RefCell<Pacer>>,
    /// Tasks in flight (a worker with one heartbeats).
    busy: Cell<usize>,
    /// Its last listing of the fleet's heartbeats: when, how many live, and when a
    /// listing last found that count changed.
    fleet_view: Cell<Option<(Instant, usize, Instant)>>,
    /// When one of its backup tasks last looked at the queue and found no task waiting.
    pub drained: Cell<Option<Instant>>,
}

impl Worker {
    /// A worker; paced, it starts with an equal share of the account and first sends
    /// at `phase` (in `[0, 1)`) of the interval between two requests of `entities`.
    pub fn new(cfg: &SimConfig, now: Instant, phase: f64, entities: u64) -> Self {
        let (initial, min, max) = cfg.limiter;
        let pacer = (cfg.policy == Policy::Paced).then(|| {
            let mut p = Pacer::new(cfg.account_pacer.clone(), now);
            p.share(1.0 / cfg.workers.max(1) as f64, now);
            let interval = entities as f64 / p.rate();
            p.hold_until(now + Duration::from_secs_f64(phase * interval));
            RefCell::new(p)
        });
        let account = RatePacer::new(PacerConfig::account(), Some(phase));
        Worker {
            limiter: AdaptiveLimit::with_pacer(initial, min, max, account, Some(PARTITION_RATE)),
            pacer,
            busy: Cell::new(0),
            fleet_view: Cell::new(None),
            drained: Cell::new(None),
        }
    }

    /// The fleet of a run: `cfg.workers` workers (at least one), each starting at its own
    /// random phase of the interval between two requests of `entities`.
    pub fn fleet(cfg: &SimConfig, entities: u64) -> Vec<Rc<Worker>> {
        let mut phases = Rng::new(cfg.seed ^ 0x5ed);
        (0..cfg.workers.max(1))
            .map(|_| Rc::new(Worker::new(cfg, Instant::now(), phases.unit(), entities)))
            .collect()
    }
}

impl Worker {
    /// Whether its last fleet listing is old enough to list again, by the product's
    /// [`listing_period`] (or there was none).
    fn fleet_listing_due(&self) -> bool {
        self.fleet_view.get().is_none_or(|(at, _, changed)| {
            let now = Instant::now();
            let drained = self.drained.get().map(|d| now.duration_since(d));
            now.duration_since(at) >= listing_period(now.duration_since(changed), drained)
        })
    }
}

/// The product's running tasks look at the fleet every `GROWING_S` (a listing when the
/// last is old enough, see [`listing_period`]).
const GROWING_S: u64 = GROWING_PERIOD.as_secs();

/// Limiter levels seen by the sampler.
#[derive(Debug, Clone)]
struct LevelAcc {
    min: f64,
    max: f64,
    sum: f64,
    samples: u64,
}

impl LevelAcc {
    fn new() -> Self {
        LevelAcc {
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum: 0.0,
            samples: 0,
        }
    }

    fn add(&mut self, v: f64) {
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v;
        self.samples += 1;
    }

    fn level(&self) -> Option<Level> {
        (self.samples > 0).then(|| Level {
            min: self.min,
            mean: self.sum / self.samples as f64,
            max: self.max,
        })
    }
}

/// One simulated run: the service, the queue, and what is counted.
pub(crate) struct Engine<T> {
    pub cfg: SimConfig,
    pub table: Table,
    pub service: RefCell<Service>,
    jitter: RefCell<Rng>,
    pub queue: RefCell<Queue<T>>,
    /// Tasks neither finished nor poisoned.
    open: Cell<u64>,
    finished: Cell<Option<Instant>>,
    done: Notify,
    pub start: Instant,
    pub counts: RefCell<ClientCounts>,
    limit_levels: RefCell<LevelAcc>,
    rate_levels: RefCell<LevelAcc>,
    series: RefCell<Vec<SeriesPoint>>,
    /// Every worker, for the fleet listings.
    workers: RefCell<Vec<Rc<Worker>>>,
}

impl<T: 'static> Engine<T> {
    pub fn new(
        cfg: SimConfig,
        table: Table,
        fresh: Box<dyn Iterator<Item = T>>,
        open: u64,
    ) -> Self {
        let now = Instant::now();
        Engine {
            service: RefCell::new(Service::new(cfg.limits.clone(), cfg.seed, now)),
            jitter: RefCell::new(Rng::new(cfg.seed ^ 0x0071_77e4)),
            queue: RefCell::new(Queue::new(fresh)),
            open: Cell::new(open),
            finished: Cell::new(None),
            done: Notify::new(),
            start: now,
            counts: RefCell::new(ClientCounts::default()),
            limit_levels: RefCell::new(LevelAcc::new()),
            rate_levels: RefCell::new(LevelAcc::new()),
            series: RefCell::new(Vec::new()),
            workers: RefCell::new(Vec::new()),
            cfg,
            table,
        }
    }

    /// Starts `workers`, each with `tasks_per_worker` slots running `run` on claimed
    /// messages, and a sampler; returns the virtual seconds until every task finished
    /// or was poisoned.
    pub async fn drive<F, Fut>(self: &Rc<Self>, workers: &[Rc<Worker>], run: F) -> f64
    where
        F: Fn(Rc<Worker>, Msg<T>) -> Fut + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let run = Rc::new(run);
        *self.workers.borrow_mut() = workers.to_vec();
        for w in workers {
            for _ in 0..self.cfg.tasks_per_worker.max(1) {
                let (e, w, run) = (self.clone(), w.clone(), run.clone());
                tokio::task::spawn_local(async move { e.slot(w, &*run).await });
            }
        }
        let (e, ws) = (self.clone(), workers.to_vec());
        tokio::task::spawn_local(async move { e.sample(ws).await });
        self.done.notified().await;
        let end = self.finished.get().expect("finished when notified");
        end.duration_since(self.start).as_secs_f64()
    }

    /// One task slot of a worker: the poll loop (an empty queue is polled again after
    /// 100 ms, doubling up to 5 s, as the real worker does).
    async fn slot<F, Fut>(&self, worker: Rc<Worker>, run: &F)
    where
        F: Fn(Rc<Worker>, Msg<T>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut idle = Duration::from_millis(100);
        while self.finished.get().is_none() {
            // Get Messages: a queue request (a different service; no table budget).
            let latency = self.service.borrow_mut().latency();
            sleep(latency).await;
            let claimed = self.queue.borrow_mut().claim(Instant::now());
            match claimed {
                Some(m) => {
                    idle = Duration::from_millis(100);
                    worker.busy.set(worker.busy.get() + 1);
                    if self.cfg.policy == Policy::Product {
                        self.look_at_fleet(&worker).await;
                    }
                    run(worker.clone(), m).await;
                    worker.busy.set(worker.busy.get() - 1);
                }
                None => {
                    sleep(idle).await;
                    idle = (idle * 2).min(MAX_POLL_INTERVAL);
                }
            }
        }
    }

    /// What the product's worker does as a task starts (`Worker::limiter_for`): unless
    /// its last listing is recent ([`listing_period`]), list the job's heartbeats (one
    /// request) and hold its pacer to its share of the account among the live workers.
    /// A worker is live while it has a
    /// task in flight: its heartbeat is written at once when it starts one with none
    /// other in flight, and marked idle when its last one ends.
    async fn look_at_fleet(&self, worker: &Worker) {
        if !worker.fleet_listing_due() {
            return;
        }
        let latency = self.service.borrow_mut().latency();
        sleep(latency).await;
        self.fleet_listed(worker);
    }

    /// The listing of [`Engine::look_at_fleet`], done.
    fn fleet_listed(&self, worker: &Worker) {
        let live = self
            .workers
            .borrow()
            .iter()
            .filter(|w| w.busy.get() > 0)
            .count()
            .max(1);
        let now = Instant::now();
        let (changed, settled) = match worker.fleet_view.get() {
            Some((_, n, changed)) if n == live => (changed, true),
            _ => (now, false),
        };
        worker.fleet_view.set(Some((now, live, changed)));
        worker
            .limiter
            .set_fleet_size(FleetCount { live, settled }, self.cfg.max_rate);
    }

    /// A task is done (committed or its done record written).
    pub fn finish_task(&self) {
        let open = self.open.get() - 1;
        self.open.set(open);
        if open == 0 {
            self.finished.set(Some(Instant::now()));
            self.done.notify_one();
        }
    }

    /// Peek Messages, as a splitting task asks (a queue request: latency, no table
    /// budget).
    pub async fn queue_has_waiting(&self) -> bool {
        let latency = self.service.borrow_mut().latency();
        sleep(latency).await;
        self.queue.borrow_mut().has_waiting(Instant::now())
    }

    /// `n` requests one after the other that cost no budget worth counting (a split's
    /// `$top=1` probes).
    pub async fn round_trips(&self, n: usize) {
        for _ in 0..n {
            let latency = self.service.borrow_mut().latency();
            sleep(latency).await;
        }
    }

    /// A split added a task.
    pub fn add_task(&self, task: T) {
        self.open.set(self.open.get() + 1);
        self.queue.borrow_mut().put(task);
    }

    /// The attempt failed: give the message back (visible after 5 s × deliveries, at most
    /// 120 s), or poison the task once it was delivered `max_attempts` times.
    pub fn fail_task(&self, m: Msg<T>) {
        let mut c = self.counts.borrow_mut();
        c.failed_attempts += 1;
        if m.deliveries >= self.cfg.max_attempts {
            c.poisoned += 1;
            drop(c);
            self.finish_task();
        } else {
            let delay = (Duration::from_secs(5) * m.deliveries).min(Duration::from_secs(120));
            self.queue.borrow_mut().give_back(m, Instant::now() + delay);
        }
    }

    /// One operation on `entities` entities of `partition`, retried on 503 like the
    /// product's client; `true` if it eventually succeeded. Paced: waits for the task's
    /// partition pacer and the worker's pacer before every try. With `observe`, every
    /// retry is reported to the worker's limiter through its `RetryObserver`, as the
    /// restore's Table client does.
    pub async fn send(
        &self,
        worker: &Worker,
        stream: Option<&RefCell<Pacer>>,
        partition: u32,
        entities: u64,
        observe: bool,
    ) -> bool {
        let mut retrying = Retrying::new(Instant::now());
        loop {
            if let Some(p) = stream {
                let at = p.borrow_mut().reserve(entities, Instant::now());
                sleep_until(at).await;
            }
            if let Some(p) = &worker.pacer {
                let at = p.borrow_mut().reserve(entities, Instant::now());
                sleep_until(at).await;
            }
            let answer = self
                .service
                .borrow_mut()
                .request(partition, entities, Instant::now());
            let latency = self.service.borrow_mut().latency();
            sleep(latency).await;
            let now = Instant::now();
            let retry_after = match answer {
                Answer::Ok => return true,
                Answer::Busy { retry_after, .. } => retry_after,
            };
            for p in stream.into_iter().chain(worker.pacer.as_ref()) {
                p.borrow_mut().throttled(now);
            }
            let next = retrying.after_busy(
                &self.cfg.backoff,
                &mut self.jitter.borrow_mut(),
                retry_after,
                now,
                |delay| {
                    if observe {
                        worker
                            .limiter
                            .on_retry("Submit Batch", &server_busy(retry_after), delay)
                    } else {
                        delay
                    }
                },
            );
            match next {
                Ok(delay) => {
                    self.counts.borrow_mut().retries += 1;
                    sleep(delay).await;
                }
                Err(wait) => {
                    self.counts.borrow_mut().gave_up += 1;
                    sleep(wait).await;
                    return false;
                }
            }
        }
    }

    /// Every second: each worker's limiter level (and pacer rate); every 10 s a point of
    /// the time series; every `share_every` the paced workers share the account's budget
    /// in proportion to their tasks in flight.
    async fn sample(&self, workers: Vec<Rc<Worker>>) {
        let mut last = (0u64, 0u64, 0u64);
        for tick in 1u64.. {
            sleep(Duration::from_secs(1)).await;
            if self.finished.get().is_some() {
                return;
            }
            let total: usize = workers.iter().map(|w| w.busy.get()).sum();
            // The product's running tasks look at the fleet every GROWING_S too (a listing
            // when the last is old enough), so a long task follows a changing fleet.
            if self.cfg.policy == Policy::Product && tick.is_multiple_of(GROWING_S) {
                for w in workers.iter().filter(|w| w.busy.get() > 0) {
                    if w.fleet_listing_due() {
                        self.fleet_listed(w);
                    }
                }
            }
            if tick.is_multiple_of(self.cfg.share_every_seconds.max(1)) && total > 0 {
                for w in workers.iter().filter(|w| w.busy.get() > 0) {
                    if let Some(p) = &w.pacer {
                        let fraction = w.busy.get() as f64 / total as f64;
                        p.borrow_mut().share(fraction, Instant::now());
                    }
                }
            }
            let limits: Vec<f64> = workers.iter().map(|w| w.limiter.current() as f64).collect();
            let rates: Vec<f64> = workers
                .iter()
                .map(|w| match &w.pacer {
                    Some(p) => p.borrow().rate(),
                    None => w.limiter.rate(),
                })
                .collect();
            let mut now_limit = LevelAcc::new();
            for &l in &limits {
                self.limit_levels.borrow_mut().add(l);
                now_limit.add(l);
            }
            let mut now_rate = LevelAcc::new();
            for &r in &rates {
                self.rate_levels.borrow_mut().add(r);
                now_rate.add(r);
            }
            if tick.is_multiple_of(10) {
                let c = &self.service.borrow().counts;
                let (entities, requests, busy) = (c.entities, c.requests, c.busy());
                let (dr, db) = (requests - last.1, busy - last.2);
                self.series.borrow_mut().push(SeriesPoint {
                    t: tick as f64,
                    entities_per_second: (entities - last.0) as f64 / 10.0,
                    busy_share: if dr == 0 { 0.0 } else { db as f64 / dr as f64 },
                    limit: now_limit.level(),
                    rate: now_rate.level(),
                });
                last = (entities, requests, busy);
            }
        }
    }

    /// Limiter levels over the run (every worker, every second).
    pub fn limit_level(&self) -> Option<Level> {
        self.limit_levels.borrow().level()
    }

    /// Pacer rates over the run.
    pub fn rate_level(&self) -> Option<Level> {
        self.rate_levels.borrow().level()
    }

    /// The 10-second series.
    pub fn series(&self) -> Vec<SeriesPoint> {
        self.series.borrow().clone()
    }
}

/// The error the product's client sees on a 503.
fn server_busy(retry_after: Option<Duration>) -> Error {
    Error::Service {
        op: "Submit Batch",
        status: 503,
        code: Some("ServerBusy".into()),
        message: "The server is busy.".into(),
        retry_after,
    }
}
