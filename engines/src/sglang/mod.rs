//! The SGLang port: release 0.5.23's scheduler and KV-cache rules as plain state machines.
//!
//! The radix cache ([`radix_cache`]) is proven operation by operation against the release's own
//! `UnifiedRadixCache` (`tests/sglang_radix_oracle.rs`); the scheduler ([`scheduler`]) step by
//! step against its own batch forming (`tests/sglang_oracle.rs`): normal and overlap loops, any
//! page size, mixed chunk, and the fcfs, lof, lpm, dfs-weight and random policies, all 55 recorded
//! workloads. [`defaults`] holds the server arguments the release derives from the GPU and the
//! CUDA graphs it captures; [`args`] and [`plan`] resolve a scenario's server arguments and size
//! the KV pool; [`SglangEngine`] is one instance, driven iteration by iteration by its host.

pub mod args;
pub mod defaults;
mod engine;
pub mod fields;
pub mod plan;
pub mod radix_cache;
pub mod scheduler;

pub use args::{SGLANG_VERSION, SglangArgs};
pub use engine::{Counters, Deadlock, Ending, FinishedRequest, Gauges, Rejection, SglangEngine};
pub use plan::{Device, KvPoolBudget, SglangConfig, SglangPlan, plan};
