//! The port's field list against SGLang 0.5.23's `ServerArgs`: every field is listed once, in the
//! release's order, every modelled one is read by `SglangArgs`, every refused one is refused by
//! name with its reason, and `FIELDS.md` is the rendering of the list. The inert ones are proven
//! inert in `actors/tests/sglang_cluster.rs`.
//!
//! `UPDATE_FIELDS=1 cargo test -p blis-engines --test sglang_fields` rewrites `FIELDS.md`.

use blis_contracts::yaml;
use blis_engines::sglang::SglangArgs;
use blis_engines::sglang::fields::{ARGUMENTS, Treatment};

const RELEASE_ARGUMENTS: &str = include_str!("../src/sglang/server_args_0.5.23.txt");
#[path = "support/fields_table.rs"]
mod fields_table;

const FIELDS_MD: &str = "src/sglang/FIELDS.md";

#[test]
fn every_field_of_the_release_is_listed_once_in_its_order() {
    let release: Vec<&str> = RELEASE_ARGUMENTS.lines().filter(|l| !l.is_empty()).collect();
    let listed: Vec<&str> = ARGUMENTS.iter().map(|(name, _)| *name).collect();
    assert_eq!(listed, release);
    assert_eq!(release.len(), 546);
}

fn parse(args: &str) -> Result<SglangArgs, blis_contracts::FieldError> {
    SglangArgs::from_yaml(&yaml::from_str(args).expect("valid YAML"), "args")
}

#[test]
fn modelled_fields_are_read_and_refused_ones_are_named_with_their_reason() {
    let mut modelled = 0;
    for &(name, treatment) in ARGUMENTS {
        let result = parse(&format!("{{{name}: ~}}"));
        match treatment {
            Treatment::Modelled | Treatment::Limited { .. } => {
                assert!(result.is_ok(), "{name}: {:?}", result.err());
                modelled += 1;
            }
            Treatment::Inert { sample, .. } => {
                let parsed =
                    parse(&format!("{{{name}: {sample}}}")).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(parsed, SglangArgs::default(), "{name} is dropped");
            }
            Treatment::Refused { why } => {
                let error = parse(&format!("{{{name}: 2}}")).expect_err(name);
                assert_eq!(error.path, format!("args.{name}"));
                assert_eq!(error.value.as_deref(), Some("2"));
                assert!(error.cause.contains(why) && error.cause.contains("does not model"), "{error}");
            }
        }
    }
    assert_eq!(modelled, 22);
    let unknown = parse("{max_num_seqs: 4}").unwrap_err();
    assert_eq!(unknown.path, "args.max_num_seqs");
    assert!(unknown.cause.contains("unknown field"), "{unknown}");
}

/// FIELDS.md as the list renders it.
fn render() -> String {
    let mut out = String::from(
        "# SGLang 0.5.23 server arguments in the port\n\n\
         Generated from `fields.rs` by `engines/tests/sglang_fields.rs` (run it with `UPDATE_FIELDS=1`\n\
         to rewrite this file). Every field of the release's `ServerArgs` struct\n\
         (`server_args_0.5.23.txt`, dumped from the installed release), in its order, is one of:\n\n\
         - **modelled**: read and simulated; unset ones resolve as the release resolves them for the\n  \
         GPU and the model (`args.rs`, `plan.rs`, `defaults.rs`; tested in `sglang_defaults.rs` and\n  \
         `actors/tests/sglang_cluster.rs`);\n\
         - **modelled in part**: modelled at the values named; any other value is refused with the\n  \
         field's path, the value and the reason;\n\
         - **inert**: accepted and ignored because it cannot change a simulated result;\n  \
         `actors/tests/sglang_cluster.rs::inert_arguments_change_nothing` sets each to the sample\n  \
         value shown and checks that the result and calls are byte-identical to a run without it;\n\
         - **refused**: setting it fails with the field's path, the value and the reason. Fields\n  \
         marked \"not yet shown inert\" are very likely inert but have no proving test yet.\n\n\
         Names the release does not have are refused as unknown fields.\n\n\
         Known deviations of modelled fields:\n\n\
         - The GPU memory the defaults read (`handle_gpu_memory_settings`) is the catalog's\n  \
         capacity, which is what torch reports (81090 MiB on H100-SXM), not `nvidia-smi`'s total\n  \
         (81559 MiB): `mem_fraction_static` resolves to 0.829 where a real H100 resolves 0.830.\n\
         - The KV pool's budget is `(total − the memory the cost model puts outside torch) ×\n  \
         mem_fraction_static − weights`, upstream's rule with the free memory it measures before\n  \
         loading the weights taken from the cost model.\n\
         - Requests end by length (outputs come from the workload, as with `ignore_eos`).\n\
         - `random`'s shuffles come from the instance's named substream of the run seed, not the\n  \
         process-wide generator `random_seed` seeds.\n\
         - The gauges (`sglang:num_running_reqs`, `num_queue_reqs`, `token_usage`,\n  \
         `cache_hit_rate`, `new_token_ratio`) update as upstream reports them: when a prefill or\n  \
         mixed batch's result is processed (with the running count, hit rate and ratio its pass\n  \
         saw), every `decode_log_interval` decode results (with that batch's size), and when the\n  \
         server falls idle; a scrape reads the last report.\n\
         - A prompt of at least `max_req_input_len` tokens is refused when the scheduler takes it;\n  \
         upstream queues it as a one-token prefill and answers 400 with that prefill's result.\n\n\
         ## Arguments\n\n\
         | argument | treatment | why / sample |\n|---|---|---|\n",
    );
    fields_table::rows(ARGUMENTS, &mut out);
    out
}

#[test]
fn fields_md_is_the_rendering_of_the_list() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FIELDS_MD);
    let rendered = render();
    if std::env::var_os("UPDATE_FIELDS").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "{} is stale: run UPDATE_FIELDS=1 cargo test -p blis-engines --test sglang_fields",
        path.display()
    );
}
