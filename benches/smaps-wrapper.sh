#!/bin/bash
# RC_BENCH_WRAPPER for `cargo bench -- rss`: runs the controller and copies its
# /proc/PID/smaps and status every second into $RC_SMAPS_DIR (default target/smaps),
# numbered from 0, to see which mappings (arenas, file-backed pages) hold its RSS.
# The bench's own peak figures are meaningless under it (they are the wrapper's).
dir=${RC_SMAPS_DIR:-target/smaps}
mkdir -p "$dir"
"$@" &
pid=$!
trap 'kill -TERM $pid' TERM
(
    i=0
    while kill -0 "$pid" 2>/dev/null; do
        cp "/proc/$pid/smaps" "$dir/smaps.$i" 2>/dev/null
        cp "/proc/$pid/status" "$dir/status.$i" 2>/dev/null
        i=$((i + 1))
        sleep 1
    done
) &
wait "$pid"
