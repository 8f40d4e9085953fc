//! Small actor models that exercise the kernel without any LLM logic.
//!
//! They are the kernel's worked examples (`docs/ADDING_AN_ACTOR.md` walks through [`mm1`]), its
//! correctness tests (the M/M/1 waiting time against queueing theory; host parity on [`mesh`])
//! and its benchmark workload.

pub mod mesh;
pub mod mm1;
