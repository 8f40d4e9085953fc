//! Capacity planning: the smallest deployment that meets SLOs at a traffic level, or the
//! highest traffic a deployment sustains under them, searched over one ordered axis.
//!
//! ```yaml
//! base: scenario.yaml
//! set:                          # optional: values every point carries
//!   workload.clients[0].arrival.rate_per_s: 50
//! search: smallest              # the first point, in axis order, that meets (or `largest`: the last)
//! axis:                         # one ordered axis ...
//!   cluster.pools[0].replicas: [1, 2, 3, 4, 6, 8]
//! points:                       # ... or ordered points (e.g. replicas with tensor parallelism)
//!   - cluster.pools[0].replicas: 2
//!     cluster.pools[0].engine.args.tensor_parallel_size: 4
//! slo: {ttft_p99_ms: 500, tpot_p99_ms: 50}
//! error_rate: 0.05              # chance of any wrong verdict among the points judged
//! replications: 5               # first look at a point; doubled while an interval straddles
//! max_replications: 20
//! ```
//!
//! A point **meets** when every SLO figure's interval lies wholly on the right side of its
//! target (a latency's upper end at or below it, a share's or a throughput's lower end at or
//! above), **fails** when any interval lies wholly on the wrong side (or it is overloaded,
//! refused or failed), and **straddles** otherwise: its replications are doubled, up to
//! `max_replications`, after which it is **undecided** and treated as not meeting. Meeting is
//! taken to be monotone along the axis, so the search is a bisection, judging at most
//! `J = ⌈log₂(K+1)⌉` of the K points. Each interval is at level `1 − α/(J·S·m)` — S the
//! looks at one point (replication counts n, 2n, … up to the maximum), m the SLOs — so by
//! Bonferroni the chance that any verdict of the search is wrong is at most α. The answer is
//! then re-run on fresh seeds (a stream of its own) and reported with its intervals.

use std::path::Path;

use blis_contracts::yaml::{self, YamlValue};
use blis_contracts::{Better, EstimateRecord, FieldError, Scenario, bounds};
use blis_costmodel::CostData;
use serde::{Deserialize, Serialize};

use super::sweep::evaluate::{Evaluate, axis_values, fresh_seed};
use super::sweep::figure::{Figure, figure};
use super::sweep::record::{AxisValue, PointRecord, PointStatus};
use super::sweep::spec::{Base, Point, build_points, grid, inline, listed};
use crate::RunError;
use crate::stats::interval::{DEFAULT_LEVEL, estimate};

/// The capacity spec as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CapacityFile {
    base: String,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    set: Option<YamlValue>,
    search: Search,
    #[serde(default)]
    axis: Option<YamlValue>,
    #[serde(default)]
    points: Option<Vec<YamlValue>>,
    slo: YamlValue,
    #[serde(default = "default_error_rate")]
    error_rate: f64,
    #[serde(default = "default_replications")]
    replications: u32,
    #[serde(default = "default_max_replications")]
    max_replications: u32,
}

fn default_error_rate() -> f64 {
    0.05
}

fn default_replications() -> u32 {
    5
}

fn default_max_replications() -> u32 {
    20
}

/// Which end of the axis is wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Search {
    /// The first point in axis order that meets the SLOs (the smallest deployment); meeting is
    /// taken to hold for every later point.
    Smallest,
    /// The last point in axis order that meets them (the highest rate sustained); meeting is
    /// taken to hold for every earlier point.
    Largest,
}

/// One objective: a figure and its target.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Objective {
    /// The figure, as the estimates name it.
    pub figure: String,
    /// Its target.
    pub target: f64,
    /// Which side of the target is good.
    #[serde(skip)]
    pub better: Better,
}

/// What a point costs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PointInfo {
    /// Its values.
    pub values: Vec<AxisValue>,
    /// Engine instances.
    pub instances: u64,
    /// GPUs: instances × their tensor-parallel degree.
    pub gpus: u64,
}

/// How to search.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Which end is wanted.
    pub search: Search,
    /// The objectives.
    pub objectives: Vec<Objective>,
    /// The chance of any wrong verdict allowed.
    pub error_rate: f64,
    /// Replications of a first look.
    pub replications: u32,
    /// Most replications of a point.
    pub max_replications: u32,
    /// The seed every point runs on.
    pub seed: u64,
    /// The points, in axis order.
    pub points: Vec<PointInfo>,
}

/// A checked capacity spec.
pub struct CapacitySpec {
    /// The base scenario.
    pub base: Base,
    /// The points, in axis order.
    pub points: Vec<Point>,
    /// How to search.
    pub plan: Plan,
}

impl CapacitySpec {
    /// Read and check the spec at `path`.
    pub fn load(path: &Path, data: &CostData) -> Result<CapacitySpec, FieldError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| FieldError::new("(spec)", path.display(), format!("cannot read the spec: {e}")))?;
        let file: CapacityFile = yaml::from_str(&text)?;
        if !(file.error_rate > 0.0 && file.error_rate <= 0.5) {
            return Err(FieldError::new("error_rate", file.error_rate, "must be above 0 and at most 0.5"));
        }
        bounds::check_replications("replications", file.replications)?;
        bounds::check_replications("max_replications", file.max_replications)?;
        if file.replications < 2 {
            return Err(FieldError::new(
                "replications",
                file.replications,
                "an interval needs at least 2 replications",
            ));
        }
        if file.max_replications < file.replications {
            return Err(FieldError::new(
                "max_replications",
                file.max_replications,
                format!("must be at least replications ({})", file.replications),
            ));
        }
        let base = Base::load(path, &file.base, "base", file.seed, None, file.set.as_ref())?;
        let (origins, settings) = match (&file.axis, &file.points) {
            (Some(axis), None) => {
                if axis.as_mapping().is_some_and(|m| m.len() > 1) {
                    return Err(FieldError::new(
                        "axis",
                        inline(axis),
                        "capacity searches one ordered axis; give points for values that change together",
                    ));
                }
                let (origins, settings) = grid(axis)?;
                let renamed: Vec<_> = origins
                    .into_iter()
                    .map(|o| {
                        Box::new(move |k| o(k).replacen("axes.", "axis.", 1)) as Box<dyn Fn(usize) -> String>
                    })
                    .collect();
                (renamed, settings)
            }
            (None, Some(points)) => listed(points)?,
            (Some(_), Some(_)) => {
                return Err(FieldError::at("points", "give either axis or points, not both"));
            }
            (None, None) => {
                return Err(FieldError::at("axis", "give the ordered axis to search (or points)"));
            }
        };
        let (_, points) = build_points(&base, &origins, settings, data)?;
        let objectives = objectives(&file.slo)?;
        let infos = points.iter().map(point_info).collect();
        let plan = Plan {
            search: file.search,
            objectives,
            error_rate: file.error_rate,
            replications: file.replications,
            max_replications: file.max_replications,
            seed: base.seed,
            points: infos,
        };
        Ok(CapacitySpec { base, points, plan })
    }
}

/// The objectives of `slo` (a map from figure to target), in the order written.
fn objectives(slo: &YamlValue) -> Result<Vec<Objective>, FieldError> {
    let Some(map) = slo.as_mapping().filter(|m| !m.is_empty()) else {
        return Err(FieldError::new(
            "slo",
            inline(slo),
            "map each figure to its target, e.g. {ttft_p99_ms: 500}",
        ));
    };
    let mut objectives = Vec::new();
    for (key, target) in map {
        let key = key
            .as_str()
            .ok_or_else(|| FieldError::new("slo", inline(key), "a target is keyed by a figure's name"))?;
        let path = format!("slo.{key}");
        let Figure { name, better } = figure(key, &path)?;
        if better == Better::Neither {
            return Err(FieldError::new(
                &path,
                key,
                "this figure describes a run and is better in neither direction",
            ));
        }
        let Some(target) = target.as_f64().filter(|t| t.is_finite() && *t > 0.0) else {
            return Err(FieldError::new(&path, inline(target), "a target is a positive number"));
        };
        if name == super::sweep::record::GOODPUT_SHARE && target > 1.0 {
            return Err(FieldError::new(&path, target, "a share is at most 1"));
        }
        objectives.push(Objective { figure: name, target, better });
    }
    Ok(objectives)
}

/// A point's values, instances and GPUs (tensor-parallel degree from its engine arguments,
/// default 1).
fn point_info(point: &Point) -> PointInfo {
    let (mut instances, mut gpus) = (0, 0);
    if let Ok(scenario) = Scenario::parse(&point.text) {
        for pool in &scenario.cluster.pools {
            let tp = pool.engine.args.get("tensor_parallel_size").and_then(YamlValue::as_u64).unwrap_or(1);
            instances += u64::from(pool.replicas);
            gpus += u64::from(pool.replicas) * tp;
        }
    }
    PointInfo { values: axis_values(point), instances, gpus }
}

/// A point's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every interval on the right side of its target.
    Meets,
    /// An interval wholly on the wrong side, or the point overloaded, refused or failed.
    Fails,
    /// Still straddling at the most replications: taken as not meeting.
    Undecided,
}

/// One objective judged at one point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judgement {
    /// The figure.
    pub figure: String,
    /// Its target.
    pub target: f64,
    /// Its estimate and interval at the search's level (absent when the figure is missing).
    pub estimate: Option<EstimateRecord>,
    /// `meets`, `fails` or `straddles`; `withheld` (overloaded) or `missing` without a value.
    pub side: &'static str,
}

/// A point the search judged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judged {
    /// The point.
    pub point: usize,
    /// Its values and cost.
    #[serde(flatten)]
    pub info: PointInfo,
    /// The verdict.
    pub verdict: Verdict,
    /// Why it does not meet (empty when it meets).
    pub reasons: Vec<String>,
    /// Replications it was finally judged on.
    pub replications: u32,
    /// Each objective.
    pub judgements: Vec<Judgement>,
}

/// `capacity.json`: the answer, every point judged, and the answer on fresh seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapacityReport {
    /// Which end was wanted.
    pub search: Search,
    /// The chance of any wrong verdict allowed.
    pub error_rate: f64,
    /// The level of every interval judged.
    pub level_each: f64,
    /// How the verdicts are made.
    pub procedure: String,
    /// The answer: the point found, if any meets.
    pub answer: Option<usize>,
    /// The points judged, in the order judged.
    pub judged: Vec<Judged>,
    /// The answer re-run on fresh seeds, judged at 95%.
    pub fresh: Option<Judged>,
}

/// Search `plan` with `evaluator`.
pub fn search(plan: &Plan, evaluator: &mut dyn Evaluate) -> Result<CapacityReport, RunError> {
    let k = plan.points.len();
    let most_judged = (usize::BITS - k.leading_zeros()) as f64;
    let looks = 1.0 + (plan.max_replications / plan.replications).ilog2() as f64;
    let level_each = 1.0 - plan.error_rate / (most_judged * looks * plan.objectives.len() as f64);
    // Positions along the search: position p is point p (smallest) or point k−1−p (largest),
    // so that meeting holds from some position on.
    let at = |p: usize| match plan.search {
        Search::Smallest => p,
        Search::Largest => k - 1 - p,
    };
    let mut judged = Vec::new();
    let (mut lo, mut hi) = (0, k);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let verdict = judge(plan, at(mid), plan.seed, evaluator, level_each, true)?;
        let meets = verdict.verdict == Verdict::Meets;
        judged.push(verdict);
        if meets {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let answer = (hi < k).then(|| at(hi));
    let fresh = match answer {
        Some(point) => {
            let replications =
                judged.iter().find(|j| j.point == point).map_or(plan.replications, |j| j.replications);
            Some(judge_once(plan, point, fresh_seed(plan.seed), replications, evaluator, DEFAULT_LEVEL)?)
        }
        None => None,
    };
    let procedure = format!(
        "bisection over {k} ordered points (at most {most_judged} judged), each look at a point judged on two-sided t intervals at level 1 - {}/({most_judged}·{looks}·{}) = {level_each:.6}: meets when every interval is on the right side of its target; replications doubled from {} to at most {} while one straddles",
        plan.error_rate,
        plan.objectives.len(),
        plan.replications,
        plan.max_replications
    );
    Ok(CapacityReport {
        search: plan.search,
        error_rate: plan.error_rate,
        level_each,
        procedure,
        answer,
        judged,
        fresh,
    })
}

/// Judge `point`, doubling its replications while an interval straddles (when `grow`).
fn judge(
    plan: &Plan,
    point: usize,
    seed: u64,
    evaluator: &mut dyn Evaluate,
    level: f64,
    grow: bool,
) -> Result<Judged, RunError> {
    let mut replications = plan.replications;
    loop {
        let judged = judge_once(plan, point, seed, replications, evaluator, level)?;
        let more = replications.saturating_mul(2);
        if judged.verdict != Verdict::Undecided || !grow || more > plan.max_replications {
            return Ok(judged);
        }
        replications = more;
    }
}

/// Judge `point` on `replications` replications from `seed`, intervals at `level`.
fn judge_once(
    plan: &Plan,
    point: usize,
    seed: u64,
    replications: u32,
    evaluator: &mut dyn Evaluate,
    level: f64,
) -> Result<Judged, RunError> {
    let record: PointRecord = evaluator.evaluate(point, seed, replications)?;
    let mut reasons = Vec::new();
    let mut judgements = Vec::new();
    match record.status {
        PointStatus::Ran if record.overloaded => {
            reasons.push("overloaded: the backlog grows (its latency figures are withheld)".to_owned());
        }
        PointStatus::Ran => {}
        PointStatus::Refused | PointStatus::Failed => {
            reasons.push(format!("not run: {}", record.reason.as_deref().unwrap_or("")));
        }
    }
    let mut straddles = false;
    for objective in &plan.objectives {
        let estimate =
            record.replications.get(&objective.figure).and_then(|values| estimate(values, level).ok()).map(
                |e| EstimateRecord { mean: e.mean, half_width: e.half_width, n: e.n as u64, level: e.level },
            );
        let side = match estimate {
            None if record.overloaded => "withheld",
            None => {
                if reasons.is_empty() {
                    reasons.push(format!("{}: no value in every replication", objective.figure));
                }
                "missing"
            }
            Some(e) => {
                let h = e.half_width.unwrap_or(f64::INFINITY);
                let (good, bad) = match objective.better {
                    Better::Higher => (e.mean - h >= objective.target, e.mean + h < objective.target),
                    Better::Lower | Better::Neither => {
                        (e.mean + h <= objective.target, e.mean - h > objective.target)
                    }
                };
                let (lower, upper) = (e.mean - h, e.mean + h);
                if good {
                    "meets"
                } else if bad {
                    reasons.push(format!(
                        "{} = {:.4} [{lower:.4}, {upper:.4}] is wholly on the wrong side of {}",
                        objective.figure, e.mean, objective.target
                    ));
                    "fails"
                } else {
                    straddles = true;
                    "straddles"
                }
            }
        };
        judgements.push(Judgement {
            figure: objective.figure.clone(),
            target: objective.target,
            estimate,
            side,
        });
    }
    let verdict = if !reasons.is_empty() {
        Verdict::Fails
    } else if straddles {
        let straddling: Vec<&str> =
            judgements.iter().filter(|j| j.side == "straddles").map(|j| j.figure.as_str()).collect();
        reasons.push(format!(
            "undecided at {replications} replications: the interval of {} holds its target",
            straddling.join(", ")
        ));
        Verdict::Undecided
    } else {
        Verdict::Meets
    };
    Ok(Judged { point, info: plan.points[point].clone(), verdict, reasons, replications, judgements })
}

#[cfg(test)]
mod tests {
    use super::super::sweep::stub::{FIGURE, Stub};
    use super::*;

    fn plan(search: Search, points: usize, target: f64) -> Plan {
        Plan {
            search,
            objectives: vec![Objective { figure: FIGURE.into(), target, better: Better::Lower }],
            error_rate: 0.05,
            replications: 5,
            max_replications: 20,
            seed: 11,
            points: (0..points)
                .map(|i| PointInfo { values: Vec::new(), instances: i as u64 + 1, gpus: i as u64 + 1 })
                .collect(),
        }
    }

    #[test]
    fn the_smallest_deployment_meeting_the_slo_is_found() {
        // p99 TTFT falls as 1000/(instances): 1000, 500, 333, 250, 200, ... against 300 ms;
        // the answer is 4 instances (point 3), whatever the seed.
        let truth: Vec<f64> = (0..10).map(|i| 1000.0 / (i as f64 + 1.0)).collect();
        for seed in 0..20 {
            let mut stub = Stub::new(truth.clone(), 20.0);
            let plan = Plan { seed, ..plan(Search::Smallest, 10, 300.0) };
            let report = search(&plan, &mut stub).unwrap();
            assert_eq!(report.answer, Some(3), "seed {seed}: {report:#?}");
            assert!(report.judged.len() <= 4, "a bisection of 10 judges at most 4 points");
            let fresh = report.fresh.as_ref().unwrap();
            assert_eq!(fresh.verdict, Verdict::Meets);
            assert_eq!(stub.asked.last().unwrap().1, fresh_seed(seed));
            for judged in &report.judged {
                assert_eq!(judged.verdict == Verdict::Meets, judged.point >= 3, "{judged:?}");
                assert_eq!(judged.reasons.is_empty(), judged.verdict == Verdict::Meets);
            }
        }
    }

    #[test]
    fn a_straddling_point_gets_more_replications_then_a_verdict() {
        // Point 2 (333 ms against 300, sd 20) straddles on 5 replications at the search's
        // level and is rejected on more.
        let truth: Vec<f64> = (0..10).map(|i| 1000.0 / (i as f64 + 1.0)).collect();
        let mut stub = Stub::new(truth, 20.0);
        let report = search(&plan(Search::Smallest, 10, 300.0), &mut stub).unwrap();
        let point2 = report.judged.iter().find(|j| j.point == 2).expect("point 2 is judged");
        assert!(point2.replications > 5, "{point2:?}");
        assert_eq!(point2.verdict, Verdict::Fails);
        assert!(point2.reasons[0].contains("wholly on the wrong side of 300"), "{:?}", point2.reasons);
        // Bonferroni over at most 4 points × 3 looks (5, 10, 20) × 1 objective.
        assert!((report.level_each - (1.0 - 0.05 / 12.0)).abs() < 1e-12);
    }

    #[test]
    fn the_highest_rate_sustained_is_found_and_overload_rejects() {
        // p99 TTFT rises with the rate: 100 + 60·i; at most 300 ms holds up to point 3.
        let truth: Vec<f64> = (0..8).map(|i| 100.0 + 60.0 * i as f64).collect();
        let mut stub = Stub::new(truth, 5.0);
        stub.overloaded = vec![5, 6, 7];
        let report = search(&plan(Search::Largest, 8, 300.0), &mut stub).unwrap();
        assert_eq!(report.answer, Some(3), "{report:#?}");
        let overloaded: Vec<&Judged> = report.judged.iter().filter(|j| j.point >= 5).collect();
        assert!(overloaded.iter().all(|j| j.reasons[0].starts_with("overloaded")), "{overloaded:?}");
        let none = search(&plan(Search::Smallest, 8, 50.0), &mut Stub::new(vec![100.0; 8], 5.0)).unwrap();
        assert_eq!(none.answer, None);
        assert!(none.fresh.is_none());
    }
}
