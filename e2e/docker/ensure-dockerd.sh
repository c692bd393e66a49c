#!/usr/bin/env bash
# Make a Docker engine answer on this machine, idempotently.
#
#   e2e/docker/ensure-dockerd.sh          # prints "dockerd: ..." lines, exit 0 when `docker info` works
#   e2e/docker/ensure-dockerd.sh --stop   # stops the engine if (and only if) this script started it
#
# - An engine that already answers is used as it is (and never stopped by us).
# - Otherwise: Debian's docker.io is installed when dockerd is missing, then dockerd is started in
#   the background (no systemd here) with the capability-filtering runtime wrapper as its default
#   runtime (see runc-capfilter: privileged containers need it on this machine), a pid file and its
#   log under ~/.cache/ferrymq-k8s/docker/. State left by an earlier, dead engine (pid files,
#   sockets, containerd's state) is cleaned first.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
STATE="${FERRYMQ_K8S_CACHE:-$HOME/.cache/ferrymq-k8s}/docker"
PIDFILE="$STATE/dockerd.pid"
LOG="$STATE/dockerd.log"
WRAPPER="$STATE/runc-capfilter"
say() { echo "dockerd: $*"; }

answers() { timeout 20 docker info >/dev/null 2>&1; }

stop() {
  if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    say "stopping the engine this script started (pid $(cat "$PIDFILE"))"
    kill "$(cat "$PIDFILE")"
    for _ in $(seq 60); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$PIDFILE"
}

install_engine() {
  command -v dockerd >/dev/null 2>&1 && return 0
  say "installing Debian's docker.io (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq docker.io >/dev/null
  # The package's own service cannot start without systemd; we start dockerd ourselves.
}

clean_stale() {
  # A dockerd from an earlier session died with the session: its pid file, sockets and the
  # containerd it spawned are stale. Leave nothing that makes the new engine refuse to start.
  # A pid file is stale when its process is gone or the number now belongs to another program
  # (pids are reused: dockerd refuses to start while its pid file names any live process).
  local pid f name
  for f in /var/run/docker.pid:dockerd /run/docker/containerd/containerd.pid:containerd; do
    name="${f##*:}" f="${f%:*}"
    if [ -s "$f" ]; then
      pid="$(cat "$f")"
      if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$name" ]; then rm -f "$f"; fi
    fi
  done
  if ! pgrep -x dockerd >/dev/null; then
    pkill -x containerd-shim-runc-v2 2>/dev/null || true
    rm -f /var/run/docker.sock /run/docker/containerd/containerd.sock /run/docker/containerd/containerd-debug.sock
    rm -rf /run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby 2>/dev/null || true
    # Bridges of a dead engine: dockerd re-creates the ones its networks need. A leftover one
    # keeps its subnet routed, and a new network with the same subnet then cannot carry traffic.
    local br
    for br in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^(docker0|br-[0-9a-f]{12})$'); do
      say "removing bridge $br left by an earlier engine"
      ip link delete "$br" 2>/dev/null || true
    done
  fi
}

start() {
  if answers; then say "an engine already answers"; return 0; fi
  install_engine
  mkdir -p "$STATE"
  install -m 0755 "$HERE/runc-capfilter" "$WRAPPER"
  clean_stale
  # kind nodes each run systemd and containerd: more inotify instances than the default 128.
  sysctl -qw fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288 2>/dev/null || true
  say "starting dockerd (log $LOG)"
  nohup dockerd --add-runtime "capfilter=$WRAPPER" --default-runtime capfilter \
      --pidfile /var/run/docker.pid >"$LOG" 2>&1 &
  echo $! > "$PIDFILE"
  for _ in $(seq 120); do
    if answers; then say "engine up ($(docker version --format '{{.Server.Version}}'))"; return 0; fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then break; fi
    sleep 0.5
  done
  say "FAILED to start; the last lines of $LOG:" >&2
  tail -20 "$LOG" >&2
  exit 1
}

case "${1:-}" in
  --stop) stop ;;
  *) start ;;
esac
