//! `route-controller plugin-check` against real plugins: it passes the reference Linux
//! router (in a network namespace of the test's own, with a route of others in the
//! same table) with batching (its apply checked) and without, and the README's
//! example plugin as the README prints it (with and without a route of others in its
//! file), and it fails, with a fix specific to what went wrong, a plugin that is not
//! idempotent, one that prints garbage and one that hangs.
//!
//! The Linux router test needs root, `ip` and python3; without them it fails saying
//! what to install or how to run it. The others need sh and jq.

#[path = "support/netns.rs"]
mod netns;
#[path = "support/tempdir.rs"]
mod tempdir;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tempdir::TempDir;

/// Runs plugin-check; returns its exit code and stdout.
fn plugin_check(config: &Path, extra: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .arg("plugin-check")
        .arg("--cloud-config")
        .arg(config)
        .args(extra)
        .output()
        .expect("run route-controller");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout)
}

fn executable(dir: &TempDir, name: &str, script: &str) -> PathBuf {
    let path = dir.write(name, script);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The example plugin exactly as the README prints it, between its markers, so that
/// what a reader copies is what passes here.
fn example() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let (begin, end) = (
        "<!-- example-file-router: begin -->\n```sh\n",
        "```\n<!-- example-file-router: end -->",
    );
    let start = readme
        .find(begin)
        .unwrap_or_else(|| panic!("README.md lost the marker {begin:?}"))
        + begin.len();
    let len = readme[start..]
        .find(end)
        .unwrap_or_else(|| panic!("README.md lost the marker {end:?}"));
    readme[start..start + len].to_string()
}

fn require_jq() {
    if Command::new("jq").arg("--version").output().is_err() {
        panic!(
            "jq is not installed: the example plugin is sh and jq; install jq (apt-get install jq)"
        );
    }
}

/// Runs plugin-check on the reference Linux router in a namespace of its own, with a
/// route of others in its table; `extra` goes into its --cloud-config. Returns the
/// output after checking that the route of others is untouched and the check's routes
/// are gone.
fn check_linux_router(label: &str, extra: &str) -> String {
    let ns = netns::Netns::new(label, "10.255.255.1/24");
    // Someone else's route, in the plugin's own table, with another proto.
    ns.ip(&[
        "route",
        "add",
        "10.254.0.0/24",
        "via",
        "10.255.255.9",
        "table",
        "100",
        "proto",
        "static",
    ]);
    let dir = TempDir::new(&format!("plugin-check-linux-{label}"));
    let config = dir.write(
        "plugin.conf",
        ns.plugin_config(
            &dir.path().join("state.json"),
            &format!("Timeout=5s\n{extra}"),
        ),
    );
    let (code, out) = plugin_check(&config, &["--foreign-destination", "10.254.0.0/24"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        ns.routes("100"),
        [(
            "10.254.0.0/24".to_string(),
            "10.255.255.9".to_string(),
            "static".to_string()
        )],
        "the route of others is still there, untouched, and the check's routes are gone"
    );
    out
}

#[test]
fn the_reference_linux_router_passes_every_check_with_apply_and_leaves_the_route_of_others() {
    let out = check_linux_router("batch", "");
    assert!(out.contains("13 passed, 0 failed, 0 skipped"), "{out}");
    for check in [
        "PASS  apply of two creates: 10.255.0.0/24 and 10.255.1.0/24 are listed",
        "PASS  apply of a create again and a delete of a route that is gone: {} for the create \
         of 10.255.0.0/24 that exists, NotFound for the delete of 10.255.1.0/24, in order",
        "PASS  apply of a delete: 10.255.0.0/24 is gone",
        "batch size 100 (changes go out in apply calls",
    ] {
        assert!(out.contains(check), "{check:?} missing:\n{out}");
    }
}

#[test]
fn the_reference_linux_router_passes_every_check_without_batching() {
    let out = check_linux_router("nobatch", "Env=LINUX_ROUTER_BATCH=0\n");
    assert!(out.contains("10 passed, 0 failed, 1 skipped"), "{out}");
    assert!(
        out.contains("SKIP  apply: describe declares no batchSize above 1"),
        "{out}"
    );
}

/// The README's example, as printed there, with nothing but its Command: it keeps its
/// routes in its default place (under `XDG_STATE_HOME`, pointed at the test's directory
/// so that the check starts from an empty table) and creates the file itself.
#[test]
fn the_example_plugin_of_the_readme_passes_as_written() {
    require_jq();
    let dir = TempDir::new("plugin-check-example");
    let plugin = executable(&dir, "example-file-router", &example());
    let state = dir.path().join("state");
    let config = dir.write(
        "plugin.conf",
        format!(
            "Command={}\nEnv=XDG_STATE_HOME={}\nTimeout=5s\n",
            plugin.display(),
            state.display()
        ),
    );
    let (code, out) = plugin_check(&config, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("9 passed, 0 failed, 2 skipped"), "{out}");
    let routes = std::fs::read_to_string(state.join("example-file-router/routes.json"))
        .expect("the example keeps its routes under XDG_STATE_HOME by default");
    assert_eq!(routes.trim(), "[]", "the check's route is gone");
}

/// The README's example with a route of others in its file (as the README's "try it"
/// puts one there): it neither lists, replaces nor deletes it.
#[test]
fn the_example_plugin_of_the_readme_leaves_a_route_of_others_alone() {
    require_jq();
    let dir = TempDir::new("plugin-check-example-foreign");
    let plugin = executable(&dir, "example-file-router", &example());
    let others = r#"[{"destinationCIDR":"10.254.0.0/24","targetNode":"vpn"}]"#;
    let routes = dir.write("routes.json", others);
    let config = dir.write(
        "plugin.conf",
        format!(
            "Command={}\nEnv=ROUTES_FILE={}\nTimeout=5s\n",
            plugin.display(),
            routes.display()
        ),
    );
    let (code, out) = plugin_check(&config, &["--foreign-destination", "10.254.0.0/24"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("10 passed, 0 failed, 1 skipped"), "{out}");
    assert!(
        out.contains("PASS  a route of others is left alone"),
        "{out}"
    );
    let after: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&routes).unwrap()).unwrap();
    let before: serde_json::Value = serde_json::from_str(others).unwrap();
    assert_eq!(
        after, before,
        "the route of others is there, untouched, alone"
    );
}

/// The copy under testdata/ (to install from) is the README's, byte for byte.
#[test]
fn the_example_plugin_file_is_the_readmes() {
    let file = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/plugins/example-file-router"),
    )
    .unwrap();
    assert_eq!(
        file,
        example(),
        "copy the README's example to the file, or back"
    );
}

#[test]
fn a_plugin_that_is_not_idempotent_fails_create_again_with_the_fix() {
    require_jq();
    let dir = TempDir::new("plugin-check-not-idempotent");
    let idempotent = "if has '.by == $me and .targetNode == $n'; then ok '{}'; exit 0; fi";
    let script = example();
    assert!(
        script.contains(idempotent),
        "the example changed; update this test"
    );
    // The same plugin, but an existing route makes create fail.
    let script = script.replace(idempotent, "has true && err AlreadyExists \"$dst exists\"");
    let plugin = executable(&dir, "not-idempotent", &script);
    let config = dir.write(
        "plugin.conf",
        format!(
            "Command={}\nEnv=ROUTES_FILE={}\nTimeout=5s\n",
            plugin.display(),
            dir.path().join("routes.json").display()
        ),
    );
    let (code, out) = plugin_check(&config, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("PASS  create: "), "{out}");
    assert!(out.contains("FAIL  create again (idempotent): "), "{out}");
    assert!(
        out.contains("an identical route that already exists counts as created"),
        "{out}"
    );
    assert!(out.contains("1 failed"), "{out}");
}

#[test]
fn a_plugin_that_prints_garbage_fails_with_the_fix() {
    let dir = TempDir::new("plugin-check-garbage");
    // A log line on stdout before the reply: the most common way to break a plugin.
    let plugin = executable(
        &dir,
        "chatty",
        "#!/bin/sh\ncat >/dev/null\necho 'talking to the router...'\necho '{\"apiVersion\":\"route-controller.plugin/v1\",\"routes\":[]}'\n",
    );
    let config = dir.write(
        "plugin.conf",
        format!("Command={}\nTimeout=5s\n", plugin.display()),
    );
    let (code, out) = plugin_check(&config, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL  list on an empty table: plugin chatty: list printed something that is not one JSON object"), "{out}");
    assert!(
        out.contains("anything else (logs, progress) on stderr"),
        "{out}"
    );
    // The fix names what went wrong, not the contract of the step.
    assert!(
        out.contains("fix: the plugin printed something besides its reply"),
        "{out}"
    );
    assert!(!out.contains("fix: list must reply"), "{out}");
    assert!(out.contains("0 passed"), "{out}");
}

#[test]
fn a_plugin_that_hangs_is_killed_at_its_timeout_and_fails_every_check() {
    let dir = TempDir::new("plugin-check-hang");
    let plugin = executable(&dir, "hangs", "#!/bin/sh\nsleep 600\n");
    let config = dir.write(
        "plugin.conf",
        format!("Command={}\nTimeout=500ms\n", plugin.display()),
    );
    let started = Instant::now();
    let (code, out) = plugin_check(&config, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL  list on an empty table: plugin hangs: list did not finish within 500ms; killed it"), "{out}");
    assert!(out.contains("raise Timeout= in --cloud-config"), "{out}");
    assert!(
        out.contains("fix: the plugin hung: reply within Timeout= (500ms)"),
        "{out}"
    );
    assert!(!out.contains("fix: list must reply"), "{out}");
    assert!(out.contains("0 passed"), "{out}");
    // Ten checks of one call each (and a cleanup), each bounded by the timeout.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_plugin_that_cannot_start_fails_once_naming_the_setting() {
    let dir = TempDir::new("plugin-check-missing");
    let config = dir.write(
        "plugin.conf",
        format!("Command={}\n", dir.path().join("no-such-plugin").display()),
    );
    let (code, out) = plugin_check(&config, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("cannot start") && out.contains("check Command= in --cloud-config"),
        "{out}"
    );
    assert!(out.contains("0 passed, 1 failed, 0 skipped"), "{out}");
}
