//! The progress display of long-running commands: a bar on a terminal (tasks, entities,
//! bytes, rate), nothing when output is JSON or not a terminal (periodic log lines
//! instead).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One progress display.
pub struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    last_log: Instant,
    what: &'static str,
}

/// A snapshot to display.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Tasks finished.
    pub tasks_done: u64,
    /// Tasks known.
    pub tasks_total: u64,
    /// Entities processed so far.
    pub entities: u64,
    /// Bytes written so far.
    pub bytes: u64,
    /// Tasks poisoned.
    pub poisoned: u64,
}

impl Progress {
    /// A display; `quiet` (for `--json`) or a non-terminal stderr hides the bar.
    pub fn new(what: &'static str, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(4));
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
        Progress {
            bar,
            started: Instant::now(),
            last_log: Instant::now(),
            what,
        }
    }

    /// Shows a snapshot.
    pub fn update(&mut self, s: Snapshot) {
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = s.entities as f64 / secs;
        let msg = format!(
            "{} entities  {}  {:.0} entities/s{}",
            s.entities,
            HumanBytes(s.bytes),
            rate,
            if s.poisoned > 0 {
                format!("  {} POISONED", s.poisoned)
            } else {
                String::new()
            }
        );
        match &self.bar {
            Some(bar) => {
                bar.set_length(s.tasks_total);
                bar.set_position(s.tasks_done);
                bar.set_message(msg);
            }
            None => {
                if self.last_log.elapsed() >= Duration::from_secs(10) {
                    self.last_log = Instant::now();
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

    /// Removes the bar.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
