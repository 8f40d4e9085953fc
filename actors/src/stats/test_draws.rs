//! Random draws that the statistics tests need beyond what a [`Substream`] offers.

use blis_kernel::Substream;

/// A standard normal draw by the Box–Muller transform (the cosine half only).
pub(crate) fn standard_normal(stream: &mut Substream) -> f64 {
    let radius = libm::sqrt(-2.0 * libm::log(stream.unit_open_at_zero()));
    radius * libm::cos(2.0 * std::f64::consts::PI * stream.unit())
}
