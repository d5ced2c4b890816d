//! The progress display of long-running commands: a bar on a terminal (percent, ETA,
//! tasks, entities, bytes, rate), log lines every ten seconds when stderr is not a
//! terminal.
//!
//! When the job's size in entities is known (a restore's from its manifest, a backup's
//! from the last backup of the same tables) the bar counts entities, which is what takes
//! time; otherwise it counts tasks.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, HumanDuration, ProgressDrawTarget, ProgressStyle};
use tablevault_coordinator::{Progress, Snapshot};

/// One progress display.
pub struct ProgressBar {
    /// The bar of the current phase (on a terminal), when it started, and its name.
    current: Mutex<Phase>,
    last_log: Mutex<Instant>,
}

struct Phase {
    bar: Option<indicatif::ProgressBar>,
    started: Instant,
    what: &'static str,
}

impl Phase {
    fn new(what: &'static str) -> Phase {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(1000),
                ProgressDrawTarget::stderr_with_hz(4),
            );
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix} [{elapsed_precise}] {bar:30} {percent:>3}%  {msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix(what);
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        Phase {
            bar,
            started: Instant::now(),
            what,
        }
    }
}

/// How far a job is: a fraction done and the time left, from a snapshot and the time
/// elapsed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Done, from 0 to 1 (below 1 until every task is done).
    pub fraction: f64,
    /// Time left at the rate so far; `None` before anything is done.
    pub eta: Option<Duration>,
}

impl Estimate {
    /// Estimates from entities when the expected count is known, else from tasks.
    pub fn of(s: &Snapshot, elapsed: Duration) -> Estimate {
        let settled = s.tasks_done + s.poisoned;
        if s.tasks_total > 0 && settled >= s.tasks_total {
            return Estimate {
                fraction: 1.0,
                eta: Some(Duration::ZERO),
            };
        }
        let fraction = match s.entities_expected {
            Some(expected) if expected > 0 => s.entities as f64 / expected as f64,
            // Every task known is split work: the fraction of tasks is a rough guide.
            _ if s.tasks_total > 0 => settled as f64 / s.tasks_total as f64,
            _ => 0.0,
        };
        // The last entities are not done until the last task commits: stay below 100%.
        let fraction = fraction.clamp(0.0, 0.99);
        let eta = (fraction > 0.0).then(|| {
            let secs = elapsed.as_secs_f64() * (1.0 - fraction) / fraction;
            Duration::from_secs_f64(secs.min(365.0 * 86_400.0))
        });
        Estimate { fraction, eta }
    }
}

impl ProgressBar {
    /// A display for a job of kind `what` (`backup`, `restore`, `verify`).
    pub fn new(what: &'static str) -> Self {
        ProgressBar {
            current: Mutex::new(Phase::new(what)),
            last_log: Mutex::new(Instant::now()),
        }
    }
}

impl Progress for ProgressBar {
    fn update(&self, s: Snapshot) {
        let phase = self.current.lock().expect("progress lock");
        let elapsed = phase.started.elapsed();
        let rate = s.entities as f64 / elapsed.as_secs_f64().max(0.001);
        let estimate = Estimate::of(&s, elapsed);
        let eta = match estimate.eta {
            Some(d) => format!("ETA {}", HumanDuration(d)),
            None => "ETA -".into(),
        };
        match &phase.bar {
            Some(bar) => {
                bar.set_position((estimate.fraction * 1000.0) as u64);
                let entities = match s.entities_expected {
                    Some(e) => format!("{}/~{e}", s.entities),
                    None => s.entities.to_string(),
                };
                bar.set_message(format!(
                    "{eta}  {}/{} tasks  {entities} entities  {}  {:.0} entities/s{}",
                    s.tasks_done,
                    s.tasks_total,
                    HumanBytes(s.bytes),
                    rate,
                    if s.poisoned > 0 {
                        format!("  {} POISONED", s.poisoned)
                    } else {
                        String::new()
                    }
                ));
            }
            None => {
                let mut last = self.last_log.lock().expect("progress lock");
                if last.elapsed() >= Duration::from_secs(10) {
                    *last = Instant::now();
                    tracing::info!(
                        what = phase.what,
                        percent = format!("{:.1}", estimate.fraction * 100.0),
                        eta_s = estimate.eta.map(|d| d.as_secs()),
                        tasks_done = s.tasks_done,
                        tasks_total = s.tasks_total,
                        entities = s.entities,
                        entities_expected = s.entities_expected,
                        "progress"
                    );
                }
            }
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.current.lock().expect("progress lock").bar {
            bar.finish_and_clear();
        }
    }

    fn phase(&self, name: &'static str) {
        let mut phase = self.current.lock().expect("progress lock");
        if let Some(bar) = &phase.bar {
            bar.finish_and_clear();
        }
        *phase = Phase::new(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(done: u64, total: u64, entities: u64, expected: Option<u64>) -> Snapshot {
        Snapshot {
            tasks_done: done,
            tasks_total: total,
            entities,
            entities_expected: expected,
            ..Snapshot::default()
        }
    }

    #[test]
    fn entities_tell_progress_when_the_size_is_known() {
        let e = Estimate::of(&snap(1, 8, 2_500, Some(10_000)), Duration::from_secs(10));
        assert_eq!(e.fraction, 0.25);
        assert_eq!(e.eta, Some(Duration::from_secs(30)));
    }

    #[test]
    fn tasks_tell_progress_otherwise_and_nothing_done_has_no_eta() {
        let e = Estimate::of(&snap(2, 8, 0, None), Duration::from_secs(4));
        assert_eq!(e.fraction, 0.25);
        assert_eq!(e.eta, Some(Duration::from_secs(12)));
        let e = Estimate::of(&snap(0, 0, 0, None), Duration::from_secs(4));
        assert_eq!((e.fraction, e.eta), (0.0, None));
    }

    #[test]
    fn an_estimate_that_is_too_small_stays_below_done_until_the_last_task() {
        // The table grew since the last backup: more entities than expected.
        let e = Estimate::of(&snap(7, 8, 12_000, Some(10_000)), Duration::from_secs(10));
        assert_eq!(e.fraction, 0.99);
        let e = Estimate::of(&snap(8, 8, 12_000, Some(10_000)), Duration::from_secs(10));
        assert_eq!((e.fraction, e.eta), (1.0, Some(Duration::ZERO)));
    }
}
