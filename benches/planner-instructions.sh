#!/usr/bin/env bash
# Instructions per plan, commit by commit: `plan::plan` over the `planner` bench's
# nodes and routes (`node-0` … in that order, one pod CIDR and one route each), built
# on each commit given and counted by valgrind's cachegrind. Unlike CPU seconds, the
# count does not move with the machine's load (benches/README.md, Benchmarks).
#
#   benches/planner-instructions.sh [COMMIT...]   (default: 8953d92, the last commit
#                                                  before the compact node, and HEAD)
#
# Each commit is checked out in a temporary worktree with the loop below as an example
# and built in release mode. The figure is what one more plan costs:
# (PLANS=3 - PLANS=0) / 3, in which making the nodes and routes cancels out.
set -euo pipefail
command -v valgrind >/dev/null || {
    echo "planner-instructions: needs valgrind (Debian: apt-get install valgrind)" >&2
    exit 2
}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
[ $# -gt 0 ] || set -- 8953d92 HEAD
work=$(mktemp -d /tmp/planner-instructions.XXXXXX)
trap 'for w in "$work"/wt-*; do git -C "$repo" worktree remove --force "$w" 2>/dev/null || true; done; rm -rf "$work"' EXIT
count() { # binary nodes plans missing -> instructions
    NODES=$2 PLANS=$3 MISSING=$4 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$1" 2>&1 \
        | awk '/I *refs/ {gsub(",", "", $NF); print $NF}'
}
echo "instructions per plan (cachegrind), all routes in place / 10 % of them missing:"
for commit in "$@"; do
    short=$(git -C "$repo" rev-parse --short "$commit")
    wt="$work/wt-$short"
    git -C "$repo" worktree add --detach --quiet "$wt" "$commit"
    mkdir -p "$wt/examples"
    cat > "$wt/examples/planner_instructions.rs" <<'RUST'
use route_controller::model::{Cidr, Node, NodeAddress, Route};
use route_controller::plan;

fn main() {
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (n, plans, missing) = (env("NODES", 5000), env("PLANS", 3), env("MISSING", 0) == 1);
    let nodes: Vec<Node> = (0..n)
        .map(|i| Node {
            name: format!("node-{i}"),
            uid: format!("uid-{i}"),
            resource_version: "1".into(),
            provider_id: Some(format!("fake://{i}")),
            pod_cidrs: vec![format!("10.{}.{}.0/24", (i >> 8) & 255, i & 255)],
            addresses: vec![NodeAddress::internal_ip(&format!("172.16.{}.{}", (i >> 8) & 255, i & 255))],
            network_unavailable: None,
        })
        .collect();
    let routes: Vec<Route> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| !missing || i % 10 != 0)
        .map(|(_, node)| Route {
            name: format!("r-{}", node.name),
            target_node: node.name.clone(),
            target_node_addresses: node.addresses.clone(),
            destination_cidr: node.pod_cidrs[0].clone(),
            ..Route::default()
        })
        .collect();
    let cidrs = vec![Cidr::parse("10.0.0.0/8").unwrap()];
    let mut kept = 0;
    for _ in 0..plans {
        kept += plan::plan(&nodes, &routes, &cidrs).kept;
    }
    println!("{kept}");
}
RUST
    (cd "$wt" && CARGO_TARGET_DIR="$work/target-$short" cargo build --release --quiet --example planner_instructions)
    b="$work/target-$short/release/examples/planner_instructions"
    line="  $short ($commit):"
    for n in 5000 50000; do
        for missing in 0 1; do
            per=$(( ($(count "$b" $n 3 $missing) - $(count "$b" $n 0 $missing)) / 3 ))
            label="$n nodes"
            [ "$missing" = 0 ] || label="$label, 10 % missing"
            line="$line $label: $(( per / 1000 ))k;"
        done
    done
    echo "$line"
done
