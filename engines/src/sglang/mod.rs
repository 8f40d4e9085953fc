//! The SGLang port: release 0.5.23's scheduler and KV-cache rules as plain state machines.
//!
//! The radix cache ([`radix_cache`]) is proven operation by operation against the release's own
//! `UnifiedRadixCache` (`tests/sglang_radix_oracle.rs`); the scheduler ([`scheduler`]) step by
//! step against its own batch forming (`tests/sglang_oracle.rs`): normal and overlap loops, any
//! page size, mixed chunk, and the fcfs, lof, lpm, dfs-weight and random policies, all 55 recorded
//! workloads. [`defaults`] holds the server arguments the release derives from the GPU and the
//! CUDA graphs it captures. Nothing routes requests to it yet: no scenario can name an SGLang
//! engine.

pub mod defaults;
pub mod radix_cache;
pub mod scheduler;
