# hack/lib.sh: what hack's cache builders share (kube.sh, nodestack.sh,
# autoscaler.sh, e2e.sh). Sourced, never run; the script sets name (its log
# prefix) first and go (the Go command) before it calls gorun.
#
#   log, note, since, field  progress lines, the build's notes (info), times,
#                            a string field of `go mod download -json`
#   take_lock <file>         one build at a time per cache: waits for the
#                            holder, saying so; the caller then looks again
#                            whether the holder built what it wanted
#   workspace <dir>          a temporary work directory ($work) and
#                            <dir>.tmp ($tmp, with bin/), both removed when
#                            the script exits; a signal first stops the
#                            command running in the background (bg, gorun)
#                            so that nothing is left building behind us, and
#                            exits 130 saying nothing was cached
#   bg <cmd…>, gorun <args…> run a command (the go command) so that a signal
#                            reaches it
# The caller renames <dir>.tmp to <dir> only when everything built, so an
# interrupted build never leaves a cache that looks complete.

log() { echo "$name: $*" >&2; }
info=()
note() { info+=("$*"); log "$*"; }
since() { echo $(( $(date +%s) - $1 )); }
field() { sed -n 's/^[[:space:]]*"'"$1"'": "\(.*\)",\{0,1\}$/\1/p'; }

take_lock() {
  command -v flock >/dev/null || return 0
  exec 9>"$1"
  if ! flock -n 9; then
    log "another build holds $1; waiting for it"
    flock 9
  fi
}

child=
work=
tmp=
cleanup() {
  if [[ -n $work ]]; then
    chmod -R u+w "$work" 2>/dev/null || true
    rm -rf "$work"
  fi
  [[ -n $tmp && -d $tmp ]] && rm -rf "$tmp"
  return 0
}
stop() {
  trap - INT TERM HUP
  if [[ -n $child ]]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  log "interrupted; nothing was cached"
  exit 130
}
workspace() {
  tmp=$1.tmp
  work=$(mktemp -d)
  trap cleanup EXIT
  trap stop INT TERM HUP
  rm -rf "$tmp"
  mkdir -p "$tmp/bin"
}
bg() {
  local rc=0
  "$@" &
  child=$!
  wait "$child" || rc=$?
  child=
  return "$rc"
}
gorun() { bg "$go" "$@"; }
