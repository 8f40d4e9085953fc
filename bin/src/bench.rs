//! `blis-actor bench`: the performance targets' cases (`docs/PERFORMANCE.md`), each run once in
//! this process with its wall time and peak resident memory.
//!
//! The reference workload (issue 13): Llama-3.1-8B on one H100-SXM behind a round-robin router,
//! Poisson arrivals at 8 requests/s, 512 input and 128 output tokens, `max_num_seqs: 256`, every
//! other engine argument at vLLM 0.15.1's default (prefix caching, asynchronous scheduling, CUDA
//! graphs), one replication on one thread. The cluster cases put 8 such engines behind the
//! router at 308 requests/s, behind the round-robin router and behind llm-d's router with its
//! built-in default config (the `-llmd` cases). `calls.jsonl` is written in full for every case.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use blis_actors::{CallSelection, CallsDigest, RunOptions, run_observed};
use blis_costmodel::CostData;

/// One bench case.
struct Case {
    name: &'static str,
    engines: u32,
    rate_per_s: f64,
    requests: u64,
    prefix_caching: bool,
    threads: usize,
    /// llm-d's router with its built-in default config instead of round-robin.
    llmd: bool,
    /// SGLang 0.5.23 instances (`max_running_requests: 256`) instead of vLLM.
    sglang: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "reference-10",
        engines: 1,
        rate_per_s: 8.0,
        requests: 10,
        prefix_caching: true,
        threads: 1,
        llmd: false,
        sglang: false,
    },
    Case {
        name: "reference-10k",
        engines: 1,
        rate_per_s: 8.0,
        requests: 10_000,
        prefix_caching: true,
        threads: 1,
        llmd: false,
        sglang: false,
    },
    Case {
        name: "reference-100k",
        engines: 1,
        rate_per_s: 8.0,
        requests: 100_000,
        prefix_caching: true,
        threads: 1,
        llmd: false,
        sglang: false,
    },
    Case {
        name: "reference-100k-no-caching",
        engines: 1,
        rate_per_s: 8.0,
        requests: 100_000,
        prefix_caching: false,
        threads: 1,
        llmd: false,
        sglang: false,
    },
    Case {
        name: "reference-1m",
        engines: 1,
        rate_per_s: 8.0,
        requests: 1_000_000,
        prefix_caching: true,
        threads: 1,
        llmd: false,
        sglang: false,
    },
    Case {
        name: "cluster-8x-100k",
        engines: 8,
        rate_per_s: 308.0,
        requests: 100_000,
        prefix_caching: true,
        threads: 2,
        llmd: false,
        sglang: false,
    },
    Case {
        name: "cluster-8x-1m",
        engines: 8,
        rate_per_s: 308.0,
        requests: 1_000_000,
        prefix_caching: true,
        threads: 2,
        llmd: false,
        sglang: false,
    },
    Case {
        name: "cluster-8x-100k-llmd",
        engines: 8,
        rate_per_s: 308.0,
        requests: 100_000,
        prefix_caching: true,
        threads: 2,
        llmd: true,
        sglang: false,
    },
    Case {
        name: "cluster-8x-1m-llmd",
        engines: 8,
        rate_per_s: 308.0,
        requests: 1_000_000,
        prefix_caching: true,
        threads: 2,
        llmd: true,
        sglang: false,
    },
    Case {
        name: "reference-100k-sglang",
        engines: 1,
        rate_per_s: 8.0,
        requests: 100_000,
        prefix_caching: true,
        threads: 1,
        llmd: false,
        sglang: true,
    },
    Case {
        name: "reference-1m-sglang",
        engines: 1,
        rate_per_s: 8.0,
        requests: 1_000_000,
        prefix_caching: true,
        threads: 1,
        llmd: false,
        sglang: true,
    },
];

/// The scenario of `case`.
fn scenario(case: &Case) -> String {
    let caching = if case.prefix_caching { "" } else { ", enable_prefix_caching: false" };
    let router = if case.llmd { "config: {}" } else { "policy: round-robin" };
    let engine = if case.sglang {
        "kind: sglang\n        version: \"0.5.23\"\n        args: { max_running_requests: 256 }".to_owned()
    } else {
        format!("kind: vllm\n        version: \"0.15.1\"\n        args: {{ max_num_seqs: 256{caching} }}")
    };
    format!(
        "# blis-actor bench case {name}.\n\
         seed: 1\n\
         frame: {{ replications: 1 }}\n\
         cluster:\n  \
           network: {{ client_router_us: 500, router_engine_us: 100 }}\n  \
           router: {{ {router} }}\n  \
           pools:\n    \
             - name: h100\n      \
               replicas: {engines}\n      \
               hardware: {{ chip: H100-SXM }}\n      \
               model: Llama-3.1-8B\n      \
               engine:\n        \
                 {engine}\n\
         workload:\n  \
           clients:\n    \
             - name: chat\n      \
               requests: {requests}\n      \
               arrival: {{ process: poisson, rate_per_s: {rate} }}\n      \
               input_tokens: {{ dist: constant, value: 512 }}\n      \
               output_tokens: {{ dist: constant, value: 128 }}\n",
        name = case.name,
        router = router,
        engine = engine,
        engines = case.engines,
        requests = case.requests,
        rate = case.rate_per_s,
    )
}

/// The process's peak resident set, KiB, from `/proc/self/status` (`VmHWM`).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time this process has used (user and system), seconds, from `/proc/self/stat` (in
/// clock ticks of 1/100 s, the Linux default).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which is in parentheses): utime and stime are the
    // 12th and 13th of them.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Reset the peak resident set to the current one (Linux: `5` into `/proc/self/clear_refs`).
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Run `names` (every case when empty), or print their scenarios; results go to stdout, the
/// case's outputs under `out/<case>/`.
pub fn bench(names: &[String], print_scenario: bool, out: &Path) -> ExitCode {
    let mut cases = Vec::new();
    for name in names {
        match CASES.iter().find(|c| c.name == name) {
            Some(case) => cases.push(case),
            None => {
                let known: Vec<&str> = CASES.iter().map(|c| c.name).collect();
                eprintln!("error: bench case `{name}` is unknown; the cases are {}", known.join(", "));
                return ExitCode::from(2);
            }
        }
    }
    if cases.is_empty() {
        cases = CASES.iter().collect();
    }
    if print_scenario {
        for case in cases {
            print!("{}", scenario(case));
        }
        return ExitCode::SUCCESS;
    }
    #[allow(clippy::disallowed_methods, reason = "bench timing: the wall clock decides nothing simulated")]
    let load_start = std::time::Instant::now();
    let data = CostData::embedded();
    let load_ms = load_start.elapsed().as_secs_f64() * 1e3;
    println!("embedded catalog and registry loaded in {load_ms:.1} ms\n");
    println!(
        "| case | requests | threads | wall s | CPU s | µs (wall) per request | peak RSS MiB | engine steps |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for case in cases {
        let dir = out.join(case.name);
        if let Err(error) = std::fs::create_dir_all(&dir) {
            eprintln!("error: {}: {error}", dir.display());
            return ExitCode::from(1);
        }
        let options = RunOptions {
            threads: Some(case.threads),
            calls: CallSelection::All,
            calls_path: Some(dir.join("calls.jsonl")),
            // As `run` does without `--record`.
            calls_digest: CallsDigest::Skipped,
            ..RunOptions::default()
        };
        let text = scenario(case);
        let reset = reset_peak_rss();
        let cpu_before = cpu_seconds();
        #[allow(
            clippy::disallowed_methods,
            reason = "bench timing: the wall clock decides nothing simulated"
        )]
        let start = std::time::Instant::now();
        let outcome = run_observed(&text, options, &data, Vec::new(), &mut |_| {});
        let wall = start.elapsed().as_secs_f64();
        let cpu = match (cpu_before, cpu_seconds()) {
            (Some(before), Some(after)) => format!("{:.2}", after - before),
            _ => "n/a".to_owned(),
        };
        let output = match outcome {
            Ok((output, _)) => output,
            Err(error) => {
                eprintln!("error: bench case {}: {error}", case.name);
                return ExitCode::from(1);
            }
        };
        if let Err(error) = std::fs::write(dir.join("result.json"), output.result_json()) {
            eprintln!("error: {}: {error}", dir.display());
            return ExitCode::from(1);
        }
        let rss = match (reset, peak_rss_kib()) {
            (true, Some(kib)) => format!("{:.1}", kib as f64 / 1024.0),
            _ => "n/a".to_owned(),
        };
        let mut line = String::new();
        let _ = write!(
            line,
            "| {} | {} | {} | {wall:.3} | {cpu} | {:.2} | {rss} | {} |",
            case.name,
            output.result.fates.arrivals,
            case.threads,
            wall * 1e6 / case.requests as f64,
            output.result.simulation.engine_steps,
        );
        println!("{line}");
    }
    ExitCode::SUCCESS
}
