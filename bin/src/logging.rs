//! Logs on stderr, stamped with simulated time, filtered `RUST_LOG`-style.

use std::fmt;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// Stamps each log line with the simulated instant of the round being run.
struct SimulatedTime;

impl FormatTime for SimulatedTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        match blis_kernel::clock::simulated_now() {
            Some(now) => write!(w, "sim {now}"),
            None => write!(w, "sim -"),
        }
    }
}

/// Install the subscriber: `RUST_LOG` filters (default `warn`), lines go to stderr.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_timer(SimulatedTime)
        .with_env_filter(filter)
        .init();
}
