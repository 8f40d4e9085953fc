//! The actors of a simulated LLM serving cluster, and the assembly of a scenario into them.
//!
//! A request's path is client → router → engine → router → client, as messages under the
//! kernel's virtual clock, per request and never per token. [`Client`]s generate calls;
//! the [`RouterHost`] picks an engine for each; each [`EngineHost`] (vLLM) or [`SglangHost`]
//! adapts one engine instance (a plain state machine from `blis-engines`) to messages and prices
//! its steps through the cost model. [`assemble`] turns a scenario into these actors; [`run`] runs it and accounts for every
//! request's fate.
//!
//! Beside the actors and their assembly, [`experiment`] holds the experiments over runs:
//! replications and their figures, comparison of configurations, validation against real runs
//! and calibration.

mod assembly;
pub mod calls_comparison;
mod calls_out;
mod client;
mod draws;
mod engine_host;
pub mod experiment;
pub mod fabric;
mod instance;
mod ledger;
mod message;
mod metrics;
mod pd_guard;
mod router_host;
mod run;
mod sglang_host;
pub mod stats;
pub mod swarm;
mod tally;
pub mod workload;

pub use assembly::{AssembledCluster, AssemblyOptions, Fault, assemble};
pub use calls_out::{CallSelection, CallsDigest, CallsOut, CallsOutError};
pub use client::{Client, ClientWiring, REQUEST_KEY_MASK, call_key};
pub use draws::MadeAhead;
pub use engine_host::EngineHost;
pub use experiment::comparison::{Configuration, MetricComparison, compare_configs};
pub use ledger::CallLedger;
pub use message::{CallCompletion, CallRejection, CallRequest, ClusterMessage, TransferDone, TransferStart};
pub use metrics::{Figures, Summary};
pub use router_host::RouterHost;
pub use run::{
    DEFAULT_SEED, Observers, Progress, RunError, RunOptions, RunOutput, request_key, run, run_observed,
    timeline_group,
};
pub use sglang_host::SglangHost;
