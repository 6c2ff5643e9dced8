#!/usr/bin/env bash
# Issue 12's acceptance in one command: items 5, 3, 4, 6 and 1, one after the other,
# every command's full output kept (the commands are those of benchmarks/RESULTS.md).
#
# usage: bash benchmarks/accept_issue12.sh OUT_DIR [DATA20_DIR]
#
#   OUT_DIR     created; one file per item (item5.txt, shard.txt, ...), their JSON
#               (item5.json, ...), OUT_DIR/log with each command's start, end, exit code
#               and the load average, and OUT_DIR/summary.txt: every goal, its figure and
#               whether this run met it (benchmarks/accept_summary.py, printed at the end)
#   DATA20_DIR  the 20M-row set at --bits 26 (train.svm, test.svm), made once with
#               `ftrl-ps gen DIR --rows 20000000 --test-rows 100000 --bits 26` (7.4 GB,
#               about a minute); without it item 6 and item 5 at 20M rows are skipped
#               (the log says so)
#
# It runs the code of the checkout it is in (PYTHONPATH is set to it, and the commands run
# from there), so that edits in another tree, or in this one after a `git worktree add`,
# do not leak into a run: `git worktree add /tmp/acc HEAD && bash
# /tmp/acc/benchmarks/accept_issue12.sh /tmp/acc-out`. Python: $PYTHON, else the
# checkout's .venv, else the main checkout's (`bash scripts/setup.sh dev,bench` makes it).
# Takes 5-15 minutes on 2 cores; do not run anything else meanwhile.
set -uo pipefail

if [[ $# -ge 1 && ( $1 == -h || $1 == --help ) ]]; then
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
if [[ $# -lt 1 ]]; then  # a usage error: the usage on stderr
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
DATA20=${2:-}
TREE=$(cd "$(dirname "$0")/.." && pwd)
MAIN=$(git -C "$TREE" worktree list --porcelain 2>/dev/null | sed -n '1s/^worktree //p')
PY=${PYTHON:-}
for candidate in "$TREE/.venv/bin/python" "${MAIN:-$TREE}/.venv/bin/python"; do
    [[ -z $PY && -x $candidate ]] && PY=$candidate
done
if [[ -z $PY ]]; then
    echo "no Python with the bench extra: run 'bash scripts/setup.sh dev,bench' or set PYTHON" >&2
    exit 2
fi
# a worktree has no generated data of its own: share the main checkout's cache
if [[ ! -e $TREE/benchmarks/.data && -n $MAIN && -d $MAIN/benchmarks/.data ]]; then
    ln -s "$MAIN/benchmarks/.data" "$TREE/benchmarks/.data"
fi
# ... nor the workplace's real data sets beside it (bench_merge.py's item 1)
if [[ -z ${BENCH_SHARED_DATA:-} && ! -d $TREE/../shared/data && -n $MAIN \
      && -d $MAIN/../shared/data ]]; then
    BENCH_SHARED_DATA=$(cd "$MAIN/../shared/data" && pwd)
    export BENCH_SHARED_DATA
fi
export PYTHONPATH=$TREE
cd "$TREE" || exit 2

log() { echo "$*" >> "$OUT/log"; echo "$*"; }
run() {
    local name=$1
    shift
    log "== $name $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)  $*"
    "$@" > "$OUT/$name.txt" 2>&1
    log "   rc $? $(date +%T)"
}

log "checkout $TREE at $(git -C "$TREE" log --oneline -1), python $PY"
log "real data sets: ${BENCH_SHARED_DATA:-$TREE/../shared/data (bench_merge.py skips those absent)}"
run item5 "$PY" benchmarks/bench_cluster.py --repeat 3 --staleness 3 --json "$OUT/item5.json"
run item5_5m "$PY" benchmarks/bench_cluster.py --rows 5000000 --repeat 3 --staleness 3 \
    --json "$OUT/item5_5m.json"
run shard "$PY" benchmarks/bench_wire.py --sizes 34000 100000 --seconds 1 --repeats 3 \
    --json "$OUT/shard.json"
run item3 "$PY" benchmarks/bench_ssp.py --scenarios transient --staleness 0,3 --repeat 2 \
    --figures "$OUT/figures" --json "$OUT/item3.json"
run item4 "$PY" benchmarks/bench_handout.py --staleness 3 --splits units --repeat 3 \
    --json "$OUT/item4.json"
if [[ -n $DATA20 && -f $DATA20/train.svm ]]; then
    # run 1 as the machine is; run 2 without this VM's first touch of memory its host
    # took back (RESULTS.md, sessions 22 and 35): one process's model, which numpy backs
    # with huge pages, after 2 GiB of them were faulted in and freed; the cluster, whose
    # workers' memory is 4 KiB pages, right after an unmeasured run of the same command
    for i in 1 2; do
        single=() cluster=()
        [[ $i == 2 ]] && single=(--warm-memory 2) cluster=(--warm-run)
        run "item6_single_$i" "$PY" benchmarks/bench_scale.py --mode single --rows 20000000 \
            --bits 26 --data "$DATA20" ${single[@]+"${single[@]}"} \
            --json "$OUT/item6_single_$i.json"
        run "item6_cluster_$i" "$PY" benchmarks/bench_scale.py --mode cluster --rows 20000000 \
            --bits 26 --data "$DATA20" --servers 2 --workers 2 ${cluster[@]+"${cluster[@]}"} \
            --json "$OUT/item6_cluster_$i.json"
    done
    # both runs of a round on memory just faulted in (neither pays for the pause before)
    run item5_20m "$PY" benchmarks/bench_cluster_cpu.py --tree "checkout=$TREE" \
        --data "$DATA20" --bits 26 --repeat 3 --warm-memory 2 --detail \
        --json "$OUT/item5_20m.json"
else
    log "== item 6 and item 5 at 20M rows skipped: no DATA20_DIR with train.svm given"
fi
run item1 "$PY" benchmarks/bench_merge.py --rules contraction --workers 2,4,8 \
    --staleness 0,3,inf --orders 3 --repeat 1 --json "$OUT/item1.json"
# every goal side by side, from the JSON files above (benchmarks/accept_summary.py)
run summary "$PY" benchmarks/accept_summary.py "$OUT"
cat "$OUT/summary.txt"
log "== done $(date +%T)"
