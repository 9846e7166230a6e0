#!/usr/bin/env bash
# Start or stop a private Docker engine for tests and CI.
#
#   .ci/dockerd.sh install   apt-get install docker.io when dockerd is missing (root, Debian)
#   .ci/dockerd.sh start     start dockerd in the background and wait until it answers
#   .ci/dockerd.sh stop      stop the engine this script started (by its pidfile)
#   .ci/dockerd.sh status    say whether it answers
#
# The engine is sealed off from the host's networking (--bridge=none --iptables=false:
# sandboxed runs use network "none" anyway), keeps its own data root, pidfile, socket
# and log, so it never touches a system engine that may also be installed.
# Override the locations with NIGHTSHIFT_DOCKER_ROOT (default /tmp/nightshift-docker).
set -euo pipefail

ROOT="${NIGHTSHIFT_DOCKER_ROOT:-/tmp/nightshift-docker}"
DATA="$ROOT/data"
EXEC="$ROOT/exec"
PIDFILE="$ROOT/dockerd.pid"
LOG="$ROOT/dockerd.log"
SOCK="${NIGHTSHIFT_DOCKER_SOCK:-/var/run/docker.sock}"
WAIT_S="${NIGHTSHIFT_DOCKER_WAIT_S:-60}"

answers() { docker -H "unix://$SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

running_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid; pid="$(cat "$PIDFILE")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

cmd_install() {
  if command -v dockerd >/dev/null 2>&1; then echo "dockerd present: $(command -v dockerd)"; return 0; fi
  if [[ "$(id -u)" != 0 ]]; then echo "dockerd missing; install docker.io as root" >&2; return 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io
}

cmd_start() {
  if answers; then
    echo "docker engine already answers at unix://$SOCK"
    return 0
  fi
  command -v dockerd >/dev/null 2>&1 || { echo "dockerd not found: run '$0 install' (apt-get install docker.io)" >&2; return 1; }
  [[ "$(id -u)" == 0 ]] || { echo "dockerd needs root" >&2; return 1; }
  mkdir -p "$DATA" "$EXEC"
  # --bridge=none: no docker0, no NAT rules; runs get network "none" from the harness.
  nohup dockerd \
    --host "unix://$SOCK" \
    --data-root "$DATA" \
    --exec-root "$EXEC" \
    --pidfile "$PIDFILE" \
    --bridge=none --iptables=false --ip6tables=false \
    >"$LOG" 2>&1 </dev/null &
  local launched=$!
  local waited=0
  until answers; do
    if ! kill -0 "$launched" 2>/dev/null; then
      echo "dockerd exited during start-up; last lines of $LOG:" >&2
      tail -n 20 "$LOG" >&2
      return 1
    fi
    if (( waited >= WAIT_S * 2 )); then
      echo "dockerd did not answer within ${WAIT_S}s; see $LOG" >&2
      kill "$launched" 2>/dev/null || true
      return 1
    fi
    sleep 0.5; waited=$((waited + 1))
  done
  echo "docker engine $(docker -H "unix://$SOCK" version --format '{{.Server.Version}}') answers at unix://$SOCK (pid $launched, log $LOG)"
}

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then echo "no dockerd started by this script is running"; return 0; fi
  kill -TERM "$pid"
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || { echo "dockerd (pid $pid) stopped"; return 0; }
    sleep 0.5
  done
  echo "dockerd (pid $pid) ignored SIGTERM for 30 s; sending SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

cmd_status() {
  if answers; then echo "answers at unix://$SOCK"; else echo "no engine answers at unix://$SOCK"; return 1; fi
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
