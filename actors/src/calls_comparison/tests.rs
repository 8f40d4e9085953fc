//! Two hand-made files with every statistic worked out by hand (all values below 2,048 µs, where
//! the registry's histogram percentiles are exact), mismatches refused by their first
//! difference, and an aggregate reference.

use blis_contracts::{
    CALLS_SCHEMA, CallRecord, CallsFile, CallsHeader, Fate, ServedPool, ServingSettings, Writer,
};

use super::*;

fn header(writer: Writer) -> CallsHeader {
    CallsHeader {
        calls: CALLS_SCHEMA.into(),
        writer,
        blis_actor_version: "0.1.0".into(),
        server: None,
        pools: vec![ServedPool {
            model: "Llama-3.1-8B".into(),
            chip: "H100-SXM".into(),
            serving: ServingSettings {
                engine: "vllm".into(),
                engine_version: "0.15.1".into(),
                replicas: 1,
                tensor_parallel_size: 1,
                max_num_seqs: 256,
                max_num_batched_tokens: 8192,
                max_model_len: 4096,
                block_size: 16,
                enable_prefix_caching: true,
                enable_chunked_prefill: true,
                gpu_memory_utilization: 0.9,
                scheduling_policy: "fcfs".into(),
            },
        }],
        workload_sha256: "w".into(),
    }
}

fn call(id: &str, arrival_us: u64, latency: &[u64]) -> CallRecord {
    CallRecord {
        replication: 0,
        request_id: id.into(),
        request: id.into(),
        node: "llm".into(),
        parents: Vec::new(),
        client: "c".into(),
        arrival_us,
        input_tokens: 100,
        output_tokens: latency.len() as u32,
        instance: "engine/p-0".into(),
        cached_tokens: 0,
        preemptions: 0,
        fate: Fate::Completed,
        settled_us: Some(arrival_us + latency.iter().sum::<u64>()),
        token_latency_us: latency.to_vec(),
        request_e2e_us: Some(latency.iter().sum()),
        disaggregated: None,
    }
}

/// A: TTFT 1000, 800, 600, 1200 µs; B: 1100, 800, 900, 1000 µs (written in another order).
fn files() -> (CallsFile, CallsFile) {
    let a = CallsFile {
        header: header(Writer::Baseline),
        calls: vec![
            call("r1", 0, &[1000, 200, 300]),
            call("r2", 1000, &[800, 400]),
            call("r3", 2000, &[600]),
            call("r4", 3000, &[1200, 100]),
        ],
    };
    let b = CallsFile {
        header: header(Writer::Run),
        calls: vec![
            call("r4", 3000, &[1000, 100]),
            call("r3", 2000, &[900]),
            call("r2", 1000, &[800, 600]),
            call("r1", 0, &[1100, 200, 300]),
        ],
    };
    (a, b)
}

fn runs(a: CallsFile, b: CallsFile) -> Vec<(String, Run)> {
    vec![("A".into(), Run::Calls(a)), ("B".into(), Run::Calls(b))]
}

fn close(got: Option<f64>, want: f64) -> bool {
    got.is_some_and(|g| (g - want).abs() <= 1e-9 * want.abs().max(1.0))
}

#[test]
fn every_statistic_of_two_hand_made_files_is_the_one_worked_out_by_hand() {
    let (a, b) = files();
    let comparison = compare_runs(&runs(a, b), &DEFAULT_PERCENTILES).unwrap();
    // metric: (A's mean, p50, p95, p99), (B's), ms. Nearest rank on 4 values: p50 is the 2nd,
    // p95 and p99 the 4th; on 3 values the 2nd and the 3rd.
    let latency: [(&str, [f64; 4], [f64; 4]); 6] = [
        ("ttft_ms", [0.9, 0.8, 1.2, 1.2], [0.95, 0.9, 1.1, 1.1]),
        // TPOT of the calls with 2 tokens or more: A 250, 400, 100; B 250, 600, 100 µs.
        ("tpot_ms", [0.25, 0.25, 0.4, 0.4], [0.95 / 3.0, 0.25, 0.6, 0.6]),
        // Gaps: A 200, 300, 400, 100; B 200, 300, 600, 100 µs.
        ("itl_ms", [0.25, 0.2, 0.4, 0.4], [0.3, 0.2, 0.6, 0.6]),
        ("e2e_ms", [1.15, 1.2, 1.5, 1.5], [1.25, 1.1, 1.6, 1.6]),
        // E2E / tokens: A 500, 600, 600, 650; B 533⅓ (533 in the histogram), 700, 900, 550 µs.
        ("normalized_e2e_ms", [0.5875, 0.6, 0.65, 0.65], [(1600.0 / 3.0 + 2150.0) / 4_000.0, 0.55, 0.9, 0.9]),
        ("request_e2e_ms", [1.15, 1.2, 1.5, 1.5], [1.25, 1.1, 1.6, 1.6]),
    ];
    let mut checked = 0;
    for (id, want_a, want_b) in latency {
        for (k, statistic) in ["mean", "p50", "p95", "p99"].iter().enumerate() {
            let row = comparison.rows.iter().find(|r| r.metric == id && r.statistic == *statistic).unwrap();
            let [(va, ea), (vb, eb)] = [row.values[0], row.values[1]];
            assert!(close(va, want_a[k]) && ea.is_none(), "{id} {statistic}: A = {va:?}");
            assert!(close(vb, want_b[k]), "{id} {statistic}: B = {vb:?}, want {}", want_b[k]);
            assert!(close(eb, (want_b[k] - want_a[k]) / want_a[k]), "{id} {statistic}: error {eb:?}");
            checked += 1;
        }
    }
    // Run-wide: A's last completion is r4 at 4,300 µs, B's r4 at 4,100 µs; 8 tokens, 4 calls.
    for (id, want_a, want_b) in [
        ("makespan_s", 0.0043, 0.0041),
        ("output_tokens_per_s", 8.0 / 0.0043, 8.0 / 0.0041),
        ("requests_per_s", 4.0 / 0.0043, 4.0 / 0.0041),
    ] {
        let row = comparison.rows.iter().find(|r| r.metric == id).unwrap();
        assert_eq!(row.statistic, "value");
        assert!(close(row.values[0].0, want_a) && close(row.values[1].0, want_b), "{id}: {row:?}");
        assert!(close(row.values[1].1, (want_b - want_a) / want_a), "{id}: {row:?}");
        checked += 1;
    }
    assert_eq!((checked, comparison.rows.len()), (27, 27), "every row checked");
    assert!((comparison.rows.iter()).all(|r| r.unit == metric(r.metric).unwrap().unit));

    // Paired, B − A per call (ms): (MAE, bias, MAPE %, WAPE %).
    let mape = |pairs: &[(f64, f64)]| {
        pairs.iter().map(|(r, o)| ((o - r) / r).abs()).sum::<f64>() / pairs.len() as f64 * 100.0
    };
    let e2e = [(1.5, 1.6), (1.2, 1.4), (0.6, 0.9), (1.3, 1.1)];
    let normalized = [(0.5, 1.6 / 3.0), (0.6, 0.7), (0.6, 0.9), (0.65, 0.55)];
    let paired: [(&str, usize, f64, f64, f64, f64); 6] = [
        // TTFT differences +100, 0, +300, −200 µs over 3,600 µs of reference.
        ("ttft_ms", 4, 0.15, 0.05, (0.1 + 0.0 + 0.5 + 200.0 / 1200.0) / 4.0 * 100.0, 600.0 / 3600.0 * 100.0),
        // TPOT pairs r1, r2, r4: 0, +200, 0 µs over 750 µs.
        ("tpot_ms", 3, 0.2 / 3.0, 0.2 / 3.0, 0.5 / 3.0 * 100.0, 200.0 / 750.0 * 100.0),
        // Gaps pair by position: only r2's 400 → 600 µs differs, over 1,000 µs.
        ("itl_ms", 4, 0.05, 0.05, 12.5, 20.0),
        ("e2e_ms", 4, 0.2, 0.1, mape(&e2e), 0.8 / 4.6 * 100.0),
        (
            "normalized_e2e_ms",
            4,
            (1.6 / 3.0 - 0.5 + 0.1 + 0.3 + 0.1) / 4.0,
            (1.6 / 3.0 - 0.5 + 0.1 + 0.3 - 0.1) / 4.0,
            mape(&normalized),
            (1.6 / 3.0 - 0.5 + 0.1 + 0.3 + 0.1) / 2.35 * 100.0,
        ),
        ("request_e2e_ms", 4, 0.2, 0.1, mape(&e2e), 0.8 / 4.6 * 100.0),
    ];
    assert_eq!(comparison.paired.len(), paired.len());
    for (id, pairs, mae, bias, mape_percent, wape_percent) in paired {
        let p = comparison.paired.iter().find(|p| p.metric == id).unwrap();
        assert_eq!((p.run.as_str(), p.pairs), ("B", pairs), "{id}");
        assert!(close(Some(p.mae), mae) && close(Some(p.bias), bias), "{id}: {p:?}");
        assert!(close(p.mape_percent, mape_percent) && close(p.wape_percent, wape_percent), "{id}: {p:?}");
    }
    let p90 = compare_runs(&runs(files().0, files().1), &[90.0]).unwrap();
    assert_eq!(
        p90.rows.iter().filter(|r| r.metric == "ttft_ms").map(|r| r.statistic.as_str()).collect::<Vec<_>>(),
        ["mean", "p90"]
    );
}

#[test]
fn other_work_is_refused_naming_its_first_difference() {
    let refused = |edit: &dyn Fn(&mut CallsFile)| {
        let (a, mut b) = files();
        edit(&mut b);
        compare_runs(&runs(a, b), &DEFAULT_PERCENTILES).unwrap_err()
    };
    let e = refused(&|b| b.calls[2].input_tokens = 120);
    assert_eq!((e.path.as_str(), e.value.as_deref()), ("B.calls[r2].input_tokens", Some("120")));
    assert!(e.cause.contains("the reference A has 100"), "{e}");
    let e = refused(&|b| b.calls[0].arrival_us = 3500);
    assert_eq!(e.path, "B.calls[r4].arrival_us");
    let e = refused(&|b| b.calls[1].output_tokens = 2);
    assert_eq!(e.path, "B.calls[r3].output_tokens");
    let e = refused(&|b| b.calls[3].parents = vec!["x".into()]);
    assert_eq!(e.path, "B.calls[r1].parents");
    let e = refused(&|b| {
        b.calls.remove(1);
    });
    assert!(e.path == "B.calls[r3]" && e.cause.contains("missing"), "{e}");
    let e = refused(&|b| b.calls.push(call("r5", 4000, &[10])));
    assert!(e.path == "B.calls[r5]" && e.cause.contains("not in the reference"), "{e}");
    let e = refused(&|b| b.calls.push(call("r1", 0, &[10])));
    assert!(e.cause.contains("appears twice"), "{e}");
    // A later node's arrival depends on how fast its parents ran: only roots are checked.
    let (mut a, mut b) = files();
    for (file, at) in [(&mut a, 1_700), (&mut b, 1_900)] {
        let mut child = call("r1/b", at, &[50]);
        child.parents = vec!["llm".into()];
        file.calls.push(child);
    }
    assert!(compare_runs(&runs(a, b), &DEFAULT_PERCENTILES).is_ok());
    let e = refused(&|b| b.header.pools[0].serving.max_num_batched_tokens = 2048);
    assert_eq!(
        (e.path.as_str(), e.value.as_deref()),
        ("B:1.pools[0].serving.max_num_batched_tokens", Some("2048"))
    );
    let (a, b) = files();
    let e = compare_runs(&runs(a, b), &[50.0, 0.0]).unwrap_err();
    assert_eq!(e.path, "--percentiles[1]");
    let (a, _) = files();
    assert!(compare_runs(&[("A".into(), Run::Calls(a))], &DEFAULT_PERCENTILES).is_err());
}

#[test]
fn an_inference_perf_summary_is_a_reference_on_the_statistics_it_holds() {
    let summary = r#"{"load_summary":{"count":4},"successes":{"count":4,
        "latency":{"time_to_first_token":{"mean":0.0009,"median":0.0008,"p95":0.0012},
                   "request_latency":{"mean":0.00115,"median":0.0012,"p99":0.0015}},
        "throughput":{"output_tokens_per_sec":2000.0,"requests_per_sec":1000.0}},
        "failures":{"count":0}}"#;
    let reference = AggregateReference::parse("real.json", summary).unwrap();
    let (_, b) = files();
    let runs = vec![("real".to_owned(), Run::Aggregate(reference.clone())), ("B".to_owned(), Run::Calls(b))];
    let comparison = compare_runs(&runs, &DEFAULT_PERCENTILES).unwrap();
    let row = |id: &str, statistic: &str| {
        comparison.rows.iter().find(|r| r.metric == id && r.statistic == statistic).unwrap()
    };
    assert!(close(row("ttft_ms", "mean").values[0].0, 0.9));
    assert!(close(row("ttft_ms", "p50").values[1].1, (0.9 - 0.8) / 0.8));
    assert!(close(row("ttft_ms", "p95").values[1].1, (1.1 - 1.2) / 1.2));
    assert_eq!(row("ttft_ms", "p99").values[0], (None, None), "not published");
    assert!(close(row("e2e_ms", "p99").values[1].1, (1.6 - 1.5) / 1.5));
    assert!(close(row("output_tokens_per_s", "value").values[1].1, (8.0 / 0.0041 - 2000.0) / 2000.0));
    assert_eq!(row("makespan_s", "value").values[0].0, None);
    assert!(comparison.paired.is_empty() && !comparison.notes.is_empty());
    let (a, _) = files();
    let backwards = vec![("A".to_owned(), Run::Calls(a)), ("real".to_owned(), Run::Aggregate(reference))];
    assert!(
        compare_runs(&backwards, &DEFAULT_PERCENTILES).unwrap_err().cause.contains("only be the reference")
    );
    assert!(AggregateReference::parse("x.json", "{}").is_err());
}
