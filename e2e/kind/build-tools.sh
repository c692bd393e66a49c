#!/usr/bin/env bash
# Build what an offline kind cluster needs besides the Kubernetes binaries (those come from
# e2e/controlplane/build.sh): kind itself, crictl (kind load), CoreDNS (a minimal-plugin main in
# e2e/kind/coredns), local-path-provisioner, and the static pause binary. All from the Go module
# proxy, cached by version under ~/.cache/ferrymq-k8s/kind-<KIND_VERSION>/bin; only what is missing
# is built. Prints the bin dir on its last line.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/../controlplane/versions.env"
CACHE_ROOT="${FERRYMQ_K8S_CACHE:-$HOME/.cache/ferrymq-k8s}"
BIN="$CACHE_ROOT/kind-$KIND_VERSION/bin"
LOG="$CACHE_ROOT/kind-$KIND_VERSION/timings.log"
mkdir -p "$BIN"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
NICE=(nice -n 19)

# shellcheck source=../lib/step.sh
source "$HERE/../lib/step.sh"

gi() { GOBIN="$BIN" "${NICE[@]}" go install -trimpath -ldflags "-s -w $2" "$1"; }

build_coredns() {
  ( cd "$HERE/coredns" && "${NICE[@]}" go build -mod=mod -trimpath \
      -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" -o "$BIN/coredns" . )
}

build_crictl() {
  # A wrapper module (e2e/kind/crictl): `go install ...@v` asks the proxy for cri-tools' version
  # list, which it does not serve.
  ( cd "$HERE/crictl" && "${NICE[@]}" go build -mod=mod -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" -o "$BIN/crictl" \
      sigs.k8s.io/cri-tools/cmd/crictl )
}

build_pause() {
  # kubeadm expects registry.k8s.io/pause; its source is one C file in the Kubernetes module.
  local src
  src="$(cd /tmp && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/build/pause/linux/pause.c"
  gcc -Os -static -DVERSION="$PAUSE_VERSION" -o "$BIN/pause" "$src"
  strip "$BIN/pause"
}

[ -x "$BIN/kind" ]    || step "kind $KIND_VERSION" gi "sigs.k8s.io/kind@$KIND_VERSION" ""
[ -x "$BIN/crictl" ]  || step "crictl $CRICTL_VERSION" build_crictl
[ -x "$BIN/local-path-provisioner" ] || step "local-path-provisioner $LOCAL_PATH_VERSION" \
                            gi "github.com/rancher/local-path-provisioner@$LOCAL_PATH_VERSION" ""
[ -x "$BIN/coredns" ] || step "coredns $COREDNS_VERSION" build_coredns
[ -x "$BIN/pause" ]   || step "pause $PAUSE_VERSION" build_pause
echo "$BIN"
