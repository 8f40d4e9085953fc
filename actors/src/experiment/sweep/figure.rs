//! The figures a search may rank or judge, named as the Result's estimates name them
//! (`ttft_ms.p99`) or as SLOs are written (`ttft_p99_ms`), checked against the metric registry.

use blis_contracts::{Better, FieldError, METRICS, metric};

use super::record::GOODPUT_SHARE;

/// Statistics of a latency metric.
const STATISTICS: [&str; 4] = ["mean", "p50", "p90", "p99"];

/// A figure of the Result, and which way it improves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Figure {
    /// Its name in `estimates` (`ttft_ms.p99`, `output_tokens_per_s`, `goodput_share`).
    pub name: String,
    /// Which direction is better.
    pub better: Better,
}

/// The figure `key` names — `metric.statistic` (`ttft_ms.p99`), the SLO form
/// `<metric>_<statistic>_ms` (`ttft_p99_ms`), a scalar metric (`output_tokens_per_s`) or
/// `goodput_share` — refused at `path` when the registry has no such figure.
pub fn figure(key: &str, path: &str) -> Result<Figure, FieldError> {
    if key == GOODPUT_SHARE {
        return Ok(Figure { name: key.to_owned(), better: Better::Higher });
    }
    let (id, statistic) = match key.split_once('.') {
        Some((id, statistic)) => (id.to_owned(), Some(statistic.to_owned())),
        None => match key.strip_suffix("_ms").and_then(|k| k.rsplit_once('_')) {
            Some((stem, statistic)) if STATISTICS.contains(&statistic) => {
                (format!("{stem}_ms"), Some(statistic.to_owned()))
            }
            _ => (key.to_owned(), None),
        },
    };
    let known = || {
        let mut names: Vec<String> = Vec::new();
        for m in METRICS {
            if m.unit == "ms" {
                names.push(format!("{}.p99", m.id));
            } else {
                names.push(m.id.to_owned());
            }
        }
        names.push(GOODPUT_SHARE.to_owned());
        names.join(", ")
    };
    let Some(definition) = metric(&id) else {
        return Err(FieldError::new(
            path,
            key,
            format!("the metric registry has no such figure; known: {}", known()),
        ));
    };
    let latency = definition.unit == "ms";
    let name = match (latency, statistic) {
        (true, Some(statistic)) if STATISTICS.contains(&statistic.as_str()) => format!("{id}.{statistic}"),
        (true, _) => {
            return Err(FieldError::new(
                path,
                key,
                format!("`{id}` is a latency: name a statistic ({})", STATISTICS.join(", ")),
            ));
        }
        (false, None) => id.clone(),
        (false, Some(_)) => {
            return Err(FieldError::new(path, key, format!("`{id}` is one number per run; name it alone")));
        }
    };
    Ok(Figure { name, better: definition.better })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slo_names_and_estimate_names_mean_the_same_figure() {
        assert_eq!(figure("ttft_p99_ms", "slo").unwrap().name, "ttft_ms.p99");
        assert_eq!(figure("ttft_ms.p99", "slo").unwrap().name, "ttft_ms.p99");
        assert_eq!(figure("tpot_p99_ms", "slo").unwrap().name, "tpot_ms.p99");
        assert_eq!(figure("output_tokens_per_s", "x").unwrap().better, Better::Higher);
        assert_eq!(figure("goodput_share", "x").unwrap().better, Better::Higher);
    }

    #[test]
    fn a_figure_the_registry_lacks_is_refused_by_path_and_value() {
        let e = figure("ttfb_p99_ms", "slo.ttfb_p99_ms").unwrap_err();
        assert_eq!(e.path, "slo.ttfb_p99_ms");
        assert_eq!(e.value.as_deref(), Some("ttfb_p99_ms"));
        assert!(e.cause.starts_with("the metric registry has no such figure; known: ttft_ms.p99"), "{e}");
        assert!(figure("ttft_ms.p42", "m").unwrap_err().cause.contains("name a statistic"));
        assert!(figure("requests_per_s.p99", "m").unwrap_err().cause.contains("one number per run"));
    }
}
