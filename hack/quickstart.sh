#!/usr/bin/env bash
# Runs one of README.md's quickstarts exactly as written: a test of the
# README itself (.ci/run runs both).
#
# Usage: hack/quickstart.sh sim|kube|real
#   sim   "## Try it": starts `make run` as a machine that never ran make kube
#         or make npd would (empty CAPN_KUBE_CACHE and CAPN_NPD_CACHE), waits
#         for capn dev, then runs each line of the block.
#   kube  "## Try it with real Kubernetes": needs the binaries of make kube
#         (it fails at once without them); the block's `bin/capn dev` line
#         starts capn dev in the background.
#   real  "## Try it with real nodes": as kube, and root with the node stack
#         and images built (make nodestack nodeimages: their caches are
#         used as they are); afterwards no network namespace of a real node
#         may be left.
#
# The block is the first ```sh fence after the line that starts
# `<!-- quickstart:NAME ` in README.md. Each line runs in the repository's
# root with bash, in order; a line starting with # is a comment; the first line that fails (or takes
# longer than QUICKSTART_LINE_TIMEOUT seconds, default 600) fails the run.
# Everything runs in a temporary HOME and XDG_CONFIG_HOME (capn dev writes
# the client config there; the Go caches stay where they are) with a
# temporary data dir, so neither ./.capn nor ~/.config/capn is used. At the
# end capn dev is stopped as Ctrl-C does, and must stop cleanly; no process
# started from the data dir may be left running. It binds 127.0.0.1:8080,
# :8081 and :4222, as README says capn dev does.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=${1:-}
case $mode in
  sim | kube | real) ;;
  *) echo "usage: hack/quickstart.sh sim|kube|real" >&2; exit 2 ;;
esac
start_timeout=${QUICKSTART_START_TIMEOUT:-600}
line_timeout=${QUICKSTART_LINE_TIMEOUT:-600}
healthz=http://127.0.0.1:8081/healthz

# The block's lines, from README.md.
mapfile -t lines < <(awk -v mark="<!-- quickstart:$mode " '
  index($0, mark) == 1 { found = 1; next }
  found && !inblock && /^```sh$/ { inblock = 1; next }
  inblock && /^```$/ { exit }
  inblock { print }
' README.md)
if [ ${#lines[@]} -eq 0 ]; then
  echo "quickstart $mode: README.md has no \`\`\`sh block after a line starting <!-- quickstart:$mode" >&2
  exit 1
fi

# Where the Go toolchain keeps its caches and settings, before HOME moves.
for v in GOCACHE GOMODCACHE GOPATH GOENV; do
  export "$v=$(go env "$v")"
done
kube_bin=$(hack/kube.sh --print-path)
# The real nodes' caches, before HOME moves (make nodestack nodeimages
# find them there).
node_caches=(
  "CAPN_NODESTACK_CACHE=${CAPN_NODESTACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/nodestack}"
  "CAPN_NODEIMAGES_CACHE=${CAPN_NODEIMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/nodeimages}"
  "CAPN_COREDNS_CACHE=${CAPN_COREDNS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capn/coredns}"
)
netns_before=$(ip netns list 2>/dev/null | awk '{print $1}' || true)

tmp=$(mktemp -d)
dev_pid=""
dev_log=$tmp/capn-dev.log
marker=$tmp/started
touch "$marker"
before=$(ls -A)

# stop_dev stops capn dev as Ctrl-C does (SIGINT to its process group) and
# waits for it; it fails unless capn dev said it stopped cleanly.
stop_dev() {
  [ -n "$dev_pid" ] || return 0
  local pid=$dev_pid rc=0 waited=0
  dev_pid=""
  kill -INT -- "-$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ $waited -lt 60 ]; do
    sleep 1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "quickstart $mode: capn dev did not stop within 60 s of SIGINT; killing it" >&2
    kill -KILL -- "-$pid" 2>/dev/null || true
    return 1
  fi
  wait "$pid" || rc=$?
  # capn dev says so only when every service stopped and NATS shut down
  # (make, between, exits as interrupted whatever its child did).
  if ! grep -qx 'capn dev: stopped' "$dev_log"; then
    echo "quickstart $mode: capn dev did not stop cleanly (exit $rc); its last lines:" >&2
    tail -n 20 "$dev_log" >&2
    return 1
  fi
  echo "quickstart $mode: capn dev stopped cleanly after SIGINT (${waited} s)"
}

# leftovers lists processes started from the data dir (the process
# provider's capn-node machines and what they run).
leftovers() {
  local p args
  for p in /proc/[0-9]*; do
    args=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    if [[ $args == *"$tmp/"* ]]; then
      echo "${p#/proc/}"
    fi
  done
}

cleanup() {
  local rc=$?
  stop_dev || rc=1
  local left
  left=$(leftovers)
  if [ -n "$left" ]; then
    echo "quickstart $mode: processes of the data dir left running, killed:" >&2
    # shellcheck disable=SC2086 # one pid a word
    ps -o pid,args -p $(echo $left | tr ' ' ,) >&2 || true
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
    rc=1
  fi
  # Real nodes: none of this data dir's network namespaces (its switch's
  # id is in lan.json) may be left.
  local lan_id
  lan_id=$(sed -n 's/.*"id": *"\([0-9a-f]*\)".*/\1/p' "$DATA_DIR/process/realnodes/lan.json" 2>/dev/null || true)
  if [ "$mode" = real ] && [ -n "$lan_id" ]; then
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
      if [[ $ns == "capn-node-$lan_id-"* || $ns == "capn-lan-$lan_id" ]] && ! grep -qxF "$ns" <<<"$netns_before"; then
        echo "quickstart real: network namespace $ns of a real node left on the host; removed" >&2
        rc=1
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
      fi
    done
    ip link del "capnh$lan_id" 2>/dev/null || true
  fi
  # What the lines wrote beside README.md (kube.kubeconfig) goes too.
  local f
  for f in $(ls -A); do
    if [ -f "$f" ] && [ "$f" -nt "$marker" ] && ! grep -qxF "$f" <<<"$before"; then
      rm -f -- "$f"
    fi
  done
  if [ $rc -ne 0 ] && [ -s "$dev_log" ]; then
    echo "quickstart $mode: capn dev's last lines ($dev_log):" >&2
    tail -n 30 "$dev_log" >&2
  else
    rm -rf "$tmp"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A machine of its own: nothing of the user's capn settings, caches or
# config; an empty NPD cache and (for sim) an empty Kubernetes cache.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^CAPN_' || true)
unset XDG_CACHE_HOME
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/home/.config
mkdir -p "$HOME" "$tmp/npd-cache" "$tmp/kube-cache"
export CAPN_NPD_CACHE=$tmp/npd-cache
if [ "$mode" = kube ] || [ "$mode" = real ]; then
  if [ ! -x "$kube_bin/kube-apiserver" ]; then
    echo "quickstart $mode: no Kubernetes binaries in $kube_bin: run make kube first" >&2
    exit 1
  fi
  export CAPN_KUBE_CACHE=${kube_bin%/*/bin}
  if [ "$mode" = real ]; then
    export "${node_caches[@]}"
  fi
else
  export CAPN_KUBE_CACHE=$tmp/kube-cache
fi
# make run's data dir (DATA_DIR) and a bare capn dev's (CAPN_DATA_DIR).
export DATA_DIR=$tmp/data CAPN_DATA_DIR=$tmp/data

# start_dev runs a command line in the background, in its own process
# group (as in a terminal of its own), and waits until capn dev answers
# /healthz and has printed its banner.
start_dev() {
  local t0=$SECONDS
  echo "  \$ $*"
  set -m
  bash -c "$*" >"$dev_log" 2>&1 &
  dev_pid=$!
  set +m
  until curl -fsS -o /dev/null --max-time 2 "$healthz" 2>/dev/null; do
    if ! kill -0 "$dev_pid" 2>/dev/null; then
      echo "quickstart $mode: '$*' exited before $healthz answered:" >&2
      cat "$dev_log" >&2
      dev_pid=""
      exit 1
    fi
    if [ $((SECONDS - t0)) -ge "$start_timeout" ]; then
      echo "quickstart $mode: $healthz did not answer within ${start_timeout} s" >&2
      exit 1
    fi
    sleep 1
  done
  # The banner comes right after /healthz; it must say what is off.
  until grep -q '^Press Ctrl-C to stop.$' "$dev_log"; do
    if [ $((SECONDS - t0)) -ge "$start_timeout" ]; then
      echo "quickstart $mode: no banner within ${start_timeout} s" >&2
      exit 1
    fi
    sleep 1
  done
  printf '  %4ds  running in the background (%s answered)\n' $((SECONDS - t0)) "$healthz"
  sed -n '/^capn dev is running$/,/^Press Ctrl-C to stop.$/p' "$dev_log" | sed 's/^/        | /'
}

# check_output holds a line to what its comment in README.md promises,
# where a zero exit does not say it: `kubectl get nodes   # 5 Nodes Ready,
# v1.37.2` must list that many Nodes, Ready, of that version.
check_output() {
  local line=$1 out=$2 n version rows ready
  if [[ $line =~ get\ pods.*#\ *([0-9]+)\ pods\ Running ]]; then
    # `kubectl get pods -o wide   # 3 pods Running`: that many, each
    # Running with a pod IP.
    n=${BASH_REMATCH[1]}
    rows=$(awk '$1 != "NAME"' "$out" | wc -l)
    ready=$(awk '$1 != "NAME" && $3 == "Running" && $6 ~ /^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$/' "$out" | wc -l)
    if [ "$rows" -ne "$n" ] || [ "$ready" -ne "$n" ]; then
      echo "quickstart $mode: README promises $n pods Running; kubectl listed $rows pods, $ready of them Running with a pod IP:" >&2
      cat "$out" >&2
      exit 1
    fi
  fi
  if [[ $line =~ get\ nodes.*#\ *([0-9]+)\ Nodes\ Ready,\ *(v[0-9.]+) ]]; then
    n=${BASH_REMATCH[1]} version=${BASH_REMATCH[2]}
    rows=$(awk '$1 != "NAME" && $NF ~ /^v[0-9]/' "$out" | wc -l)
    ready=$(awk -v v="$version" '$2 == "Ready" && $NF == v' "$out" | wc -l)
    if [ "$rows" -ne "$n" ] || [ "$ready" -ne "$n" ]; then
      echo "quickstart $mode: README promises $n Nodes Ready at $version; kubectl listed $rows Nodes, $ready of them Ready at $version:" >&2
      cat "$out" >&2
      exit 1
    fi
  fi
}

total=$SECONDS
echo "quickstart $mode: README.md's block, line by line (data dir $DATA_DIR)"
if [ "$mode" = sim ]; then
  # README: "With `make run` going in one terminal, in another:"
  start_dev make run
  # A fresh machine: Kubernetes is off, and the banner says how to turn it on.
  grep -qF 'turn on: make kube, then bin/capn dev --kube-bin "$(hack/kube.sh --print-path)"' "$dev_log" || {
    echo "quickstart sim: the banner does not say how to turn Kubernetes on" >&2
    exit 1
  }
fi
for line in "${lines[@]}"; do
  trimmed=${line#"${line%%[![:space:]]*}"}
  case $trimmed in
    '' | '#'*) continue ;;
  esac
  if [[ $trimmed == "bin/capn dev"* ]]; then
    start_dev "$line"
    continue
  fi
  t0=$SECONDS
  echo "  \$ $line"
  rc=0
  timeout "$line_timeout" bash -o pipefail -c "$line" 2>&1 | tee "$tmp/line.out" | sed 's/^/        | /' || rc=$?
  if [ $rc -ne 0 ]; then
    echo "quickstart $mode: FAILED (exit $rc after $((SECONDS - t0)) s): $line" >&2
    exit 1
  fi
  check_output "$line" "$tmp/line.out"
  printf '  %4ds  ok\n' $((SECONDS - t0))
done
stop_dev
printf 'quickstart %s: every line of README.md ran, %d s in all\n' "$mode" $((SECONDS - total))
