//! Generating synthetic requests: time per request for a plain client and a session client,
//! and the peak memory after streaming 1,000,000 requests (which stays flat: the source yields
//! one request at a time). Figures in `docs/PERFORMANCE.md`.

use std::hint::black_box;

use blis_actors::workload::{RequestSource, Synthetic};
use blis_contracts::{ClientSpec, yaml};
use blis_kernel::Streams;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const PLAIN: &str = r#"
name: chat
requests: 1000000
arrival: { process: gamma, rate_per_s: 50, cv: 2 }
shared_prefix: { groups: 16, tokens: 500 }
input_tokens: { dist: lognormal, mean: 600, std: 400, min: 1, max: 8000 }
output_tokens: { dist: normal, mean: 200, std: 60, min: 1, max: 1000 }
timeout_s: 60
"#;

const SESSIONS: &str = r#"
name: sessions
requests: 1000000
arrival: { process: poisson, rate_per_s: 50 }
input_tokens: { dist: uniform, min: 50, max: 500 }
output_tokens: { dist: exponential, mean: 150, min: 1, max: 1000 }
session: { turns: { dist: uniform, min: 1, max: 6 }, think_time_s: { dist: exponential, mean: 4 } }
"#;

/// Peak resident memory of this process so far, KiB (Linux `VmHWM`).
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn generation(c: &mut Criterion) {
    let mut group = c.benchmark_group("workload/generate");
    for (name, text) in [("plain", PLAIN), ("sessions", SESSIONS)] {
        let spec: ClientSpec = yaml::from_str(text).expect("a valid client");
        let before = peak_kib();
        let mut source = Synthetic::new(&spec, None, Streams::new(1));
        let mut count = 0u64;
        while let Some(planned) = source.next_request() {
            black_box(&planned);
            count += 1;
        }
        println!("{name}: streamed {count} requests; peak RSS {before} KiB before, {} KiB after", peak_kib());
        group.throughput(Throughput::Elements(10_000));
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut source = Synthetic::new(&spec, None, Streams::new(1));
                for _ in 0..10_000 {
                    black_box(source.next_request());
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, generation);
criterion_main!(benches);
