//! Running ahead: a detached actor alone at its instant may go on through its own internal
//! events before any other pending event, and the run must be the one that takes them a round
//! at a time: the same transitions at the same instants, the same counts, the same clock at
//! every slice's end and at a horizon, the same halt.

use std::sync::{Arc, Mutex};

use blis_kernel::{
    Actor, ActorId, Assembly, Context, Event, HostKind, Instant, Message, MessageClass, Observer, Outbox,
    RunEnd, SimDuration, SimTime, TimeAdvance, TransitionRecord,
};

#[derive(Clone, Debug, PartialEq)]
struct Ping(u64);

impl Message for Ping {
    fn class(&self) -> MessageClass {
        MessageClass(0)
    }
}

/// What a stepper did: the time of each of its transitions, and how many it ran ahead.
#[derive(Clone, Debug, Default, PartialEq)]
struct Log {
    transitions: Vec<u64>,
    ran_ahead: u64,
}

/// Wakes every `period` µs, `wakes` times, sending a ping to `sink` (4 µs away) every
/// `emit_every`-th wake and halting at wake `halt_at`; runs ahead when offered.
struct Stepper {
    period: u64,
    wakes: u64,
    woken: u64,
    emit_every: u64,
    halt_at: Option<u64>,
    sink: ActorId,
    last: SimTime,
    log: Arc<Mutex<Log>>,
}

impl Stepper {
    /// Every 3 µs, 60 wakes, a ping every 7th.
    fn new(sink: ActorId, halt_at: Option<u64>, log: &Arc<Mutex<Log>>) -> Stepper {
        Stepper {
            period: 3,
            wakes: 60,
            woken: 0,
            emit_every: 7,
            halt_at,
            sink,
            last: SimTime::ZERO,
            log: log.clone(),
        }
    }

    fn wake(&mut self, now: SimTime, out: &mut Outbox<Ping>) {
        self.woken += 1;
        self.last = now;
        self.log.lock().unwrap().transitions.push(now.as_micros());
        if self.woken.is_multiple_of(self.emit_every) {
            out.send(self.sink, SimDuration::from_micros(4), Ping(self.woken));
        }
        if self.halt_at == Some(self.woken) {
            out.halt(format!("wake {}", self.woken));
        }
    }

    fn next(&self) -> Option<SimTime> {
        (self.woken < self.wakes).then(|| SimTime::from_micros((self.woken + 1) * self.period))
    }
}

impl Actor<Ping> for Stepper {
    fn time_advance(&self) -> TimeAdvance {
        self.next().map_or(TimeAdvance::Passive, |at| TimeAdvance::until(self.last, at))
    }

    fn transition(&mut self, ctx: &Context, _: Event<'_, Ping>, out: &mut Outbox<Ping>) {
        self.wake(ctx.now.time, out);
        while let Some(next) = self.next()
            && out.run_ahead_to(next)
        {
            self.log.lock().unwrap().ran_ahead += 1;
            self.wake(next, out);
        }
    }
}

/// Wakes every `period` µs, `wakes` times, doing nothing else: other events that cut a run.
struct Pacer {
    period: u64,
    wakes: u64,
}

impl Actor<Ping> for Pacer {
    fn time_advance(&self) -> TimeAdvance {
        if self.wakes > 0 {
            TimeAdvance::After(SimDuration::from_micros(self.period))
        } else {
            TimeAdvance::Passive
        }
    }

    fn transition(&mut self, _: &Context, event: Event<'_, Ping>, _: &mut Outbox<Ping>) {
        if !matches!(event, Event::External(_)) {
            self.wakes -= 1;
        }
    }
}

/// Takes pings.
struct Sink;

impl Actor<Ping> for Sink {
    fn time_advance(&self) -> TimeAdvance {
        TimeAdvance::Passive
    }

    fn transition(&mut self, _: &Context, _: Event<'_, Ping>, _: &mut Outbox<Ping>) {}
}

/// A stepper (detached, every 3 µs, 60 wakes, a ping every 7th) beside a pacer every 20 µs,
/// 4 times, and the pings' sink: runs ahead cut by the pacer, by pings and by the end.
fn assembly(halt_at: Option<u64>, log: &Arc<Mutex<Log>>) -> Assembly<Ping> {
    let mut assembly = Assembly::new();
    let stepper = assembly.declare("stepper").unwrap();
    let sink = assembly.add("sink", Sink).unwrap();
    assembly.install_detached(stepper, Stepper::new(sink, halt_at, log)).unwrap();
    assembly.add("pacer", Pacer { period: 20, wakes: 4 }).unwrap();
    assembly
}

/// The run one round at a time (a slice of one round leaves none spare to run ahead): each
/// round's instant, the log and the counts.
fn stepped(halt_at: Option<u64>) -> (Vec<Instant>, Log, blis_kernel::RunStats) {
    let log = Arc::new(Mutex::new(Log::default()));
    let mut sim = assembly(halt_at, &log).build(HostKind::Inline).unwrap();
    let mut instants = Vec::new();
    loop {
        let end = sim.run_rounds(SimTime::MAX, 1).unwrap();
        if matches!(end, Some(RunEnd::Quiescent { .. })) {
            break;
        }
        instants.push(sim.now());
        if end.is_some() {
            break;
        }
    }
    let log = log.lock().unwrap().clone();
    (instants, log, sim.stats())
}

#[test]
fn a_run_ahead_makes_the_transitions_and_counts_of_a_round_at_a_time() {
    let (instants, by_step, step_stats) = stepped(None);
    assert_eq!(by_step.ran_ahead, 0, "a round at a time leaves nothing to run ahead");
    assert_eq!(by_step.transitions, (1..=60).map(|wake| 3 * wake).collect::<Vec<u64>>());
    // `step` runs the full round, which offers no run ahead either.
    let log = Arc::new(Mutex::new(Log::default()));
    let mut by_full_rounds = assembly(None, &log).build(HostKind::Inline).unwrap();
    while by_full_rounds.step().unwrap().is_some() {}
    assert_eq!(*log.lock().unwrap(), by_step);
    assert_eq!(by_full_rounds.stats(), step_stats);
    let log = Arc::new(Mutex::new(Log::default()));
    let mut sim = assembly(None, &log).build(HostKind::Inline).unwrap();
    let last = instants.last().unwrap().time;
    assert_eq!(sim.run().unwrap(), RunEnd::Quiescent { at: last });
    let by_run = log.lock().unwrap().clone();
    assert_eq!(by_run.transitions, by_step.transitions);
    assert_eq!(sim.stats(), step_stats);
    // The stepper is alone between the pacer's wakes and the pings' deliveries.
    assert!(by_run.ran_ahead > 30, "ran ahead {} times", by_run.ran_ahead);
}

#[test]
fn slices_of_rounds_end_where_a_round_at_a_time_does() {
    let (instants, by_step, _) = stepped(None);
    for slice in [1u64, 2, 3, 5, 8] {
        let log = Arc::new(Mutex::new(Log::default()));
        let mut sim = assembly(None, &log).build(HostKind::Inline).unwrap();
        let mut rounds = 0u64;
        while sim.run_rounds(SimTime::MAX, slice).unwrap().is_none() {
            rounds += slice;
            assert_eq!(sim.stats().rounds, rounds, "slice {slice}");
            assert_eq!(sim.now(), instants[rounds as usize - 1], "slice {slice} after {rounds} rounds");
        }
        let slices = instants.len() as u64 / slice;
        assert_eq!(rounds, slices * slice, "slice {slice}: every full slice ended as a slice");
        assert_eq!(sim.stats().rounds, instants.len() as u64, "slice {slice}");
        assert_eq!(log.lock().unwrap().transitions, by_step.transitions, "slice {slice}");
        if slice > 1 {
            assert!(log.lock().unwrap().ran_ahead > 0, "slice {slice} ran ahead");
        }
    }
}

#[test]
fn a_horizon_stops_a_run_ahead_where_a_round_at_a_time_stops() {
    for horizon in [0, 2, 3, 4, 19, 20, 21, 45, 100] {
        let log = Arc::new(Mutex::new(Log::default()));
        let mut sim = assembly(None, &log).build(HostKind::Inline).unwrap();
        let end = sim.run_until(SimTime::from_micros(horizon)).unwrap();
        assert_eq!(end, RunEnd::Horizon { at: SimTime::from_micros(horizon) });
        let expected: Vec<u64> = (1..=horizon / 3).map(|wake| 3 * wake).collect();
        assert_eq!(log.lock().unwrap().transitions, expected, "horizon {horizon}");
        let rounds_up_to_horizon = stepped(None).0.iter().filter(|i| i.time.as_micros() <= horizon).count();
        assert_eq!(sim.stats().rounds, rounds_up_to_horizon as u64, "horizon {horizon}");
    }
}

#[test]
fn a_halt_ends_a_run_ahead_at_the_halting_transition() {
    let (instants, by_step, step_stats) = stepped(Some(11));
    let log = Arc::new(Mutex::new(Log::default()));
    let mut sim = assembly(Some(11), &log).build(HostKind::Inline).unwrap();
    let end = sim.run().unwrap();
    let reason = "wake 11".to_owned();
    assert_eq!(end, RunEnd::Halted { at: SimTime::from_micros(33), actor: "stepper".into(), reason });
    assert_eq!(log.lock().unwrap().transitions, by_step.transitions);
    assert_eq!(sim.stats(), step_stats);
    assert_eq!(sim.now(), *instants.last().unwrap());
}

/// Sees every transition.
#[derive(Default)]
struct Watcher {
    stepper_transitions: u64,
}

impl Observer<Ping> for Watcher {
    fn on_transition(&mut self, record: &TransitionRecord<'_>) {
        if record.name == "stepper" {
            self.stepper_transitions += 1;
        }
    }
}

/// Sees only the attached actors.
struct BlindWatcher;

impl Observer<Ping> for BlindWatcher {
    fn blind_to_detached(&self) -> bool {
        true
    }
}

#[test]
fn only_a_detached_actor_unwatched_on_the_inline_host_runs_ahead() {
    // An observer that must see every transition sees every one of the stepper's.
    let log = Arc::new(Mutex::new(Log::default()));
    let mut sim = assembly(None, &log).build(HostKind::Inline).unwrap();
    sim.observe(Watcher::default());
    sim.run().unwrap();
    let watcher = sim.finish().take_observer::<Watcher>(0).unwrap();
    assert_eq!(watcher.stepper_transitions, 60);
    assert_eq!(log.lock().unwrap().ran_ahead, 0);
    // One blind to detached actors leaves the offer standing.
    let log = Arc::new(Mutex::new(Log::default()));
    let mut sim = assembly(None, &log).build(HostKind::Inline).unwrap();
    sim.observe(BlindWatcher);
    sim.run().unwrap();
    assert!(log.lock().unwrap().ran_ahead > 0);
    // The parity host runs each actor's round as a task of its own, one round at a time.
    let log = Arc::new(Mutex::new(Log::default()));
    let mut sim = assembly(None, &log).build(HostKind::Tasks).unwrap();
    sim.run().unwrap();
    assert_eq!(log.lock().unwrap().ran_ahead, 0);
    assert_eq!(log.lock().unwrap().transitions, stepped(None).1.transitions);
    // An attached actor is never offered one.
    let log = Arc::new(Mutex::new(Log::default()));
    let mut plain = Assembly::new();
    let sink = plain.add("sink", Sink).unwrap();
    plain.add("stepper", Stepper::new(sink, None, &log)).unwrap();
    plain.build(HostKind::Inline).unwrap().run().unwrap();
    assert_eq!(log.lock().unwrap().ran_ahead, 0);
}
