//! How a port treats each argument of its upstream engine: models it, models some values, accepts
//! it as proven inert, or refuses it by name with the reason.

use blis_contracts::yaml::YamlValue;
use blis_contracts::{AttentionKind, FieldError, ModelArchitecture};

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

/// Check every name in `args` (an engine's arguments, found at `path`) against `treatment`
/// before they are read: a refused one fails with its path, its value and the reason (`release`
/// names the upstream with its article, e.g. `a vLLM 0.15.1`); inert ones are removed.
pub fn screen(
    args: &mut YamlValue,
    path: &str,
    release: &str,
    treatment: impl Fn(&str) -> Option<Treatment>,
) -> Result<(), FieldError> {
    let Some(mapping) = args.as_mapping_mut() else { return Ok(()) };
    let mut inert = Vec::new();
    for (key, setting) in mapping.iter() {
        let Some(name) = key.as_str() else { continue };
        match treatment(name) {
            Some(Treatment::Refused { why }) => {
                let rendered = serde_json::to_string(setting).unwrap_or_default();
                return Err(FieldError::new(
                    format!("{path}.{name}"),
                    rendered.trim_matches('"'),
                    format!("{release} argument this build does not model: {why}"),
                ));
            }
            Some(Treatment::Inert { .. }) => inert.push(key.clone()),
            Some(Treatment::Modelled | Treatment::Limited { .. }) | None => {}
        }
    }
    for key in inert {
        mapping.remove(&key);
    }
    Ok(())
}

/// Refuse a model whose attention `port` (e.g. `the vLLM port`) does not lower yet, naming the
/// pool's `model` field under `pool_path`.
pub fn refuse_unlowered_attention(
    model: &ModelArchitecture,
    port: &str,
    pool_path: &str,
) -> Result<(), FieldError> {
    let attention = match model.attention {
        AttentionKind::Full => return Ok(()),
        AttentionKind::SlidingWindow { window } => format!("sliding-window attention (window {window})"),
        AttentionKind::MultiHeadLatent { .. } => "multi-head latent attention (MLA)".to_owned(),
    };
    Err(FieldError::new(
        format!("{pool_path}.model"),
        &model.name,
        format!("{attention} is not lowered by {port} yet"),
    ))
}
