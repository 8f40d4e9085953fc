//! The Kubernetes manifests of `docs/DISTRIBUTED.md` validated offline against the
//! Kubernetes API schema: each document is deserialised into its `k8s-openapi` type
//! (`batch/v1` Job, `v1` PersistentVolumeClaim; the crate's `latest` API version), which checks
//! every field's type and the required fields, and serialised back: a field the type does not
//! know is dropped by the round trip, so any difference is an unknown field and is refused
//! (deny-unknown-fields semantics). The doc must hold the files as they are.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::Value;

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../docs/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Paths in `given` that `typed` lacks or holds differently.
fn unknown(given: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    match (given, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                match b.get(key) {
                    Some(other) => unknown(value, other, &format!("{path}.{key}"), out),
                    None => out.push(format!("{path}.{key}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                unknown(x, y, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a == b => {}
        _ => out.push(path.to_owned()),
    }
}

/// Validate one manifest document; the error names what is wrong.
fn validate(document: &str) -> Result<String, String> {
    let yaml: blis_contracts::yaml::YamlValue =
        blis_contracts::yaml::from_str(document).map_err(|e| e.to_string())?;
    let given = blis_contracts::yaml::to_json(&yaml, "").map_err(|e| e.to_string())?;
    let kind = given["kind"].as_str().unwrap_or_default().to_owned();
    let typed = match (given["apiVersion"].as_str(), kind.as_str()) {
        (Some("batch/v1"), "Job") => serde_json::to_value(
            serde_json::from_value::<Job>(given.clone()).map_err(|e| format!("Job: {e}"))?,
        ),
        (Some("v1"), "PersistentVolumeClaim") => serde_json::to_value(
            serde_json::from_value::<PersistentVolumeClaim>(given.clone())
                .map_err(|e| format!("PVC: {e}"))?,
        ),
        other => return Err(format!("no schema for {other:?}")),
    }
    .unwrap();
    let mut fields = Vec::new();
    unknown(&given, &typed, "", &mut fields);
    if fields.is_empty() { Ok(kind) } else { Err(format!("unknown fields: {}", fields.join(", "))) }
}

/// The documents of a multi-document YAML file.
fn documents(text: &str) -> Vec<String> {
    text.split("\n---\n").map(str::to_owned).collect()
}

#[test]
fn the_indexed_job_and_its_merge_are_valid_kubernetes_objects() {
    let sweep = read("distributed/sweep-indexed-job.yaml");
    let kinds: Vec<String> = documents(&sweep).iter().map(|d| validate(d).unwrap()).collect();
    assert_eq!(kinds, ["PersistentVolumeClaim", "Job"]);
    let merge = read("distributed/merge-job.yaml");
    assert_eq!(validate(&merge).unwrap(), "Job");
    // The sweep is Indexed, its completions are the shards blis-actor is told, and every pod
    // mounts the claim.
    let job: Job = serde_json::from_value(
        blis_contracts::yaml::to_json(&blis_contracts::yaml::from_str(&documents(&sweep)[1]).unwrap(), "")
            .unwrap(),
    )
    .unwrap();
    let spec = job.spec.unwrap();
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    let completions = spec.completions.unwrap();
    let pod = spec.template.spec.unwrap();
    let command = pod.containers[0].command.as_ref().unwrap().join(" ");
    assert!(command.contains(&format!("--shards {completions} ")), "{command}");
    assert!(command.contains("$JOB_COMPLETION_INDEX"), "{command}");
    let claim = pod.volumes.unwrap()[0].persistent_volume_claim.as_ref().unwrap().claim_name.clone();
    assert_eq!(claim, "blis-sweep-data");
}

#[test]
fn an_unknown_or_mistyped_field_is_refused() {
    let sweep = read("distributed/sweep-indexed-job.yaml");
    let job = documents(&sweep)[1].clone();
    let typo = job.replace("completionMode: Indexed", "completionsMode: Indexed");
    assert_eq!(validate(&typo).unwrap_err(), "unknown fields: .spec.completionsMode");
    let mistyped = job.replace("completions: 4", "completions: four");
    assert!(
        validate(&mistyped).unwrap_err().starts_with("Job: invalid type: string \"four\""),
        "{}",
        validate(&mistyped).unwrap_err()
    );
    let nested = job.replace("mountPath: /data", "mountpath: /data");
    let e = validate(&nested).unwrap_err();
    assert!(e.contains(".spec.template.spec.containers[0].volumeMounts[0].mountpath"), "{e}");
}

#[test]
fn the_doc_holds_the_manifests_and_the_batch_script_as_they_are() {
    let doc = read("DISTRIBUTED.md");
    for file in
        ["distributed/sweep-array.sbatch", "distributed/sweep-indexed-job.yaml", "distributed/merge-job.yaml"]
    {
        assert!(doc.contains(&read(file)), "docs/DISTRIBUTED.md does not hold {file} as it is");
    }
}
