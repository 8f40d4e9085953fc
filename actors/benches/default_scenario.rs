//! Simulated requests per wall second for the default scenario (3,000 requests, two vLLM
//! instances on H100), without and with a timeline being written. Figures in
//! `docs/PERFORMANCE.md`.

use std::hint::black_box;

use blis_actors::{RunOptions, run, run_observed, timeline_group};
use blis_costmodel::CostData;
use blis_kernel::timeline::{TimelineFilter, TimelineWriter};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const DEFAULT: &str = include_str!("../../fixtures/scenarios/default.yaml");

/// One replication on one thread: the figure is the cost of one simulated run.
fn one() -> RunOptions {
    RunOptions { replications: Some(1), threads: Some(1), ..RunOptions::default() }
}

fn default_scenario(c: &mut Criterion) {
    let requests = run(DEFAULT, one(), &mut |_| {}).expect("the default scenario runs").calls.len();
    let mut group = c.benchmark_group("scenario/default");
    group.throughput(Throughput::Elements(requests as u64));
    group.sample_size(20);
    group.bench_function("inline", |b| {
        b.iter(|| black_box(run(DEFAULT, one(), &mut |_| {}).expect("the default scenario runs")))
    });
    group.bench_function("inline-traced", |b| {
        b.iter(|| {
            let writer = TimelineWriter::new(
                std::io::sink(),
                TimelineFilter::default(),
                Box::new(timeline_group),
                &[],
            );
            black_box(
                run_observed(DEFAULT, one(), &CostData::embedded(), vec![Box::new(writer)], &mut |_| {})
                    .expect("the default scenario runs"),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, default_scenario);
criterion_main!(benches);
