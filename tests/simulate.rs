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
    assert!(svg.contains("log scale"), "calls on a log axis: {svg}");
    assert!(
        svg.contains("node change to route created"),
        "the latency panel: {svg}"
    );
    assert!(table.contains("  watch (ours) "), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("  verdict: watch (ours)")),
        "{table}"
    );
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
        (vec!["--duration", "100000000h"], "--duration"),
        (vec!["--duration", "721h"], "--duration"),
        (vec!["--nodes", "60001"], "--nodes"),
        (vec!["--latency", "2m"], "--latency"),
        (vec!["--cloud", "gcp"], "--cloud"),
        (vec!["--cloud", "azure", "--nodes", "10"], "--nodes"),
        (
            vec!["--cloud", "azure", "--scenario", "steady"],
            "--scenario",
        ),
        (
            vec![
                "--scenario",
                "steady",
                "--nodes",
                "60000",
                "--duration",
                "24h",
            ],
            "at most --duration 4h",
        ),
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

/// Guards the bounds check: `--duration 100000000h` used to allocate until the machine
/// ran out of memory. Now it is refused before anything runs, also under a memory
/// limit the simulation itself would exceed at once.
#[test]
fn a_run_too_big_for_memory_is_refused_before_it_starts() {
    let out = Command::new("sh")
        .args([
            "-c",
            "ulimit -v 262144 && exec \"$0\" simulate --scenario steady --duration 100000000h",
            env!("CARGO_BIN_EXE_route-controller"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--duration") && !err.contains("simulating"),
        "{err}"
    );
}

/// Guards that goals are judged only when measured: a 1 s steady run has no
/// heartbeat, a scale-out of one node no create beyond the burst (it printed
/// `+inf %` and "goal met").
#[test]
fn goals_that_a_run_cannot_show_are_not_measured() {
    for args in [
        &["--scenario", "steady", "--duration", "1s"][..],
        &[
            "--scenario",
            "scale-out",
            "--nodes",
            "1",
            "--duration",
            "5m",
        ],
    ] {
        let out = simulate(args);
        assert!(out.status.success(), "{args:?}");
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(!table.contains("inf"), "{args:?}: {table}");
        assert!(!table.contains("goal met"), "{args:?}: {table}");
        assert!(table.contains("goal not measured"), "{args:?}: {table}");
        let mut json_args = args.to_vec();
        json_args.extend(["--output", "json"]);
        let r = json(&json_args);
        let goals = r["goals"].as_array().unwrap();
        assert!(!goals.is_empty());
        assert!(goals.iter().all(|g| g["met"].is_null()), "{goals:?}");
    }
}

/// Guards JSON's `null` where the table shows `-`: in a steady cluster no route is
/// wanted, so there is no node-to-route latency (it used to read 0).
#[test]
fn json_has_null_where_nothing_was_measured() {
    let r = json(&[
        "--scenario",
        "steady",
        "--nodes",
        "10",
        "--duration",
        "10m",
        "--output",
        "json",
    ]);
    for m in r["modes"].as_array().unwrap() {
        assert!(m["latencySeconds"]["nodeToRoute"].is_null(), "{m}");
    }
    assert!(
        r["verdict"]
            .as_str()
            .unwrap()
            .starts_with("verdict: watch (ours)")
    );
}

/// Guards the chart check before the run: a path that cannot be written fails at once
/// instead of after the simulation.
#[test]
fn an_unwritable_chart_fails_before_the_run() {
    let out = simulate(&[
        "--scenario",
        "steady",
        "--chart",
        "/nonexistent-dir/calls.svg",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--chart /nonexistent-dir/calls.svg"), "{err}");
    assert!(!err.contains("simulating"), "checked before the run: {err}");
}

/// Guards the full-table scenario (issue 14, item 2): upstream sends creates that the
/// full table refuses and sends them again; ours sends none that cannot fit and still
/// routes every node once the second scale-down makes room. Without the controller's
/// hold, ours shows refusals too.
#[test]
fn full_table_upstream_creates_are_refused_and_retried_ours_are_never_sent() {
    let report = json(&["--scenario", "full-table", "--output", "json"]);
    let ours = mode(&report, "watch");
    assert_eq!(
        ours.get("refusedCreates"),
        None,
        "ours: none refused: {ours}"
    );
    assert_eq!(ours["unserved"], 0, "{ours}");
    for upstream in ["poll", "upstream-watch"] {
        let m = mode(&report, upstream);
        let refused = m["refusedCreates"].as_u64().unwrap_or(0);
        assert!(refused > 0, "{upstream}: the cloud refused nothing: {m}");
        assert!(
            m["cloudCalls"]["create"].as_u64().unwrap_or(0)
                > ours["cloudCalls"]["create"].as_u64().unwrap_or(0),
            "{upstream} retried its refused creates: {m}"
        );
    }
}

/// Guards `simulate --cloud azure`: its JSON names both sides of each scenario, the model
/// labelled as one, and ours never has two writes of the table in flight.
#[test]
fn the_azure_comparison_sets_ours_beside_the_model_of_the_updater() {
    let r = json(&["--cloud", "azure", "--output", "json"]);
    let scenarios = r.as_array().expect("a list of scenarios");
    let names: Vec<&str> = scenarios
        .iter()
        .filter_map(|s| s["scenario"].as_str())
        .collect();
    assert_eq!(
        names,
        ["idle-add", "scale-out", "rolling-upgrade", "second-writer"]
    );
    for s in scenarios {
        assert_eq!(s["ours"]["maxWritesInFlight"], 1, "{s}");
        assert_eq!(s["ours"]["reportedDoneNotInTable"], 0, "{s}");
        assert_eq!(s["ours"]["unserved"], 0, "{s}");
        assert_eq!(s["theirsModel"]["side"], "cloud-provider-azure (model)");
    }
    let table = String::from_utf8_lossy(&simulate(&["--cloud", "azure"]).stdout).to_string();
    assert!(table.contains("MODEL of cloud-provider-azure"), "{table}");
}

fn stdout(args: &[&str]) -> String {
    let out = simulate(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 on stdout")
}

/// Guards the default table's width (issue 39): every line of every scenario fits 100
/// columns, and `--wide` brings back the columns left out (and may pass 100).
#[test]
fn the_table_fits_100_columns_and_wide_has_every_column() {
    let args = ["--nodes", "40", "--duration", "20m"];
    let table = stdout(&args);
    for line in table.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line:?}\n{table}",
            line.chars().count()
        );
    }
    assert!(table.matches("limited by").count() >= 6, "{table}");
    assert!(
        table.contains("--wide adds"),
        "the legend says where the rest is: {table}"
    );
    assert!(!table.contains("trigger->pass p50"), "{table}");
    let wide = stdout(&[&args[..], &["--wide"]].concat());
    assert!(wide.contains("trigger->pass p50/p99/max"), "{wide}");
    assert!(
        wide.contains("creates") && wide.contains("passes"),
        "{wide}"
    );
    assert!(wide.lines().any(|l| l.chars().count() > 100), "{wide}");
}

/// Guards that no cell reads as a measurement when nothing was measured: a pass that
/// starts on its trigger says "at once", not 0ms/0ms/0ms, and a scenario without goals
/// prints no tally of zeros.
#[test]
fn nothing_unmeasured_reads_as_a_measurement() {
    let wide = stdout(&[
        "--scenario",
        "address-churn",
        "--nodes",
        "30",
        "--duration",
        "10m",
        "--wide",
    ]);
    assert!(!wide.contains("0ms/0ms/0ms"), "{wide}");
    assert!(
        wide.contains("at once"),
        "ours starts its pass on the trigger: {wide}"
    );
    assert!(!wide.contains("0 met"), "{wide}");
    assert!(
        !wide.contains("goals:"),
        "address-churn has no goal: {wide}"
    );
    let steady = stdout(&["--scenario", "steady", "--nodes", "10", "--duration", "10m"]);
    let ours = steady
        .lines()
        .find(|l| l.starts_with("  watch (ours)"))
        .expect("our row");
    // mode, calls, lists, 429s, node->route, missing, limited by
    let cells: Vec<&str> = ours["  watch (ours)".len()..].split_whitespace().collect();
    assert_eq!(cells[3..], ["-", "0", "-"], "{steady}");
}

/// Guards "limited by": in a scale-out against an API of 1 request/s, ours and poll are
/// held by that rate and upstream's watch mode by the routes it left missing; in a
/// rolling upgrade each mode by its own pace; in a steady cluster nothing is measured.
#[test]
fn each_row_says_what_limited_it() {
    let args = [
        "--scenario",
        "scale-out",
        "--nodes",
        "150",
        "--duration",
        "10m",
        "--output",
        "json",
    ];
    let r = json(&args);
    assert_eq!(
        mode(&r, "watch")["limitedBy"],
        "the API's 1 request/s",
        "{r}"
    );
    assert_eq!(
        mode(&r, "poll")["limitedBy"],
        "the API's 1 request/s",
        "{r}"
    );
    let upstream = mode(&r, "upstream-watch");
    let missing = upstream["unserved"].as_u64().unwrap();
    assert!(missing > 0, "{upstream}");
    assert_eq!(
        upstream["limitedBy"],
        format!("{missing} routes missing"),
        "{upstream}"
    );
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
    assert_eq!(
        mode(&r, "watch")["limitedBy"],
        "the cloud's latency (100ms)",
        "{r}"
    );
    assert_eq!(mode(&r, "poll")["limitedBy"], "the 10s poll period", "{r}");
    assert_eq!(
        mode(&r, "upstream-watch")["limitedBy"],
        "its 10s token bucket",
        "{r}"
    );
    let steady = json(&[
        "--scenario",
        "steady",
        "--nodes",
        "10",
        "--duration",
        "10m",
        "--output",
        "json",
    ]);
    assert_eq!(mode(&steady, "watch")["limitedBy"], "-", "{steady}");
}
