//! The experiments over runs: each runs the simulator more than once and draws a conclusion
//! from the runs together.
//!
//! A `replication` is one seeded run of a scenario; `figures` turns a run's replications
//! into estimates with intervals, the acceptance conditions and the validity flag;
//! `comparison` pairs two configurations on common random numbers; [`validation`] re-runs
//! real vLLM experiments and compares them stage by stage; [`calibration`] fits shared cost
//! model terms with the simulator in the loop, and [`identification`] says which of them the
//! runs determine; a [`sweep`] runs many configurations of one
//! base and names the best with its false-winner chance controlled; [`capacity`] searches an
//! ordered axis for the smallest deployment (or highest rate) that meets SLOs.

pub mod calibration;
pub mod capacity;
pub(crate) mod comparison;
pub(crate) mod figures;
pub mod identification;
pub(crate) mod replication;
pub mod sweep;
pub mod validation;
