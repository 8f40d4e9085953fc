//! Every vLLM argument the port lists as inert is proven so: setting it to a non-default sample
//! value leaves the result (but for the scenario's own text) and every call byte-identical.

mod common;

use blis_actors::{RunOptions, RunOutput, run};
use blis_engines::vllm::{ARGUMENTS, Treatment};

fn base() -> String {
    common::one_pool(
        Some(9),
        None,
        1,
        "max_model_len: 4096 ARG",
        r#"
  clients:
    - name: a
      requests: 30
      arrival: { process: poisson, rate_per_s: 40 }
      shared_prefix: { groups: 2, tokens: 300 }
      input_tokens: { dist: uniform, min: 10, max: 600 }
      output_tokens: { dist: uniform, min: 1, max: 60 }
"#,
    )
}

/// The run's outputs as bytes, without the scenario text that names the argument.
fn comparable(mut output: RunOutput) -> (String, String) {
    output.result.scenario.given.clear();
    let calls: Vec<String> = output.calls.iter().map(|c| serde_json::to_string(c).unwrap()).collect();
    (serde_json::to_string(&output.result).unwrap(), calls.join("\n"))
}

#[test]
fn inert_arguments_change_nothing() {
    let baseline = comparable(run(&base().replace(" ARG", ""), RunOptions::default(), &mut |_| {}).unwrap());
    let mut proven = 0;
    for &(name, treatment) in ARGUMENTS {
        let Treatment::Inert { sample, .. } = treatment else { continue };
        let text = base().replace(" ARG", &format!(", {name}: {sample}"));
        let output = run(&text, RunOptions::default(), &mut |_| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(comparable(output) == baseline, "{name}: {sample} changed the run");
        proven += 1;
    }
    assert!(proven >= 40, "{proven} inert arguments");
}
