//! Statistics for turning simulation output into estimates with honest uncertainty.
//!
//! Pure functions and plain types: no actors, no I/O, no randomness of their own. The intended
//! use follows a simulation statistician's routine (Law & Kelton, *Simulation Modeling and
//! Analysis*, ch. 9–10). First ask whether the run has a steady state at all: [`overload`] flags
//! a backlog that keeps growing, for which no steady-state mean exists. Then cut the initial
//! transient: [`warmup`] chooses how many observations to discard by MSER-5. Estimate a mean
//! either from independent replications, one value each, with [`interval::estimate`], or from
//! one long run by [`batch_means`]; both give an [`interval::Estimate`] whose t quantile comes
//! from [`student_t`]. Compare two configurations run on the same seeds with [`compare`], which
//! uses the pairing (common random numbers) to see differences the separate intervals would hide.
//! Latency distributions are kept in a [`histogram::LatencyHistogram`], exact to three
//! significant digits and mergeable across replications without loss.

pub mod batch_means;
pub mod compare;
pub mod histogram;
pub mod interval;
pub mod overload;
pub mod student_t;
pub mod warmup;

#[cfg(test)]
pub(crate) mod test_draws;
