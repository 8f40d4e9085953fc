//! The ordering invariant: every bag is sorted by `(time, class, sender, send_count)`, where the
//! sender's place comes from its name, whatever order actors were assembled in.

use std::cell::RefCell;
use std::rc::Rc;

use blis_kernel::{
    Actor, ActorId, Assembly, Context, Event, HostKind, Message, MessageClass, Outbox, SimDuration,
    TimeAdvance,
};
use proptest::prelude::*;

#[derive(Clone, Debug, PartialEq)]
struct Tagged {
    class: u16,
    tag: u32,
}

impl Message for Tagged {
    fn class(&self) -> MessageClass {
        MessageClass(self.class)
    }
}

/// Emits its whole list at time zero, in list order.
struct Burst {
    to: ActorId,
    messages: Vec<(u16, u64, u32)>,
    fired: bool,
}

impl Actor<Tagged> for Burst {
    fn time_advance(&self) -> TimeAdvance {
        if self.fired { TimeAdvance::Passive } else { TimeAdvance::After(SimDuration::ZERO) }
    }

    fn output(&self, _: &Context, out: &mut Outbox<Tagged>) {
        for &(class, delay, tag) in &self.messages {
            out.send(self.to, SimDuration::from_micros(delay), Tagged { class, tag });
        }
    }

    fn transition(&mut self, _: &Context, _: Event<'_, Tagged>, _: &mut Outbox<Tagged>) {
        self.fired = true;
    }
}

/// One delivered message as the receiver saw it: (time µs, round, class, sender name, send count, tag).
type Seen = (u64, u32, u16, String, u64, u32);

struct Receiver {
    names: Vec<(ActorId, String)>,
    bags: Rc<RefCell<Vec<Vec<Seen>>>>,
}

impl Actor<Tagged> for Receiver {
    fn time_advance(&self) -> TimeAdvance {
        TimeAdvance::Passive
    }

    fn transition(&mut self, _: &Context, event: Event<'_, Tagged>, _: &mut Outbox<Tagged>) {
        let Event::External(bag) = event else { panic!("the receiver never wakes by itself") };
        let seen = bag
            .map(|e| {
                let name = self.names.iter().find(|(id, _)| *id == e.sender).unwrap().1.clone();
                (e.key.time.as_micros(), e.round, e.payload.class, name, e.key.send_count, e.payload.tag)
            })
            .collect();
        self.bags.borrow_mut().push(seen);
    }
}

fn run(senders: &[Vec<(u16, u64, u32)>], declaration_order: &[usize], host: HostKind) -> Vec<Vec<Seen>> {
    let mut assembly = Assembly::new();
    let receiver = assembly.declare("receiver").unwrap();
    let mut names = Vec::new();
    for &i in declaration_order {
        let name = format!("sender-{i}");
        let id = assembly
            .add(name.clone(), Burst { to: receiver, messages: senders[i].clone(), fired: false })
            .unwrap();
        names.push((id, name));
    }
    let bags = Rc::new(RefCell::new(Vec::new()));
    assembly.install(receiver, Receiver { names, bags: bags.clone() }).unwrap();
    let mut sim = assembly.build(host).unwrap();
    sim.run().unwrap();
    bags.take()
}

fn senders_strategy() -> impl Strategy<Value = Vec<Vec<(u16, u64, u32)>>> {
    prop::collection::vec(prop::collection::vec((0u16..4, 0u64..3, any::<u32>()), 0..12), 1..7)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn bags_are_sorted_by_the_key_and_independent_of_assembly_order(
        senders in senders_strategy(),
        shuffle in any::<u64>(),
    ) {
        let forward: Vec<usize> = (0..senders.len()).collect();
        let mut permuted = forward.clone();
        // A deterministic shuffle of the declaration order.
        let mut state = shuffle | 1;
        for i in (1..permuted.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            permuted.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let reference = run(&senders, &forward, HostKind::Inline);
        let total: usize = senders.iter().map(Vec::len).sum();
        prop_assert_eq!(reference.iter().map(Vec::len).sum::<usize>(), total);
        for bag in &reference {
            // One bag per instant, all of it due at that instant.
            prop_assert!(bag.windows(2).all(|w| (w[0].0, w[0].1) == (w[1].0, w[1].1)));
            // Sorted by (class, sender name, send count), strictly.
            let keys: Vec<_> = bag.iter().map(|s| (s.2, s.3.clone(), s.4)).collect();
            prop_assert!(keys.windows(2).all(|w| w[0] < w[1]), "bag out of order: {:?}", keys);
        }
        // Zero delay lands in round 1 of time 0; delay d in round 0 of time d.
        for bag in &reference {
            let (time, round) = (bag[0].0, bag[0].1);
            prop_assert_eq!(round, u32::from(time == 0));
        }
        prop_assert_eq!(&run(&senders, &permuted, HostKind::Inline), &reference);
        prop_assert_eq!(&run(&senders, &permuted, HostKind::Tasks), &reference);
    }
}

#[test]
fn classes_order_before_senders_and_senders_by_name() {
    // sender-0 sends class 1 then class 0; sender-1 sends class 0 twice. All at time 5.
    let senders = vec![vec![(1, 5, 10), (0, 5, 11)], vec![(0, 5, 20), (0, 5, 21)]];
    let bags = run(&senders, &[1, 0], HostKind::Inline);
    let order: Vec<u32> = bags[0].iter().map(|s| s.5).collect();
    assert_eq!(order, vec![11, 20, 21, 10]);
}
