//! Records the build's provenance for the Result: the commit (when git can tell), the profile,
//! the compiler and the versions of the crates whose behaviour reaches the outputs. Never fails:
//! whatever cannot be found is left out.

use std::process::Command;

/// Crates whose versions can change outputs: the math on decision paths, the random streams,
/// the seeds, the parser and the JSON writer.
const CRATES: [&str; 5] = ["libm", "rand_chacha", "serde_json", "serde_norway", "sha2"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../Cargo.lock");
    println!("cargo:rerun-if-env-changed=BLIS_ACTOR_COMMIT");
    let commit = std::env::var("BLIS_ACTOR_COMMIT").ok().filter(|c| !c.is_empty()).or_else(git_commit);
    println!("cargo:rustc-env=BLIS_BUILD_COMMIT={}", commit.unwrap_or_default());
    println!("cargo:rustc-env=BLIS_BUILD_PROFILE={}", std::env::var("PROFILE").unwrap_or_default());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version = run(&rustc, &["--version"]).unwrap_or_default();
    println!("cargo:rustc-env=BLIS_BUILD_RUSTC={rustc_version}");
    let lock = std::fs::read_to_string("../Cargo.lock").unwrap_or_default();
    let versions: Vec<String> = CRATES
        .iter()
        .filter_map(|name| locked_version(&lock, name).map(|version| format!("{name}={version}")))
        .collect();
    println!("cargo:rustc-env=BLIS_BUILD_CRATES={}", versions.join(","));
}

/// The checked-out commit, `-dirty` when tracked files differ from it; none without git.
fn git_commit() -> Option<String> {
    let commit = run("git", &["rev-parse", "HEAD"])?;
    // Rebuild when HEAD moves (the paths work in worktrees too).
    for path in ["HEAD", "index"] {
        if let Some(file) = run("git", &["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    if let Some(branch) = run("git", &["symbolic-ref", "-q", "HEAD"])
        && let Some(file) = run("git", &["rev-parse", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={file}");
    }
    let dirty = Command::new("git")
        .args(["diff-index", "--quiet", "HEAD", "--"])
        .status()
        .is_ok_and(|status| status.code() == Some(1));
    Some(if dirty { format!("{commit}-dirty") } else { commit })
}

/// `program args…`'s trimmed stdout, if it ran and succeeded.
fn run(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// The version of `name` in a Cargo.lock.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("name = \"{name}\"") {
            let version = lines.next()?.trim().strip_prefix("version = \"")?.strip_suffix('"')?;
            return Some(version.to_owned());
        }
    }
    None
}
