//! The image recipe (`Dockerfile`), built by a daemonless builder from Debian's
//! packages, `buildah`, as root with the `vfs` storage driver and `chroot` isolation
//! (no daemon, no runtime, no overlay mounts), with `--pull=never`: the default stage
//! only copies the built static musl binary, so nothing is fetched. The image's
//! config (user, entrypoint, labels) is checked, its layers are unpacked, and the
//! binary answers `--version` chrooted into that file system, which holds nothing
//! else. Its storage lives under `target/buildah/`, so nothing leaks to the machine.
//!
//! The binary is the one `.ci/run` builds (`RC_TEST_MUSL_BINARY`); without it the test
//! builds it, as `.ci/run` does, into `target/musl/`.
//!
//! Also here: `--version` names the commit the binary was built from (build.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

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

// --- the image ---------------------------------------------------------------------

const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The static musl binary: `RC_TEST_MUSL_BINARY` (set by `.ci/run` after its musl
/// build), or built here as `.ci/run` builds it.
fn musl_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("RC_TEST_MUSL_BINARY") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "RC_TEST_MUSL_BINARY={} is not a file",
            path.display()
        );
        return path;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building the static musl binary into target/musl (RC_TEST_MUSL_BINARY is unset)");
    let out = Command::new(cargo)
        .current_dir(repo())
        .args([
            "build",
            "--release",
            "--bin",
            "route-controller",
            "--target",
        ])
        .arg(MUSL_TARGET)
        .args(["--target-dir", "target/musl"])
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "the static musl build failed; it needs the target and musl-gcc: \
         `rustup target add {MUSL_TARGET}` and `apt-get install musl-tools` (.ci/run installs \
         both)\n---- cargo stderr:\n{}",
        tail(&out.stderr)
    );
    repo().join(format!(
        "target/musl/{MUSL_TARGET}/release/route-controller"
    ))
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// `buildah` with its storage under `target/buildah/`.
struct Buildah {
    root: PathBuf,
}

impl Buildah {
    fn new() -> Buildah {
        match Command::new("buildah").arg("--version").output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!("`buildah --version` failed: {}", tail(&out.stderr)),
            Err(e) => panic!(
                "the image test needs buildah, a daemonless image builder ({e}): \
                 `apt-get install buildah` (.ci/run installs it)"
            ),
        }
        Buildah {
            root: repo().join("target/buildah"),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("buildah")
            .arg("--root")
            .arg(self.root.join("root"))
            .arg("--runroot")
            .arg(self.root.join("runroot"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .output()
            .expect("run buildah");
        assert!(
            out.status.success(),
            "buildah {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            tail(&out.stderr)
        );
        out
    }
}

/// The path of `binary` in the build context (the repository), which the Dockerfile's
/// `BINARY` argument takes.
fn in_context(binary: &Path) -> String {
    let binary = binary.canonicalize().expect("the binary's path");
    let repo = repo().canonicalize().expect("the repository's path");
    binary
        .strip_prefix(&repo)
        .unwrap_or_else(|_| {
            panic!(
                "{} is outside the repository, the image's build context; build it under \
                 target/ (cargo's --target-dir)",
                binary.display()
            )
        })
        .to_string_lossy()
        .into_owned()
}

/// The user the manifests run the controller as, `runAsUser:runAsGroup` of the pod.
fn manifests_user() -> String {
    use route_controller::manifests::{ManifestOptions, render};
    let yaml = render(&ManifestOptions {
        cluster_cidr: "10.244.0.0/16".into(),
        ..ManifestOptions::default()
    });
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).expect("the manifests parse");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    let sc = &deployment["spec"]["template"]["spec"]["securityContext"];
    format!("{}:{}", sc["runAsUser"], sc["runAsGroup"])
}

/// Unpacks the image's layers, in order, into `rootfs`, from `buildah push`'s `dir:`
/// copy (uncompressed layers); returns the image's size (the layers' bytes).
fn unpack(pushed: &Path, rootfs: &Path) -> u64 {
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(pushed.join("manifest.json")).expect("the pushed manifest"),
    )
    .expect("the manifest is JSON");
    std::fs::create_dir_all(rootfs).expect("create the rootfs");
    let mut size = 0;
    for layer in manifest["layers"].as_array().expect("layers") {
        let digest = layer["digest"].as_str().expect("a digest");
        let file = pushed.join(digest.trim_start_matches("sha256:"));
        size += layer["size"].as_u64().unwrap_or(0);
        let out = Command::new("tar")
            .arg("-xf")
            .arg(&file)
            .arg("-C")
            .arg(rootfs)
            .output()
            .expect("run tar");
        assert!(out.status.success(), "tar: {}", tail(&out.stderr));
    }
    size
}

/// Every file (not directory) under `dir`, relative to it.
fn files(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read a rootfs dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, base, out);
        } else {
            out.push(
                path.strip_prefix(base)
                    .unwrap_or(&path)
                    .display()
                    .to_string(),
            );
        }
    }
}

#[test]
fn the_image_holds_the_binary_alone_runs_it_as_the_manifests_user_and_answers_version() {
    let buildah = Buildah::new();
    let binary = musl_binary();
    let work = repo().join(format!("target/buildah/test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("create the work dir");
    let tag = format!("localhost/route-controller-test:{}", std::process::id());
    let revision = head_commit().unwrap_or_else(|| "none".into());
    let started = std::time::Instant::now();
    buildah.run(&[
        "build",
        "--isolation",
        "chroot",
        "--pull=never",
        "--build-arg",
        &format!("BINARY={}", in_context(&binary)),
        "--build-arg",
        &format!("VERSION={}", env!("CARGO_PKG_VERSION")),
        "--build-arg",
        &format!("REVISION={revision}"),
        "--build-arg",
        "SOURCE=https://example.invalid/route-controller",
        "-t",
        &tag,
        &repo().display().to_string(),
    ]);
    let built = started.elapsed();

    let inspect = buildah.run(&["inspect", "--type", "image", &tag]);
    let image: Value = serde_json::from_slice(&inspect.stdout).expect("inspect's JSON");
    let config = &image["OCIv1"]["config"];
    assert_eq!(config["User"], manifests_user().as_str(), "{config:#}");
    assert_eq!(config["User"], "65532:65532");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/local/bin/route-controller"])
    );
    let label = |name: &str| {
        config["Labels"][format!("org.opencontainers.image.{name}")]
            .as_str()
            .unwrap_or_else(|| panic!("no label {name}: {config:#}"))
            .to_string()
    };
    assert_eq!(label("version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(label("revision"), revision);
    assert_eq!(label("licenses"), env!("CARGO_PKG_LICENSE"));
    assert_eq!(label("source"), "https://example.invalid/route-controller");
    assert_eq!(label("title"), "route-controller");
    assert!(!label("description").is_empty());

    let pushed = work.join("pushed");
    buildah.run(&[
        "push",
        "--disable-compression",
        &tag,
        &format!("dir:{}", pushed.display()),
    ]);
    buildah.run(&["rmi", &tag]);
    let rootfs = work.join("rootfs");
    let size = unpack(&pushed, &rootfs);
    let mut found = Vec::new();
    files(&rootfs, &rootfs, &mut found);
    assert_eq!(found, ["usr/local/bin/route-controller"], "nothing else");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(rootfs.join("usr/local/bin/route-controller"))
        .expect("the binary")
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o555, "read and run, not written");

    // In the image's file system alone: no libc, no loader, nothing but the binary.
    let out = Command::new("chroot")
        .arg(&rootfs)
        .args(["/usr/local/bin/route-controller", "--version"])
        .output()
        .expect("run chroot (coreutils)");
    assert!(
        out.status.success(),
        "the binary does not run in the image's file system ({}): {}",
        out.status,
        tail(&out.stderr)
    );
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let host = Command::new(&binary)
        .arg("--version")
        .output()
        .expect("run the binary");
    assert_eq!(version, String::from_utf8_lossy(&host.stdout).trim());
    assert!(
        version.starts_with(&format!("route-controller {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    eprintln!("image: {size} bytes in its layers (uncompressed), built in {built:.1?}; {version}");
    let _ = std::fs::remove_dir_all(&work);
}
