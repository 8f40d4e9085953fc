//! How a port treats each argument of its upstream engine: models it, models some values, accepts
//! it as proven inert, or refuses it by name with the reason.

/// What the port does with one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// Read by the port and simulated.
    Modelled,
    /// Accepted and ignored: it cannot change a simulated result. `sample` is a value the inert
    /// test sets (YAML) to prove it.
    Inert {
        /// Why it cannot matter.
        why: &'static str,
        /// A non-default value, as YAML.
        sample: &'static str,
    },
    /// Read and simulated at some values only; any other value is refused with `why`.
    Limited {
        /// Which values are modelled and why the others are not.
        why: &'static str,
    },
    /// Refused when set: the port does not model what it changes.
    Refused {
        /// What is not modelled.
        why: &'static str,
    },
}
