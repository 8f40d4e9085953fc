//! A synthetic client fitted to a trace: the trace's gaps between arrivals and its prompt and
//! output lengths, candidate families fitted to each by maximum likelihood, each fit tested on
//! samples it did not see, and the best family per quantity written as a [`ClientSpec`].
//!
//! Every [`HOLD_OUT`]-th sample (in trace order) is held out; the families are fitted to the
//! others and tested on the held-out ones with a Kolmogorov–Smirnov test: the statistic `D` is
//! the largest distance between the held-out samples' empirical CDF and the CDF of the fitted law
//! as the trace would record it (gaps rounded to the trace's time resolution; lengths rounded to
//! whole tokens and clamped, exactly as [`super::sampling::draw_length`] draws them), and the
//! p-value is the asymptotic Kolmogorov distribution's tail at `(√n + 0.12 + 0.11/√n)·D`
//! (Stephens' finite-sample correction). Because the parameters never saw the held-out samples,
//! the test needs no correction for estimated parameters; on whole numbers it is conservative.
//! Gaps: exponential, gamma and Weibull, the smallest `D` chosen among those the scenario can
//! express (gamma CV in [0.01, 100], Weibull CV in [0.05, 20]). Lengths: normal, log-normal and
//! exponential, the smallest `D` chosen unless its p-value is below [`FALLBACK_P`], when the
//! lengths are written as an empirical table instead. A quantity that never varies is written
//! as a constant. The written laws are the ones tested (fitted to the kept samples).
//! Transcendental functions come from `libm`.

mod gaps;
mod lengths;
mod special;

use blis_contracts::{ClientSpec, FieldError, LengthDist, NodeKind, PromptPart, Workload};

use super::RequestSource;
use super::sampling::GapLaw;
pub use gaps::arrival_of;
use special::kolmogorov_tail;

/// Every `HOLD_OUT`-th sample (the 5th, the 10th, …) is held out of the fits to test them.
pub const HOLD_OUT: usize = 5;
/// Below this p-value on held-out samples, no parametric family describes the lengths and they
/// are written as an empirical table.
pub const FALLBACK_P: f64 = 0.05;
/// Most values an empirical table holds (more distinct lengths are summarised by quantiles).
pub const EMPIRICAL_VALUES: usize = 200;

/// What a trace holds for fitting.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceSample {
    /// Requests read.
    pub requests: u64,
    /// Requests of more than one node, whose DAG shape a fitted client does not reproduce.
    pub multi_node_requests: u64,
    /// LLM calls whose prompts hold shared blocks, which a fitted client does not reproduce.
    pub calls_with_shared_blocks: u64,
    /// Gaps between consecutive arrivals, µs.
    pub gaps_us: Vec<u64>,
    /// Prompt length of every LLM call (an earlier node's history counted in full), tokens.
    pub input_tokens: Vec<u32>,
    /// Output length of every LLM call, tokens.
    pub output_tokens: Vec<u32>,
}

impl TraceSample {
    /// Read every request of `source`; refuses with the source's error if it ended early.
    pub fn collect(source: &mut dyn RequestSource) -> Result<TraceSample, FieldError> {
        let mut sample = TraceSample::default();
        let mut previous = None;
        while let Some(planned) = source.next_request() {
            let spec = planned.spec;
            if let Some(previous) = previous {
                sample.gaps_us.push(spec.arrival_us.saturating_sub(previous));
            }
            previous = Some(spec.arrival_us);
            sample.requests += 1;
            if spec.nodes.len() > 1 {
                sample.multi_node_requests += 1;
            }
            // Each node's prompt and output length, so a history part counts its node in full.
            let mut lengths: Vec<Option<(u64, u32)>> = Vec::with_capacity(spec.nodes.len());
            for node in &spec.nodes {
                let NodeKind::Llm(call) = &node.kind else {
                    lengths.push(None);
                    continue;
                };
                let prompt: u64 = call
                    .prompt
                    .iter()
                    .map(|part| match part {
                        PromptPart::Tokens(n) | PromptPart::Shared { tokens: n, .. } => u64::from(*n),
                        PromptPart::TokenIds(ids) => ids.len() as u64,
                        PromptPart::History(of) => spec
                            .nodes
                            .iter()
                            .zip(&lengths)
                            .find(|(n, _)| &n.id == of)
                            .and_then(|(_, l)| *l)
                            .map_or(0, |(p, o)| p + u64::from(o)),
                    })
                    .sum();
                lengths.push(Some((prompt, call.output_tokens)));
                if call.prompt.iter().any(|part| matches!(part, PromptPart::Shared { .. })) {
                    sample.calls_with_shared_blocks += 1;
                }
                sample.input_tokens.push(u32::try_from(prompt).unwrap_or(u32::MAX));
                sample.output_tokens.push(call.output_tokens);
            }
        }
        match source.error() {
            Some(error) => Err(error.clone()),
            None => Ok(sample),
        }
    }
}

/// Why a trace cannot be fitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FitError {
    /// Too few gaps to fit and test a law (one request more than gaps).
    TooFewGaps(usize),
    /// Too few LLM calls to fit and test their lengths.
    TooFewCalls(usize),
    /// Every request arrives at the same instant.
    SimultaneousArrivals,
    /// Every kept gap is within one step of the trace's time resolution (µs), too short to tell
    /// a law from.
    UnresolvedGaps(u64),
}

impl std::fmt::Display for FitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let least = HOLD_OUT;
        match self {
            FitError::TooFewGaps(gaps) => write!(
                f,
                "{} requests: at least {} are needed to fit and test arrival gaps \
                 (every {least}th gap is held out)",
                gaps + 1,
                least + 1
            ),
            FitError::TooFewCalls(calls) => write!(
                f,
                "{calls} LLM calls: at least {least} are needed to fit and test lengths \
                 (every {least}th is held out)"
            ),
            FitError::SimultaneousArrivals => write!(f, "every request arrives at the same instant"),
            FitError::UnresolvedGaps(resolution) => write!(
                f,
                "every gap is within one step of the trace's time resolution ({resolution} µs): \
                 too short to fit"
            ),
        }
    }
}

impl std::error::Error for FitError {}

/// A Kolmogorov–Smirnov test of held-out samples against a fitted law.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KsTest {
    /// The largest distance between the samples' empirical CDF and the law's.
    pub d: f64,
    /// The asymptotic p-value.
    pub p: f64,
    /// Held-out samples.
    pub n: usize,
}

impl KsTest {
    /// The test of `n` samples at distance `d`.
    fn new(d: f64, n: usize) -> KsTest {
        let root = libm::sqrt(n as f64);
        KsTest { d, p: kolmogorov_tail((root + 0.12 + 0.11 / root) * d), n }
    }
}

/// One candidate family of a quantity.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate<L> {
    /// The family's name.
    pub family: &'static str,
    /// Its law fitted to the kept samples, or why there is none.
    pub law: Result<L, String>,
    /// Its test on the held-out samples, when fitted.
    pub test: Option<KsTest>,
    /// Why the scenario cannot use it though it was fitted (a CV out of range).
    pub unusable: Option<String>,
}

/// The candidates of one quantity and the law written for it.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantityFit<L> {
    /// Every candidate, fitted and tested (none when the quantity never varies).
    pub candidates: Vec<Candidate<L>>,
    /// The family written: a candidate's, `empirical` or `constant`.
    pub chosen: &'static str,
    /// The law written.
    pub law: L,
}

/// A client fitted to a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadFit {
    /// Requests in the trace (the fitted client sends as many).
    pub requests: u64,
    /// The trace's time resolution, µs: the greatest common divisor of its gaps.
    pub resolution_us: u64,
    /// Gaps of at most one step of the resolution, which the likelihood counts only as shorter
    /// than one and a half steps.
    pub censored_gaps: usize,
    /// Gaps between arrivals.
    pub gaps: QuantityFit<GapLaw>,
    /// Prompt lengths.
    pub input_tokens: QuantityFit<LengthDist>,
    /// Output lengths.
    pub output_tokens: QuantityFit<LengthDist>,
}

impl WorkloadFit {
    /// Fit every quantity of `sample`.
    pub fn new(sample: &TraceSample) -> Result<WorkloadFit, FitError> {
        if sample.gaps_us.len() < HOLD_OUT {
            return Err(FitError::TooFewGaps(sample.gaps_us.len()));
        }
        if sample.input_tokens.len() < HOLD_OUT {
            return Err(FitError::TooFewCalls(sample.input_tokens.len()));
        }
        let resolution = sample.gaps_us.iter().fold(0, |g, &x| gcd(g, x));
        if resolution == 0 {
            return Err(FitError::SimultaneousArrivals);
        }
        let gaps = gaps::fit_gaps(&sample.gaps_us, resolution).ok_or(FitError::UnresolvedGaps(resolution))?;
        Ok(WorkloadFit {
            requests: sample.requests,
            resolution_us: resolution,
            censored_gaps: sample.gaps_us.iter().filter(|&&g| g <= resolution).count(),
            gaps,
            input_tokens: lengths::fit_lengths(&sample.input_tokens),
            output_tokens: lengths::fit_lengths(&sample.output_tokens),
        })
    }

    /// The workload of one client named `name` sending the trace's number of requests with the
    /// chosen laws.
    pub fn workload(&self, name: &str) -> Workload {
        let arrival = arrival_of(&self.gaps.law).expect("the chosen gap law is one the scenario accepts");
        Workload {
            rate_per_s: None,
            clients: vec![ClientSpec {
                name: name.to_owned(),
                requests: self.requests,
                arrival,
                input_tokens: self.input_tokens.law.clone(),
                output_tokens: self.output_tokens.law.clone(),
                shared_prefix: None,
                session: None,
                slo_class: None,
                priority: None,
                timeout_s: None,
                fairness_id: None,
                slo_ttft_ms: None,
                model: None,
            }],
            replays: Vec::new(),
            inference_perf: None,
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The kept samples and the held-out ones.
fn split<T: Copy>(samples: &[T]) -> (Vec<T>, Vec<T>) {
    let (mut kept, mut held) = (Vec::new(), Vec::new());
    for (i, &x) in samples.iter().enumerate() {
        if i % HOLD_OUT == HOLD_OUT - 1 { held.push(x) } else { kept.push(x) }
    }
    (kept, held)
}

/// `x` to six significant digits, so a written spec reads cleanly.
fn significant(x: f64) -> f64 {
    format!("{x:.5e}").parse().unwrap_or(x)
}

/// The largest distance between the empirical CDF of `sorted` (values on a grid of `step`) and
/// `cdf`, the CDF of a law on the same grid: both step only at grid points, so it is enough to
/// compare at each sample value and one step below it.
fn ks_grid(sorted: &[u64], step: u64, cdf: impl Fn(u64) -> f64) -> f64 {
    let n = sorted.len() as f64;
    let mut d: f64 = 0.0;
    let mut i = 0;
    while i < sorted.len() {
        let value = sorted[i];
        let end = i + sorted[i..].iter().take_while(|&&v| v == value).count();
        let below = value.checked_sub(step).map_or(0.0, &cdf);
        d = d.max((i as f64 / n - below).abs()).max((end as f64 / n - cdf(value)).abs());
        i = end;
    }
    d
}

#[cfg(test)]
mod tests {
    use blis_contracts::Arrival;
    use blis_kernel::{Streams, Substream};

    use super::super::sampling::{draw_length, weibull_cv};
    use super::*;

    /// A trace of `lengths` calls whose gaps are those of arrival times recorded to the µs, as the
    /// simulator records them.
    fn sample(gaps_us: Vec<u64>, lengths: Vec<u32>) -> TraceSample {
        TraceSample {
            requests: gaps_us.len() as u64 + 1,
            multi_node_requests: 0,
            calls_with_shared_blocks: 0,
            gaps_us,
            input_tokens: lengths.clone(),
            output_tokens: lengths,
        }
    }

    /// `n` gaps of `law` between arrival times rounded up to the µs.
    fn recorded_gaps(law: GapLaw, n: usize, stream: &mut Substream) -> Vec<u64> {
        let (mut clock, mut previous) = (0.0, 0);
        (0..n)
            .map(|_| {
                clock += law.draw(stream);
                let arrival = libm::ceil(clock) as u64;
                let gap = arrival - previous;
                previous = arrival;
                gap
            })
            .collect()
    }

    fn candidate<'a, L>(fit: &'a QuantityFit<L>, family: &str) -> &'a Candidate<L> {
        fit.candidates.iter().find(|c| c.family == family).unwrap()
    }

    /// Requests from a list, for [`TraceSample::collect`].
    struct Listed(std::vec::IntoIter<blis_contracts::RequestSpec>);

    impl RequestSource for Listed {
        fn pacing(&self) -> super::super::Pacing {
            super::super::Pacing::Open
        }

        fn next_request(&mut self) -> Option<super::super::Planned> {
            self.0.next().map(|spec| super::super::Planned { spec, stage: 0 })
        }
    }

    #[test]
    fn a_sample_holds_gaps_and_every_call_with_its_history_counted() {
        let line = |id: &str, at: u64| {
            format!(
                r#"{{"id":"{id}","arrival_us":{at},"nodes":[{{"kind":"llm","id":"a","prompt":[{{"shared":{{"name":"s","tokens":100}}}},{{"tokens":20}}],"output_tokens":8}},{{"kind":"tool","id":"t","parents":["a"],"duration_us":5}},{{"kind":"llm","id":"b","parents":["t"],"prompt":[{{"history":"a"}},{{"token_ids":[1,2,3]}}],"output_tokens":2}}]}}"#
            )
        };
        let requests = [line("r0", 10), line("r1", 10), line("r2", 250)]
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect::<Vec<_>>();
        let sample = TraceSample::collect(&mut Listed(requests.into_iter())).unwrap();
        assert_eq!(sample.gaps_us, [0, 240]);
        assert_eq!(sample.input_tokens, [120, 131, 120, 131, 120, 131]);
        assert_eq!(sample.output_tokens, [8, 2, 8, 2, 8, 2]);
        assert_eq!((sample.requests, sample.multi_node_requests, sample.calls_with_shared_blocks), (3, 3, 3));
    }

    #[test]
    fn gamma_gaps_with_cv_2_are_recognised_and_their_cv_recovered() {
        let mut stream = Streams::new(3).stream("fit-test", "gamma-gaps", "");
        let gaps = recorded_gaps(GapLaw::gamma(20.0, 2.0), 20_000, &mut stream);
        let fit = WorkloadFit::new(&sample(gaps, vec![1, 2, 3, 4, 5, 6])).unwrap();
        assert_eq!(fit.gaps.chosen, "gamma");
        let Arrival::Gamma { rate_per_s: Some(rate), cv, .. } = arrival_of(&fit.gaps.law).unwrap() else {
            panic!("{:?}", fit.gaps.law)
        };
        assert!((cv - 2.0).abs() < 0.1, "cv {cv}");
        assert!((rate - 20.0).abs() < 1.0, "rate {rate}");
        let gamma = candidate(&fit.gaps, "gamma").test.unwrap();
        let exponential = candidate(&fit.gaps, "exponential").test.unwrap();
        assert!(
            gamma.d < exponential.d && gamma.p > 0.05 && exponential.p < 1e-6,
            "{gamma:?} {exponential:?}"
        );
        assert_eq!(gamma.n, 4_000);
        assert!(fit.censored_gaps > 500, "a gamma of cv 2 has many gaps under 1 µs: {}", fit.censored_gaps);
    }

    #[test]
    fn weibull_and_exponential_gaps_fit_their_own_family() {
        for (law, family) in [(GapLaw::weibull(5.0, 2.0), "weibull"), (GapLaw::poisson(5.0), "exponential")] {
            let mut stream = Streams::new(4).stream("fit-test", family, "");
            let gaps = recorded_gaps(law, 20_000, &mut stream);
            let fit = WorkloadFit::new(&sample(gaps, vec![1, 2, 3, 4, 5, 6])).unwrap();
            let test = candidate(&fit.gaps, family).test.unwrap();
            assert!(test.p > 0.05, "{family}: {test:?}");
            if family == "weibull" {
                assert_eq!(fit.gaps.chosen, "weibull", "{:?}", fit.gaps.candidates);
                let Ok(GapLaw::Weibull { shape, .. }) = candidate(&fit.gaps, "weibull").law else { panic!() };
                assert!((weibull_cv(shape) - 2.0).abs() < 0.1, "shape {shape}");
            }
        }
    }

    #[test]
    fn millisecond_gaps_with_simultaneous_requests_are_fitted_at_their_resolution() {
        // Exponential gaps of mean 20 ms recorded to the ms: a fifth of them are 0 or 1 ms.
        let mut stream = Streams::new(6).stream("fit-test", "ms-gaps", "");
        let (mut clock, mut previous) = (0.0, 0);
        let gaps: Vec<u64> = (0..5_000)
            .map(|_| {
                clock += stream.exponential(20_000.0);
                let arrival = libm::round(clock / 1_000.0) as u64 * 1_000;
                let gap = arrival - previous;
                previous = arrival;
                gap
            })
            .collect();
        let fit = WorkloadFit::new(&sample(gaps, vec![1, 2, 3, 4, 5, 6])).unwrap();
        assert_eq!(fit.resolution_us, 1_000);
        let GapLaw::Exponential { mean_us } = candidate(&fit.gaps, "exponential").law.clone().unwrap() else {
            panic!()
        };
        assert!((mean_us - 20_000.0).abs() < 1_000.0, "{mean_us}");
        assert!(candidate(&fit.gaps, "exponential").test.unwrap().p > 0.05);
    }

    #[test]
    fn lognormal_lengths_pick_lognormal_and_a_mixture_falls_back_to_a_table() {
        let dist = LengthDist::Lognormal { mean: 800.0, std: 600.0, min: 1, max: 1_000_000 };
        let mut stream = Streams::new(5).stream("fit-test", "lognormal-lengths", "");
        let lengths: Vec<u32> = (0..10_000).map(|_| draw_length(&dist, &mut stream)).collect();
        let fit = lengths::fit_lengths(&lengths);
        assert_eq!(fit.chosen, "lognormal", "{:?}", fit.candidates);
        let LengthDist::Lognormal { mean, std, min, max } = fit.law else { panic!() };
        assert!((mean - 800.0).abs() < 30.0 && (std - 600.0).abs() < 40.0, "{mean} {std}");
        assert_eq!((min, max), (*lengths.iter().min().unwrap(), *lengths.iter().max().unwrap()));
        for family in ["normal", "exponential"] {
            assert!(candidate(&fit, family).test.unwrap().p < 1e-6, "{family}");
        }
        // Two far-apart modes: no family fits, so the lengths are written as a table.
        let bimodal: Vec<u32> =
            (0..2_000).map(|i| if i % 3 == 0 { 100 + i % 7 } else { 4_000 + i % 11 }).collect();
        let fit = lengths::fit_lengths(&bimodal);
        assert_eq!(fit.chosen, "empirical");
        let LengthDist::Empirical { values, .. } = &fit.law else { panic!() };
        assert_eq!(values.len(), 18);
        assert!(candidate(&fit, "empirical").test.unwrap().p > 0.5);
    }

    #[test]
    fn the_grid_ks_distance_compares_on_both_sides_of_each_step() {
        let fair = |k: u64| (k.min(4) as f64) / 4.0;
        assert_eq!(ks_grid(&[1, 2, 3, 4], 1, fair), 0.0);
        // All mass at 4 against a fair die: just below 4 the distance is 3/4.
        assert_eq!(ks_grid(&[4, 4, 4, 4], 1, fair), 0.75);
        assert_eq!(ks_grid(&[20, 40], 20, |k| if k >= 40 { 1.0 } else { 0.25 }), 0.25);
    }

    #[test]
    fn degenerate_traces_give_constants_or_a_refusal() {
        let fit = WorkloadFit::new(&sample(vec![1000; 8], vec![64; 9])).unwrap();
        assert_eq!(
            arrival_of(&fit.gaps.law).unwrap(),
            Arrival::Constant { rate_per_s: Some(1000.0), rate_fraction: None }
        );
        assert_eq!(fit.input_tokens.law, LengthDist::Constant { value: 64 });
        assert_eq!(WorkloadFit::new(&sample(vec![0; 8], vec![1; 9])), Err(FitError::SimultaneousArrivals));
        assert_eq!(WorkloadFit::new(&sample(vec![5; 3], vec![1; 4])), Err(FitError::TooFewGaps(3)));
        assert_eq!(
            WorkloadFit::new(&sample(vec![0, 7, 0, 7, 7, 0, 7], vec![1; 8])),
            Err(FitError::UnresolvedGaps(7))
        );
    }

    #[test]
    fn the_fitted_workload_validates_and_reads_back_from_yaml() {
        let mut stream = Streams::new(8).stream("fit-test", "workload", "");
        let gaps = recorded_gaps(GapLaw::gamma(4.0, 1.5), 400, &mut stream);
        let dist = LengthDist::Lognormal { mean: 300.0, std: 200.0, min: 1, max: 100_000 };
        let lengths: Vec<u32> = (0..401).map(|_| draw_length(&dist, &mut stream)).collect();
        let workload = WorkloadFit::new(&sample(gaps, lengths)).unwrap().workload("fitted");
        workload.validate().unwrap();
        let text = blis_contracts::yaml::to_string(&workload).unwrap();
        let read: Workload = blis_contracts::yaml::from_str(&text).unwrap();
        read.validate().unwrap();
        assert_eq!(read, workload);
        assert_eq!(read.clients[0].requests, 401);
    }
}
