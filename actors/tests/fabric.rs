//! The fabric: transfers over shared links at max-min fair rates, through the actor and on the
//! bare state machine, and the refusals of a misconfigured `cluster.fabric`.

use blis_actors::fabric::{FabricActor, Flows, Topology};
use blis_actors::{ClusterMessage, TransferStart};
use blis_contracts::{Endpoint, FabricSpec, Scenario};
use blis_costmodel::Catalog;
use blis_kernel::{
    Actor, ActorId, Assembly, Context, Event, HostKind, Outbox, SimDuration, SimTime, TimeAdvance,
};
use proptest::prelude::*;

/// Sends transfers to the fabric at set times and records when each is reported done.
struct Probe {
    fabric: ActorId,
    plan: Vec<(u64, TransferStart)>,
    done: Vec<(u64, u64)>,
    last: SimTime,
}

impl Actor<ClusterMessage> for Probe {
    fn time_advance(&self) -> TimeAdvance {
        match self.plan.first() {
            Some((at, _)) => TimeAdvance::until(self.last, SimTime::from_micros(*at)),
            None => TimeAdvance::Passive,
        }
    }

    fn transition(
        &mut self,
        ctx: &Context,
        event: Event<'_, ClusterMessage>,
        out: &mut Outbox<ClusterMessage>,
    ) {
        let now = ctx.now.time.as_micros();
        if let Event::External(bag) | Event::Confluent(bag) = event {
            for envelope in bag {
                if let ClusterMessage::TransferDone(done) = envelope.payload {
                    self.done.push((done.id, now));
                }
            }
        }
        while self.plan.first().is_some_and(|(at, _)| *at == now) {
            let (_, start) = self.plan.remove(0);
            out.send(self.fabric, SimDuration::ZERO, ClusterMessage::TransferStart(Box::new(start)));
        }
        self.last = ctx.now.time;
    }
}

fn topology(spec: &FabricSpec) -> Topology {
    Topology::resolve(spec, &Catalog::embedded(), "cluster.fabric").unwrap()
}

/// Run `plan` (start time, id, from, to, bytes) through a fabric actor; returns (id, done time).
fn run(spec: &FabricSpec, plan: &[(u64, u64, Endpoint, Endpoint, u64)]) -> Vec<(u64, u64)> {
    let mut assembly = Assembly::new();
    let fabric = assembly.declare("fabric").unwrap();
    let probe = assembly.declare("probe").unwrap();
    assembly.install(fabric, FabricActor::new(topology(spec))).unwrap();
    let plan =
        plan.iter().map(|&(at, id, from, to, bytes)| (at, TransferStart { id, from, to, bytes })).collect();
    assembly.install(probe, Probe { fabric, plan, done: Vec::new(), last: SimTime::ZERO }).unwrap();
    let mut sim = assembly.build(HostKind::Inline).unwrap();
    sim.run().unwrap();
    let mut done = sim.finish().take_actor::<Probe>(probe).unwrap().done;
    done.sort();
    done
}

const GPU0: Endpoint = Endpoint::Gpus { first: 0, count: 1 };
const HOST0: Endpoint = Endpoint::Host { node: 0 };
/// 64 MB: 1,000 µs alone on a PCIe Gen5 x16 direction (64 GB/s).
const MB64: u64 = 64_000_000;

fn no_latency() -> FabricSpec {
    FabricSpec { hop_latency_us: 0, ..FabricSpec::default() }
}

#[test]
fn two_equal_transfers_sharing_a_link_finish_together_at_twice_the_solo_time() {
    let spec = no_latency();
    assert_eq!(run(&spec, &[(0, 1, GPU0, HOST0, MB64)]), vec![(1, 1_000)]);
    // Both stores leave GPU 0 over its one PCIe up direction.
    assert_eq!(
        run(&spec, &[(0, 1, GPU0, HOST0, MB64), (0, 2, GPU0, HOST0, MB64)]),
        vec![(1, 2_000), (2, 2_000)]
    );
    // Opposite directions do not share: a load and a store each run alone.
    assert_eq!(
        run(&spec, &[(0, 1, GPU0, HOST0, MB64), (0, 2, HOST0, GPU0, MB64)]),
        vec![(1, 1_000), (2, 1_000)]
    );
}

#[test]
fn a_transfer_starting_midway_slows_the_first_exactly_as_max_min_says() {
    // A alone drains 32 MB by 500 µs; then A and B get 32 GB/s each: A's last 32 MB take 1,000
    // µs (done at 1,500), by when B has 32 MB of its 64; alone again, B's rest takes 500 µs.
    let done = run(&no_latency(), &[(0, 1, GPU0, HOST0, MB64), (500, 2, GPU0, HOST0, MB64)]);
    assert_eq!(done, vec![(1, 1_500), (2, 2_000)]);
}

#[test]
fn a_two_link_path_is_bound_by_the_slower_link() {
    // GPU 0 of node 0 to GPU 0 of node 1: PCIe (64 GB/s), NIC out (50 GB/s), NIC in, PCIe: the
    // 400 Gb/s NIC bounds it, 64 MB in 1,280 µs; plus 4 hops of 1 µs before the bytes flow.
    let spec = FabricSpec { nodes: 2, ..FabricSpec::default() };
    let remote = Endpoint::Gpus { first: 8, count: 1 };
    assert_eq!(run(&spec, &[(0, 1, GPU0, remote, MB64)]), vec![(1, 1_284)]);
    // A GPU to its host memory: PCIe then DRAM (614.4 GB/s), bound by PCIe; 2 hops.
    assert_eq!(run(&FabricSpec::default(), &[(0, 1, GPU0, HOST0, MB64)]), vec![(1, 1_002)]);
}

#[test]
fn a_tensor_parallel_end_moves_its_share_over_each_gpus_own_link() {
    // TP 2: each GPU moves 32 MB over its own PCIe, so the store takes half the time.
    let tp2 = Endpoint::Gpus { first: 0, count: 2 };
    assert_eq!(run(&no_latency(), &[(0, 1, tp2, HOST0, MB64)]), vec![(1, 500)]);
}

#[test]
fn progressive_filling_gives_the_unbottlenecked_flow_what_is_left() {
    // Link 0 (10 B/µs) carries f1 and f2; link 1 (4 B/µs) carries f2 and f3. Link 1 is the
    // bottleneck: f2 = f3 = 2. f1 is then alone on what is left of link 0: 8, not an equal 5.
    let mut flows: Flows<u32> = Flows::new(vec![10.0, 4.0]);
    flows.start(0, 1, vec![(vec![0], 1_000)], 0).unwrap();
    flows.start(0, 2, vec![(vec![0, 1], 1_000)], 0).unwrap();
    flows.start(0, 3, vec![(vec![1], 1_000)], 0).unwrap();
    let rates: Vec<(u32, f64)> = flows.rates().into_iter().map(|(k, _, r)| (k, r)).collect();
    assert_eq!(rates, vec![(1, 8.0), (2, 2.0), (3, 2.0)]);
    // f1 ends at 125 µs; f2 and f3 still share link 1 (link 0 no longer binds f2).
    assert_eq!(flows.advance(125), vec![1]);
    let rates: Vec<(u32, f64)> = flows.rates().into_iter().map(|(k, _, r)| (k, r)).collect();
    assert_eq!(rates, vec![(2, 2.0), (3, 2.0)]);
    assert_eq!(flows.advance(10_000), vec![2, 3]);
    assert_eq!(flows.now_us(), 10_000);
    assert!(flows.is_empty());
}

#[test]
fn a_cancelled_transfer_gives_its_share_back_at_once() {
    let mut flows: Flows<u32> = Flows::new(vec![64_000.0]);
    flows.start(0, 1, vec![(vec![0], MB64)], 0).unwrap();
    flows.start(0, 2, vec![(vec![0], MB64)], 0).unwrap();
    // At 1,000 µs both have 32 MB left; 2 is dropped and 1 finishes its 32 MB alone.
    assert!(flows.cancel(1_000, &2).is_empty());
    assert_eq!(flows.next_event_us(), Some(1_500));
}

#[test]
fn misconfigured_fabrics_are_refused_with_path_value_and_cause() {
    let catalog = Catalog::embedded();
    let bad = |spec: FabricSpec| Topology::resolve(&spec, &catalog, "cluster.fabric").unwrap_err();
    let e = bad(FabricSpec { gpu_host: "pcie-gen9".to_owned(), ..FabricSpec::default() });
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("cluster.fabric.gpu_host", Some("pcie-gen9")));
    assert!(e.cause.contains("not in the catalog") && e.cause.contains("pcie-gen5-x16"), "{e}");
    let e = bad(FabricSpec { nic: "nvlink-4".to_owned(), ..FabricSpec::default() });
    assert_eq!(e.path, "cluster.fabric.nic");
    assert!(e.cause.contains("a gpu_gpu link kind, not nic"), "{e}");
    let e = bad(FabricSpec { host_memory: "pcie-gen5-x16".to_owned(), ..FabricSpec::default() });
    assert_eq!(e.path, "cluster.fabric.host_memory");
    let e = bad(FabricSpec { gpus_per_node: 0, ..FabricSpec::default() });
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("cluster.fabric.gpus_per_node", Some("0")));
    let e = bad(FabricSpec { nodes: 100_000, ..FabricSpec::default() });
    assert_eq!(e.path, "cluster.fabric.nodes");
    // In a scenario: unknown fields are refused by name, bounds by path.
    let scenario = |fabric: &str| {
        format!(
            "cluster:\n  router: {{policy: round-robin}}\n  fabric: {fabric}\n  pools:\n  - name: p\n    replicas: 1\n    \
             hardware: {{chip: H100-SXM}}\n    model: Llama-3.1-8B\n    engine: {{kind: vllm, version: 0.15.1}}\n\
             workload:\n  clients:\n  - name: c\n    requests: 1\n    arrival: {{process: poisson, rate_per_s: 1}}\n    \
             input_tokens: {{dist: constant, value: 10}}\n    output_tokens: {{dist: constant, value: 1}}\n"
        )
    };
    let e = Scenario::parse(&scenario("{gpus_per_node: 99}")).unwrap_err();
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("cluster.fabric.gpus_per_node", Some("99")));
    let e = Scenario::parse(&scenario("{switch: nvlink-4}")).unwrap_err();
    assert!(e.to_string().contains("switch"), "{e}");
    let parsed = Scenario::parse(&scenario("{nodes: 2, hop_latency_us: 3}")).unwrap();
    let fabric = parsed.cluster.fabric.unwrap();
    assert_eq!((fabric.nodes, fabric.gpus_per_node, fabric.hop_latency_us), (2, 8, 3));
}

/// One random transfer: start time, path over 4 links, bytes, latency.
fn transfer() -> impl Strategy<Value = (u64, Vec<usize>, u64, u64)> {
    (0u64..2_000, proptest::sample::subsequence(vec![0usize, 1, 2, 3], 1..=4), 1u64..5_000_000, 0u64..5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// After every event no link carries more than its capacity, and every transfer's bytes are
    /// conserved: what drained between two events is its rate times the time, nothing is lost
    /// or made, and each completes no sooner than its slowest link alone allows.
    #[test]
    fn bytes_are_conserved_and_no_link_is_ever_over_capacity(
        caps in proptest::collection::vec(100.0f64..10_000.0, 4),
        mut plan in proptest::collection::vec(transfer(), 1..12),
    ) {
        plan.sort_by_key(|t| t.0);
        let mut flows: Flows<usize> = Flows::new(caps.clone());
        let mut delivered = vec![0.0f64; plan.len()];
        let mut finished_at = vec![None; plan.len()];
        let mut next = 0;
        let mut now = 0u64;
        loop {
            let start_at = plan.get(next).map(|t| t.0);
            let event = match (start_at, flows.next_event_us()) {
                (None, None) => break,
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
            };
            prop_assert!(event >= now);
            // Between events rates are constant: bytes drained = rate × dt, capped at what was left.
            let before: Vec<(usize, f64)> = flows.bytes_left();
            let rates = flows.rates();
            let done = flows.advance(event);
            for (k, left) in &before {
                let rate: f64 = rates.iter().filter(|(r, _, _)| r == k).map(|(_, _, r)| r).sum();
                let after = flows.bytes_left().into_iter().find(|(a, _)| a == k).map_or(0.0, |(_, l)| l);
                let drained = left - after;
                prop_assert!(drained >= -1e-6, "bytes appeared");
                prop_assert!(drained <= rate * (event - now) as f64 + 1e-6 * plan[*k].2 as f64, "drained faster than its rate");
                delivered[*k] += drained;
            }
            for k in done {
                finished_at[k] = Some(event);
            }
            now = event;
            while plan.get(next).is_some_and(|t| t.0 == now) {
                let (_, path, bytes, latency) = plan[next].clone();
                for k in flows.start(now, next, vec![(path, bytes)], latency).unwrap() {
                    finished_at[k] = Some(now);
                }
                next += 1;
            }
            for (load, cap) in flows.link_loads().iter().zip(&caps) {
                prop_assert!(*load <= cap * (1.0 + 1e-9), "load {load} over capacity {cap}");
            }
        }
        for (k, (start, path, bytes, latency)) in plan.iter().enumerate() {
            prop_assert!((delivered[k] - *bytes as f64).abs() <= 1e-6 * *bytes as f64 + 1e-6, "transfer {k}: {} of {bytes}", delivered[k]);
            let slowest = path.iter().map(|&l| caps[l]).fold(f64::INFINITY, f64::min);
            let end = finished_at[k].expect("every transfer completes");
            prop_assert!(end as f64 >= (*start + *latency) as f64 + *bytes as f64 / slowest - 1e-9);
        }
    }
}
