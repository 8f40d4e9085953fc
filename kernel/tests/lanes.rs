//! Detached actors in lanes: a run whose servers run ahead of the rest, on one to three
//! threads, makes every transition a sequential run makes (same instants, bags, elapsed times
//! and outputs), counts the same rounds, ends its slices at the same instants, and stops with an
//! error instead of a different outcome when an actor breaks the lanes' promise.

use std::collections::VecDeque;

use blis_kernel::{
    Actor, ActorId, Assembly, AssemblyError, Context, Event, HostKind, KernelError, LaneSpec, Message,
    MessageClass, Observer, Outbox, RunEnd, RunStats, SimDuration, SimTime, Simulation, TimeAdvance,
};

#[derive(Debug)]
enum Msg {
    /// A server finished a job (quiet: the dispatcher's answer to it sends nothing to servers).
    Done { job: u64 },
    /// A job to dispatch or serve, with its service time in µs.
    Job { job: u64, work: u64 },
}

impl Message for Msg {
    fn class(&self) -> MessageClass {
        match self {
            Msg::Done { .. } => MessageClass(0),
            Msg::Job { .. } => MessageClass(1),
        }
    }
}

const QUIET: MessageClass = MessageClass(0);
const TO_DISPATCHER_US: u64 = 30;
const TO_SERVER_US: u64 = 20;

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn bag_line(ctx: &Context, event: &Event<'_, Msg>) -> String {
    let kind = match event {
        Event::Internal => "internal",
        Event::External(_) => "external",
        Event::Confluent(_) => "confluent",
    };
    format!("{} e={} {kind}", ctx.now, ctx.elapsed)
}

/// Sends jobs to the dispatcher at pseudo-random gaps (some zero, so arrivals coincide).
struct Source {
    dispatcher: ActorId,
    rng: u64,
    left: u64,
    sent: u64,
    gap_us: u64,
    log: Vec<String>,
}

impl Actor<Msg> for Source {
    fn time_advance(&self) -> TimeAdvance {
        if self.left == 0 {
            TimeAdvance::Passive
        } else {
            TimeAdvance::After(SimDuration::from_micros(self.gap_us))
        }
    }

    fn transition(&mut self, ctx: &Context, event: Event<'_, Msg>, out: &mut Outbox<Msg>) {
        self.log.push(bag_line(ctx, &event));
        let work = 50 + xorshift(&mut self.rng) % 900;
        out.send(
            self.dispatcher,
            SimDuration::from_micros(TO_DISPATCHER_US),
            Msg::Job { job: self.sent, work },
        );
        self.sent += 1;
        self.left -= 1;
        self.gap_us = xorshift(&mut self.rng) % 300;
        if self.gap_us < 40 {
            self.gap_us = 0;
        }
    }
}

/// Sends each job to the server with the fewest outstanding (what `Done` updates), forwards
/// every `Done` to the sink at once; with `feedback`, also answers a `Done` with a new job.
struct Dispatcher {
    servers: Vec<ActorId>,
    sink: ActorId,
    outstanding: Vec<u32>,
    feedback: bool,
    log: Vec<String>,
}

impl Actor<Msg> for Dispatcher {
    fn time_advance(&self) -> TimeAdvance {
        TimeAdvance::Passive
    }

    fn transition(&mut self, ctx: &Context, event: Event<'_, Msg>, out: &mut Outbox<Msg>) {
        let mut line = bag_line(ctx, &event);
        if let Event::External(bag) | Event::Confluent(bag) = event {
            for envelope in bag {
                line +=
                    &format!(" {:?}<-{}#{}", envelope.payload, envelope.sender.0, envelope.key.send_count);
                match envelope.payload {
                    Msg::Job { job, work } => {
                        let (index, _) =
                            self.outstanding.iter().enumerate().min_by_key(|&(i, n)| (*n, i)).unwrap();
                        self.outstanding[index] += 1;
                        let to = self.servers[index];
                        out.send(to, SimDuration::from_micros(TO_SERVER_US), Msg::Job { job, work });
                    }
                    Msg::Done { job } => {
                        let index = self.servers.iter().position(|&s| s == envelope.sender).unwrap();
                        self.outstanding[index] -= 1;
                        out.send(self.sink, SimDuration::ZERO, Msg::Done { job });
                        if self.feedback {
                            self.outstanding[0] += 1;
                            out.send(
                                self.servers[0],
                                SimDuration::from_micros(TO_SERVER_US),
                                Msg::Job { job, work: 10 },
                            );
                        }
                    }
                }
            }
        }
        self.log.push(line);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Idle,
    /// A transient state (time advance zero) before serving, so a lane runs several rounds at
    /// one time.
    Starting,
    Serving {
        job: u64,
        until: SimTime,
    },
}

/// Serves its jobs in order; answers each with `Done` to the dispatcher.
struct Server {
    dispatcher: ActorId,
    queue: VecDeque<(u64, u64)>,
    phase: Phase,
    now: SimTime,
    /// Halt when this job is done.
    halt_after: Option<u64>,
    /// Also tell this (detached) actor, which lanes refuse.
    peer: Option<ActorId>,
    log: Vec<String>,
}

impl Server {
    fn new(dispatcher: ActorId) -> Server {
        Server {
            dispatcher,
            queue: VecDeque::new(),
            phase: Phase::Idle,
            now: SimTime::ZERO,
            halt_after: None,
            peer: None,
            log: Vec::new(),
        }
    }

    fn start_next(&mut self, now: SimTime) {
        self.phase = match self.queue.pop_front() {
            Some((job, work)) => {
                Phase::Serving { job, until: now.saturating_add(SimDuration::from_micros(work)) }
            }
            None => Phase::Idle,
        };
    }
}

impl Actor<Msg> for Server {
    fn time_advance(&self) -> TimeAdvance {
        match self.phase {
            Phase::Idle => TimeAdvance::Passive,
            Phase::Starting => TimeAdvance::After(SimDuration::ZERO),
            Phase::Serving { until, .. } => TimeAdvance::After(until.saturating_since(self.now)),
        }
    }

    fn transition(&mut self, ctx: &Context, event: Event<'_, Msg>, out: &mut Outbox<Msg>) {
        let now = ctx.now.time;
        self.now = now;
        let mut line = bag_line(ctx, &event);
        if matches!(event, Event::Internal | Event::Confluent(_)) {
            match self.phase {
                Phase::Starting => self.start_next(now),
                Phase::Serving { job, .. } => {
                    line += &format!(" done {job}");
                    out.send(self.dispatcher, SimDuration::from_micros(TO_SERVER_US), Msg::Done { job });
                    if let Some(peer) = self.peer {
                        out.send(peer, SimDuration::from_micros(TO_SERVER_US), Msg::Done { job });
                    }
                    if self.halt_after == Some(job) {
                        out.halt(format!("job {job} done"));
                    }
                    self.start_next(now);
                }
                Phase::Idle => {}
            }
        }
        if let Event::External(bag) | Event::Confluent(bag) = event {
            for envelope in bag {
                line += &format!(" {:?}#{}", envelope.payload, envelope.key.send_count);
                if let Msg::Job { job, work } = envelope.payload {
                    self.queue.push_back((job, work));
                }
            }
            if self.phase == Phase::Idle && !self.queue.is_empty() {
                self.phase = Phase::Starting;
            }
        }
        self.log.push(line);
    }
}

/// Logs what reaches it.
struct Sink {
    log: Vec<String>,
}

impl Actor<Msg> for Sink {
    fn time_advance(&self) -> TimeAdvance {
        TimeAdvance::Passive
    }

    fn transition(&mut self, ctx: &Context, event: Event<'_, Msg>, _: &mut Outbox<Msg>) {
        let mut line = bag_line(ctx, &event);
        if let Event::External(bag) = event {
            for envelope in bag {
                line += &format!(" {:?}", envelope.payload);
            }
        }
        self.log.push(line);
    }
}

#[derive(Clone, Copy, Default)]
struct Variant {
    feedback: bool,
    peer: bool,
    halt_after: Option<u64>,
}

const SERVERS: usize = 5;

fn assemble(variant: Variant, jobs: u64) -> (Assembly<Msg>, Vec<ActorId>) {
    let mut assembly = Assembly::new();
    let source = assembly.declare("source").unwrap();
    let dispatcher = assembly.declare("dispatcher").unwrap();
    let sink = assembly.declare("sink").unwrap();
    let servers: Vec<ActorId> =
        (0..SERVERS).map(|i| assembly.declare(format!("server-{i}")).unwrap()).collect();
    assembly
        .install(
            source,
            Source {
                dispatcher,
                rng: 0x9e37_79b9_7f4a_7c15,
                left: jobs,
                sent: 0,
                gap_us: 0,
                log: Vec::new(),
            },
        )
        .unwrap();
    assembly
        .install(
            dispatcher,
            Dispatcher {
                servers: servers.clone(),
                sink,
                outstanding: vec![0; SERVERS],
                feedback: variant.feedback,
                log: Vec::new(),
            },
        )
        .unwrap();
    assembly.install(sink, Sink { log: Vec::new() }).unwrap();
    for (i, &id) in servers.iter().enumerate() {
        let mut server = Server::new(dispatcher);
        server.halt_after = variant.halt_after;
        if variant.peer && i == 2 {
            server.peer = Some(servers[3]);
        }
        assembly.install_detached(id, server).unwrap();
    }
    let mut ids = vec![source, dispatcher, sink];
    ids.extend(servers);
    (assembly, ids)
}

fn spec(threads: usize) -> LaneSpec {
    LaneSpec {
        threads,
        lookahead: SimDuration::from_micros(TO_SERVER_US),
        quiet: vec![QUIET],
        reach: Vec::new(),
        handoff_grain: 0,
        grid: SimDuration::ZERO,
    }
}

fn build(variant: Variant, jobs: u64, lanes: Option<usize>) -> (Simulation<Msg>, Vec<ActorId>) {
    let (assembly, ids) = assemble(variant, jobs);
    let simulation = match lanes {
        Some(threads) => assembly.build_in_lanes(&spec(threads)).unwrap(),
        None => assembly.build(HostKind::Inline).unwrap(),
    };
    (simulation, ids)
}

/// Every actor's log, in assembly order.
fn logs(simulation: Simulation<Msg>, ids: &[ActorId]) -> Vec<Vec<String>> {
    let mut finished = simulation.finish();
    let mut out = Vec::new();
    out.push(finished.take_actor::<Source>(ids[0]).unwrap().log);
    out.push(finished.take_actor::<Dispatcher>(ids[1]).unwrap().log);
    out.push(finished.take_actor::<Sink>(ids[2]).unwrap().log);
    for &id in &ids[3..] {
        out.push(finished.take_actor::<Server>(id).unwrap().log);
    }
    out
}

fn counts(stats: RunStats) -> (u64, u64, u64) {
    (stats.rounds, stats.transitions, stats.messages)
}

#[test]
fn servers_in_lanes_make_a_sequential_runs_transitions_on_any_thread_count() {
    let (mut sequential, ids) = build(Variant::default(), 2_000, None);
    let end = sequential.run().unwrap();
    let stats = sequential.stats();
    let expected = logs(sequential, &ids);
    assert!(expected[3..].iter().all(|log| log.len() > 300), "every server is busy");
    for threads in [1, 2, 3] {
        let (mut lanes, ids) = build(Variant::default(), 2_000, Some(threads));
        assert_eq!(lanes.run().unwrap(), end, "{threads} threads");
        let shared = lanes.stats().shared_windows;
        assert_eq!(counts(lanes.stats()), counts(stats), "{threads} threads");
        assert_eq!(logs(lanes, &ids), expected, "{threads} threads");
        if threads > 1 {
            assert!(shared > 100, "{threads} threads shared {shared} windows");
        } else {
            assert_eq!(shared, 0);
        }
    }
}

#[test]
fn slices_of_rounds_end_at_the_same_instants_in_lanes() {
    let slices = |lanes: Option<usize>| {
        let (mut simulation, _) = build(Variant::default(), 500, lanes);
        let mut ends = Vec::new();
        loop {
            let end = simulation.run_rounds(SimTime::MAX, 7).unwrap();
            ends.push((simulation.now(), simulation.stats().rounds, simulation.in_flight()));
            if end.is_some() {
                return (ends, end);
            }
        }
    };
    let expected = slices(None);
    assert!(expected.0.len() > 100);
    for threads in [1, 2] {
        let got = slices(Some(threads));
        assert_eq!(got.1, expected.1, "{threads} threads");
        // In flight differs while a lane holds messages it has not taken yet; the instants and
        // round counts may not.
        let strip = |v: &Vec<(blis_kernel::Instant, u64, usize)>| {
            v.iter().map(|&(a, b, _)| (a, b)).collect::<Vec<_>>()
        };
        assert_eq!(strip(&got.0), strip(&expected.0), "{threads} threads");
    }
}

#[test]
fn a_horizon_stops_lanes_where_it_stops_a_sequential_run() {
    let horizon = SimTime::from_micros(40_000);
    let (mut sequential, ids) = build(Variant::default(), 2_000, None);
    let end = sequential.run_until(horizon).unwrap();
    assert_eq!(end, RunEnd::Horizon { at: horizon });
    let stats = sequential.stats();
    let expected = logs(sequential, &ids);
    let (mut lanes, ids) = build(Variant::default(), 2_000, Some(2));
    assert_eq!(lanes.run_until(horizon).unwrap(), end);
    assert_eq!(counts(lanes.stats()), counts(stats));
    assert_eq!(logs(lanes, &ids), expected);
}

#[test]
fn a_stop_decided_between_slices_at_the_next_grid_point_is_a_sequential_runs_stop() {
    // A caller decides after some slices to stop just before the next multiple of the grid;
    // windows never cross one, so the servers are where a sequential run leaves them.
    let grid = SimDuration::from_micros(5_000);
    let stopped = |lanes: Option<usize>, slice: u64| {
        let (assembly, ids) = assemble(Variant::default(), 2_000);
        let mut simulation = match lanes {
            // The source's jobs pass through the dispatcher: 30 + 20 µs before a server.
            Some(threads) => {
                let reach = vec![(ids[0], SimDuration::from_micros(TO_DISPATCHER_US + TO_SERVER_US))];
                assembly.build_in_lanes(&LaneSpec { grid, reach, ..spec(threads) }).unwrap()
            }
            None => assembly.build(HostKind::Inline).unwrap(),
        };
        for _ in 0..40 {
            assert_eq!(simulation.run_rounds(SimTime::MAX, slice).unwrap(), None);
        }
        let period = grid.as_micros();
        let stop = SimTime::from_micros((simulation.now().time.as_micros() / period + 1) * period - 1);
        assert_eq!(simulation.run_until(stop).unwrap(), RunEnd::Horizon { at: stop });
        let stats = counts(simulation.stats());
        (stop, stats, logs(simulation, &ids))
    };
    // Slices of every length to 60, so that some stop decisions fall while the lanes hold
    // instants the rounds have not reached yet (stopping at the slice's end instead fails
    // with slices of 6, 8, 11, 21 and 23 rounds, among others).
    for slice in 1..=60 {
        let expected = stopped(None, slice);
        for threads in [1, 2] {
            assert!(stopped(Some(threads), slice) == expected, "{threads} threads, slices of {slice}");
        }
    }
}

#[test]
fn a_halt_in_a_lane_ends_the_run_at_the_sequential_runs_instant() {
    let variant = Variant { halt_after: Some(700), ..Variant::default() };
    let (mut sequential, _) = build(variant, 2_000, None);
    let end = sequential.run().unwrap();
    assert!(
        matches!(&end, RunEnd::Halted { actor, reason, .. } if actor.starts_with("server-") && reason == "job 700 done"),
        "{end:?}"
    );
    let rounds = sequential.stats().rounds;
    for threads in [1, 2] {
        let (mut lanes, _) = build(variant, 2_000, Some(threads));
        assert_eq!(lanes.run().unwrap(), end, "{threads} threads");
        assert_eq!(lanes.stats().rounds, rounds, "{threads} threads");
    }
}

#[test]
fn an_answer_that_was_not_quiet_stops_the_run_instead_of_changing_it() {
    // The dispatcher answers a `Done` with a job to a server: `Done` is declared quiet, so the
    // servers already ran past that job's delivery.
    let variant = Variant { feedback: true, ..Variant::default() };
    let horizon = SimTime::from_micros(50_000);
    let (mut sequential, _) = build(variant, 200, None);
    assert_eq!(sequential.run_until(horizon).unwrap(), RunEnd::Horizon { at: horizon });
    let (mut lanes, _) = build(variant, 200, Some(2));
    match lanes.run_until(horizon) {
        Err(KernelError::LookaheadBroken { sender, at, frontier }) => {
            assert_eq!(sender, "dispatcher");
            assert!(at < frontier, "{at} against {frontier}");
        }
        other => panic!("expected the broken lookahead, got {other:?}"),
    }
}

#[test]
fn a_message_between_detached_actors_is_refused() {
    let variant = Variant { peer: true, ..Variant::default() };
    let (mut lanes, ids) = build(variant, 200, Some(2));
    assert_eq!(
        lanes.run(),
        Err(KernelError::DetachedToDetached { sender: "server-2".to_owned(), to: ids[6] })
    );
}

struct Watcher {
    blind: bool,
}

impl Observer<Msg> for Watcher {
    fn blind_to_detached(&self) -> bool {
        self.blind
    }
}

#[test]
fn only_an_observer_blind_to_detached_actors_may_watch_lanes() {
    let (mut lanes, _) = build(Variant::default(), 50, Some(2));
    lanes.observe(Watcher { blind: true });
    assert!(lanes.run().is_ok());
    let (mut lanes, _) = build(Variant::default(), 50, Some(2));
    lanes.observe(Watcher { blind: false });
    assert_eq!(lanes.run(), Err(KernelError::ObserverSeesDetached));
}

#[test]
fn lanes_need_a_thread_and_a_lookahead() {
    let (assembly, _) = assemble(Variant::default(), 1);
    assert_eq!(
        assembly.build_in_lanes(&LaneSpec { threads: 0, ..spec(1) }).err(),
        Some(AssemblyError::NoLaneThreads)
    );
    let (assembly, _) = assemble(Variant::default(), 1);
    let zero = LaneSpec { lookahead: SimDuration::ZERO, ..spec(1) };
    assert_eq!(assembly.build_in_lanes(&zero).err(), Some(AssemblyError::ZeroLookahead));
}
