#!/usr/bin/env bash
# Instructions per watch event, commit by commit: the `events` bench's decoding loop
# (heartbeat MODIFIED events of 10.6 KiB nodes, decoded by the watch's Reflector and
# filtered by the controller) built on each commit given and counted by valgrind's
# cachegrind. Unlike CPU seconds, the count does not move with the machine's load, so
# it says whether code made decoding slower (benches/README.md, Benchmarks).
#
#   benches/events-instructions.sh [COMMIT...]   (default: the commits the README names)
#
# Each commit is checked out in a temporary worktree with the loop below as an example
# and built in release mode (about a minute each with a shared target directory). The
# figure is what 10 000 more events cost in one more run: (ROUNDS=20, RUNS=2) -
# (ROUNDS=20, RUNS=1) - (ROUNDS=10, RUNS=2) + (ROUNDS=10, RUNS=1), in which making the
# JSON and filing the 1 000 nodes cancel out; divided by 10 000.
#
# CPU_ROUNDS=N (default 0) then runs the binaries natively, interleaved, N rounds of
# three runs each over 50 000 events, and prints events per CPU second of the loop's
# thread: the spread that made CPU time useless for this question (benches/README.md, Benchmarks).
set -euo pipefail
command -v valgrind >/dev/null || {
    echo "events-instructions: needs valgrind (Debian: apt-get install valgrind)" >&2
    exit 2
}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
[ $# -gt 0 ] || set -- 91aec9f de43623^ de43623 3a40afc^ 3a40afc 39e94b3 d5dbfcd HEAD
work=$(mktemp -d /tmp/events-instructions.XXXXXX)
trap 'for w in "$work"/wt-*; do git -C "$repo" worktree remove --force "$w" 2>/dev/null || true; done; rm -rf "$work"' EXIT
count() { # binary rounds runs -> instructions
    ROUNDS=$2 RUNS=$3 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$1" 2>&1 \
        | awk '/I *refs/ {gsub(",", "", $NF); print $NF}'
}
echo "instructions per heartbeat event (cachegrind), 10 000 events of 1 000 nodes:"
for commit in "$@"; do
    short=$(git -C "$repo" rev-parse --short "$commit")
    wt="$work/wt-$short"
    git -C "$repo" worktree add --detach --quiet "$wt" "$commit"
    mkdir -p "$wt/examples"
    # Before 7af930e the controller's types were reached through its module.
    if grep -q "pub use controller::" "$wt/src/lib.rs"; then path="route_controller"; else path="route_controller::controller"; fi
    sed "s/CONTROLLER_PATH/$path/" > "$wt/examples/events_instructions.rs" <<'RUST'
use std::sync::Arc;
use std::time::Instant;

use CONTROLLER_PATH::{Config, Controller, Input, NodeEvent};
use route_controller::kube::WatchConfig;
use route_controller::kube::watch::{LineOutcome, Reflector};
use route_controller::metrics::Metrics;
use route_controller::model::{Cidr, ListMeta, Node, NodeList};
RUST
    sed -n '/^fn node_json_in/,/^}/p' "$repo/benches/bench.rs" \
        | sed 's/fn node_json_in(cloud: BenchCloud, i: usize, rv: u64)/fn node_json(i: usize, rv: u64)/;
               s/cloud\.pod_cidr(i)/format!("10.{}.{}.0\/24", (i >> 8) \& 255, i \& 255)/g;
               s/cloud\.provider_id(i)/format!("fake:\/\/{i}")/g' >> "$wt/examples/events_instructions.rs"
    cat >> "$wt/examples/events_instructions.rs" <<'RUST'

fn main() {
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (nodes, rounds, runs) = (1000, env("ROUNDS", 10), env("RUNS", 1));
    let lines: Vec<String> = (0..rounds * nodes)
        .map(|k| format!("{{\"type\":\"MODIFIED\",\"object\":{}}}", node_json(k % nodes, 1000 + k as u64)))
        .collect();
    let listed: Vec<String> = (0..nodes).map(|i| node_json(i, 999)).collect();
    for _ in 0..runs {
        let mut config = Config::new(vec![Cidr::parse("10.0.0.0/8").unwrap()]);
        config.seed = Some(1);
        let mut controller = Controller::new(config, Arc::new(Metrics::new()));
        let now = Instant::now();
        let _ = controller.handle(Input::Node(NodeEvent::Init), now);
        for i in 0..nodes {
            let node: Node = serde_json::from_str(&listed[i]).unwrap();
            let _ = controller.handle(Input::Node(NodeEvent::InitApply(node)), now);
        }
        let _ = controller.handle(Input::Node(NodeEvent::InitDone), now);
        let mut reflector = Reflector::new(WatchConfig::default());
        let meta = ListMeta { resource_version: "999".into(), ..Default::default() };
        let _ = reflector.on_list_page(Ok(NodeList { items: Vec::new(), metadata: meta }), now);
        let _ = reflector.on_watch_started(Ok(()), now);
        let cpu_start = thread_cpu_seconds();
        for line in &lines {
            if let LineOutcome::Event(event) = reflector.on_watch_line(line.as_bytes(), now) {
                let _ = controller.handle(Input::Node(event), now);
            }
        }
        println!("{:.0} events per CPU second", lines.len() as f64 / (thread_cpu_seconds() - cpu_start));
    }
}

/// This thread's CPU time so far (the bench's `thread_cpu_time`).
fn thread_cpu_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()).unwrap_or(0.0) / 1e9
}
RUST
    # Fresh sources, so that the shared target directory rebuilds the crate.
    find "$wt/src" "$wt/examples" -name '*.rs' -exec touch {} +
    (cd "$wt" && CARGO_TARGET_DIR="$work/target" cargo build --release --quiet --example events_instructions)
    cp "$work/target/release/examples/events_instructions" "$work/bin-$short"
    b=$work/bin-$short
    loop=$(( $(count "$b" 20 2) - $(count "$b" 20 1) - $(count "$b" 10 2) + $(count "$b" 10 1) ))
    echo "  $short ($commit): $(( loop / 10000 )) instructions per event"
done
for round in $(seq 1 "${CPU_ROUNDS:-0}"); do
    [ "$round" = 1 ] && echo "events per CPU second, 50 000 events, three runs a commit a round:"
    for commit in "$@"; do
        short=$(git -C "$repo" rev-parse --short "$commit")
        echo "  round $round, $short: $(ROUNDS=50 RUNS=3 "$work/bin-$short" | awk '{print $1}' | tr '\n' ' ')"
    done
done
