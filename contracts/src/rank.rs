//! Ranks of trust, and the facts and prices that carry them.

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

impl Rank {
    /// Every rank, most trusted first.
    pub const ALL: [Rank; 7] = [
        Rank::Measured,
        Rank::Calibrated,
        Rank::Transferred,
        Rank::Literature,
        Rank::VendorSpec,
        Rank::Roofline,
        Rank::Assumed,
    ];

    /// The rank's name in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Rank::Measured => "measured",
            Rank::Calibrated => "calibrated",
            Rank::Transferred => "transferred",
            Rank::Literature => "literature",
            Rank::VendorSpec => "vendor_spec",
            Rank::Roofline => "roofline",
            Rank::Assumed => "assumed",
        }
    }
}

/// Time split by the rank of the coefficient that priced it, microseconds, indexed like
/// [`Rank::ALL`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankShares(pub [f64; 7]);

impl RankShares {
    /// Add `micros` priced at `rank`.
    pub fn add(&mut self, rank: Rank, micros: f64) {
        self.0[rank as usize] += micros;
    }

    /// Add every share of `other`.
    pub fn merge(&mut self, other: &RankShares) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }

    /// The total over all ranks.
    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }

    /// The micros at `rank`.
    pub fn get(&self, rank: Rank) -> f64 {
        self.0[rank as usize]
    }
}
