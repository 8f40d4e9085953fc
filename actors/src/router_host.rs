//! The router host: adapts a router — llm-d's ([`blis_router::Router`]) or the round-robin
//! baseline — to messages and simulated time.
//!
//! Requests from clients go to the endpoint the router picks among those serving the request's
//! model; completions and rejections pass back through to their client (releasing the router's
//! in-flight state as upstream's response hooks do); an abort goes to the engine the call was
//! sent to. llm-d's router learns of the engines only by scrape: each endpoint is scraped on the
//! metrics source's interval, on its own phase (drawn once per endpoint), by a message the engine
//! answers with its Prometheus gauges, so every decision rests on figures as old as the last
//! scrape that came back. Scraping stops once every client has said it is done. When the config
//! indexes KV events (llm-d's precise prefix cache), each engine's per-step event batches are
//! handed to the router as they arrive, tagged with the endpoint and the model it serves (the
//! `kv@<pod>@<model>` topic upstream reads them under).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use blis_kernel::{Actor, ActorId, Context, Event, Outbox, SimDuration, SimTime, Streams, TimeAdvance};
use blis_router::{Decision, EndpointIndex, RoundRobin, Router, RouterRng, RoutingRequest};

use crate::message::{CallRejection, CallRequest, ClusterMessage};

/// The router in front of the engines.
pub struct RouterHost {
    engines: Vec<ActorId>,
    engine_names: Vec<Arc<str>>,
    /// Each endpoint's served model (a KV-event topic's model).
    engine_models: Vec<Arc<str>>,
    endpoint_of: BTreeMap<ActorId, EndpointIndex>,
    /// Per served model, the endpoints serving it, in name order.
    models: Vec<(Arc<str>, Vec<EndpointIndex>)>,
    policy: Policy,
    delay_to_engine: SimDuration,
    delay_to_client: SimDuration,
    routed: u64,
    refused: u64,
    /// Where each unanswered call went, for its abort.
    destinations: BTreeMap<u64, ActorId>,
    last_transition: SimTime,
}

/// How the host picks.
enum Policy {
    /// One round-robin cycle per model.
    RoundRobin(Vec<RoundRobin>),
    /// llm-d's router.
    Llmd(Box<Llmd>),
}

/// llm-d's router with its random streams and scrape schedule.
struct Llmd {
    router: Router,
    rng: RouterRng,
    scrapes: ScrapeSchedule,
    clients_left: usize,
    report_first_token: bool,
}

/// When each endpoint is scraped next: base ticks at `phase + k·base` (k ≥ 1, the first one
/// tick after the endpoint appears, as upstream's collector starts), each metrics source firing
/// on its first tick and then every `period` ticks (`datalayer/interval_dispatcher.go`).
struct ScrapeSchedule {
    base_us: u64,
    phases_us: Vec<u64>,
    /// Per extracting metrics source, its period in base ticks.
    periods: Vec<u64>,
    /// (time, endpoint, tick) of each endpoint's next firing.
    next: BTreeSet<(u64, EndpointIndex, u64)>,
}

impl ScrapeSchedule {
    fn new(base_us: u64, phases_us: Vec<u64>, periods: Vec<u64>) -> ScrapeSchedule {
        let mut schedule = ScrapeSchedule { base_us, phases_us, periods, next: BTreeSet::new() };
        if !schedule.periods.is_empty() {
            for e in 0..schedule.phases_us.len() {
                schedule.plan(e as EndpointIndex, 0);
            }
        }
        schedule
    }

    /// Plan `endpoint`'s first firing after tick `after`.
    fn plan(&mut self, endpoint: EndpointIndex, after: u64) {
        // The smallest k > after with (k − 1) a multiple of some period.
        let tick = self
            .periods
            .iter()
            .map(|&p| {
                let k = after + 1;
                let offset = (k - 1) % p;
                if offset == 0 { k } else { k + p - offset }
            })
            .min()
            .expect("a schedule has sources");
        let at = self.phases_us[endpoint as usize].saturating_add(tick.saturating_mul(self.base_us));
        self.next.insert((at, endpoint, tick));
    }

    /// How many sources fire at `tick`.
    fn firing(&self, tick: u64) -> usize {
        self.periods.iter().filter(|&&p| (tick - 1).is_multiple_of(p)).count()
    }
}

/// Everything llm-d's router host needs beyond the engines.
pub struct LlmdWiring {
    /// The router, over the endpoints in name order.
    pub router: Router,
    /// The scenario's streams (the router draws from `router/*` substreams).
    pub streams: Streams,
    /// `--refresh-metrics-interval`, µs.
    pub refresh_interval_us: u64,
    /// Each extracting metrics source's period in base ticks.
    pub source_periods: Vec<u64>,
    /// How many clients will say they are done.
    pub clients: usize,
}

impl RouterHost {
    /// A router over `engines` (with their names and served models, in name order) with
    /// one-way delays to each side; `llmd` selects llm-d's router, `None` the round-robin
    /// baseline.
    pub fn new(
        engines: Vec<(ActorId, Arc<str>, Arc<str>)>,
        llmd: Option<LlmdWiring>,
        delay_to_engine: SimDuration,
        delay_to_client: SimDuration,
    ) -> RouterHost {
        let mut models: Vec<(Arc<str>, Vec<EndpointIndex>)> = Vec::new();
        for (i, (_, _, model)) in engines.iter().enumerate() {
            match models.iter_mut().find(|(m, _)| m == model) {
                Some((_, list)) => list.push(i as EndpointIndex),
                None => models.push((model.clone(), vec![i as EndpointIndex])),
            }
        }
        let endpoint_of =
            engines.iter().enumerate().map(|(i, (id, _, _))| (*id, i as EndpointIndex)).collect();
        let engine_names: Vec<Arc<str>> = engines.iter().map(|(_, n, _)| n.clone()).collect();
        let engine_models: Vec<Arc<str>> = engines.iter().map(|(_, _, m)| m.clone()).collect();
        let policy = match llmd {
            None => Policy::RoundRobin(vec![RoundRobin::default(); models.len()]),
            Some(wiring) => {
                let phases = engine_names
                    .iter()
                    .map(|name| {
                        wiring
                            .streams
                            .stream("router", "scrape-phase", name)
                            .below(wiring.refresh_interval_us)
                    })
                    .collect();
                let report_first_token = wiring.router.wants_first_chunk();
                Policy::Llmd(Box::new(Llmd {
                    router: wiring.router,
                    rng: RouterRng {
                        tie_break: wiring.streams.stream("router", "tie-break", ""),
                        exploration: wiring.streams.stream("router", "exploration", ""),
                    },
                    scrapes: ScrapeSchedule::new(wiring.refresh_interval_us, phases, wiring.source_periods),
                    clients_left: wiring.clients,
                    report_first_token,
                }))
            }
        };
        RouterHost {
            engines: engines.iter().map(|(id, _, _)| *id).collect(),
            engine_names,
            engine_models,
            endpoint_of,
            models,
            policy,
            delay_to_engine,
            delay_to_client,
            routed: 0,
            refused: 0,
            destinations: BTreeMap::new(),
            last_transition: SimTime::ZERO,
        }
    }

    /// llm-d's router, when it is the one running (for its state after a run).
    pub fn llmd(&self) -> Option<&Router> {
        match &self.policy {
            Policy::Llmd(l) => Some(&l.router),
            Policy::RoundRobin(_) => None,
        }
    }

    fn route(&mut self, mut call: Box<CallRequest>, now: SimTime, out: &mut Outbox<ClusterMessage>) {
        let candidates = self.models.iter().position(|(m, _)| *m == call.model);
        let (picked, policy, score) = match (&mut self.policy, candidates) {
            (Policy::RoundRobin(cycles), Some(m)) => {
                let list = &self.models[m].1;
                (Ok(list[cycles[m].pick(list.len())]), "round-robin", None)
            }
            (Policy::RoundRobin(_), None) => {
                (Err((503, "no endpoint serves the model".to_owned())), "round-robin", None)
            }
            (Policy::Llmd(llmd), m) => {
                let candidates: &[EndpointIndex] = m.map_or(&[], |m| &self.models[m].1);
                let output_tokens = call.request.output_token_ids.len() as u64;
                let request = RoutingRequest {
                    key: call.request.key,
                    model: &call.model,
                    prompt_token_ids: &call.request.prompt_token_ids,
                    priority: -call.request.priority,
                    cache_salt: &[],
                    max_tokens: Some(output_tokens),
                };
                call.report_first_token = llmd.report_first_token;
                match llmd.router.route(&request, candidates, now.as_micros(), &mut llmd.rng) {
                    Decision::Routed { endpoint, score, .. } => (Ok(endpoint), "llm-d", Some(score)),
                    Decision::Refused { status, reason } => (Err((status, reason)), "llm-d", None),
                }
            }
        };
        match picked {
            Ok(endpoint) => {
                self.routed += 1;
                if let Some(notes) = out.notes() {
                    let note = notes
                        .decision("decisions", "route")
                        .arg("request", call.request.key)
                        .arg("picked", &*self.engine_names[endpoint as usize])
                        .arg("policy", policy)
                        .arg("endpoints", self.engines.len());
                    if let Some(score) = score {
                        note.arg("score", score);
                    }
                }
                let engine = self.engines[endpoint as usize];
                self.destinations.insert(call.request.key, engine);
                out.send(engine, self.delay_to_engine, ClusterMessage::Request(call));
            }
            Err((status, reason)) => {
                self.refused += 1;
                if let Some(notes) = out.notes() {
                    notes
                        .decision("decisions", "refuse")
                        .arg("request", call.request.key)
                        .arg("status", u64::from(status))
                        .arg("reason", reason.as_str());
                }
                let rejection = CallRejection {
                    key: call.request.key,
                    client: call.client,
                    instance: Arc::from("router"),
                    reason: format!("router_{status}: {reason}"),
                };
                out.send(call.client, self.delay_to_client, ClusterMessage::Rejection(Box::new(rejection)));
            }
        }
    }

    fn settled(&mut self, key: u64) {
        if let Policy::Llmd(llmd) = &mut self.policy {
            llmd.router.end(key);
        }
    }
}

impl Actor<ClusterMessage> for RouterHost {
    fn time_advance(&self) -> TimeAdvance {
        match &self.policy {
            Policy::Llmd(llmd) => match llmd.scrapes.next.first() {
                Some(&(at, _, _)) => TimeAdvance::until(self.last_transition, SimTime::from_micros(at)),
                None => TimeAdvance::Passive,
            },
            Policy::RoundRobin(_) => TimeAdvance::Passive,
        }
    }

    fn transition(
        &mut self,
        ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let now = ctx.now.time;
        if let Event::External(bag) | Event::Confluent(bag) = event {
            for envelope in bag {
                let sender = envelope.sender;
                match envelope.payload {
                    ClusterMessage::Request(call) => self.route(call, now, out),
                    ClusterMessage::Abort(abort) => {
                        // An abort for a call already answered has nowhere to go.
                        if let Some(engine) = self.destinations.remove(&abort.key) {
                            self.settled(abort.key);
                            out.send(engine, self.delay_to_engine, ClusterMessage::Abort(abort));
                        }
                    }
                    answer @ (ClusterMessage::Completion(_) | ClusterMessage::Rejection(_)) => {
                        self.destinations.remove(&answer.key());
                        self.settled(answer.key());
                        out.send(answer.client(), self.delay_to_client, answer);
                    }
                    ClusterMessage::FirstToken(first) => {
                        if let Policy::Llmd(llmd) = &mut self.policy {
                            llmd.router.first_chunk(first.key);
                        }
                    }
                    ClusterMessage::Metrics(scrape) => {
                        if let (Policy::Llmd(llmd), Some(&endpoint)) =
                            (&mut self.policy, self.endpoint_of.get(&sender))
                        {
                            llmd.router.record_scrape(endpoint, &scrape, now.as_micros());
                        }
                    }
                    ClusterMessage::KvEvents(batch) => {
                        if let (Policy::Llmd(llmd), Some(&endpoint)) =
                            (&mut self.policy, self.endpoint_of.get(&sender))
                        {
                            let model = &self.engine_models[endpoint as usize];
                            llmd.router.record_kv_events(endpoint, model, &batch);
                        }
                    }
                    ClusterMessage::ClientDone => {
                        if let Policy::Llmd(llmd) = &mut self.policy {
                            llmd.clients_left = llmd.clients_left.saturating_sub(1);
                            if llmd.clients_left == 0 {
                                llmd.scrapes.next.clear();
                            }
                        }
                    }
                    ClusterMessage::Scrape => {}
                }
            }
        }
        if let Policy::Llmd(llmd) = &mut self.policy {
            while let Some(&(at, endpoint, tick)) = llmd.scrapes.next.first()
                && at <= now.as_micros()
            {
                llmd.scrapes.next.pop_first();
                for _ in 0..llmd.scrapes.firing(tick) {
                    out.send(self.engines[endpoint as usize], self.delay_to_engine, ClusterMessage::Scrape);
                }
                llmd.scrapes.plan(endpoint, tick);
            }
        }
        self.last_transition = now;
    }

    fn describe(&self, description: &mut blis_kernel::Description) {
        description.arg("routed", self.routed);
        description.arg("refused", self.refused);
    }
}
