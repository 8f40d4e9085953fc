//! The port's field list against vLLM 0.15.1's `EngineArgs`: every argument is listed once, in
//! the release's order, every modelled one is read by `VllmArgs`, every refused one is refused by
//! name with its reason, and `FIELDS.md` is the rendering of the list.
//!
//! `UPDATE_FIELDS=1 cargo test -p blis-engines --test vllm_fields` rewrites `FIELDS.md`.

use blis_contracts::yaml;
use blis_engines::vllm::{ARGUMENTS, Treatment, VllmArgs};

const RELEASE_ARGUMENTS: &str = include_str!("../src/vllm/engine_args_0.15.1.txt");
#[path = "support/fields_table.rs"]
mod fields_table;

const FIELDS_MD: &str = "src/vllm/FIELDS.md";

#[test]
fn every_argument_of_the_release_is_listed_once_in_its_order() {
    let release: Vec<&str> = RELEASE_ARGUMENTS.lines().filter(|l| !l.is_empty()).collect();
    let listed: Vec<&str> = ARGUMENTS.iter().map(|(name, _)| *name).collect();
    assert_eq!(listed, release);
    assert_eq!(release.len(), 161);
}

fn parse(args: &str) -> Result<VllmArgs, blis_contracts::FieldError> {
    VllmArgs::from_yaml(&yaml::from_str(args).expect("valid YAML"), "args")
}

#[test]
fn modelled_arguments_are_read_and_refused_ones_are_named_with_their_reason() {
    for &(name, treatment) in ARGUMENTS {
        let result = parse(&format!("{{{name}: ~}}"));
        match treatment {
            Treatment::Modelled | Treatment::Limited { .. } => {
                assert!(result.is_ok(), "{name}: {:?}", result.err())
            }
            Treatment::Inert { sample, .. } => {
                let parsed =
                    parse(&format!("{{{name}: {sample}}}")).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(parsed, VllmArgs::default(), "{name} is dropped");
            }
            Treatment::Refused { why } => {
                let error = parse(&format!("{{{name}: 2}}")).expect_err(name);
                assert_eq!(error.path, format!("args.{name}"));
                assert_eq!(error.value.as_deref(), Some("2"));
                assert!(error.cause.contains(why) && error.cause.contains("does not model"), "{error}");
            }
        }
    }
    let unknown = parse("{max_num_seq: 4}").unwrap_err();
    assert_eq!(unknown.path, "args.max_num_seq");
    assert!(unknown.cause.contains("unknown field"), "{unknown}");
}

/// FIELDS.md as the list renders it.
fn render() -> String {
    let mut out = String::from(
        "# vLLM 0.15.1 engine arguments in the port\n\n\
         Generated from `fields.rs` by `engines/tests/vllm_fields.rs` (run it with `UPDATE_FIELDS=1`\n\
         to rewrite this file). Every field of the release's `EngineArgs` dataclass\n\
         (`engine_args_0.15.1.txt`), in its order, is one of:\n\n\
         - **modelled**: read and simulated; defaults resolve as `vllm serve` resolves them\n  \
         (`args.rs`, tested in `vllm_engine.rs` and `actors/tests/bad_input.rs`);\n\
         - **modelled in part**: modelled at the values named; any other value is refused with the\n  \
         field's path, the value and the reason;\n\
         - **inert**: accepted and ignored because it cannot change a simulated result;\n  \
         `actors/tests/inert_arguments.rs` sets each to the sample value shown and checks that the\n  \
         result and calls are byte-identical to a run without it;\n\
         - **refused**: setting it fails with the field's path, the value and the reason.\n\n\
         Names the release does not have are refused as unknown fields.\n\n\
         Known deviations of modelled fields:\n\n\
         - `prefix_caching_hash_algo`: decisions do not depend on the hash function, so every\n  \
         value is accepted; block hashes in KV events are always computed with `sha256_cbor`\n  \
         (`sha256` pickles Python objects, which has no portable byte recipe).\n\n\
         ## Known upstream stalls\n\
         \n\
         Two stalls of vLLM 0.15.1 are ported exactly, and the simulated instance declares a livelock\n\
         after 16 × `max_model_len` steps without a sampled token (empty steps count unless a KV transfer\n\
         is under way), so the run stops with that message instead of running forever:\n\
         \n\
         - `scheduling_policy: priority`: requests of equal priority and arrival time preempt each other\n  \
         forever when the cache holds only one of them (recorded from vLLM itself in\n  \
         `traces/vllm-0.15.1/priority-livelock*.jsonl`).\n\
         - A NIXL decode instance with too few blocks: requests whose KV has been read, or is parked\n  \
         waiting for it, hold their prompts' blocks while the head of the queue cannot get the blocks\n  \
         it needs; it preempts itself or is never admitted, and the instance polls forever (recorded as\n  \
         `traces/vllm-0.15.1/nixl-d-stall-*.jsonl`; the cluster test\n  \
         `actors/tests/disaggregation.rs::a_decode_instance_that_livelocks_as_vllm_does_stops_the_run_naming_it`).\n\
         \n\
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
        "{} is stale: run UPDATE_FIELDS=1 cargo test -p blis-engines --test vllm_fields",
        path.display()
    );
}
