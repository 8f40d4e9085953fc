//! The byte-identity check the routing integration tests share: the same scenario gives the
//! same `result.json` and `calls.jsonl` on either host and with any thread count.

use std::path::PathBuf;

use blis_actors::{RunOptions, run};
use blis_kernel::HostKind;

/// `text`'s `result.json` and `calls.jsonl` (inline host, one thread), after asserting that two
/// threads and the tasks host give the same bytes; files it names are read from `base_dir`.
pub fn identical_across_hosts_and_threads(text: &str, base_dir: Option<PathBuf>) -> (Vec<u8>, Vec<u8>) {
    let with = |host: HostKind, threads: usize| {
        let options =
            RunOptions { host, threads: Some(threads), base_dir: base_dir.clone(), ..RunOptions::default() };
        let out = run(text, options, &mut |_| {}).unwrap();
        (out.result_json(), out.calls_jsonl())
    };
    let reference = with(HostKind::Inline, 1);
    assert!(with(HostKind::Inline, 2) == reference, "one thread vs two");
    assert!(with(HostKind::Tasks, 1) == reference, "inline vs tasks host");
    reference
}
