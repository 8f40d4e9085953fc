//! Kernel throughput: messages per wall second through a 64-actor randomised mesh, on each
//! host. Figures and the machine they came from are in `docs/PERFORMANCE.md`.

use std::hint::black_box;

use blis_kernel::toys::mesh::{self, MeshConfig};
use blis_kernel::{Assembly, HostKind, Simulation, Streams};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const CONFIG: MeshConfig = MeshConfig { nodes: 64, ticks: 2_000, hops: 3 };

fn build(host: HostKind) -> Simulation<mesh::Token> {
    let mut assembly = Assembly::new();
    mesh::assemble(&mut assembly, CONFIG, Streams::new(1)).expect("the mesh assembles");
    assembly.build(host).expect("the mesh builds")
}

fn messages_per_run() -> u64 {
    let mut sim = build(HostKind::Inline);
    sim.run().expect("the mesh runs");
    sim.stats().messages
}

fn hosts(c: &mut Criterion) {
    let messages = messages_per_run();
    let mut group = c.benchmark_group("kernel/mesh-64");
    group.throughput(Throughput::Elements(messages));
    group.sample_size(10);
    for (label, host) in [("inline", HostKind::Inline), ("tasks", HostKind::Tasks)] {
        group.bench_function(label, |b| {
            b.iter_batched(
                || build(host),
                |mut sim| black_box(sim.run().expect("the mesh runs")),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, hosts);
criterion_main!(benches);
