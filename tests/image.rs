//! The image recipe (`Dockerfile`) and what it stamps: `--version` names the commit the
//! binary was built from (build.rs).

use std::process::Command;

/// `git rev-parse --short HEAD` in the repository, or `None` outside a git checkout.
fn head_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Inside a checkout `--version` names HEAD's commit (with `-dirty` when the sources
/// differ from it); outside one, the version stands alone.
#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .arg("--version")
        .output()
        .expect("run route-controller --version");
    assert!(out.status.success());
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let plain = format!("route-controller {}", env!("CARGO_PKG_VERSION"));
    match head_commit() {
        Some(commit) => {
            let shown = line
                .strip_prefix(&format!("{plain} (commit "))
                .and_then(|rest| rest.strip_suffix(')'))
                .unwrap_or_else(|| panic!("no commit in {line:?}"));
            let hash = shown.strip_suffix("-dirty").unwrap_or(shown);
            assert_eq!(hash, commit, "{line:?}");
        }
        None => assert_eq!(line, plain),
    }
}
