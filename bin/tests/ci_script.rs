//! `.ci/run` works wherever the build folder is: run on a copy of the script with stand-ins for
//! cargo and rustup, a `CARGO_TARGET_DIR` elsewhere and no `target/` folder beside it.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn the_ci_script_runs_with_the_target_dir_elsewhere() {
    let scratch = tempfile::Builder::new().prefix("blis-actor-ci-").tempdir().unwrap();
    let root = scratch.path();
    let (ci, tools) = (root.join(".ci"), root.join("tools"));
    std::fs::create_dir_all(&ci).unwrap();
    std::fs::create_dir_all(&tools).unwrap();
    let script = format!("{}/../.ci/run", env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(script, ci.join("run")).unwrap();
    // The Slurm step's stand-in records the binary it was given.
    let slurm = root.join("scripts/ci/slurm-sweep.sh");
    std::fs::create_dir_all(slurm.parent().unwrap()).unwrap();
    std::fs::write(&slurm, "#!/bin/sh\necho \"$1\" > \"$(dirname \"$0\")/given\"\n").unwrap();
    std::fs::set_permissions(&slurm, std::fs::Permissions::from_mode(0o755)).unwrap();
    // cargo prints one test result line for `test`, nothing for fmt and clippy.
    let stand_ins = [
        (
            "cargo",
            "#!/bin/sh\n[ \"$1\" = test ] && echo 'test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured'\nexit 0\n",
        ),
        ("rustup", "#!/bin/sh\nexit 0\n"),
    ];
    for (name, body) in stand_ins {
        let path = tools.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:{}", tools.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("bash")
        .arg(ci.join("run"))
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", root.join("elsewhere"))
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("passed 3, failed 0, ignored 1"), "{stdout}");
    assert!(!root.join("target").exists(), "nothing is written to target/ by name");
    let given = std::fs::read_to_string(root.join("scripts/ci/given")).expect("the Slurm step ran");
    assert_eq!(given.trim(), root.join("elsewhere/debug/blis-actor").display().to_string());
}
