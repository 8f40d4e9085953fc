//! Random substreams: a new stream or a new draw never shifts another stream.

use blis_kernel::toys::mm1::{self, Job, Mm1Config};
use blis_kernel::{
    Actor, Assembly, Context, Event, HostKind, Outbox, SimDuration, Streams, Substream, TimeAdvance,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_stream_draws_the_same_whatever_other_streams_do(
        seed in any::<u64>(),
        name in "[a-z/]{0,12}",
        others in prop::collection::vec(("[a-z/]{0,12}", 0usize..20), 0..6),
    ) {
        let streams = Streams::new(seed);
        let alone: Vec<u64> = {
            let mut s = streams.stream(&name, "purpose", "entity");
            (0..32).map(|_| s.next_u64()).collect()
        };
        let mut target = streams.stream(&name, "purpose", "entity");
        let mut interleaved = Vec::new();
        for (other, draws) in &others {
            let mut o = streams.stream(other, "purpose", "other-entity");
            for _ in 0..*draws {
                o.next_u64();
            }
            interleaved.push(target.next_u64());
        }
        interleaved.extend((interleaved.len()..32).map(|_| target.next_u64()));
        prop_assert_eq!(interleaved, alone);
    }
}

/// An actor that only draws random numbers from its own substream, every 3 µs.
struct Noise {
    stream: Substream,
    left: u32,
}

impl Actor<Job> for Noise {
    fn time_advance(&self) -> TimeAdvance {
        if self.left > 0 { TimeAdvance::After(SimDuration::from_micros(3)) } else { TimeAdvance::Passive }
    }

    fn transition(&mut self, _: &Context, _: Event<'_, Job>, _: &mut Outbox<Job>) {
        self.stream.exponential(5.0);
        self.left -= 1;
    }
}

#[test]
fn adding_an_actor_with_its_own_draws_leaves_a_model_unchanged() {
    let config = Mm1Config { mean_gap_us: 1_000.0, mean_service_us: 700.0, jobs: 2_000 };
    let waits = |with_noise: bool| {
        let streams = Streams::new(11);
        let mut assembly = Assembly::new();
        let ids = mm1::assemble(&mut assembly, config, streams).unwrap();
        if with_noise {
            assembly
                .add("a-noise", Noise { stream: streams.stream("noise", "draw", ""), left: 1_000 })
                .unwrap();
        }
        let mut sim = assembly.build(HostKind::Inline).unwrap();
        sim.run().unwrap();
        sim.finish().take_actor::<mm1::Server>(ids.server).unwrap().waits_us().to_vec()
    };
    let plain = waits(false);
    assert_eq!(plain.len(), 2_000);
    assert_eq!(waits(true), plain);
}
