#!/usr/bin/env bash
# `make images`: FerryMQ's three images from the repository's Dockerfiles.
#
#   ferrymq/broker:TAG    broker-image/Dockerfile  (broker, name server, standalone)
#   ferrymq/operator:TAG  Dockerfile               (the kopf operator)
#   ferrymq/spark:TAG     spark-jobs/Dockerfile    (Spark driver/executor with ferrymq_spark)
#
# TAG: $FERRYMQ_IMAGE_TAG, default the chart's appVersion. Base: $FERRYMQ_PYTHON_IMAGE if set
# (e.g. the official python:3.11.10-slim-bookworm, with internet access); otherwise that official
# image when it is already present locally; otherwise a Python base built here from Debian's
# packages (e2e/images/debian-base.sh, no registry needed). Nothing is pulled unless you name it.
# A TLS-inspecting proxy: $FERRYMQ_BUILD_CA (default: this machine's trust store) is given to the
# build stages only, as build-ca.crt in the context; the published stages never contain it.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TAG="${FERRYMQ_IMAGE_TAG:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}/\1/p' "$REPO/charts/ferrymq-operator/Chart.yaml")}"
OFFICIAL=python:3.11.10-slim-bookworm
log() { echo "images: $*" >&2; }

bash "$REPO/e2e/docker/ensure-dockerd.sh" >&2

python_base() {
  if [ -n "${FERRYMQ_PYTHON_IMAGE:-}" ]; then echo "$FERRYMQ_PYTHON_IMAGE"; return; fi
  if docker image inspect "$OFFICIAL" >/dev/null 2>&1; then echo "$OFFICIAL"; return; fi
  local img=ferrymq.local/python:3.11-bookworm debian
  if ! docker image inspect "$img" >/dev/null 2>&1; then
    debian="$(bash "$HERE/debian-base.sh")"
    log "building $img from $debian (Debian's python3)"
    printf 'FROM %s\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null && rm -rf /var/lib/apt/lists/*\n' \
      "$debian" | docker build -q -t "$img" - >/dev/null
  fi
  echo "$img"
}
BASE="$(python_base)"

CA="${FERRYMQ_BUILD_CA-/etc/ssl/certs/ca-certificates.crt}"
cleanup() { rm -f "$REPO/build-ca.crt"; }
trap cleanup EXIT
if [ -n "$CA" ] && [ -f "$CA" ]; then cp "$CA" "$REPO/build-ca.crt"; fi

build() {  # build NAME DOCKERFILE
  local t0=$SECONDS out="$REPO/.cache/images-$1.log"
  mkdir -p "$REPO/.cache"
  if docker build --build-arg "PYTHON_IMAGE=$BASE" -f "$REPO/$2" -t "ferrymq/$1:$TAG" "$REPO" >"$out" 2>&1; then
    log "built ferrymq/$1:$TAG in $((SECONDS - t0)) s ($(docker image inspect -f '{{.Size}}' "ferrymq/$1:$TAG" | awk '{printf "%.0f MB", $1/1048576}'))"
  else
    log "FAILED ferrymq/$1:$TAG; the end of $out:"; tail -25 "$out" >&2; return 1
  fi
}
log "base $BASE, tag $TAG"
started="$(date +%s)"
# The Spark image (a JRE and pyspark) takes longest: build it beside the other two.
build spark spark-jobs/Dockerfile & spark=$!
build broker broker-image/Dockerfile
build operator Dockerfile
wait "$spark"
# Every build leaves the images its tags pointed to before, and its build stages, untagged: 4-5 GB
# a run, 47 GB after a day of runs on one machine (Apache's broker then refused writes: disk 91 %
# full). Untagged images older than this build go; this build's stages stay as the next one's cache.
docker image prune -f --filter "until=$started" >/dev/null || log "could not remove old untagged images"
printf 'ferrymq/%s:%s\n' broker "$TAG" operator "$TAG" spark "$TAG"
