//! The client: plays one workload source and records what came back.
//!
//! A source yields requests, each a DAG of nodes (LLM calls, tool calls, intervals) with an
//! arrival time. The client releases a request's root nodes when it arrives — at its arrival
//! time (open loop), when an earlier request of a closed loop ends, or when its stage starts —
//! and every other node when all its parents have finished. An LLM call goes to the router with
//! its prompt and output token ids, fixed in advance from substreams keyed by the request, the
//! node and the prompt part (a shared part by its name; a history part by the node it repeats),
//! so a later turn's prompt holds the earlier turn's real output ids. Tool calls and intervals
//! are timers. A call not answered within its timeout is aborted: the client records it as timed
//! out and sends an abort, which frees the engine's blocks; a node that fails leaves its
//! descendants unsent. When a request ends, its calls' records leave the client through the
//! run's [`CallLedger`]; the client keeps nothing of a request after it ends.

mod window;

use std::collections::BTreeMap;
use std::sync::Arc;

use blis_contracts::{
    CallRecord, Disaggregated, Fate, FieldError, LlmCall, NodeKind, PromptPart, RequestSpec,
};
use blis_engines::vllm::EngineRequest;
use blis_kernel::{
    Actor, ActorId, Context, Description, Event, KeyTable, Outbox, SimDuration, SimTime, Streams, Substream,
    TimeAdvance,
};

use self::window::Window;
use crate::draws::{DrawAhead, Drawn, DrawnPrompt, MadeAhead, NodeDraws, TokenDraws};
use crate::ledger::CallLedger;
use crate::message::{CallAbort, CallRequest, ClusterMessage};
use crate::workload::sampling::draw_duration_us;
use crate::workload::{Pacing, Planned, RequestSource};

/// A call's key: the client's index, the request's sequence number and the node's index,
/// `client << 48 | request << 16 | node`, so the key of a request's calls is known from its id.
pub fn call_key(client: u32, request: u64, node: usize) -> u64 {
    (u64::from(client) << 48) | (request << 16) | node as u64
}

/// The bits of a call key that name its request.
pub const REQUEST_KEY_MASK: u64 = !0xffff;

/// Where a node stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeState {
    /// Waiting for this many parents.
    Blocked(u32),
    /// Sent (an LLM call) or running (a timer).
    Running,
    /// Finished successfully.
    Done,
    /// Failed (dropped or timed out), or never to run because a parent failed.
    Failed,
}

/// A request that has arrived and not yet ended.
struct LiveRequest {
    spec: RequestSpec,
    arrival_us: u64,
    stage: u32,
    nodes: Vec<NodeState>,
    /// The call key of each LLM node.
    calls: Vec<Option<u64>>,
    /// What each LLM node sent, for later history parts.
    exchanges: Vec<Option<Exchange>>,
    children: Vec<Vec<usize>>,
    unsettled: usize,
    /// Its calls' token ids, when they were drawn ahead.
    drawn: Option<Drawn>,
}

/// The token ids of one call: its prompt and the output it will get.
#[derive(Clone, Debug)]
struct Exchange {
    prompt: Arc<[u32]>,
    output: Arc<[u32]>,
}

/// Where a client sits in the cluster and how it draws token ids.
#[derive(Clone, Debug)]
pub struct ClientWiring {
    /// The client's index among clients (the top bits of its call keys).
    pub index: u32,
    /// Its own address.
    pub me: ActorId,
    /// The router's address.
    pub router: ActorId,
    /// One-way delay to the router.
    pub delay_to_router: SimDuration,
    /// Token ids are drawn below this.
    pub vocab_size: u32,
    /// The run's substreams.
    pub streams: Streams,
    /// Whether to keep every request released, for exporting the workload.
    pub keep_released: bool,
    /// Whether the kept requests carry every prompt as the token ids the client sent.
    pub released_token_ids: bool,
    /// The model its requests name.
    pub model: Arc<str>,
    /// Whether to tell the router when it will send nothing more.
    pub notify_done: bool,
    /// Where ended requests' call records go.
    pub ledger: CallLedger,
    /// Whether to read the source and draw its requests' token ids ahead, on a thread of their
    /// own (the same ids either way).
    pub draw_ahead: bool,
    /// The fairness-id header its requests carry, if any.
    pub fairness_id: Option<Arc<str>>,
    /// The SLO-TTFT header (ms) its requests carry, if any.
    pub slo_ttft_ms: Option<u64>,
    /// What a client drawing ahead makes of its prompts off the simulation's thread.
    pub made_ahead: MadeAhead,
}

/// What the client knows of one LLM call.
#[derive(Clone, Debug)]
struct Call {
    key: u64,
    name: String,
    /// The request's slot while it lives.
    live: usize,
    node_index: usize,
    sent_us: Option<u64>,
    arrival_us: u64,
    input_tokens: u32,
    output_tokens: u32,
    instance: Option<Arc<str>>,
    fate: Option<Fate>,
    token_latency_us: Vec<u64>,
    cached_tokens: u32,
    preemptions: u32,
    request_e2e_us: Option<u64>,
    settled_us: Option<u64>,
    disaggregated: Option<Box<Disaggregated>>,
}

/// The names a call's record carries besides its own: its request's id, its node's and the
/// node's parents'.
struct Names {
    request: String,
    node: String,
    parents: Vec<String>,
}

impl Names {
    /// Node `node`'s names, taken from the spec of a request that is ending (its id taken too
    /// when `last`, else copied).
    fn take(spec: &mut RequestSpec, node: usize, last: bool) -> Names {
        Names {
            request: if last { std::mem::take(&mut spec.id) } else { spec.id.clone() },
            node: std::mem::take(&mut spec.nodes[node].id),
            parents: std::mem::take(&mut spec.nodes[node].parents),
        }
    }
}

/// Something the client does at a time of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    /// A tool call or interval ends.
    NodeEnds {
        /// The live request's slot.
        live: usize,
        /// The node.
        node: usize,
    },
    /// A call's timeout.
    Timeout {
        /// The call's key.
        call: u64,
    },
    /// A closed loop's next request.
    Release,
    /// The next stage starts.
    StageStarts,
}

/// One client.
pub struct Client {
    name: String,
    index: u32,
    me: ActorId,
    router: ActorId,
    delay_to_router: SimDuration,
    draws: TokenDraws,
    supply: Supply,
    pacing: Pacing,
    think_times: Substream,
    /// The next request of the source, not yet released.
    upcoming: Option<Planned>,
    /// The upcoming request's token ids, when they were drawn ahead.
    upcoming_drawn: Option<Drawn>,
    stage: u32,
    /// When the current stage began (`A_s`) and its time origin (`T0`), µs.
    stage_origin_us: u64,
    stage_start_us: u64,
    stage_waiting: bool,
    timers: BTreeMap<(u64, u64), Timer>,
    timer_sequence: u64,
    /// Requests that have arrived and not ended, by the sequence number each got on arrival
    /// (timers and calls name them by it).
    live: Window<Box<LiveRequest>>,
    /// The calls of live requests, by key.
    calls: KeyTable<Box<Call>>,
    ledger: CallLedger,
    ended: u64,
    outstanding: u64,
    arrived: u64,
    last_arrival_us: u64,
    released: Option<Vec<RequestSpec>>,
    /// Whether kept requests carry their prompts as token ids.
    released_token_ids: bool,
    model: Arc<str>,
    /// The fairness-id header its requests carry.
    fairness_id: Option<Arc<str>>,
    /// The SLO-TTFT header (ms) its requests carry.
    slo_ttft_ms: Option<u64>,
    /// Whether it still has to tell the router it is done.
    notify_done: bool,
    last_transition: SimTime,
}

/// Where a client's requests come from.
enum Supply {
    /// Its source, read as requests arrive; their ids are drawn as their calls are sent.
    Direct(Box<dyn RequestSource>),
    /// Its source read, and the ids drawn, ahead on a thread of their own.
    Ahead(DrawAhead),
}

impl Client {
    /// A client named `name` playing `source`, wired into the cluster by `wiring`.
    pub fn new(name: &str, source: Box<dyn RequestSource>, wiring: ClientWiring) -> Client {
        let ClientWiring {
            index,
            me,
            router,
            delay_to_router,
            vocab_size,
            streams,
            keep_released,
            released_token_ids,
            model,
            notify_done,
            ledger,
            draw_ahead,
            fairness_id,
            slo_ttft_ms,
            made_ahead,
        } = wiring;
        let component = format!("client/{name}");
        let think_times = streams.stream(&component, "closed-loop-think-time", "");
        let draws = TokenDraws::new(streams, component, vocab_size, made_ahead);
        let pacing = source.pacing();
        // A client whose drawing thread cannot start draws as it sends: the same ids.
        let supply = if draw_ahead {
            DrawAhead::start(source, draws.clone()).map_or_else(Supply::Direct, Supply::Ahead)
        } else {
            Supply::Direct(source)
        };
        let mut client = Client {
            name: name.to_owned(),
            think_times,
            index,
            me,
            router,
            delay_to_router,
            draws,
            supply,
            pacing,
            upcoming: None,
            upcoming_drawn: None,
            stage: 0,
            stage_origin_us: 0,
            stage_start_us: 0,
            stage_waiting: false,
            timers: BTreeMap::new(),
            timer_sequence: 0,
            live: Window::default(),
            calls: KeyTable::new(),
            ledger,
            ended: 0,
            outstanding: 0,
            arrived: 0,
            last_arrival_us: 0,
            released: keep_released.then(Vec::new),
            released_token_ids,
            model,
            fairness_id,
            slo_ttft_ms,
            notify_done,
            last_transition: SimTime::ZERO,
        };
        client.take_upcoming();
        if let Pacing::StagesAfterCompletion { lead_us, .. } = client.pacing {
            client.stage_start_us = lead_us;
        }
        if let Pacing::Closed { concurrency, .. } = client.pacing {
            for _ in 0..concurrency {
                client.schedule(0, Timer::Release);
            }
        }
        client
    }

    /// The client's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests that have arrived so far.
    pub fn arrived(&self) -> u64 {
        self.arrived
    }

    /// When the last request arrived, µs.
    pub fn last_arrival_us(&self) -> u64 {
        self.last_arrival_us
    }

    /// Why the client's source ended early, if it did.
    pub fn source_error(&self) -> Option<&FieldError> {
        match &self.supply {
            Supply::Direct(source) => source.error(),
            Supply::Ahead(ahead) => ahead.error(),
        }
    }

    /// Take the source's next request as the upcoming one.
    fn take_upcoming(&mut self) {
        (self.upcoming, self.upcoming_drawn) = match &mut self.supply {
            Supply::Direct(source) => (source.next_request(), None),
            Supply::Ahead(ahead) => match ahead.next_request() {
                Some((planned, drawn)) => (Some(planned), Some(drawn)),
                None => (None, None),
            },
        };
    }

    /// The requests released, as released (when the client was asked to keep them).
    pub fn take_released(&mut self) -> Option<Vec<RequestSpec>> {
        self.released.take()
    }

    fn schedule(&mut self, at_us: u64, timer: Timer) {
        self.timers.insert((at_us, self.timer_sequence), timer);
        self.timer_sequence += 1;
    }

    /// When the upcoming request arrives under open-loop or staged pacing.
    fn upcoming_arrival(&self) -> Option<u64> {
        let planned = self.upcoming.as_ref()?;
        match self.pacing {
            Pacing::Open => Some(planned.spec.arrival_us),
            Pacing::StagesAfterCompletion { .. } if planned.stage == self.stage && !self.stage_waiting => {
                Some(self.stage_start_us + planned.spec.arrival_us)
            }
            Pacing::StagesAfterCompletion { .. } | Pacing::Closed { .. } => None,
        }
    }

    /// Admit the upcoming request at `now_us` and release its roots.
    fn arrive(&mut self, now_us: u64, out: &mut Outbox<ClusterMessage>) {
        let Some(planned) = self.upcoming.take() else { return };
        let drawn = self.upcoming_drawn.take();
        self.take_upcoming();
        let sequence = self.arrived;
        self.arrived += 1;
        self.last_arrival_us = now_us;
        let spec = planned.spec;
        let kept = match &self.released {
            Some(_) if self.released_token_ids => Some(self.with_token_ids(&spec)),
            Some(_) => Some(spec.clone()),
            None => None,
        };
        if let (Some(released), Some(kept)) = (&mut self.released, kept) {
            released.push(RequestSpec { arrival_us: now_us, ..kept });
        }
        let n = spec.nodes.len();
        let mut children = vec![Vec::new(); n];
        let mut nodes = Vec::with_capacity(n);
        for (i, node) in spec.nodes.iter().enumerate() {
            for parent in &node.parents {
                let p = spec
                    .nodes
                    .iter()
                    .position(|m| &m.id == parent)
                    .expect("a validated request names its parents");
                children[p].push(i);
            }
            nodes.push(NodeState::Blocked(node.parents.len() as u32));
        }
        let live = self.live.next_key();
        let single = spec.calls().count() == 1;
        let mut calls = vec![None; n];
        for (i, node) in spec.nodes.iter().enumerate() {
            if let NodeKind::Llm(call) = &node.kind {
                let key = call_key(self.index, sequence, i);
                calls[i] = Some(key);
                self.calls.insert(
                    key,
                    Box::new(Call {
                        key,
                        name: if single { spec.id.clone() } else { format!("{}/{}", spec.id, node.id) },
                        live,
                        node_index: i,
                        sent_us: None,
                        arrival_us: now_us,
                        input_tokens: 0,
                        output_tokens: call.output_tokens,
                        instance: None,
                        fate: None,
                        token_latency_us: Vec::new(),
                        cached_tokens: 0,
                        preemptions: 0,
                        request_e2e_us: None,
                        settled_us: None,
                        disaggregated: None,
                    }),
                );
            }
        }
        let pushed = self.live.push(Box::new(LiveRequest {
            arrival_us: now_us,
            stage: planned.stage,
            exchanges: vec![None; n],
            unsettled: n,
            nodes,
            calls,
            children,
            spec,
            drawn,
        }));
        debug_assert_eq!(pushed, live, "the request is held under the key its calls name");
        for i in 0..n {
            if self.live.get(live).expect("a live request").nodes[i] == NodeState::Blocked(0) {
                self.start_node(live, i, now_us, out);
            }
        }
    }

    /// Start node `i` of live request `live`: send its call or start its timer.
    fn start_node(&mut self, live: usize, i: usize, now_us: u64, out: &mut Outbox<ClusterMessage>) {
        let request = self.live.get_mut(live).expect("a live request");
        request.nodes[i] = NodeState::Running;
        match request.spec.nodes[i].kind {
            NodeKind::Tool(duration_us) | NodeKind::Interval(duration_us) => {
                self.schedule(now_us.saturating_add(duration_us), Timer::NodeEnds { live, node: i });
            }
            NodeKind::Llm(_) => self.send(live, i, now_us, out),
        }
    }

    /// `spec` with every LLM prompt written as the one part of token ids this client sends for
    /// it (history parts included: an earlier node's prompt and output ids are fixed in
    /// advance), for `--export-workload --token-ids`.
    fn with_token_ids(&self, spec: &RequestSpec) -> RequestSpec {
        let mut resolved = spec.clone();
        for (i, node) in resolved.nodes.iter_mut().enumerate() {
            if let NodeKind::Llm(call) = &mut node.kind {
                call.prompt = vec![PromptPart::TokenIds(self.prompt_of(spec, i))];
            }
        }
        resolved
    }

    /// The prompt ids of LLM node `node` of `spec`, computed from the spec alone (a history
    /// part's ids recomputed from the earlier node's).
    fn prompt_of(&self, spec: &RequestSpec, node: usize) -> Vec<u32> {
        let NodeKind::Llm(call) = &spec.nodes[node].kind else { return Vec::new() };
        self.prompt_ids(spec, node, call, None, &mut |earlier, prompt| {
            prompt.extend(self.prompt_of(spec, earlier));
            if let NodeKind::Llm(earlier_call) = &spec.nodes[earlier].kind {
                let earlier_id = &spec.nodes[earlier].id;
                self.draws.output_tokens(&spec.id, earlier_id, earlier_call.output_tokens, prompt);
            }
        })
    }

    /// The prompt ids of LLM node `node` of `spec`, from `drawn` where its parts were drawn
    /// ahead; `history` appends the prompt and output ids of an earlier node a history part
    /// names.
    fn prompt_ids(
        &self,
        spec: &RequestSpec,
        node: usize,
        call: &LlmCall,
        drawn: Option<&NodeDraws>,
        history: &mut dyn FnMut(usize, &mut Vec<u32>),
    ) -> Vec<u32> {
        let mut prompt = Vec::new();
        let node_id = &spec.nodes[node].id;
        for (j, part) in call.prompt.iter().enumerate() {
            if let Some(DrawnPrompt::Parts(parts)) = drawn.map(|d| &d.prompt)
                && let Some(ids) = parts[j].as_deref()
            {
                prompt.extend_from_slice(ids);
                continue;
            }
            if let PromptPart::History(of) = part {
                let earlier = spec.nodes.iter().position(|n| &n.id == of).expect("validated history");
                history(earlier, &mut prompt);
            } else {
                self.draws.prompt_part(&spec.id, node_id, j, part, &mut prompt);
            }
        }
        prompt
    }

    /// The prompt ids of an LLM node, its history from the exchanges already made.
    fn prompt(
        &self,
        request: &LiveRequest,
        node: usize,
        call: &LlmCall,
        drawn: Option<&NodeDraws>,
    ) -> Vec<u32> {
        self.prompt_ids(&request.spec, node, call, drawn, &mut |earlier, prompt| {
            let exchange =
                request.exchanges[earlier].as_ref().expect("a history node finished before its descendant");
            prompt.extend_from_slice(&exchange.prompt);
            prompt.extend_from_slice(&exchange.output);
        })
    }

    /// Send LLM node `node` of `live` to the router.
    fn send(&mut self, live: usize, node: usize, now_us: u64, out: &mut Outbox<ClusterMessage>) {
        let mut drawn = self.live.get_mut(live).and_then(|r| r.drawn.as_mut()).and_then(|d| d.take(node));
        let keys_ahead = drawn.as_mut().and_then(|d| d.keys.take());
        let digests_ahead = drawn.as_mut().and_then(|d| d.digests.take());
        let request = self.live.get(live).expect("a live request");
        let NodeKind::Llm(call) = &request.spec.nodes[node].kind else {
            unreachable!("only an LLM node is sent")
        };
        let (priority, output_tokens, timeout_us) = (call.priority, call.output_tokens, call.timeout_us);
        let index = request.calls[node].expect("an LLM node has a call");
        let record = self.calls.get(index).expect("a live request's call");
        let prompt: Arc<[u32]> = match drawn.as_ref().map(|d| &d.prompt) {
            Some(DrawnPrompt::Whole(prompt)) => prompt.clone(),
            _ => self.prompt(request, node, call, drawn.as_ref()).into(),
        };
        let output: Arc<[u32]> = match &drawn {
            Some(drawn) => drawn.output.clone(),
            None => {
                let mut output = Vec::new();
                let node_id = &request.spec.nodes[node].id;
                self.draws.output_tokens(&request.spec.id, node_id, output_tokens, &mut output);
                output.into()
            }
        };
        if let (Some(drawn), Supply::Ahead(ahead)) = (drawn, &self.supply) {
            ahead.give_back(drawn);
        }
        let key = record.key;
        let engine_request = EngineRequest {
            key,
            name: Arc::from(record.name.as_str()),
            priority,
            prompt_token_ids: prompt.clone(),
            output_token_ids: output.clone(),
            arrival_us: now_us,
        };
        self.live.get_mut(live).expect("a live request").exchanges[node] =
            Some(Exchange { prompt: prompt.clone(), output });
        let record = self.calls.get_mut(index).expect("a live request's call");
        record.sent_us = Some(now_us);
        record.arrival_us = now_us;
        record.input_tokens = prompt.len() as u32;
        self.outstanding += 1;
        if let Some(timeout_us) = timeout_us {
            self.schedule(now_us.saturating_add(timeout_us), Timer::Timeout { call: index });
        }
        if let Some(notes) = out.notes() {
            let record = self.calls.get(index).expect("a live request's call");
            notes
                .phase_begin("request", key, record.name.clone())
                .arg("input_tokens", u64::from(record.input_tokens))
                .arg("output_tokens", u64::from(output_tokens));
            notes.phase_begin("request", key, "queued");
            notes.counter("client", "outstanding", self.outstanding as f64);
        }
        let message = CallRequest {
            client: self.me,
            request: engine_request,
            model: self.model.clone(),
            report_first_token: false,
            fairness_id: self.fairness_id.clone(),
            slo_ttft_ms: self.slo_ttft_ms,
            pd: None,
            keys_ahead,
            digests_ahead,
        };
        out.send(self.router, self.delay_to_router, ClusterMessage::Request(Box::new(message)));
    }

    /// Node `i` of `live` ended (`ok`: successfully); release what it unblocks.
    fn settle(&mut self, live: usize, i: usize, ok: bool, now_us: u64, out: &mut Outbox<ClusterMessage>) {
        let request = self.live.get_mut(live).expect("a live request");
        request.nodes[i] = if ok { NodeState::Done } else { NodeState::Failed };
        request.unsettled -= 1;
        let mut ready = Vec::new();
        let mut failed = Vec::new();
        let mut pending: Vec<(usize, bool)> = request.children[i].iter().map(|&c| (c, ok)).collect();
        while let Some((child, parent_ok)) = pending.pop() {
            match (request.nodes[child], parent_ok) {
                (NodeState::Blocked(1), true) => {
                    request.nodes[child] = NodeState::Blocked(0);
                    ready.push(child);
                }
                (NodeState::Blocked(n), true) => request.nodes[child] = NodeState::Blocked(n - 1),
                (NodeState::Blocked(_), false) => {
                    // A failed parent: the child never runs, nor anything below it.
                    request.nodes[child] = NodeState::Failed;
                    request.unsettled -= 1;
                    failed.push(child);
                    pending.extend(request.children[child].iter().map(|&c| (c, false)));
                }
                _ => {}
            }
        }
        for child in failed {
            if let Some(call) = request.calls[child] {
                self.calls.get_mut(call).expect("a live request's call").fate = Some(Fate::NotStarted);
            }
        }
        ready.sort_unstable();
        for child in ready {
            self.start_node(live, child, now_us, out);
        }
        self.maybe_end(live, now_us);
    }

    /// End `live` if all its nodes are settled: write the request's end to end time, hand its
    /// calls' records to the ledger and let the pacing release what waits for it.
    fn maybe_end(&mut self, live: usize, now_us: u64) {
        if self.live.get(live).is_none_or(|r| r.unsettled > 0) {
            return;
        }
        let mut request = self.live.remove(live).expect("checked above");
        let all_done = request.nodes.iter().all(|&n| n == NodeState::Done);
        if all_done
            && let Some(last) = request
                .calls
                .iter()
                .flatten()
                .max_by_key(|&&c| self.calls.get(c).expect("a live request's call").fate_time())
        {
            self.calls.get_mut(*last).expect("a live request's call").request_e2e_us =
                Some(now_us - request.arrival_us);
        }
        let settle_key = (now_us, self.index, self.ended);
        self.ended += 1;
        // The records take the request's names from its spec, which ends here: the last
        // call's record takes the request's id itself.
        let last_call = request.calls.iter().rposition(Option::is_some);
        for (i, key) in request.calls.iter().enumerate() {
            let Some(key) = key else { continue };
            let call = self.calls.remove(*key).expect("a live request's call");
            let fate = call.fate.clone().expect("an ended request's calls are settled");
            let names = Names::take(&mut request.spec, i, Some(i) == last_call);
            self.ledger.settle(settle_key, self.record(*call, names, fate));
        }
        match self.pacing {
            Pacing::Closed { think_time_s, .. } => {
                let think = think_time_s.map_or(0, |d| draw_duration_us(&d, &mut self.think_times));
                self.schedule(now_us.saturating_add(think), Timer::Release);
            }
            Pacing::StagesAfterCompletion { .. } => {
                let stage_done = !self.live.values().any(|r| r.stage == request.stage);
                let next_stage = self.upcoming.as_ref().is_some_and(|p| p.stage > request.stage);
                if stage_done && next_stage && request.stage == self.stage && self.stage_waiting {
                    self.schedule_next_stage(now_us);
                }
            }
            Pacing::Open => {}
        }
        if let Supply::Ahead(ahead) = &mut self.supply {
            ahead.free_later(request);
        }
    }

    fn receive(&mut self, now_us: u64, message: ClusterMessage, out: &mut Outbox<ClusterMessage>) {
        let index = message.key();
        // A call whose request already ended was answered after its timeout.
        let Some(call) = self.calls.get_mut(index) else { return };
        if call.fate.is_some() {
            // Answered after its timeout: already settled.
            return;
        }
        let ok = match message {
            ClusterMessage::Completion(mut m) => {
                // Every token took the same way back; the last one arrives now.
                let back = now_us - m.token_times_us.last().copied().unwrap_or(now_us);
                let mut previous = call.arrival_us;
                // The engine's list of token times becomes the list of gaps, in place.
                let mut gaps = std::mem::take(&mut m.token_times_us);
                for time in &mut gaps {
                    let seen = *time + back;
                    *time = seen - previous;
                    previous = seen;
                }
                call.token_latency_us = gaps;
                call.instance = Some(m.instance);
                call.fate = Some(Fate::Completed);
                call.cached_tokens = m.cached_tokens;
                call.preemptions = m.num_preemptions;
                call.disaggregated = m.disaggregated;
                true
            }
            ClusterMessage::Rejection(m) => {
                call.instance = Some(m.instance);
                call.fate = Some(Fate::Dropped { reason: m.reason });
                false
            }
            ClusterMessage::Request(_)
            | ClusterMessage::Abort(_)
            | ClusterMessage::FirstToken(_)
            | ClusterMessage::Scrape
            | ClusterMessage::Metrics(_)
            | ClusterMessage::KvEvents(_)
            | ClusterMessage::ClientDone
            | ClusterMessage::TransferDone(_)
            | ClusterMessage::TransferCancel(_)
            | ClusterMessage::TransferStart(_)
            | ClusterMessage::KvNotify(_) => return,
        };
        call.settled_us = Some(now_us);
        let (live, node) = (call.live, call.node_index);
        self.outstanding -= 1;
        if let Some(notes) = out.notes() {
            // The innermost phase (returning, or queued for a refused call), then the call.
            let key = index;
            notes.phase_end("request", key);
            notes.phase_end("request", key);
            notes.counter("client", "outstanding", self.outstanding as f64);
        }
        self.settle(live, node, ok, now_us, out);
    }

    fn fire(&mut self, now_us: u64, timer: Timer, out: &mut Outbox<ClusterMessage>) {
        match timer {
            Timer::NodeEnds { live, node } => self.settle(live, node, true, now_us, out),
            Timer::Timeout { call: key } => {
                let Some(call) = self.calls.get_mut(key).filter(|c| c.fate.is_none()) else { return };
                call.fate = Some(Fate::TimedOut);
                call.settled_us = Some(now_us);
                let (live, node) = (call.live, call.node_index);
                self.outstanding -= 1;
                if let Some(notes) = out.notes() {
                    notes.phase_end("request", key);
                    notes.phase_end("request", key);
                    notes.counter("client", "outstanding", self.outstanding as f64);
                }
                out.send(
                    self.router,
                    self.delay_to_router,
                    ClusterMessage::Abort(CallAbort { key, client: self.me }),
                );
                self.settle(live, node, false, now_us, out);
            }
            Timer::Release => self.arrive(now_us, out),
            Timer::StageStarts => {
                let Pacing::StagesAfterCompletion { lead_us, .. } = self.pacing else { return };
                self.stage += 1;
                self.stage_origin_us = now_us;
                self.stage_start_us = now_us + lead_us;
                self.stage_waiting = false;
            }
        }
    }

    /// Under staged pacing, when the upcoming request belongs to a later stage, wait for the
    /// current stage to empty (or schedule the next at once if it already has).
    fn check_stage(&mut self, now_us: u64) {
        let Pacing::StagesAfterCompletion { .. } = self.pacing else { return };
        let Some(next_stage) = self.upcoming.as_ref().map(|p| p.stage) else { return };
        if next_stage > self.stage && !self.stage_waiting {
            self.stage_waiting = true;
            if !self.live.values().any(|r| r.stage == self.stage) {
                self.schedule_next_stage(now_us);
            }
        }
    }

    /// The current stage ended at `ended_us`: the next begins `interval` after the first poll
    /// tick at or after it.
    fn schedule_next_stage(&mut self, ended_us: u64) {
        let Pacing::StagesAfterCompletion { poll_us, interval_us, .. } = self.pacing else { return };
        let poll_us = poll_us.max(1);
        let ticks = (ended_us.saturating_sub(self.stage_origin_us)).div_ceil(poll_us);
        let detected = self.stage_origin_us + ticks * poll_us;
        self.schedule(detected + interval_us, Timer::StageStarts);
    }

    /// The records of the calls of requests that had not ended when the run stopped, requests
    /// in arrival order and calls in node order; a call without an answer gets its fate from
    /// `unanswered` (given its key), a call never sent is not started.
    pub fn unended_records(&mut self, mut unanswered: impl FnMut(u64) -> Fate) -> Vec<CallRecord> {
        let mut records = Vec::new();
        for mut request in self.live.take_all() {
            for (i, key) in request.calls.iter().enumerate() {
                let Some(key) = key else { continue };
                let call = self.calls.remove(*key).expect("a live request's call");
                let fate = call.fate.clone().unwrap_or_else(|| match call.sent_us {
                    Some(_) => unanswered(call.key),
                    None => Fate::NotStarted,
                });
                let names = Names::take(&mut request.spec, i, false);
                records.push(self.record(*call, names, fate));
            }
        }
        records
    }

    /// The record of `call`, which ended as `fate` (the run stamps its replication).
    fn record(&self, call: Call, names: Names, fate: Fate) -> CallRecord {
        CallRecord {
            replication: 0,
            request_id: call.name,
            request: names.request,
            node: names.node,
            parents: names.parents,
            client: self.name.clone(),
            arrival_us: call.arrival_us,
            input_tokens: call.input_tokens,
            output_tokens: call.output_tokens,
            instance: call.instance.as_deref().unwrap_or("").to_owned(),
            cached_tokens: call.cached_tokens,
            preemptions: call.preemptions,
            fate,
            settled_us: call.settled_us,
            token_latency_us: call.token_latency_us,
            request_e2e_us: call.request_e2e_us,
            disaggregated: call.disaggregated.map(|d| *d),
        }
    }

    /// Whether it will send nothing more and has yet to tell the router so.
    fn owes_done(&self) -> bool {
        self.notify_done && self.upcoming.is_none() && self.timers.is_empty() && self.live.is_empty()
    }

    /// The next time the client acts on its own, µs.
    fn next_own_event(&self) -> Option<u64> {
        let timer = self.timers.keys().next().map(|&(at, _)| at);
        match (timer, self.upcoming_arrival()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl Call {
    /// When the call settled, for ordering a request's calls (its last token's gap sum).
    fn fate_time(&self) -> u64 {
        self.arrival_us + self.token_latency_us.iter().sum::<u64>()
    }
}

impl Actor<ClusterMessage> for Client {
    fn time_advance(&self) -> TimeAdvance {
        if self.owes_done() {
            // Nothing left to send: say so at once (a client with no requests too).
            return TimeAdvance::until(self.last_transition, self.last_transition);
        }
        match self.next_own_event() {
            Some(at) => TimeAdvance::until(self.last_transition, SimTime::from_micros(at)),
            None => TimeAdvance::Passive,
        }
    }

    fn transition(
        &mut self,
        ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let now_us = ctx.now.time.as_micros();
        if let Event::External(bag) | Event::Confluent(bag) = event {
            for envelope in bag {
                self.receive(now_us, envelope.payload, out);
            }
        }
        // Timers and arrivals due now, in time order; a timer of zero duration fires in the
        // same transition.
        loop {
            self.check_stage(now_us);
            let timer = self.timers.first_key_value().map(|(&key, &timer)| (key, timer));
            let arrival = self.upcoming_arrival();
            match (timer, arrival) {
                (Some(((at, _), _)), Some(arrival_at)) if arrival_at < at && arrival_at <= now_us => {
                    self.arrive(now_us, out);
                }
                (Some((key, timer)), _) if key.0 <= now_us => {
                    self.timers.remove(&key);
                    self.fire(now_us, timer, out);
                }
                (_, Some(arrival_at)) if arrival_at <= now_us => self.arrive(now_us, out),
                _ => break,
            }
        }
        if self.owes_done() {
            self.notify_done = false;
            out.send(self.router, self.delay_to_router, ClusterMessage::ClientDone);
        }
        self.last_transition = ctx.now.time;
    }

    fn describe(&self, description: &mut Description) {
        description.arg("arrived", self.arrived);
        description.arg("outstanding", self.outstanding);
        description.arg("live_requests", self.live.len() as u64);
    }
}
