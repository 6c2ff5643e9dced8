#!/usr/bin/env bash
# End-to-end test of the container deployment: build the Dockerfile and run
# docker-compose.yml (both unchanged) with podman + podman-compose, then check the run.
#
#   bash scripts/compose-test.sh                  # prepare, run, check, clean up (exit 0 = passed)
#   bash scripts/compose-test.sh --prepare-only   # install podman, base image, build the image
#
# What it does (docs/deployment.md, "Running it for real: scripts/compose-test.sh"):
#  1. installs podman, runc, debootstrap (apt-get; needs root) when missing, and
#     podman-compose (pinned in requirements/dev-lock.txt) with scripts/setup.sh;
#  2. gives podman a configuration this kind of machine accepts, in its own file
#     (CONTAINERS_CONF; nothing under /etc is changed): runc (crun refuses a hybrid
#     cgroup v1/v2 layout), cgroupfs, file events, and ulimits no higher than the hard
#     limits of this shell (podman's defaults, 1048576 open files, fail without
#     CAP_SYS_RESOURCE);
#  3. makes python:3.11-slim when it is not in podman's image store: with
#     COMPOSE_TEST_PULL=1 by pulling it, otherwise (the default: no image registry needed)
#     as a stand-in made with debootstrap from the Debian mirror of /etc/apt (Debian
#     bookworm + its python3.11). Once made it stays in the store: later runs reuse it;
#  4. builds the image (--format docker keeps the HEALTHCHECK; the host's CA bundle is
#     lent to the RUN steps as a read-only mount for pip, not stored in the image);
#  5. `podman-compose up -d` under its own project name with small data (no --scale:
#     the worker replicas come from deploy.replicas), waits for the export container,
#     reads its metrics, the worker registry of server-0 and every worker replica's
#     exit code, trains the same data in one process (same image, `ftrl-ps train`),
#     then `podman-compose down -v --remove-orphans` (the documented way to stop) and
#     checks that nothing of the project is left;
#  6. writes a JSON report (COMPOSE_TEST_REPORT) and exits 1 if a check failed; the
#     logs stay a day in runs/PROJECT of the cache folder (last-run: the newest).
#
# Settings (environment): COMPOSE_TEST_WORKERS (3), GEN_ROWS (200000, the compose file's default), GEN_TEST_ROWS (5000),
# COMPOSE_TEST_TOLERANCE (0.005: largest |export - one process| test logloss),
# COMPOSE_TEST_TIMEOUT (900 s for the export), COMPOSE_TEST_PROJECT (ftrl-ps-test-PID),
# COMPOSE_TEST_IMAGE (ftrl-ps:compose-test-N, N a checksum of this clone's path),
# COMPOSE_TEST_REPORT (a JSON file, default none),
# COMPOSE_TEST_KEEP=1 (leave the project running; you clean up).
#
# Fault mode (FAULTS=1; GEN_ROWS defaults to 400000 there, and every worker sleeps
# FTRL_PS_STRAGGLE_DELAY (0.03 s) before each clock tick, the documented straggler
# injection, so that training lasts a few seconds whatever the machine's speed and
# the kill lands mid-training): once server-0's /v1/status shows pushes and not every worker has finished,
# kill -9 the container of FAULT_SERVER (server-1) and of one worker replica; the
# restart policies, shard checkpoints and push journals must bring the run to the same
# checks as the normal mode, and both killed containers must have restarted. The report
# gives every container's restart count and exit code ("containers") and what was
# killed when ("faults"); FAULT_SERVER= (empty) or FAULT_WORKER=0 leave one out. FAULT_KILL=process (default) sends SIGKILL to the container's
# main process from the host, as a crash or the OOM killer would; FAULT_KILL=podman
# uses `podman kill -s KILL`, which podman counts as a stop by the user: it applies no
# restart policy then (podman 4.3), so that run is expected to time out.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PREPARE_ONLY=
for arg in "$@"; do
  case $arg in
    --prepare-only) PREPARE_ONLY=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compose-test: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

WORKERS=${COMPOSE_TEST_WORKERS:-3}
TOLERANCE=${COMPOSE_TEST_TOLERANCE:-0.005}
TIMEOUT=${COMPOSE_TEST_TIMEOUT:-900}
PROJECT=${COMPOSE_TEST_PROJECT:-ftrl-ps-test-$$}
# one tag per clone: two worktrees testing at once must not rebuild each other's image
IMAGE=${COMPOSE_TEST_IMAGE:-ftrl-ps:compose-test-$(printf %s "$REPO" | cksum | cut -d' ' -f1)}
BASE=docker.io/library/python:3.11-slim
STATE=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ftrl-ps-compose-test
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
FAULTS=${FAULTS:-}
FAULT_SERVER=${FAULT_SERVER-server-1}   # empty: kill no server
if [ -n "$FAULTS" ]; then DEFAULT_ROWS=400000; else DEFAULT_ROWS=200000; fi
export GEN_ROWS=${GEN_ROWS:-$DEFAULT_ROWS} GEN_TEST_ROWS=${GEN_TEST_ROWS:-5000}
if [ -n "$FAULTS" ]; then  # passed to the worker replicas by docker-compose.yml
  export FTRL_PS_STRAGGLE_PROB=${FTRL_PS_STRAGGLE_PROB:-1}
  export FTRL_PS_STRAGGLE_DELAY=${FTRL_PS_STRAGGLE_DELAY:-0.03}
fi
# logs of each run stay in runs/PROJECT (a day), last-run points to the newest: two
# runs at once (other worktrees) must not share a folder
WORK=$STATE/runs/$PROJECT
mkdir -p "$STATE/runs"
find "$STATE/runs" -mindepth 1 -maxdepth 1 -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
rm -rf "$WORK"
mkdir -p "$WORK"
# (a real last-run folder belongs to a run of an older version of this script: keep it)
[ -d "$STATE/last-run" ] && [ ! -L "$STATE/last-run" ] || ln -sfn "runs/$PROJECT" "$STATE/last-run"
T0=$(date +%s)
log() { echo "compose-test: $*" >&2; }
die() { log "error: $*"; exit 1; }

# --- 1. tools --------------------------------------------------------------------------
# one preparation at a time on this machine (apt-get, the base image, builds of one tag):
# .ci/run starts one beside the test suite, and the suite's own run waits for it here
if command -v flock >/dev/null; then
  exec 9>"$STATE/prepare.lock"
  flock -n 9 || { log "waiting for another preparation to finish ($STATE/prepare.lock)"
                  flock 9 || log "could not take the lock; preparing beside the other"; }
fi
apt_install() {
  [ "$(id -u)" = 0 ] || die "$1 is not installed and installing it needs root (apt-get)"
  command -v apt-get >/dev/null || die "$1 is not installed and there is no apt-get here"
  log "installing ${*:2} (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    "${@:2}" >/dev/null
}
command -v podman >/dev/null || apt_install podman podman runc debootstrap
bash scripts/setup.sh dev >/dev/null          # .venv with podman-compose (dev lock)
PODMAN_COMPOSE=$REPO/.venv/bin/podman-compose
[ -x "$PODMAN_COMPOSE" ] || die "podman-compose missing from .venv (scripts/setup.sh dev)"

# --- 2. podman's configuration for this run ---------------------------------------------
NOFILE=$(ulimit -Hn); NPROC=$(ulimit -Hu); PIDMAX=$(cat /proc/sys/kernel/pid_max)
[ "$NOFILE" = unlimited ] && NOFILE=1048576
if [ "$NPROC" = unlimited ] || [ "$NPROC" -gt "$PIDMAX" ]; then NPROC=$PIDMAX; fi
RUNTIME=; command -v runc >/dev/null && RUNTIME='runtime = "runc"'
cat > "$STATE/containers.conf" <<EOF
# written by scripts/compose-test.sh
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]
[engine]
$RUNTIME
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF=$STATE/containers.conf

# --- 3. the base image -----------------------------------------------------------------
if ! podman image exists "$BASE" && [ -n "${COMPOSE_TEST_PULL:-}" ]; then
  podman pull "$BASE" || log "could not pull $BASE; making a stand-in"
fi
if ! podman image exists "$BASE"; then
  command -v debootstrap >/dev/null || apt_install debootstrap debootstrap
  MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
  log "making a stand-in for $BASE: debootstrap bookworm from $MIRROR (once; about 2 minutes)"
  ROOTFS=$WORK/rootfs
  debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
  cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
  chroot "$ROOTFS" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install \
      -y -qq --no-install-recommends python3 python3-pip python3-venv python-is-python3 \
      ca-certificates >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*'
  rm -f "$ROOTFS"/usr/lib/python3.*/EXTERNALLY-MANAGED   # pip installs system-wide, as in python:*
  : > "$ROOTFS/etc/resolv.conf"
  tar -C "$ROOTFS" -c . | podman import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$BASE" >/dev/null
  rm -rf "$ROOTFS"
fi
T_BASE=$(date +%s)

# --- 4. the image ----------------------------------------------------------------------
CA_MOUNT=()
[ -f "$CA_BUNDLE" ] && CA_MOUNT=(-v "$CA_BUNDLE:$CA_BUNDLE:ro")
log "building $IMAGE from $REPO/Dockerfile"
OLD_ID=$(podman image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
podman build --pull=never --format docker --network host "${CA_MOUNT[@]}" -t "$IMAGE" . \
  >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log" >&2; die "podman build failed"; }
NEW_ID=$(podman image inspect -f '{{.Id}}' "$IMAGE")
if [ -n "$OLD_ID" ] && [ "$OLD_ID" != "$NEW_ID" ] &&
   [ -z "$(podman image inspect -f '{{join .RepoTags ""}}' "$OLD_ID" 2>/dev/null)" ]; then
  podman rmi "$OLD_ID" >/dev/null 2>&1 || true   # our previous build, now untagged
fi
T_BUILD=$(date +%s)
log "prepared in $((T_BUILD - T0)) s (base image $((T_BASE - T0)) s, build $((T_BUILD - T_BASE)) s)"
exec 9>&-   # the lock: the next preparation may go on
[ -n "$PREPARE_ONLY" ] && exit 0

# --- 5. the compose run ------------------------------------------------------------------
pc() { "$PODMAN_COMPOSE" -p "$PROJECT" -f "$REPO/docker-compose.yml" "$@"; }
project_resources() {   # every container, pod, volume and network of the project, one a line
  local label=io.podman.compose.project=$PROJECT
  podman ps -a --filter "label=$label" --format 'container {{.Names}}'
  podman pod ps --filter "name=^pod_$PROJECT\$" --format 'pod {{.Name}}'
  podman volume ls --filter "label=$label" --format 'volume {{.Name}}'
  podman network ls --format 'network {{.Name}}' | grep -F " ${PROJECT}_" || true
}
cleanup() {
  [ -n "${COMPOSE_TEST_KEEP:-}" ] && { log "COMPOSE_TEST_KEEP: project $PROJECT left running"; return; }
  local kind name
  while read -r kind name; do
    case $kind in
      container) podman rm -f "$name" ;;
      pod) podman pod rm -f "$name" ;;
      volume) podman volume rm -f "$name" ;;
      network) podman network rm -f "$name" ;;
    esac >/dev/null 2>&1 || true
  done < <(project_resources 2>/dev/null)
}
trap cleanup EXIT
export FTRL_PS_NUM_WORKERS=$WORKERS IMAGE=$IMAGE
# `serve` publishes a loopback port: a free one, so that nothing else on this host collides
SERVE_PORT=${SERVE_PORT:-$(python3 -c 'import socket; s = socket.socket()
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
export SERVE_PORT
export FTRL_PS_TOKEN=${FTRL_PS_TOKEN:-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')}
log "podman-compose -p $PROJECT up -d  (GEN_ROWS=$GEN_ROWS GEN_TEST_ROWS=$GEN_TEST_ROWS" \
    "FTRL_PS_NUM_WORKERS=$WORKERS SERVE_PORT=$SERVE_PORT" \
    "FTRL_PS_STRAGGLE_DELAY=${FTRL_PS_STRAGGLE_DELAY:-0})"
T_UP=$(date +%s)
pc up -d >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log" >&2; die "podman-compose up failed"; }
names() {  # container names of one service of the project
  podman ps -a --filter "label=io.podman.compose.project=$PROJECT" \
    --filter "label=io.podman.compose.service=$1" --format '{{.Names}}' | sort
}
EXPORT=$(names export)
[ -n "$EXPORT" ] || die "no export container"
server0_status() {  # server-0's /v1/status (reads need the token too: the container has it)
  podman exec "$(names server-0)" python -c "import os, urllib.request as u; print(u.urlopen(
    u.Request('http://127.0.0.1:7000/v1/status', headers={'Authorization': 'Bearer '
    + os.environ['FTRL_PS_TOKEN']}), timeout=10).read().decode())" 2>/dev/null
}
echo '{}' > "$WORK/faults.json"
if [ -n "$FAULTS" ]; then
  # training under way: pushes applied and not every worker finished, then kill -9
  FAULT_AT=
  while [ $(( $(date +%s) - T_UP )) -lt "$TIMEOUT" ]; do
    PROGRESS=$(server0_status | python3 -c 'import json, sys
s = json.load(sys.stdin); c = s.get("clock") or {}
done = sum(w.get("state") == "finished" for w in c.get("workers", []))
print(s["counters"]["pushes"], done, c.get("num_workers"))' 2>/dev/null || true)
    read -r PUSHES FINISHED NUM <<<"${PROGRESS:-0 0 0}"
    if [ "$PUSHES" -gt 0 ] 2>/dev/null; then
      [ "$FINISHED" -lt "$NUM" ] || die "every worker finished before the faults (raise GEN_ROWS)"
      FAULT_AT=$(( $(date +%s) - T_UP )); break
    fi
    sleep 1
  done
  [ -n "$FAULT_AT" ] || die "training did not start within $TIMEOUT s"
  KILLED_SERVER=; [ -z "$FAULT_SERVER" ] || KILLED_SERVER=$(names "$FAULT_SERVER")
  KILLED_WORKER=  # the first worker container still running
  [ "${FAULT_WORKER:-1}" = 0 ] || KILLED_WORKER=$(podman ps --filter status=running \
    --filter "label=io.podman.compose.project=$PROJECT" \
    --filter "label=io.podman.compose.service=worker" --format '{{.Names}}' | sort | head -1)
  log "faults $FAULT_AT s after up (server-0: $PUSHES pushes, $FINISHED/$NUM workers" \
      "finished): kill -9 (${FAULT_KILL:-process}) $KILLED_SERVER $KILLED_WORKER"
  for c in $KILLED_SERVER $KILLED_WORKER; do
    if [ "${FAULT_KILL:-process}" = podman ]; then podman kill -s KILL "$c" >/dev/null; continue; fi
    PID=$(podman inspect -f '{{.State.Pid}}' "$c")
    # an exited container's pid is 0, and `kill -KILL 0` would kill this script's own group
    [ "${PID:-0}" -gt 0 ] || die "$c is not running any more (it finished before the kill)"
    kill -KILL "$PID"
  done
  python3 -c 'import json, sys; json.dump({"seconds_after_up": int(sys.argv[2]),
      "server0_pushes": int(sys.argv[3]), "workers_finished": int(sys.argv[4]),
      "killed": sys.argv[5:]}, open(sys.argv[1], "w"))' "$WORK/faults.json" \
    "$FAULT_AT" "$PUSHES" "$FINISHED" $KILLED_SERVER $KILLED_WORKER
fi
EXPORT_RC=$(timeout "$TIMEOUT" podman wait "$EXPORT" || echo timeout)
T_DONE=$(date +%s)
log "export exited ($EXPORT_RC) $((T_DONE - T_UP)) s after up"
podman logs "$EXPORT" >"$WORK/export.log" 2>&1 || true
podman cp "$EXPORT:/models/metrics.json" "$WORK/metrics.json" 2>/dev/null || echo '{}' > "$WORK/metrics.json"
server0_status >"$WORK/status.json" || echo '{}' > "$WORK/status.json"
# every container of the project: name, status, exit code, restarts
podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}' | sort |
  while read -r c; do
    podman inspect -f '{{.Name}} {{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$c"
  done >"$WORK/containers.txt" 2>/dev/null || true
: > "$WORK/workers.txt"
for w in $(names worker); do
  podman inspect -f '{{.Name}} {{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$w" \
    >>"$WORK/workers.txt"
  podman logs "$w" >"$WORK/worker-$w.log" 2>&1 || true
done
for svc in gen server-0 server-1 serve; do
  podman logs "$(names "$svc")" >"$WORK/$svc.log" 2>&1 || true
done
# one process on the same data, in the same image, with the servers' feature space
BITS=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["layout"]["bits"])' \
       "$WORK/status.json" 2>/dev/null || echo 20)
DATA_VOLUME=$(podman volume ls --filter "label=io.podman.compose.project=$PROJECT" \
                --format '{{.Name}}' | grep -E '_data$' | head -1 || true)
log "one-process baseline on the same data (volume $DATA_VOLUME)"
podman run --rm --network none --no-healthcheck -v "$DATA_VOLUME:/data:ro" "$IMAGE" sh -c \
  "python -m ftrl_ps train /data/train.svm --test /data/test.svm --bits $BITS --quiet \
     --metrics-json /tmp/single.json >&2 && cat /tmp/single.json" \
  >"$WORK/single.json" 2>"$WORK/single.log" || echo '{}' > "$WORK/single.json"
log "podman-compose down -v --remove-orphans"
pc down -v --remove-orphans >"$WORK/down.log" 2>&1 || log "podman-compose down failed"
project_resources >"$WORK/left.txt" 2>/dev/null || true
T_END=$(date +%s)

# --- 6. the report and the checks ---------------------------------------------------------
REPORT=${COMPOSE_TEST_REPORT:-$WORK/report.json}
log "report: $REPORT, logs: $WORK"
python3 - "$WORK" "$REPORT" <<EOF
import json, pathlib, sys
work, out = pathlib.Path(sys.argv[1]), sys.argv[2]
def load(name):
    try:
        return json.loads((work / name).read_text() or "{}")
    except ValueError:
        return {}
single = load("single.json")
def containers(name):
    out = []
    for line in (work / name).read_text().splitlines():
        name, status, code, restarts = line.split()
        out.append({"name": name, "status": status, "exit_code": int(code),
                    "restarts": int(restarts)})
    return out
workers = containers("workers.txt")
clock = (load("status.json").get("clock") or {})
report = {
    "project": "$PROJECT", "image": "$IMAGE", "workers_configured": $WORKERS,
    "gen_rows": $GEN_ROWS, "gen_test_rows": $GEN_TEST_ROWS, "tolerance": $TOLERANCE,
    "export_exit_code": None if "$EXPORT_RC" == "timeout" else int("$EXPORT_RC"),
    "export_metrics": load("metrics.json"),
    "single_process": {k: single.get(k) for k in ("test_logloss", "test_auc", "rows")},
    "registered_workers": [{k: w.get(k) for k in ("index", "state", "worker_id")}
                           for w in clock.get("workers", [])],
    "server_num_workers": clock.get("num_workers"),
    "worker_containers": workers,
    "containers": containers("containers.txt"),
    "faults": load("faults.json"),
    "left_after_down": (work / "left.txt").read_text().split("\n")[:-1],
    "seconds": {"prepare": $T_BUILD - $T0, "base_image": $T_BASE - $T0,
                "build": $T_BUILD - $T_BASE, "up_to_export_done": $T_DONE - $T_UP,
                "total": $T_END - $T0},
    "logs": {p.name: p.read_text()[-3000:] for p in sorted(work.glob("*.log"))},
}
pathlib.Path(out).write_text(json.dumps(report, indent=1) + "\n")
EOF
python3 - "$REPORT" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
problems = []
n = r["workers_configured"]
if r["export_exit_code"] != 0:
    problems.append(f"export exit code {r['export_exit_code']}")
got, ref = r["export_metrics"].get("test_logloss"), r["single_process"].get("test_logloss")
if got is None or ref is None or abs(got - ref) > r["tolerance"]:
    problems.append(f"test logloss: compose {got}, one process {ref} (tolerance {r['tolerance']})")
indices = sorted(w["index"] for w in r["registered_workers"] if w["state"] == "finished")
if indices != list(range(n)):
    problems.append(f"finished worker indices {indices}, expected 0..{n - 1}")
codes = [w["exit_code"] for w in r["worker_containers"]]
if len(codes) != n or any(codes):
    problems.append(f"worker containers' exit codes {codes}, expected {n} zeros")
restarts = {c["name"]: c["restarts"] for c in r["containers"]}
for name in r["faults"].get("killed", []):
    if restarts.get(name, 0) < 1:
        problems.append(f"killed container {name} was not restarted ({restarts.get(name)})")
if r["left_after_down"]:
    problems.append(f"left after podman-compose down: {r['left_after_down']}")
print(f"compose-test: export test logloss {got} vs one process {ref}; workers finished "
      f"{indices}; worker exit codes {codes}; {r['seconds']['total']} s in all "
      f"(prepare {r['seconds']['prepare']} s, run {r['seconds']['up_to_export_done']} s)",
      file=sys.stderr)
if r["faults"]:
    print(f"compose-test: faults {r['faults']}; containers (status, exit code, restarts): "
          + ", ".join(f"{c['name']} {c['status']} {c['exit_code']} {c['restarts']}"
                      for c in r["containers"]), file=sys.stderr)
for p in problems:
    print(f"compose-test: FAILED: {p}", file=sys.stderr)
if problems:
    print(r["logs"].get("export.log", ""), file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
