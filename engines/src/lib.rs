//! Engine ports: the upstream engines' scheduling and KV-cache rules as plain state machines.
//!
//! Each port makes the decisions its upstream makes, step by step, given the same inputs, and
//! knows nothing of actors or prices: it forms each step's `StepShape` and asks the contracts'
//! `Environment` what it costs. The vLLM port ([`vllm`]) models release 0.15.1's V1 engine; the
//! SGLang port ([`sglang`]) models release 0.5.23's scheduler and radix cache, not yet priced
//! or wired into the cluster.

pub mod fields;
pub mod sglang;
pub mod vllm;
