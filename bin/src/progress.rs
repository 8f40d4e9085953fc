//! Progress of long commands on stderr: an `indicatif` bar on a terminal, a line every few
//! seconds otherwise (a log, a pipe), nothing with `--quiet`.
//!
//! Progress is paced by wall time, the project's one wall-clock exception (clippy.toml): it only
//! decides what a person sees on stderr, never anything simulated or written to an output file.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use blis_actors::Progress;
use indicatif::{ProgressBar, ProgressStyle};

/// Wall time between two updates of the bar.
const BAR_EVERY: Duration = Duration::from_millis(100);

/// Wall time between two progress lines when stderr is not a terminal.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// How progress is shown.
enum Display {
    Bar(ProgressBar),
    Lines,
    Nothing,
}

/// Shows a command's progress on stderr.
pub struct Reporter {
    display: Display,
    started: Instant,
    last: Option<Instant>,
    label: String,
}

impl Reporter {
    /// A reporter: a bar on a terminal, lines otherwise, nothing when `quiet`.
    #[allow(clippy::disallowed_methods, reason = "wall time paces the progress display only")]
    pub fn new(quiet: bool) -> Reporter {
        let display = if quiet {
            Display::Nothing
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix} {bar:40} {pos}/{len} calls answered, {msg}, {elapsed} wall",
                )
                .expect("the progress template is valid"),
            );
            Display::Bar(bar)
        } else {
            Display::Lines
        };
        Reporter { display, started: Instant::now(), last: None, label: String::new() }
    }

    /// Take the progress of the run named `label` (an experiment, a side of a comparison).
    #[allow(clippy::disallowed_methods, reason = "wall time paces the progress display only")]
    pub fn update(&mut self, label: &str, progress: Progress) {
        let every = match self.display {
            Display::Nothing => return,
            Display::Bar(_) => BAR_EVERY,
            Display::Lines => LINE_EVERY,
        };
        let now = Instant::now();
        // A new run is shown at once; the same run again once the interval has passed.
        if self.label == label && self.last.is_some_and(|last| now.duration_since(last) < every) {
            return;
        }
        self.last = Some(now);
        label.clone_into(&mut self.label);
        let simulated = format!("{:.1} s simulated", progress.simulated.as_secs_f64());
        match &self.display {
            Display::Bar(bar) => {
                bar.set_prefix(label.to_owned());
                bar.set_length(progress.total);
                bar.set_position(progress.answered);
                bar.set_message(simulated);
            }
            Display::Lines => eprintln!(
                "{label}: {}/{} calls answered, {simulated}, {:.0} s wall",
                progress.answered,
                progress.total,
                now.duration_since(self.started).as_secs_f64()
            ),
            Display::Nothing => {}
        }
    }

    /// Clear the bar.
    pub fn finish(self) {
        if let Display::Bar(bar) = self.display {
            bar.finish_and_clear();
        }
    }
}
