//! Round semantics of the coordinator, on both hosts: zero-delay chains, transient states,
//! confluent transitions, elapsed time, the round bound, horizons and halts.

use std::cell::RefCell;
use std::rc::Rc;

use blis_kernel::{
    Actor, ActorId, Assembly, Context, Event, HostKind, Instant, KernelError, Message, MessageClass,
    Observer, Outbox, RunEnd, SimDuration, SimTime, TimeAdvance, TransitionKind, TransitionRecord,
};

const HOSTS: [HostKind; 2] = [HostKind::Inline, HostKind::Tasks];

#[derive(Clone, Debug, PartialEq)]
struct Ping(u32);

impl Message for Ping {
    fn class(&self) -> MessageClass {
        MessageClass(0)
    }
}

/// Fires once after `delay`, sending `Ping(0)` to `to` (if any) with zero delay.
struct Starter {
    to: Option<ActorId>,
    delay: Option<SimDuration>,
}

impl Actor<Ping> for Starter {
    fn time_advance(&self) -> TimeAdvance {
        self.delay.map_or(TimeAdvance::Passive, TimeAdvance::After)
    }

    fn output(&self, _: &Context, out: &mut Outbox<Ping>) {
        if let Some(to) = self.to {
            out.send(to, SimDuration::ZERO, Ping(0));
        }
    }

    fn transition(&mut self, _: &Context, _: Event<'_, Ping>, _: &mut Outbox<Ping>) {
        self.delay = None;
    }
}

/// Forwards every ping to `next` with `delay`, if it has a next.
struct Relay {
    next: Option<ActorId>,
    delay: SimDuration,
}

impl Actor<Ping> for Relay {
    fn time_advance(&self) -> TimeAdvance {
        TimeAdvance::Passive
    }

    fn transition(&mut self, _: &Context, event: Event<'_, Ping>, out: &mut Outbox<Ping>) {
        if let (Event::External(bag), Some(next)) = (event, self.next) {
            for envelope in bag {
                out.send(next, self.delay, Ping(envelope.payload.0 + 1));
            }
        }
    }
}

/// One transition as recorded: actor name, instant, kind, elapsed time, bag size.
type Seen = (String, Instant, TransitionKind, SimDuration, usize);

/// Records every transition it is told about.
#[derive(Clone, Default)]
struct Recorder(Rc<RefCell<Vec<Seen>>>);

impl Observer<Ping> for Recorder {
    fn on_transition(&mut self, r: &TransitionRecord<'_>) {
        self.0.borrow_mut().push((r.name.to_owned(), r.now, r.kind, r.elapsed, r.bag_len));
    }
}

fn at(t: u64, round: u32) -> Instant {
    Instant { time: SimTime::from_micros(t), round }
}

#[test]
fn a_zero_delay_chain_of_k_actors_completes_in_k_rounds_at_one_time() {
    for host in HOSTS {
        for k in [1u32, 2, 5, 17] {
            let mut assembly = Assembly::new();
            let ids: Vec<ActorId> = (0..k).map(|i| assembly.declare(format!("a{i:02}")).unwrap()).collect();
            let starter = Starter { to: ids.get(1).copied(), delay: Some(SimDuration::from_micros(10)) };
            assembly.install(ids[0], starter).unwrap();
            for i in 1..k as usize {
                let next = ids.get(i + 1).copied();
                assembly.install(ids[i], Relay { next, delay: SimDuration::ZERO }).unwrap();
            }
            let mut sim = assembly.build(host).unwrap();
            let recorder = Recorder::default();
            sim.observe(recorder.clone());
            let end = sim.run().unwrap();
            assert_eq!(end, RunEnd::Quiescent { at: SimTime::from_micros(10) }, "{host:?} k={k}");
            assert_eq!(sim.stats().rounds, u64::from(k), "{host:?} k={k}");
            let log = recorder.0.borrow();
            let expected: Vec<(String, Instant)> = (0..k).map(|i| (format!("a{i:02}"), at(10, i))).collect();
            let seen: Vec<(String, Instant)> = log.iter().map(|(n, i, ..)| (n.clone(), *i)).collect();
            assert_eq!(seen, expected, "{host:?} k={k}");
        }
    }
}

/// Stays transient (time advance zero) for `left` rounds, then passive.
struct Transient {
    left: u32,
}

impl Actor<Ping> for Transient {
    fn time_advance(&self) -> TimeAdvance {
        if self.left > 0 { TimeAdvance::After(SimDuration::ZERO) } else { TimeAdvance::Passive }
    }

    fn transition(&mut self, _: &Context, _: Event<'_, Ping>, _: &mut Outbox<Ping>) {
        self.left -= 1;
    }
}

#[test]
fn transient_states_make_further_rounds_at_the_same_time() {
    for host in HOSTS {
        let mut assembly = Assembly::new();
        assembly.add("t", Transient { left: 4 }).unwrap();
        let mut sim = assembly.build(host).unwrap();
        let mut instants = Vec::new();
        while let Some(i) = sim.step().unwrap() {
            instants.push(i);
        }
        assert_eq!(instants, vec![at(0, 0), at(0, 1), at(0, 2), at(0, 3)], "{host:?}");
    }
}

/// Wakes every `period`, `wakes` times; messages do not move its wake-ups.
struct Periodic {
    period: SimDuration,
    next_in: SimDuration,
    wakes: u32,
}

impl Periodic {
    fn new(period_us: u64, wakes: u32) -> Periodic {
        let period = SimDuration::from_micros(period_us);
        Periodic { period, next_in: period, wakes }
    }
}

impl Actor<Ping> for Periodic {
    fn time_advance(&self) -> TimeAdvance {
        if self.wakes > 0 { TimeAdvance::After(self.next_in) } else { TimeAdvance::Passive }
    }

    fn transition(&mut self, ctx: &Context, event: Event<'_, Ping>, _: &mut Outbox<Ping>) {
        match event {
            Event::Internal | Event::Confluent(_) => {
                self.wakes -= 1;
                self.next_in = self.period;
            }
            Event::External(_) => {
                // Keep the same absolute wake-up: shorten the time advance by the elapsed time.
                self.next_in = SimDuration::from_micros(self.next_in.as_micros() - ctx.elapsed.as_micros());
            }
        }
    }
}

#[test]
fn transitions_are_internal_external_or_confluent_with_the_elapsed_time() {
    for host in HOSTS {
        let mut assembly = Assembly::new();
        let periodic = assembly.declare("periodic").unwrap();
        let relay = assembly.declare("relay").unwrap();
        assembly.install(periodic, Periodic::new(10, 2)).unwrap();
        // The starter fires at (2, 0); the relay gets the ping at (2, 1) and forwards it with
        // delay 4: external at 6 (elapsed 6 since time 0); then wakes at 10 and 20.
        assembly.install(relay, Relay { next: Some(periodic), delay: SimDuration::from_micros(4) }).unwrap();
        let starter = Starter { to: Some(relay), delay: Some(SimDuration::from_micros(2)) };
        assembly.add("starter", starter).unwrap();
        let mut sim = assembly.build(host).unwrap();
        let recorder = Recorder::default();
        sim.observe(recorder.clone());
        sim.run().unwrap();
        let log: Vec<_> = recorder.0.borrow().iter().filter(|r| r.0 == "periodic").cloned().collect();
        assert_eq!(
            log,
            vec![
                ("periodic".to_owned(), at(6, 0), TransitionKind::External, SimDuration::from_micros(6), 1),
                ("periodic".to_owned(), at(10, 0), TransitionKind::Internal, SimDuration::from_micros(4), 0),
                ("periodic".to_owned(), at(20, 0), TransitionKind::Internal, SimDuration::from_micros(10), 0),
            ],
            "{host:?}"
        );
    }
}

#[test]
fn a_message_landing_on_a_wake_up_makes_a_confluent_transition() {
    for host in HOSTS {
        let mut assembly = Assembly::new();
        let periodic = assembly.declare("periodic").unwrap();
        let relay = assembly.declare("relay").unwrap();
        assembly.install(periodic, Periodic::new(10, 1)).unwrap();
        assembly.install(relay, Relay { next: Some(periodic), delay: SimDuration::from_micros(7) }).unwrap();
        // Starter fires at 3 (round 0); the relay gets it at (3, 1) and forwards with delay 7:
        // it arrives at (10, 0), exactly when the periodic wakes.
        assembly
            .add("starter", Starter { to: Some(relay), delay: Some(SimDuration::from_micros(3)) })
            .unwrap();
        let mut sim = assembly.build(host).unwrap();
        let recorder = Recorder::default();
        sim.observe(recorder.clone());
        sim.run().unwrap();
        let log = recorder.0.borrow();
        let periodic_log: Vec<_> = log.iter().filter(|r| r.0 == "periodic").collect();
        assert_eq!(periodic_log.len(), 1);
        assert_eq!(periodic_log[0].1, at(10, 0));
        assert_eq!(periodic_log[0].2, TransitionKind::Confluent, "{host:?}");
        assert_eq!(periodic_log[0].4, 1);
    }
}

/// Sends one ping to `other` with zero delay on every message it receives, forever.
struct Echo {
    other: ActorId,
    serve: bool,
}

impl Actor<Ping> for Echo {
    fn time_advance(&self) -> TimeAdvance {
        if self.serve { TimeAdvance::After(SimDuration::from_micros(5)) } else { TimeAdvance::Passive }
    }

    fn output(&self, _: &Context, out: &mut Outbox<Ping>) {
        out.send(self.other, SimDuration::ZERO, Ping(0));
    }

    fn transition(&mut self, _: &Context, event: Event<'_, Ping>, out: &mut Outbox<Ping>) {
        self.serve = false;
        if let Event::External(bag) = event {
            for envelope in bag {
                out.send(self.other, SimDuration::ZERO, Ping(envelope.payload.0 + 1));
            }
        }
    }
}

#[test]
fn the_round_bound_fails_naming_the_actors() {
    for host in HOSTS {
        let mut assembly = Assembly::new();
        let ping = assembly.declare("ping").unwrap();
        let pong = assembly.declare("pong").unwrap();
        assembly.install(ping, Echo { other: pong, serve: true }).unwrap();
        assembly.install(pong, Echo { other: ping, serve: false }).unwrap();
        assembly.add("bystander", Transient { left: 0 }).unwrap();
        assembly.max_rounds_per_instant(50).unwrap();
        let mut sim = assembly.build(host).unwrap();
        let error = sim.run().unwrap_err();
        assert_eq!(
            error,
            KernelError::RoundLimit {
                time: SimTime::from_micros(5),
                bound: 50,
                actors: vec!["ping".to_owned()]
            },
            "{host:?}"
        );
        assert!(error.to_string().contains("ping"));
        assert!(error.to_string().contains("did not advance after 50 rounds"));
    }
}

#[test]
fn a_lone_actor_meets_the_round_bound_and_is_seen_as_any_other() {
    // An actor alone at its instant (no bag, nobody else due) takes the coordinator's short
    // round: the bound, the counts and what observers see are those of a full round.
    for host in HOSTS {
        let mut assembly = Assembly::new();
        assembly.add("alone", Transient { left: u32::MAX }).unwrap();
        assembly.max_rounds_per_instant(7).unwrap();
        let mut sim = assembly.build(host).unwrap();
        let recorder = Recorder::default();
        sim.observe(recorder.clone());
        let error = sim.run().unwrap_err();
        assert_eq!(
            error,
            KernelError::RoundLimit { time: SimTime::ZERO, bound: 7, actors: vec!["alone".to_owned()] },
            "{host:?}"
        );
        assert_eq!(sim.stats().rounds, 7, "{host:?}");
        assert_eq!(sim.stats().transitions, 7, "{host:?}");
        let seen = recorder.0.borrow();
        let expected: Vec<Seen> = (0..7)
            .map(|round| ("alone".to_owned(), at(0, round), TransitionKind::Internal, SimDuration::ZERO, 0))
            .collect();
        assert_eq!(*seen, expected, "{host:?}");
    }
}

/// Two periodic actors, a starter and a relay chain: rounds with one actor alone, with
/// several, with bags and with transient states.
fn mixed_assembly() -> Assembly<Ping> {
    let mut assembly = Assembly::new();
    let first = assembly.declare("relay-a").unwrap();
    let second = assembly.declare("relay-b").unwrap();
    assembly.install(first, Relay { next: Some(second), delay: SimDuration::from_micros(3) }).unwrap();
    assembly.install(second, Relay { next: None, delay: SimDuration::ZERO }).unwrap();
    assembly.add("starter", Starter { to: Some(first), delay: Some(SimDuration::from_micros(7)) }).unwrap();
    assembly.add("tick", Periodic::new(5, 9)).unwrap();
    assembly.add("tock", Periodic::new(15, 3)).unwrap();
    assembly.add("transient", Transient { left: 3 }).unwrap();
    assembly
}

#[test]
fn a_run_sees_the_transitions_and_counts_of_stepping_round_by_round() {
    // `run` takes the short round for an actor alone at its instant; `step` always takes the
    // full one. Both must make the same transitions, in the same order, with the same counts.
    for host in HOSTS {
        let stepped = Recorder::default();
        let mut by_step = mixed_assembly().build(host).unwrap();
        by_step.observe(stepped.clone());
        while by_step.step().unwrap().is_some() {}
        let ran = Recorder::default();
        let mut by_run = mixed_assembly().build(host).unwrap();
        by_run.observe(ran.clone());
        assert_eq!(by_run.run().unwrap(), RunEnd::Quiescent { at: by_step.now().time }, "{host:?}");
        assert_eq!(*ran.0.borrow(), *stepped.0.borrow(), "{host:?}");
        assert_eq!(by_run.stats(), by_step.stats(), "{host:?}");
        let lone = ran.0.borrow().iter().filter(|seen| seen.1.time == SimTime::from_micros(5)).count();
        assert_eq!(lone, 1, "tick is alone at 5 µs: {host:?}");
        assert!(by_run.stats().rounds < by_run.stats().transitions, "some rounds hold several actors");
    }
}

#[test]
fn the_horizon_stops_before_later_events_and_the_run_can_resume() {
    for host in HOSTS {
        let mut assembly = Assembly::new();
        assembly.add("periodic", Periodic::new(10, 3)).unwrap();
        let mut sim = assembly.build(host).unwrap();
        assert_eq!(
            sim.run_until(SimTime::from_micros(15)).unwrap(),
            RunEnd::Horizon { at: SimTime::from_micros(15) }
        );
        assert_eq!(sim.now(), at(10, 0));
        assert_eq!(sim.next_instant(), Some(at(20, 0)));
        assert_eq!(sim.run().unwrap(), RunEnd::Quiescent { at: SimTime::from_micros(30) });
    }
}

/// Halts the run at its first wake-up.
struct Halter;

impl Actor<Ping> for Halter {
    fn time_advance(&self) -> TimeAdvance {
        TimeAdvance::After(SimDuration::from_micros(7))
    }

    fn transition(&mut self, _: &Context, _: Event<'_, Ping>, out: &mut Outbox<Ping>) {
        out.halt("enough");
    }
}

#[test]
fn an_actor_can_halt_the_run_with_a_reason() {
    for host in HOSTS {
        let mut assembly = Assembly::new();
        assembly.add("halter", Halter).unwrap();
        let mut sim = assembly.build(host).unwrap();
        assert_eq!(
            sim.run().unwrap(),
            RunEnd::Halted {
                at: SimTime::from_micros(7),
                actor: "halter".to_owned(),
                reason: "enough".to_owned()
            }
        );
    }
}

#[test]
fn sending_to_an_unknown_actor_is_an_error_naming_the_sender() {
    for host in HOSTS {
        let mut assembly = Assembly::new();
        assembly
            .add("starter", Starter { to: Some(ActorId(9)), delay: Some(SimDuration::from_micros(1)) })
            .unwrap();
        let mut sim = assembly.build(host).unwrap();
        assert_eq!(
            sim.run().unwrap_err(),
            KernelError::UnknownReceiver { sender: "starter".to_owned(), to: ActorId(9) }
        );
    }
}

#[test]
fn assembly_refuses_duplicate_empty_and_missing_actors() {
    let mut assembly: Assembly<Ping> = Assembly::new();
    assembly.declare("a").unwrap();
    assert_eq!(assembly.declare("a"), Err(blis_kernel::AssemblyError::DuplicateName("a".to_owned())));
    assert_eq!(assembly.declare(""), Err(blis_kernel::AssemblyError::EmptyName));
    assert_eq!(assembly.max_rounds_per_instant(0), Err(blis_kernel::AssemblyError::ZeroRoundBound));
    assert!(matches!(
        assembly.build(HostKind::Inline),
        Err(blis_kernel::AssemblyError::NotInstalled(name)) if name == "a"
    ));
}

#[test]
fn finished_runs_hand_back_actors_by_type() {
    for host in HOSTS {
        let mut assembly = Assembly::new();
        let id = assembly.add("t", Transient { left: 3 }).unwrap();
        let mut sim = assembly.build(host).unwrap();
        sim.run().unwrap();
        let mut finished = sim.finish();
        assert!(finished.take_actor::<Halter>(id).is_none());
        assert_eq!(finished.take_actor::<Transient>(id).map(|t| t.left), Some(0));
    }
}

/// What the clock published during a transition, beside the transition's own instant.
type ClockReading = (Option<Instant>, Instant);

/// Records the simulated time the clock module publishes while it transitions.
struct ClockReader {
    seen: Rc<RefCell<Vec<ClockReading>>>,
    left: u32,
}

impl Actor<Ping> for ClockReader {
    fn time_advance(&self) -> TimeAdvance {
        if self.left > 0 { TimeAdvance::After(SimDuration::from_micros(3)) } else { TimeAdvance::Passive }
    }

    fn transition(&mut self, ctx: &Context, _: Event<'_, Ping>, _: &mut Outbox<Ping>) {
        self.left -= 1;
        self.seen.borrow_mut().push((blis_kernel::clock::simulated_now(), ctx.now));
    }
}

#[test]
fn logs_can_read_the_simulated_time_of_the_round_on_both_hosts() {
    for host in HOSTS {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let mut assembly = Assembly::new();
        assembly.add("clock", ClockReader { seen: seen.clone(), left: 4 }).unwrap();
        let mut sim = assembly.build(host).unwrap();
        sim.run().unwrap();
        sim.finish();
        assert_eq!(blis_kernel::clock::simulated_now(), None, "cleared when the run is finished");
        let seen = seen.borrow();
        assert_eq!(seen.len(), 4);
        assert!(seen.iter().all(|(published, now)| *published == Some(*now)), "{host:?}: {seen:?}");
    }
}
