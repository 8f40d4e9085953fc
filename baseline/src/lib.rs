//! Real-server baselines: a workload replayed against an OpenAI-compatible server (vLLM), its
//! calls recorded as the client saw them in the `calls.jsonl` format a simulation writes, so
//! `compare` and `draw` put the two side by side.
//!
//! [`config`] reads what the server is (its URL, model, chip and serving settings, which go
//! into the header); [`workload`] takes the requests a baseline can replay (one LLM call each,
//! its prompt as token ids) and refuses the rest by name; [`token_clock`] turns chunks into
//! per-token latencies; [`driver`] sends every call at its scheduled arrival and turns every
//! outcome into a fate. The driver is the only code in the workspace besides the progress
//! display that reads the wall clock (`docs/VALIDATION.md`).

pub mod config;
pub mod driver;
pub mod token_clock;
pub mod workload;

pub use config::BaselineConfig;
pub use driver::{BaselineError, BaselineSummary, run_baseline};
