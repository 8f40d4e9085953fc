//! `--trace` and `--trace-filter`: the Perfetto timeline of a run.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use blis_actors::{REQUEST_KEY_MASK, request_key, timeline_group};
use blis_contracts::{Scenario, yaml};
use blis_kernel::timeline::{TimelineFilter, TimelineWriter};
use blis_kernel::{SimDuration, SimTime};

/// The writer of a trace file.
pub type Writer = TimelineWriter<BufWriter<File>>;

/// Parse `from=S,to=S,components=A;B,requests=ID;ID` (times in seconds of simulated time).
pub fn parse_filter(spec: &str, scenario_text: &str) -> Result<TimelineFilter, String> {
    let mut filter = TimelineFilter::default();
    let time = |key: &str, value: &str| -> Result<SimTime, String> {
        let seconds: f64 =
            value.parse().map_err(|_| format!("--trace-filter {key}={value}: not a number of seconds"))?;
        SimDuration::from_secs_ceil(seconds)
            .map(|d| SimTime::ZERO.saturating_add(d))
            .map_err(|e| format!("--trace-filter {key}={value}: {e}"))
    };
    for part in spec.split(',').filter(|p| !p.is_empty()) {
        let (key, value) =
            part.split_once('=').ok_or_else(|| format!("--trace-filter {part:?}: expected key=value"))?;
        match key {
            "from" => filter.from = Some(time(key, value)?),
            "to" => filter.to = Some(time(key, value)?),
            "components" => filter.components = value.split(';').map(str::to_owned).collect(),
            "requests" => {
                let scenario: Scenario = yaml::from_str(scenario_text).map_err(|e| e.to_string())?;
                for id in value.split(';') {
                    let key = request_key(&scenario, id).ok_or_else(|| {
                        format!("--trace-filter requests={id}: no such request in the scenario")
                    })?;
                    filter.ids.push(key);
                }
                filter.id_mask = Some(REQUEST_KEY_MASK);
            }
            other => {
                return Err(format!(
                    "--trace-filter {other}: unknown key (use from, to, components, requests)"
                ));
            }
        }
    }
    if let (Some(from), Some(to)) = (filter.from, filter.to)
        && from > to
    {
        return Err(format!("--trace-filter: from ({from}) is after to ({to})"));
    }
    Ok(filter)
}

/// A writer to `path` for a run seeded with `seed` (the header records it).
pub fn writer(path: &Path, filter: TimelineFilter, seed: u64) -> std::io::Result<Writer> {
    let file = BufWriter::new(File::create(path)?);
    let other =
        [("producer", format!("blis-actor {}", env!("CARGO_PKG_VERSION"))), ("seed", seed.to_string())];
    Ok(TimelineWriter::new(file, filter, Box::new(timeline_group), &other))
}
