//! The client: an open-loop source of LLM calls and the record of what came back.
//!
//! It sends requests with exponential gaps (a Poisson process) through the router, each with
//! prompt and output token ids drawn from substreams keyed by the request, so the same request
//! has the same tokens whatever the rest of the configuration. It records every call's fate and,
//! for completed calls, the latency of every token as the client sees it.

use std::sync::Arc;

use blis_contracts::{Arrival, CallRecord, ClientSpec, Fate, LengthDist};
use blis_engines::vllm::EngineRequest;
use blis_kernel::{
    Actor, ActorId, Context, Description, Event, Outbox, SimDuration, SimTime, Streams, Substream,
    TimeAdvance,
};

use crate::message::{CallRequest, ClusterMessage};

/// Bits of a request key below the client index.
pub const KEY_SEQUENCE_BITS: u32 = 40;

/// What the client knows of one call.
#[derive(Clone, Debug)]
struct Call {
    arrival_us: u64,
    input_tokens: u32,
    output_tokens: u32,
    instance: Option<Arc<str>>,
    fate: Option<Fate>,
    token_latency_us: Vec<u64>,
    cached_tokens: u32,
    preemptions: u32,
}

/// One open-loop client.
pub struct Client {
    name: String,
    index: u32,
    me: ActorId,
    router: ActorId,
    delay_to_router: SimDuration,
    spec: ClientSpec,
    vocab_size: u32,
    streams: Streams,
    gaps: Substream,
    input_lengths: Substream,
    output_lengths: Substream,
    prefix_groups: Substream,
    next_gap: SimDuration,
    calls: Vec<Call>,
    outstanding: u64,
}

impl Client {
    /// A client named `name` (its `index` among clients), at address `me`, sending through
    /// `router` with a one-way delay, drawing token ids below `vocab_size`.
    pub fn new(
        spec: &ClientSpec,
        index: u32,
        me: ActorId,
        router: ActorId,
        delay_to_router: SimDuration,
        vocab_size: u32,
        streams: Streams,
    ) -> Client {
        let component = format!("client/{}", spec.name);
        let mut client = Client {
            name: spec.name.clone(),
            index,
            me,
            router,
            delay_to_router,
            spec: spec.clone(),
            vocab_size,
            streams,
            gaps: streams.stream(&component, "arrival", ""),
            input_lengths: streams.stream(&component, "input-length", ""),
            output_lengths: streams.stream(&component, "output-length", ""),
            prefix_groups: streams.stream(&component, "prefix-group", ""),
            next_gap: SimDuration::ZERO,
            calls: Vec::with_capacity(spec.requests.min(1 << 20) as usize),
            outstanding: 0,
        };
        client.next_gap = client.draw_gap();
        client
    }

    fn draw_gap(&mut self) -> SimDuration {
        match self.spec.arrival {
            Arrival::Poisson { rate_per_s } => {
                SimDuration::from_micros_ceil(self.gaps.exponential(1e6 / rate_per_s))
                    .expect("a validated positive rate gives a finite gap")
            }
        }
    }

    fn draw_length(stream: &mut Substream, dist: LengthDist) -> u32 {
        match dist {
            LengthDist::Constant { value } => value,
            LengthDist::Uniform { min, max } => min + stream.below(u64::from(max - min) + 1) as u32,
        }
    }

    /// `count` token ids for `purpose` of `item`, from their own substream.
    fn token_ids(&self, purpose: &str, item: &str, count: u32) -> impl Iterator<Item = u32> + use<> {
        let mut stream = self.streams.stream(&format!("client/{}", self.name), purpose, item);
        let vocab_size = u64::from(self.vocab_size);
        (0..count).map(move |_| stream.below(vocab_size) as u32)
    }

    /// The prompt of `request_id`: its group's system prompt (if any), then its own tokens.
    fn prompt(&mut self, request_id: &str, own_tokens: u32) -> Arc<[u32]> {
        let prefix = self.spec.shared_prefix.map(|shared| {
            let group = self.prefix_groups.below(u64::from(shared.groups));
            self.token_ids("prefix-tokens", &group.to_string(), shared.tokens)
        });
        prefix.into_iter().flatten().chain(self.token_ids("prompt-tokens", request_id, own_tokens)).collect()
    }

    /// The key of this client's `sequence`-th request.
    fn key(&self, sequence: u64) -> u64 {
        (u64::from(self.index) << KEY_SEQUENCE_BITS) | sequence
    }

    fn send_next(&mut self, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let sequence = self.calls.len() as u64;
        let request_id = format!("{}-{sequence}", self.name);
        let own_tokens = Client::draw_length(&mut self.input_lengths, self.spec.input_tokens);
        let output_tokens = Client::draw_length(&mut self.output_lengths, self.spec.output_tokens);
        let prompt_token_ids = self.prompt(&request_id, own_tokens);
        let input_tokens = prompt_token_ids.len() as u32;
        let request = EngineRequest {
            key: self.key(sequence),
            name: Arc::from(request_id.as_str()),
            priority: self.spec.priority,
            prompt_token_ids,
            output_token_ids: self.token_ids("output-tokens", &request_id, output_tokens).collect(),
            arrival_us: now.as_micros(),
        };
        self.calls.push(Call {
            arrival_us: now.as_micros(),
            input_tokens,
            output_tokens,
            instance: None,
            fate: None,
            token_latency_us: Vec::new(),
            cached_tokens: 0,
            preemptions: 0,
        });
        self.outstanding += 1;
        if let Some(notes) = out.notes() {
            let key = request.key;
            notes
                .phase_begin("request", key, request_id)
                .arg("input_tokens", u64::from(input_tokens))
                .arg("output_tokens", u64::from(output_tokens));
            notes.phase_begin("request", key, "queued");
            notes.counter("client", "outstanding", self.outstanding as f64);
        }
        let message = CallRequest { client: self.me, request };
        out.send(self.router, self.delay_to_router, ClusterMessage::Request(Box::new(message)));
    }

    fn receive(&mut self, now: SimTime, message: ClusterMessage, out: &mut Outbox<ClusterMessage>) {
        let key = match &message {
            ClusterMessage::Completion(m) => m.key,
            ClusterMessage::Rejection(m) => m.key,
            ClusterMessage::Request(_) => return,
        };
        let Some(call) = self.calls.get_mut((key & ((1 << KEY_SEQUENCE_BITS) - 1)) as usize) else { return };
        match message {
            ClusterMessage::Completion(m) => {
                // Every token took the same way back; the last one arrives now.
                let back = now.as_micros() - m.token_times_us.last().copied().unwrap_or(now.as_micros());
                let mut previous = call.arrival_us;
                call.token_latency_us = m
                    .token_times_us
                    .iter()
                    .map(|&t| {
                        let seen = t + back;
                        let gap = seen - previous;
                        previous = seen;
                        gap
                    })
                    .collect();
                call.instance = Some(m.instance);
                call.fate = Some(Fate::Completed);
                call.cached_tokens = m.cached_tokens;
                call.preemptions = m.num_preemptions;
            }
            ClusterMessage::Rejection(m) => {
                call.instance = Some(m.instance);
                call.fate = Some(Fate::Dropped { reason: m.reason });
            }
            ClusterMessage::Request(_) => return,
        }
        self.outstanding -= 1;
        if let Some(notes) = out.notes() {
            // The innermost phase (returning, or queued for a refused call), then the request.
            notes.phase_end("request", key);
            notes.phase_end("request", key);
            notes.counter("client", "outstanding", self.outstanding as f64);
        }
    }

    /// The client's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests sent so far.
    pub fn sent(&self) -> u64 {
        self.calls.len() as u64
    }

    /// One record per call sent; calls without an answer get their fate from `unanswered`
    /// (given the call's key).
    pub fn records(&self, mut unanswered: impl FnMut(u64) -> Fate) -> Vec<CallRecord> {
        self.calls
            .iter()
            .enumerate()
            .map(|(sequence, call)| CallRecord {
                request_id: format!("{}-{sequence}", self.name),
                client: self.name.clone(),
                arrival_us: call.arrival_us,
                input_tokens: call.input_tokens,
                output_tokens: call.output_tokens,
                instance: call.instance.as_deref().unwrap_or("").to_owned(),
                cached_tokens: call.cached_tokens,
                preemptions: call.preemptions,
                fate: call.fate.clone().unwrap_or_else(|| unanswered(self.key(sequence as u64))),
                token_latency_us: call.token_latency_us.clone(),
            })
            .collect()
    }
}

impl Actor<ClusterMessage> for Client {
    fn time_advance(&self) -> TimeAdvance {
        if self.sent() < self.spec.requests {
            TimeAdvance::After(self.next_gap)
        } else {
            TimeAdvance::Passive
        }
    }

    fn transition(
        &mut self,
        ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let now = ctx.now.time;
        let (sends, bag) = match event {
            Event::Internal => (true, None),
            Event::External(bag) => {
                self.next_gap = SimDuration::from_micros(
                    self.next_gap.as_micros().saturating_sub(ctx.elapsed.as_micros()),
                );
                (false, Some(bag))
            }
            Event::Confluent(bag) => (true, Some(bag)),
        };
        if let Some(bag) = bag {
            for envelope in bag {
                self.receive(now, envelope.payload, out);
            }
        }
        if sends {
            self.send_next(now, out);
            self.next_gap = self.draw_gap();
        }
    }

    fn describe(&self, description: &mut Description) {
        description.arg("sent", self.sent());
        description.arg("outstanding", self.outstanding);
    }
}
