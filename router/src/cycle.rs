//! The scheduling cycle: one request in, one decision out, as llm-d-router v0.10.0's director
//! and scheduler make it.
//!
//! Order (`requestcontrol/director.go::HandleRequest`, `scheduling/scheduler.go::Schedule`):
//! admission — the legacy one ([`Router::route`]: a sheddable request is refused while the pool is
//! saturated), or, with the `flowControl` gate on, the wait in `crate::flow_control` the router
//! host drives before [`Router::schedule`] → candidates
//! (the endpoints serving the request's model, in name order) → data producers in dependency
//! order → the profile handler → per profile: filters in order, each on the previous survivors
//! (none left fails the profile) → scorers, each score clamped to 0..1, times its weight, summed
//! → the picker → pre-request hooks (the prefix index learns the decision, in-flight counters
//! rise, the no-hit LRU moves, session bindings are made, the P/D handler writes the decode
//! sidecar's headers). With `disagg-profile-handler` the handler picks profile after profile
//! (decode, then prefill when its decider says so, or prefill first) and the decode result is
//! primary; [`Router::result`] holds every profile's targets and the sidecar's headers. Response
//! hooks write session tokens when the response's headers pass back and release the in-flight
//! counters as the response passes back. Every random choice draws from the router's named
//! substreams.

use std::collections::BTreeMap;

use blis_kernel::Substream;

use crate::config::RouterConfig;
use crate::endpoint::{Endpoint, EndpointIndex, Scrape};
use crate::plugins::disagg::{self, ProfileRun, Stage};
use crate::plugins::{PluginKind, scorers};
use crate::precise_prefix::KvEventBatch;
use crate::request::RoutingRequest;
use crate::view::{Attributes, PluginInstance, View};

/// The router's random sources, each a named substream.
#[derive(Clone, Debug)]
pub struct RouterRng {
    /// Picker shuffles and weighted draws (`router`, `tie-break`).
    pub tie_break: Substream,
    /// The affinity filter's exploration draws (`router`, `exploration`).
    pub exploration: Substream,
}

/// A profile's targets (one unless the picker returns more), inline for the usual few.
pub type Targets = smallvec::SmallVec<[EndpointIndex; 4]>;

/// What the router decided for one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Sent on: the primary profile's targets, the first being where the request goes.
    Routed {
        /// The endpoint the request goes to.
        endpoint: EndpointIndex,
        /// Every target the picker returned, in order.
        targets: Targets,
        /// The winner's total score.
        score: f64,
    },
    /// Refused with the HTTP status and message a client would see.
    Refused {
        /// The status code.
        status: u16,
        /// Upstream's message.
        reason: String,
    },
}

/// The scheduling result of the last routed request: each profile in the result with its
/// targets (the primary first), the prefill target, and the headers the decode sidecar receives.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulingResult {
    /// The primary profile's index.
    pub primary: usize,
    /// (profile index, its targets) for every profile in the result, the primary first.
    pub profiles: Vec<(usize, Targets)>,
    /// The prefill profile's first target, when it ran and picked one.
    pub prefill: Option<EndpointIndex>,
    /// Headers the pre-request hooks set on the request for the decode sidecar, in order.
    pub headers: Vec<(&'static str, String)>,
}

/// What the response hooks need of a routed request: its primary target and each profile's
/// first target.
#[derive(Clone, Debug)]
struct Routed {
    primary: EndpointIndex,
    firsts: smallvec::SmallVec<[(usize, EndpointIndex); 3]>,
}

/// llm-d's router as a state machine: its plugins, their state, and the endpoints' last scrape.
#[derive(Clone, Debug)]
pub struct Router {
    config: RouterConfig,
    endpoints: Vec<Endpoint>,
    attributes: Attributes,
    scratch: Scratch,
    result: SchedulingResult,
    /// Requests whose response headers have not passed back yet (only while a plugin writes
    /// response headers).
    awaiting_headers: BTreeMap<u64, Routed>,
}

/// Buffers reused across cycles, so routing allocates nothing in the steady state.
#[derive(Clone, Debug, Default)]
struct Scratch {
    survivors: Vec<EndpointIndex>,
    filtered: Vec<EndpointIndex>,
    scores: Vec<Option<f64>>,
    totals: Vec<f64>,
    scored: Vec<(EndpointIndex, f64)>,
    keys: Vec<f64>,
    cold: Vec<(usize, bool)>,
    infos: Vec<crate::plugins::prefix::PrefixMatchInfo>,
    runs: Vec<ProfileRun>,
    run_scores: Vec<f64>,
}

impl Router {
    /// A router running `config` over `endpoints` (in name order; their indexes are positions).
    pub fn new(mut config: RouterConfig, endpoints: Vec<Endpoint>) -> Router {
        for plugin in &mut config.plugins {
            if let PluginKind::InFlightLoadProducer(p) = &mut plugin.kind {
                p.register_endpoints(endpoints.len());
            }
        }
        Router {
            config,
            endpoints,
            attributes: Attributes::default(),
            scratch: Scratch::default(),
            result: SchedulingResult::default(),
            awaiting_headers: BTreeMap::new(),
        }
    }

    /// The scheduling result of the last request routed.
    pub fn result(&self) -> &SchedulingResult {
        &self.result
    }

    /// Whether any plugin reads request headers (session affinity, the session-id producer):
    /// without one, callers may pass no headers.
    pub fn reads_headers(&self) -> bool {
        self.config
            .plugins
            .iter()
            .any(|p| matches!(p.kind, PluginKind::SessionAffinity(_) | PluginKind::SessionIdProducer(_)))
    }

    /// Whether any plugin writes response headers (session affinity's encoded-endpoint strategy).
    pub fn writes_response_headers(&self) -> bool {
        self.config
            .plugins
            .iter()
            .any(|p| matches!(&p.kind, PluginKind::SessionAffinity(s) if s.writes_response_header()))
    }

    /// The config it runs.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// The endpoints, with their last-scraped metrics.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The plugin instances and their state.
    pub fn plugins(&self) -> &[PluginInstance] {
        &self.config.plugins
    }

    /// Take in a scrape of `endpoint` arriving at `now_us`, through the configured extractors.
    pub fn record_scrape(&mut self, endpoint: EndpointIndex, scrape: &Scrape, now_us: u64) {
        let endpoint = &mut self.endpoints[endpoint as usize];
        let engine = endpoint.engine_type();
        endpoint.metrics.apply(scrape, engine, now_us);
    }

    /// Decide where `request` goes among `candidates` (the endpoints serving its model, in
    /// index order) at `now_us`, through the legacy admission (the `flowControl` gate off).
    pub fn route(
        &mut self,
        request: &RoutingRequest,
        candidates: &[EndpointIndex],
        now_us: u64,
        rng: &mut RouterRng,
    ) -> Decision {
        if request.priority < 0 && self.saturation(candidates, now_us) >= 1.0 {
            return refused(429, "system saturated, sheddable request dropped");
        }
        self.schedule(request, candidates, now_us, rng)
    }

    /// The configured saturation detector's reading over `pool` at `now_us` (1 for no
    /// endpoints): what the legacy admission and flow control's dispatch cycle gate on.
    pub fn saturation(&self, pool: &[EndpointIndex], now_us: u64) -> f64 {
        let request = RoutingRequest {
            key: 0,
            model: "",
            prompt_token_ids: &[],
            priority: 0,
            cache_salt: &[],
            max_tokens: None,
            headers: &[],
            prompt_digests: None,
        };
        saturation(&self.view(&request, now_us), self.config.saturation_detector, pool)
    }

    /// Schedule an admitted request (one flow control dispatched, or one the legacy admission
    /// let through): candidates, producers, the profile, the pre-request hooks.
    pub fn schedule(
        &mut self,
        request: &RoutingRequest,
        candidates: &[EndpointIndex],
        now_us: u64,
        rng: &mut RouterRng,
    ) -> Decision {
        if candidates.is_empty() {
            return refused(503, "failed to find endpoint candidates for serving the request");
        }
        self.produce(request, candidates);
        for plugin in &mut self.config.plugins {
            if let PluginKind::SessionAffinity(s) = &mut plugin.kind {
                s.begin_request();
            }
        }
        let stages = match &self.config.plugins[self.config.handler].kind {
            PluginKind::DisaggProfileHandler(h) => h.stages,
            _ => return self.route_single(request, candidates, now_us, rng),
        };
        self.route_disagg(stages, request, candidates, now_us, rng)
    }

    /// The single-profile handler's cycle: its one profile, whose failure fails the request.
    fn route_single(
        &mut self,
        request: &RoutingRequest,
        candidates: &[EndpointIndex],
        now_us: u64,
        rng: &mut RouterRng,
    ) -> Decision {
        let Some((endpoint, targets, score)) = self.run_profile(0, request, candidates, now_us, rng) else {
            let name = &self.config.profiles[0].name;
            return refused(
                429,
                &format!("failed to find target endpoint: failed to run scheduler profile '{name}'"),
            );
        };
        self.result.primary = 0;
        self.result.profiles.clear();
        self.result.profiles.push((0, targets.clone()));
        self.result.prefill = None;
        self.result.headers.clear();
        self.pre_request(request, endpoint, now_us);
        Decision::Routed { endpoint, targets, score }
    }

    /// `disagg-profile-handler`'s cycle (`scheduler.go::Schedule`): pick and run profiles until
    /// the handler is done, then its `ProcessResults`.
    fn route_disagg(
        &mut self,
        stages: disagg::Stages,
        request: &RoutingRequest,
        candidates: &[EndpointIndex],
        now_us: u64,
        rng: &mut RouterRng,
    ) -> Decision {
        let n = self.config.profiles.len();
        let mut runs = std::mem::take(&mut self.scratch.runs);
        let mut run_scores = std::mem::take(&mut self.scratch.run_scores);
        runs.clear();
        runs.resize(n, None);
        run_scores.clear();
        run_scores.resize(n, 0.0);
        loop {
            let next = {
                let view = self.view(request, now_us);
                let input = if self.attributes.tokenized { request.prompt_token_ids.len() as u64 } else { 0 };
                stages.pick(&mut runs, &mut |_: Stage, decider, winner| decide(&view, decider, input, winner))
            };
            let Some(p) = next else { break };
            let run = self.run_profile(p, request, candidates, now_us, rng);
            run_scores[p] = run.as_ref().map_or(0.0, |r| r.2);
            runs[p] = Some(run.map(|r| r.1));
        }
        let outcome = if runs.iter().all(Option::is_none) {
            Err(format!("failed to run any scheduler profile for request {}", request.key))
        } else {
            stages.process_results(&runs).map_err(str::to_owned)
        };
        let decision = match outcome {
            Err(why) => refused(429, &format!("failed to find target endpoint: {why}")),
            Ok([decode, prefill, encode]) => {
                let decode = decode.expect("the decode profile is in every result");
                let targets = runs[decode].clone().flatten().expect("the decode profile ran");
                let endpoint = targets[0];
                self.result.primary = decode;
                self.result.profiles.clear();
                self.result.headers.clear();
                self.result.profiles.push((decode, targets.clone()));
                self.result.prefill = None;
                if let Some(p) = prefill {
                    let prefill_targets = runs[p].clone().flatten().expect("the prefill profile ran");
                    self.result.prefill = prefill_targets.first().copied();
                    self.result.profiles.push((p, prefill_targets));
                }
                if let Some(e) = encode {
                    self.result
                        .profiles
                        .push((e, runs[e].clone().flatten().expect("the encode profile ran")));
                }
                self.sidecar_headers(prefill, encode);
                self.pre_request(request, endpoint, now_us);
                Decision::Routed { endpoint, targets, score: run_scores[decode] }
            }
        };
        self.scratch.runs = runs;
        self.scratch.run_scores = run_scores;
        decision
    }

    /// The disagg handler's pre-request hook: `x-prefiller-host-port` from the prefill result's
    /// first target, `x-encoder-hosts-ports` from every encode target.
    fn sidecar_headers(&mut self, prefill: Option<usize>, encode: Option<usize>) {
        let host_port =
            |e: EndpointIndex| format!("{}:{}", self.endpoints[e as usize].name, disagg::MODEL_SERVER_PORT);
        let of = |profile: usize| self.result.profiles.iter().find(|(p, _)| *p == profile).map(|(_, t)| t);
        if let Some(first) = prefill.and_then(of).and_then(|t| t.first()) {
            let value = host_port(*first);
            self.result.headers.push((disagg::PREFILL_HEADER, value));
        }
        if let Some(targets) = encode.and_then(of).filter(|t| !t.is_empty()) {
            let value = targets.iter().map(|&e| host_port(e)).collect::<Vec<_>>().join(",");
            self.result.headers.push((disagg::ENCODE_HEADER, value));
        }
    }

    /// The response's headers passed back through the router (`ResponseHeader`): the session
    /// tokens the plugins write on the response, as (header, value), into `out`.
    pub fn response_header(&mut self, key: u64, out: &mut Vec<(String, String)>) {
        let Some(routed) = self.awaiting_headers.remove(&key) else { return };
        for plugin in &self.config.plugins {
            let PluginKind::SessionAffinity(s) = &plugin.kind else { continue };
            let pod = if s.profile_name.is_empty() {
                Some(routed.primary)
            } else {
                self.config
                    .profiles
                    .iter()
                    .position(|p| p.name == s.profile_name)
                    .and_then(|p| routed.firsts.iter().find(|(q, _)| *q == p))
                    .map(|&(_, e)| e)
            };
            let name = pod.map(|e| &*self.endpoints[e as usize].name);
            if let Some(header) = s.response_header(name) {
                out.push(header);
            }
        }
    }

    /// The response's first chunk passed back through the router.
    pub fn first_chunk(&mut self, key: u64) {
        for plugin in &mut self.config.plugins {
            if let PluginKind::InFlightLoadProducer(p) = &mut plugin.kind {
                p.first_chunk(key);
            }
        }
    }

    /// The response ended (or the request was answered with an error, or given up).
    pub fn end(&mut self, key: u64) {
        self.awaiting_headers.remove(&key);
        for plugin in &mut self.config.plugins {
            if let PluginKind::InFlightLoadProducer(p) = &mut plugin.kind {
                p.end(key);
            }
        }
    }

    /// Take in a batch of KV events `endpoint` (serving `model`) published, in every precise
    /// producer subscribed to it.
    pub fn record_kv_events(&mut self, endpoint: EndpointIndex, model: &str, batch: &KvEventBatch) {
        for plugin in &mut self.config.plugins {
            let producer = match &mut plugin.kind {
                PluginKind::PrecisePrefixProducer(p) => &mut p.inner,
                PluginKind::PrecisePrefixScorer(s) => &mut s.producer.inner,
                _ => continue,
            };
            if producer.subscribed() {
                producer.apply_batch(endpoint, model, batch);
            }
        }
    }

    /// The block size and per-prompt cap the approximate prefix producer hashes prompts with
    /// when the endpoints scrape `cache_block_size`, so that clients can make their prompts'
    /// digests ahead; `None` unless exactly one such producer runs.
    pub fn prompt_digest_plan(&self, cache_block_size: Option<u32>) -> Option<(u32, usize)> {
        let mut plans = self.config.producers.iter().filter_map(|&p| match &self.config.plugins[p].kind {
            PluginKind::ApproxPrefixProducer(producer) => Some(producer.inner.hash_plan(cache_block_size)),
            _ => None,
        });
        let plan = plans.next()?;
        plans.next().is_none().then_some(plan)
    }

    /// Whether any plugin reads the engines' KV events (so the engines should publish them).
    pub fn wants_kv_events(&self) -> bool {
        self.config.plugins.iter().any(|p| match &p.kind {
            PluginKind::PrecisePrefixProducer(producer) => producer.inner.subscribed(),
            PluginKind::PrecisePrefixScorer(s) => s.producer.inner.subscribed(),
            _ => false,
        })
    }

    /// Whether any plugin releases state on a response's first chunk.
    pub fn wants_first_chunk(&self) -> bool {
        self.config.plugins.iter().any(|p| matches!(p.kind, PluginKind::InFlightLoadProducer(_)))
            || self.writes_response_headers()
    }

    fn view<'a>(&'a self, request: &'a RoutingRequest<'a>, now_us: u64) -> View<'a> {
        View {
            now_us,
            endpoints: &self.endpoints,
            request,
            attributes: &self.attributes,
            plugins: &self.config.plugins,
        }
    }

    /// Run the data producers in dependency order.
    fn produce(&mut self, request: &RoutingRequest, candidates: &[EndpointIndex]) {
        self.attributes.clear();
        let endpoints = self.endpoints.len();
        for i in 0..self.config.producers.len() {
            let p = self.config.producers[i];
            let plugins = &mut self.config.plugins;
            match &mut plugins[p].kind {
                PluginKind::TokenProducer(_) => {
                    self.attributes.tokenized = !request.prompt_token_ids.is_empty()
                }
                PluginKind::ApproxPrefixProducer(producer) => {
                    let first_block_size = candidates
                        .first()
                        .map(|&e| self.endpoints[e as usize].metrics.cache_block_size)
                        .filter(|&b| b > 0)
                        .map(|b| b as u32);
                    let block_size = producer.inner.block_size(first_block_size);
                    let digested = self.attributes.tokenized
                        && request.prompt_digests.is_some_and(|digests| {
                            producer.inner.hash_digested(
                                request.model,
                                request.cache_salt,
                                digests,
                                block_size,
                                &mut producer.hashes,
                            )
                        });
                    if !digested {
                        let prompts: &[&[u32]] =
                            if self.attributes.tokenized { &[request.prompt_token_ids] } else { &[] };
                        producer.inner.hash_request(
                            request.model,
                            request.cache_salt,
                            prompts,
                            block_size,
                            &mut producer.hashes,
                        );
                    }
                    let infos = &mut self.scratch.infos;
                    infos.clear();
                    producer.inner.produce(&mut producer.hashes, candidates, infos);
                    let slots = self.attributes.prefix_slots(p, endpoints);
                    for (&e, info) in candidates.iter().zip(infos.iter()) {
                        slots[e as usize] = Some(*info);
                    }
                }
                PluginKind::SessionIdProducer(producer) => {
                    let id = producer.extract(|h| request.header(h));
                    self.attributes.set_session_id(p, id);
                }
                PluginKind::PrecisePrefixProducer(producer) => {
                    let prompts: &[&[u32]] =
                        if self.attributes.tokenized { &[request.prompt_token_ids] } else { &[] };
                    write_precise(&mut self.attributes, p, endpoints, producer, request, prompts, candidates);
                }
                PluginKind::PrecisePrefixScorer(legacy) => {
                    let prompts: &[&[u32]] =
                        if self.attributes.tokenized { &[request.prompt_token_ids] } else { &[] };
                    write_precise(
                        &mut self.attributes,
                        p,
                        endpoints,
                        &mut legacy.producer,
                        request,
                        prompts,
                        candidates,
                    );
                }
                PluginKind::InFlightLoadProducer(_) => {
                    let input =
                        if self.attributes.tokenized { request.prompt_token_ids.len() as u64 } else { 0 };
                    let PluginKind::InFlightLoadProducer(producer) = &self.config.plugins[p].kind else {
                        unreachable!()
                    };
                    // The prefix producer ran first (dependency order); its slots are read
                    // while this producer's are written.
                    let prefix_at = producer
                        .prefix_producer
                        .and_then(|pp| self.attributes.prefix.iter().position(|(i, _)| *i == pp));
                    self.attributes.uncached_slots(p, endpoints);
                    let Attributes { prefix, uncached, .. } = &mut self.attributes;
                    let slots = &mut uncached.iter_mut().find(|(i, _)| *i == p).expect("just created").1;
                    for &e in candidates {
                        let info = prefix_at.and_then(|at| prefix[at].1[e as usize]);
                        slots[e as usize] = Some(producer.estimate(input, info, request.max_tokens));
                    }
                }
                _ => {}
            }
        }
    }

    /// Run profile `index`: the picked endpoint, all targets and the winner's score, or `None`
    /// when a filter left no endpoint.
    fn run_profile(
        &mut self,
        index: usize,
        request: &RoutingRequest,
        candidates: &[EndpointIndex],
        now_us: u64,
        rng: &mut RouterRng,
    ) -> Option<(EndpointIndex, Targets, f64)> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let profile = &self.config.profiles[index];
        let view = self.view(request, now_us);
        scratch.survivors.clear();
        scratch.survivors.extend_from_slice(candidates);
        for &f in &profile.filters {
            scratch.filtered.clear();
            filter(
                &view,
                &self.config.plugins[f].kind,
                &scratch.survivors,
                &mut rng.exploration,
                &mut scratch.filtered,
            );
            std::mem::swap(&mut scratch.survivors, &mut scratch.filtered);
            if scratch.survivors.is_empty() {
                self.scratch = scratch;
                return None;
            }
        }
        let n = scratch.survivors.len();
        scratch.totals.clear();
        scratch.totals.resize(n, 0.0);
        scratch.cold.clear();
        for &(s, weight) in &profile.scorers {
            scratch.scores.clear();
            scratch.scores.resize(n, None);
            let kind = &self.config.plugins[s].kind;
            if let PluginKind::NoHitLruScorer(lru) = kind {
                let cold = lru.is_cold(&view, &scratch.survivors);
                scratch.cold.push((s, cold));
                lru.score(&view, &scratch.survivors, cold, &mut scratch.scores);
            } else {
                score(&view, kind, &scratch.survivors, &mut scratch.scores);
            }
            for (total, value) in scratch.totals.iter_mut().zip(&scratch.scores) {
                if let Some(v) = value {
                    *total += clamp_unit(*v) * weight;
                }
            }
        }
        scratch.scored.clear();
        scratch.scored.extend(scratch.survivors.iter().copied().zip(scratch.totals.iter().copied()));
        let PluginKind::Picker(picker) = &self.config.plugins[profile.picker].kind else {
            unreachable!("a profile's picker is a picker")
        };
        let picked = picker.pick(&mut scratch.scored, &mut rng.tie_break, &mut scratch.keys);
        let targets: Targets = scratch.scored[..picked].iter().map(|&(e, _)| e).collect();
        let (endpoint, total) = scratch.scored[0];
        self.scratch = scratch;
        Some((endpoint, targets, total))
    }

    /// Pre-request hooks of every plugin, for a request routed to `endpoint` (the primary
    /// target) with the profiles in [`Router::result`]. Like upstream's, the approximate index,
    /// the no-hit LRU and the in-flight producer know the prefill profile by its default name
    /// `prefill`, whatever the handler calls it.
    fn pre_request(&mut self, request: &RoutingRequest, endpoint: EndpointIndex, now_us: u64) {
        let prefill = self
            .result
            .profiles
            .iter()
            .find(|(p, t)| {
                *p != self.result.primary && self.config.profiles[*p].name == "prefill" && !t.is_empty()
            })
            .map(|(_, t)| t[0]);
        let primary_and_prefill = [Some(endpoint), prefill];
        let capacity = |e: EndpointIndex| {
            let blocks = self.endpoints[e as usize].metrics.cache_num_blocks;
            (e, (blocks > 0).then_some(blocks))
        };
        let servers: smallvec::SmallVec<[(EndpointIndex, Option<u64>); 2]> =
            primary_and_prefill.iter().flatten().map(|&e| capacity(e)).collect();
        let cold = std::mem::take(&mut self.scratch.cold);
        let firsts: smallvec::SmallVec<[(usize, EndpointIndex); 3]> =
            self.result.profiles.iter().filter(|(_, t)| !t.is_empty()).map(|(p, t)| (*p, t[0])).collect();
        for (i, plugin) in self.config.plugins.iter_mut().enumerate() {
            match &mut plugin.kind {
                PluginKind::ApproxPrefixProducer(producer) => {
                    let hashes = std::mem::take(&mut producer.hashes);
                    producer.inner.pre_request(&hashes, &servers);
                    producer.hashes = hashes;
                }
                PluginKind::InFlightLoadProducer(producer) => {
                    let slots = self.attributes.uncached.iter().find(|(p, _)| *p == i).map(|(_, s)| s);
                    let tokens = |e: EndpointIndex| slots.and_then(|s| s[e as usize]).unwrap_or(0);
                    let targets: smallvec::SmallVec<[(EndpointIndex, bool, u64); 3]> = firsts
                        .iter()
                        .map(|&(p, e)| (e, self.config.profiles[p].name == "prefill", tokens(e)))
                        .collect();
                    producer.add(request.key, &targets);
                }
                PluginKind::NoHitLruScorer(lru) if cold.iter().any(|&(s, c)| s == i && c) => {
                    for &e in primary_and_prefill.iter().flatten() {
                        lru.touch(&self.endpoints[e as usize].name);
                    }
                }
                PluginKind::SessionAffinity(session) => {
                    let picked = if session.profile_name.is_empty() {
                        Some(endpoint)
                    } else {
                        let profiles = &self.config.profiles;
                        firsts
                            .iter()
                            .find(|&&(p, _)| profiles[p].name == session.profile_name)
                            .map(|&(_, e)| e)
                    };
                    let pod = picked.map(|e| &self.endpoints[e as usize].name);
                    session.pre_request(request, &self.attributes, now_us, pod);
                }
                _ => {}
            }
        }
        self.scratch.cold = cold;
        if self.writes_response_headers() {
            self.awaiting_headers.insert(request.key, Routed { primary: endpoint, firsts });
        }
    }
}

/// Run a precise producer and write its match info for `candidates` into plugin `p`'s slots
/// (none at all when no prompt fills a block, as upstream writes nothing then).
fn write_precise(
    attributes: &mut Attributes,
    p: usize,
    endpoints: usize,
    producer: &mut crate::plugins::precise::Producer,
    request: &RoutingRequest,
    prompts: &[&[u32]],
    candidates: &[EndpointIndex],
) {
    let matches = &mut producer.matches;
    producer.inner.produce(request.model, request.cache_salt, prompts, candidates, endpoints, matches);
    let slots = attributes.prefix_slots(p, endpoints);
    for (&e, m) in candidates.iter().zip(matches.iter()) {
        slots[e as usize] = Some(m.info);
    }
}

fn refused(status: u16, reason: &str) -> Decision {
    Decision::Refused { status, reason: reason.to_owned() }
}

/// `enforceScoreRange`: below 0 → 0, above 1 → 1; NaN passes through as upstream's does.
pub fn clamp_unit(score: f64) -> f64 {
    score.clamp(0.0, 1.0)
}

/// Ask decider plugin `decider` whether to disaggregate, for a prompt of `input` tokens and the
/// decode winner `winner`.
fn decide(view: &View, decider: usize, input: u64, winner: Option<EndpointIndex>) -> bool {
    match &view.plugins[decider].kind {
        PluginKind::PrefixBasedPdDecider(d) => {
            d.disaggregate(input, winner, winner.and_then(|e| view.prefix_info(d.producer, e)))
        }
        PluginKind::AlwaysDisaggPdDecider => true,
        _ => unreachable!("the loader checked the deciders"),
    }
}

fn saturation(view: &View, detector: usize, candidates: &[EndpointIndex]) -> f64 {
    match &view.plugins[detector].kind {
        PluginKind::UtilizationDetector(d) => d.saturation(view, candidates),
        PluginKind::ConcurrencyDetector(d) => d.saturation(view, candidates),
        _ => unreachable!("the loader checked the saturation detector"),
    }
}

fn filter(
    view: &View,
    kind: &PluginKind,
    input: &[EndpointIndex],
    exploration: &mut Substream,
    out: &mut Vec<EndpointIndex>,
) {
    match kind {
        PluginKind::ByLabelFilter(f) => {
            out.extend(input.iter().copied().filter(|&e| f.keeps(&view.endpoints[e as usize])));
        }
        PluginKind::LabelSelectorFilter(f) => {
            out.extend(input.iter().copied().filter(|&e| f.matches(&view.endpoints[e as usize].labels)));
        }
        PluginKind::UtilizationFilter(f) => f.filter(view, input, out),
        PluginKind::PrefixCacheAffinityFilter(f) => f.filter(view, input, exploration, out),
        PluginKind::UtilizationDetector(d) => d.filter(view, input, out),
        PluginKind::ConcurrencyDetector(d) => d.filter(view, input, out),
        PluginKind::SessionAffinity(s) => s.filter(view, input, out),
        _ => unreachable!("only filters are in a profile's filter slot"),
    }
}

fn score(view: &View, kind: &PluginKind, candidates: &[EndpointIndex], out: &mut [Option<f64>]) {
    match kind {
        PluginKind::QueueScorer => scorers::queue(view, candidates, out),
        PluginKind::KvCacheUtilizationScorer => scorers::kv_cache_utilization(view, candidates, out),
        PluginKind::RunningRequestsSizeScorer => scorers::running(view, candidates, out),
        PluginKind::LoadAwareScorer(s) => s.score(view, candidates, out),
        PluginKind::PrefixCacheScorer(s) => {
            for (slot, &e) in out.iter_mut().zip(candidates) {
                *slot = Some(s.score(view.prefix_info(s.producer, e).as_ref()));
            }
        }
        PluginKind::PrecisePrefixScorer(legacy) => {
            let s = &legacy.scorer;
            for (slot, &e) in out.iter_mut().zip(candidates) {
                *slot = Some(s.score(view.prefix_info(s.producer, e).as_ref()));
            }
        }
        PluginKind::TokenLoadScorer(s) => s.score(view, candidates, out),
        PluginKind::ActiveRequestScorer(s) => s.score(view, candidates, out),
        PluginKind::SessionAffinity(s) => s.score(view, candidates, out),
        _ => unreachable!("only scorers are in a profile's scorer slot"),
    }
}
