//! Ranks of trust and facts that carry them.

use serde::{Deserialize, Serialize};

/// How much a number is trusted, most trusted first (DESIGN.md §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rank {
    /// Measured on the hardware in question.
    Measured,
    /// Fitted to real runs (within the range fitted).
    Calibrated,
    /// Fitted elsewhere and carried over.
    Transferred,
    /// From a paper or a third-party measurement.
    Literature,
    /// From the vendor's datasheet.
    VendorSpec,
    /// Derived from peaks alone.
    Roofline,
    /// A stated assumption.
    Assumed,
}

/// One number with its unit, rank and source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    /// The value, in `unit`.
    pub value: f64,
    /// Its unit, e.g. `FLOP/s`, `B/s`, `B`.
    pub unit: String,
    /// How much it is trusted.
    pub rank: Rank,
    /// Where it comes from.
    pub source: String,
}
