# shellcheck shell=bash
# Sourced by the build scripts under e2e/: `step NAME CMD...` runs CMD with its output on stderr
# (a script's stdout carries only its result, e.g. a bin dir on the last line), appends start and
# end times to $LOG, and on failure names the step that broke and exits.
step() {
  local name="$1"; shift
  local t0=$SECONDS
  echo "[$(date -u +%FT%TZ)] start $name" | tee -a "$LOG" >&2
  if ! "$@" >&2; then
    echo "$(basename "$0"): step '$name' FAILED (log: $LOG)" >&2
    exit 1
  fi
  echo "[$(date -u +%FT%TZ)] done  $name in $((SECONDS - t0)) s" | tee -a "$LOG" >&2
}
