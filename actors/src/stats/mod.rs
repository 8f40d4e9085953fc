//! Statistics for turning simulation output into estimates with honest uncertainty.
//!
//! Pure functions and plain types, no actors and no I/O. Independent replications of a run give
//! one value each of an output measure; [`interval::estimate`] turns them into a mean with a
//! Student-t confidence interval, whose quantile [`student_t::t_quantile`] computes.
pub mod batch_means;
pub mod compare;
pub mod interval;
pub mod overload;
pub mod student_t;
pub mod warmup;

#[cfg(test)]
mod test_draws;
