//! The progress display of long-running commands: a bar on a terminal (tasks, entities,
//! bytes, rate), log lines every ten seconds when stderr is not a terminal.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, ProgressDrawTarget, ProgressStyle};
use tablevault_coordinator::{Progress, Snapshot};

/// One progress display.
pub struct ProgressBar {
    bar: Option<indicatif::ProgressBar>,
    started: Instant,
    last_log: Mutex<Instant>,
    what: &'static str,
}

impl ProgressBar {
    /// A display for a job of kind `what` (`backup`, `restore`).
    pub fn new(what: &'static str) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(0),
                ProgressDrawTarget::stderr_with_hz(4),
            );
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix} [{elapsed_precise}] {bar:30} {pos}/{len} tasks  {msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix(what);
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        ProgressBar {
            bar,
            started: Instant::now(),
            last_log: Mutex::new(Instant::now()),
            what,
        }
    }
}

impl Progress for ProgressBar {
    fn update(&self, s: Snapshot) {
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = s.entities as f64 / secs;
        match &self.bar {
            Some(bar) => {
                bar.set_length(s.tasks_total);
                bar.set_position(s.tasks_done);
                bar.set_message(format!(
                    "{} entities  {}  {:.0} entities/s{}",
                    s.entities,
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
                        what = self.what,
                        tasks_done = s.tasks_done,
                        tasks_total = s.tasks_total,
                        entities = s.entities,
                        "progress"
                    );
                }
            }
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
