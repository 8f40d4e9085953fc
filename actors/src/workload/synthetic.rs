//! The synthetic source: a client's distributions turned into requests.
//!
//! Request `k` of client `c` is named `c-k`. Without sessions it is one LLM node `llm` whose
//! prompt is the drawn system prompt (a shared part named `c/system-<g>`) followed by its own
//! tokens. With sessions it is a chain `t0 → i0 → t1 → … ` of turns and think-time intervals,
//! where turn `j`'s prompt is turn `j−1`'s prompt and output followed by new tokens.

use blis_contracts::{
    Arrival, ClientSpec, LlmCall, NodeKind, NodeSpec, PromptPart, RequestSpec, Stage, StageGaps,
};
use blis_kernel::{Streams, Substream};

use super::sampling::{GapLaw, draw_duration_us, draw_length};
use super::{Pacing, Planned, RequestSource};

/// Where arrivals stand within a staged process.
#[derive(Clone, Debug)]
struct StageCursor {
    stages: Vec<Stage>,
    index: usize,
    start_us: f64,
}

/// Requests drawn from a client's distributions.
pub struct Synthetic {
    spec: ClientSpec,
    pacing: Pacing,
    gap_law: Option<GapLaw>,
    stages: Option<StageCursor>,
    gaps: Substream,
    input_lengths: Substream,
    output_lengths: Substream,
    prefix_groups: Substream,
    turns: Substream,
    think_times: Substream,
    clock_us: f64,
    sent: u64,
}

impl Synthetic {
    /// The source of `spec` (already validated), with the workload's total rate for clients that
    /// give a fraction of it.
    pub fn new(spec: &ClientSpec, total_rate_per_s: Option<f64>, streams: Streams) -> Synthetic {
        let component = format!("client/{}", spec.name);
        let rate = spec.arrival.rate().and_then(|r| r.resolve(total_rate_per_s)).unwrap_or(1.0);
        let (gap_law, pacing, stages) = match &spec.arrival {
            Arrival::Poisson { .. } => (Some(GapLaw::poisson(rate)), Pacing::Open, None),
            Arrival::Gamma { cv, .. } => (Some(GapLaw::gamma(rate, *cv)), Pacing::Open, None),
            Arrival::Weibull { cv, .. } => (Some(GapLaw::weibull(rate, *cv)), Pacing::Open, None),
            Arrival::Constant { .. } => (Some(GapLaw::constant(rate)), Pacing::Open, None),
            Arrival::Staged { stages } => {
                (None, Pacing::Open, Some(StageCursor { stages: stages.clone(), index: 0, start_us: 0.0 }))
            }
            Arrival::Closed { concurrency, think_time_s } => {
                (None, Pacing::Closed { concurrency: *concurrency, think_time_s: *think_time_s }, None)
            }
        };
        Synthetic {
            spec: spec.clone(),
            pacing,
            gap_law,
            stages,
            gaps: streams.stream(&component, "arrival", ""),
            input_lengths: streams.stream(&component, "input-length", ""),
            output_lengths: streams.stream(&component, "output-length", ""),
            prefix_groups: streams.stream(&component, "prefix-group", ""),
            turns: streams.stream(&component, "turns", ""),
            think_times: streams.stream(&component, "think-time", ""),
            clock_us: 0.0,
            sent: 0,
        }
    }

    /// The next arrival time, µs, or `None` when a staged process has run out of stages.
    fn next_arrival(&mut self) -> Option<f64> {
        if let Some(law) = self.gap_law {
            self.clock_us += law.draw(&mut self.gaps);
            return Some(self.clock_us);
        }
        let Some(cursor) = self.stages.as_mut() else { return Some(0.0) };
        loop {
            let stage = *cursor.stages.get(cursor.index)?;
            let end_us = cursor.start_us + stage.duration_s * 1e6;
            if stage.rate_per_s > 0.0 {
                let law = match stage.gaps {
                    StageGaps::Poisson => GapLaw::poisson(stage.rate_per_s),
                    StageGaps::Constant => GapLaw::constant(stage.rate_per_s),
                };
                let at = self.clock_us.max(cursor.start_us) + law.draw(&mut self.gaps);
                if at < end_us {
                    self.clock_us = at;
                    return Some(at);
                }
            }
            cursor.index += 1;
            cursor.start_us = end_us;
            self.clock_us = end_us;
        }
    }

    /// One LLM node.
    fn call(&mut self, prompt: Vec<PromptPart>) -> LlmCall {
        LlmCall {
            prompt,
            output_tokens: draw_length(&self.spec.output_tokens, &mut self.output_lengths),
            priority: self.spec.engine_priority(),
            timeout_us: self.spec.timeout_s.map(|s| libm::ceil(s * 1e6) as u64),
        }
    }

    /// The nodes of one request.
    fn nodes(&mut self) -> Vec<NodeSpec> {
        let mut first = Vec::new();
        if let Some(shared) = self.spec.shared_prefix {
            let group = self.prefix_groups.below(u64::from(shared.groups));
            first.push(PromptPart::Shared {
                name: format!("{}/system-{group}", self.spec.name),
                tokens: shared.tokens,
            });
        }
        first.push(PromptPart::Tokens(draw_length(&self.spec.input_tokens, &mut self.input_lengths)));
        let Some(session) = self.spec.session.clone() else {
            let call = self.call(first);
            return vec![NodeSpec { id: "llm".to_owned(), parents: Vec::new(), kind: NodeKind::Llm(call) }];
        };
        let turns = draw_length(&session.turns, &mut self.turns).max(1);
        let mut nodes = Vec::with_capacity(2 * turns as usize - 1);
        let call = self.call(first);
        nodes.push(NodeSpec { id: "t0".to_owned(), parents: Vec::new(), kind: NodeKind::Llm(call) });
        for turn in 1..turns {
            let think = draw_duration_us(&session.think_time_s, &mut self.think_times);
            let previous = format!("t{}", turn - 1);
            let pause = format!("i{}", turn - 1);
            nodes.push(NodeSpec {
                id: pause.clone(),
                parents: vec![previous.clone()],
                kind: NodeKind::Interval(think),
            });
            let own = draw_length(&self.spec.input_tokens, &mut self.input_lengths);
            let call = self.call(vec![PromptPart::History(previous), PromptPart::Tokens(own)]);
            nodes.push(NodeSpec { id: format!("t{turn}"), parents: vec![pause], kind: NodeKind::Llm(call) });
        }
        nodes
    }
}

impl RequestSource for Synthetic {
    fn pacing(&self) -> Pacing {
        self.pacing.clone()
    }

    fn answers_release_nothing(&self) -> bool {
        self.pacing == Pacing::Open && self.spec.session.is_none()
    }

    fn prompts_hold_no_outputs(&self) -> bool {
        self.spec.session.is_none()
    }

    fn next_request(&mut self) -> Option<Planned> {
        if self.sent >= self.spec.requests {
            return None;
        }
        let arrival = self.next_arrival()?;
        let mut digits = itoa::Buffer::new();
        let id = [self.spec.name.as_str(), "-", digits.format(self.sent)].concat();
        self.sent += 1;
        let nodes = self.nodes();
        Some(Planned { spec: RequestSpec { id, arrival_us: libm::ceil(arrival) as u64, nodes }, stage: 0 })
    }
}

#[cfg(test)]
mod tests {
    use blis_contracts::{Duration, LengthDist, Session};

    use super::*;

    fn spec(arrival: Arrival) -> ClientSpec {
        ClientSpec {
            name: "c".into(),
            requests: 1_000,
            arrival,
            input_tokens: LengthDist::Constant { value: 10 },
            output_tokens: LengthDist::Constant { value: 5 },
            shared_prefix: None,
            session: None,
            slo_class: None,
            priority: None,
            timeout_s: None,
            fairness_id: None,
            slo_ttft_ms: None,
            model: None,
        }
    }

    #[test]
    fn a_staged_process_runs_each_stage_at_its_rate_and_stops_after_the_last() {
        let stages = vec![
            Stage { rate_per_s: 10.0, duration_s: 20.0, gaps: StageGaps::Constant },
            Stage { rate_per_s: 0.0, duration_s: 5.0, gaps: StageGaps::Poisson },
            Stage { rate_per_s: 2.0, duration_s: 10.0, gaps: StageGaps::Constant },
        ];
        let mut source = Synthetic::new(&spec(Arrival::Staged { stages }), None, Streams::new(1));
        let arrivals: Vec<u64> =
            std::iter::from_fn(|| source.next_request()).map(|p| p.spec.arrival_us).collect();
        // 10/s for 20 s: 100_000 µs apart, the last at 19.9 s; then 2/s from 25 s to 35 s.
        assert_eq!(arrivals.len(), 199 + 19);
        assert_eq!(arrivals[0], 100_000);
        assert_eq!(arrivals[198], 19_900_000);
        assert_eq!(arrivals[199], 25_500_000);
        assert_eq!(*arrivals.last().unwrap(), 34_500_000);
    }

    #[test]
    fn a_session_chains_turns_through_think_times_and_carries_history() {
        let mut client = spec(Arrival::Poisson { rate_per_s: Some(1.0), rate_fraction: None });
        client.session = Some(Session {
            turns: LengthDist::Constant { value: 3 },
            think_time_s: Duration::Constant { value: 2.0 },
        });
        let mut source = Synthetic::new(&client, None, Streams::new(1));
        let request = source.next_request().unwrap().spec;
        request.validate("r").unwrap();
        let ids: Vec<&str> = request.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["t0", "i0", "t1", "i1", "t2"]);
        assert_eq!(request.nodes[1].kind, NodeKind::Interval(2_000_000));
        let NodeKind::Llm(turn) = &request.nodes[4].kind else { panic!() };
        assert_eq!(turn.prompt, vec![PromptPart::History("t1".into()), PromptPart::Tokens(10)]);
    }
}
