//! `route-controller simulate`: the JSON shape, determinism, the chart, bad flags, and
//! the comparison the README's first command shows (on small scenarios, so it is fast).

use std::process::{Command, Output};

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("run the binary")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = simulate(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn mode<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["modes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mode"] == name)
        .expect(name)
}

fn calls(m: &serde_json::Value) -> u64 {
    ["list", "create", "delete"]
        .iter()
        .map(|k| m["cloudCalls"][k].as_u64().unwrap())
        .sum()
}

#[test]
fn json_has_the_documented_shape_for_every_mode() {
    let r = json(&[
        "--scenario",
        "rolling-upgrade",
        "--nodes",
        "20",
        "--duration",
        "10m",
        "--output",
        "json",
    ]);
    assert_eq!(r["scenario"], "rolling-upgrade");
    assert_eq!(r["nodes"], 20);
    assert_eq!(r["durationSeconds"], 600);
    let modes: Vec<&str> = r["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["poll", "upstream-watch", "watch"]);
    for m in r["modes"].as_array().unwrap() {
        for key in ["routeMutations", "passes", "rateLimited"] {
            assert!(m[key].is_u64(), "{key} in {m}");
        }
        for lat in ["triggerToPass", "nodeToRoute"] {
            for q in ["p50", "p99", "max"] {
                assert!(m["latencySeconds"][lat][q].is_number(), "{lat}.{q} in {m}");
            }
        }
        assert_eq!(
            m["routeMutations"], 40,
            "20 replacements: a delete and a create each"
        );
    }
}

#[test]
fn ours_needs_the_fewest_calls_and_reacts_fastest_in_a_rolling_upgrade() {
    let r = json(&[
        "--scenario",
        "rolling-upgrade",
        "--nodes",
        "30",
        "--duration",
        "15m",
        "--output",
        "json",
    ]);
    let (poll, upstream, ours) = (
        mode(&r, "poll"),
        mode(&r, "upstream-watch"),
        mode(&r, "watch"),
    );
    assert!(
        calls(ours) < calls(upstream) && calls(upstream) < calls(poll),
        "{r}"
    );
    assert!(
        calls(ours) as f64 <= 1.1 * ours["routeMutations"].as_f64().unwrap(),
        "{ours}"
    );
    let p99 = |m: &serde_json::Value| m["latencySeconds"]["nodeToRoute"]["p99"].as_f64().unwrap();
    assert!(p99(ours) < 1.0, "{ours}");
    assert!(
        p99(upstream) > 5.0,
        "upstream-style watch waits for its token bucket: {upstream}"
    );
    assert_eq!(ours["unserved"], 0);
}

#[test]
fn ours_never_hits_the_rate_limit_in_a_scale_out() {
    let r = json(&[
        "--scenario",
        "scale-out",
        "--nodes",
        "60",
        "--duration",
        "5m",
        "--output",
        "json",
    ]);
    let ours = mode(&r, "watch");
    assert_eq!(ours["rateLimited"], 0, "{ours}");
    assert_eq!(ours["unserved"], 0, "{ours}");
    assert!(
        mode(&r, "poll")["rateLimited"].as_u64().unwrap() > 0,
        "the comparison shows the refusals"
    );
}

#[test]
fn one_seed_gives_the_same_numbers() {
    let args = [
        "--scenario",
        "flaky-cloud",
        "--nodes",
        "25",
        "--duration",
        "10m",
        "--seed",
        "7",
        "--output",
        "json",
    ];
    assert_eq!(json(&args), json(&args));
}

#[test]
fn the_table_reports_the_goals_and_the_chart_is_svg() {
    let dir = std::env::temp_dir().join(format!("rc-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("calls.svg");
    let out = simulate(&[
        "--scenario",
        "steady",
        "--nodes",
        "50",
        "--duration",
        "2h",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("scenario steady: 50 nodes, 2h0m0s"),
        "{table}"
    );
    assert!(
        table.contains("goal met: at most 1 list per resync"),
        "{table}"
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert_eq!(svg.matches("<polyline").count(), 3, "one line per mode");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    for (args, needle) in [
        (vec!["--scenario", "tuesday"], "--scenario"),
        (vec!["--duration", "soon"], "--duration"),
        (vec!["--duration", "0s"], "--duration"),
        (vec!["--nodes", "0"], "--nodes"),
        (vec!["--latency", "fast"], "--latency"),
        (vec!["--output", "xml"], "--output"),
    ] {
        let out = simulate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.trim().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}
