//! The Python tools the tests run (moto, proxy.py, a real Keystone and Neutron), each
//! installed from PyPI once per target directory into a virtualenv of its own. A lock
//! file beside it keeps test binaries that start together from installing it twice;
//! the copy of its requirements written last says the install is complete, and a
//! change of requirements installs it again.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The target directory (`CARGO_TARGET_TMPDIR` is `<target>/tmp` for integration tests).
pub fn target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).to_path_buf()
}

/// `target/<name>`, holding `requirements` installed, installing them first if needed.
/// `purpose` says which tests need the tool (for the message when python3 is missing),
/// `tool` what pip installs (for the message when PyPI cannot be reached).
pub fn install(name: &str, requirements: &str, purpose: &str, tool: &str) -> PathBuf {
    let target = target_dir();
    let dir = target.join(name);
    let marker = dir.join("installed-requirements.txt");
    let installed = || fs::read_to_string(&marker).is_ok_and(|r| r == requirements);
    if installed() {
        return dir;
    }
    fs::create_dir_all(&target).expect("create the target directory");
    let _lock = locked(&target.join(format!("{name}.lock")));
    if installed() {
        return dir; // another test binary installed it while we waited
    }
    let started = Instant::now();
    let python = Command::new("python3").arg("--version").output();
    if !python.as_ref().is_ok_and(|o| o.status.success()) {
        panic!(
            "{purpose}, which needs python3 (3.10 or later) with the venv module and pip: \
             install them (Debian/Ubuntu: apt-get install python3 python3-venv python3-pip) \
             and run the tests again"
        );
    }
    if dir.exists() {
        fs::remove_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot remove the partial {}: {e}", dir.display()));
    }
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&dir),
        "python3 -m venv (install python3-venv: apt-get install python3-venv)",
    );
    let requirements_file = dir.join("requirements.txt");
    fs::write(&requirements_file, requirements).expect("write requirements.txt");
    run(
        Command::new(dir.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements_file),
        &format!("pip install {tool} from PyPI (is PyPI reachable?)"),
    );
    fs::write(&marker, requirements).expect("write the install marker");
    eprintln!(
        "[{name}] installed {tool} into {} in {:.1} s",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    dir
}

/// An exclusive lock on `path`, held until the file is dropped.
#[allow(dead_code)] // not every test binary's tools need more than `install`
pub fn locked(path: &Path) -> File {
    let lock =
        File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
    lock
}

/// Runs a set-up command, failing the test with its output if it fails.
pub fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: could not start: {e}"));
    if !output.status.success() {
        panic!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
