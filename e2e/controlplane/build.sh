#!/usr/bin/env bash
# Build the local Kubernetes test control plane from the Go module proxy, idempotently.
#
#   e2e/controlplane/build.sh            # builds only what is missing, prints the bin dir
#
# Binaries land OUTSIDE the clone, in $FERRYMQ_K8S_CACHE/k8s-<version>/bin (default
# ~/.cache/ferrymq-k8s), so a fresh clone on the same machine reuses them; GOMODCACHE and
# GOCACHE stay at Go's defaults in $HOME for the same reason. Everything runs under
# `nice -n 19` so other work on a small machine keeps moving. Per-step wall times and
# binary sizes are appended to <cache>/timings.log.
#
# Why a wrapper module (go.mod next to this script): k8s.io/kubernetes requires its
# staging modules at v0.0.0 with replace directives, so `go install .../kube-apiserver@v`
# cannot work; our own module replaces each staging module by its published v0.Y.Z.
# etcd's server module is a main package that k/k already requires at its pinned version.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
CACHE_ROOT="${FERRYMQ_K8S_CACHE:-$HOME/.cache/ferrymq-k8s}"
OUT="$CACHE_ROOT/k8s-$K8S_VERSION"
BIN="$OUT/bin"
LOG="$OUT/timings.log"
mkdir -p "$BIN"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
NICE=(nice -n 19)

need_go() {
  command -v go >/dev/null || { echo "build.sh: Go is required (go1.26+) and was not found" >&2; exit 2; }
}

# shellcheck source=../lib/step.sh
source "$HERE/../lib/step.sh"

build_helm() {
  # Like helm's Makefile: the default Kubernetes version of `helm template`/`lint` comes from
  # the client-go helm is built with (otherwise it is v1.20 and charts with kubeVersion fail).
  local gomod minor
  gomod="$(cd /tmp && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  minor="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)"
  local x="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    x+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
  done
  GOBIN="$BIN" "${NICE[@]}" go install -trimpath -ldflags "-s -w $x" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

build_kwok() {
  GOBIN="$BIN" "${NICE[@]}" go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

build_k8s() {
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local date; date="$(date -u +%FT%TZ)"
  local x=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    x+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    x+=" -X $p.gitTreeState=clean -X $p.buildDate=$date"
  done
  local tmp="$OUT/build-tmp"; rm -rf "$tmp"; mkdir -p "$tmp"
  # One invocation so the shared closure compiles once. -mod=mod: resolve go.sum from the
  # proxy without `go mod tidy` (which the upstream notes say can trip on gogo/protobuf).
  ( cd "$HERE" && "${NICE[@]}" go build -mod=mod -trimpath -tags selinux,notest,grpcnotrace \
      -ldflags "-s -w$x" -o "$tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl \
      k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kubeadm \
      k8s.io/kubernetes/cmd/kube-proxy \
      go.etcd.io/etcd/server/v3 )
  mv "$tmp/server" "$tmp/etcd"   # the etcd main package's directory is server/v3
  mv "$tmp"/* "$BIN/"; rmdir "$tmp"
}

kwok_stages() {
  # kwok v0.8 starts with no stages unless given some: take the upstream "fast" node and pod
  # stages (Ready at once, Jobs complete, deletions finish) and node heartbeats with leases
  # from the pinned kwok module we just built, so nothing fetched is copied into the repo.
  local src; src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
  local f out="$OUT/kwok-stages.yaml.tmp"
  : > "$out"
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [ -f "$src/$f" ] || (cd /tmp && go mod download "sigs.k8s.io/kwok@$KWOK_VERSION")
    { echo "---"; cat "$src/$f"; } >> "$out"
  done
  mv "$out" "$OUT/kwok-stages.yaml"
}

prometheus_crds() {
  # The Prometheus operator's PodMonitor and PrometheusRule CRDs, so the chart's monitoring
  # objects are validated by the real API server; from the pinned Go module, never copied in.
  local src; src="$(go env GOMODCACHE)/github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION/example/prometheus-operator-crd"
  local f out="$OUT/prometheus-operator-crds.yaml.tmp"
  [ -d "$src" ] || (cd /tmp && go mod download "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
  : > "$out"
  for f in monitoring.coreos.com_podmonitors.yaml monitoring.coreos.com_prometheusrules.yaml; do
    { echo "---"; cat "$src/$f"; } >> "$out"
  done
  mv "$out" "$OUT/prometheus-operator-crds.yaml"
}

missing() { for b in "$@"; do [ -x "$BIN/$b" ] || return 0; done; return 1; }

main() {
  need_go
  if missing helm; then step "helm $HELM_VERSION" build_helm; fi
  if missing etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kubeadm kube-proxy; then
    step "k8s $K8S_VERSION (apiserver, controller-manager, scheduler, kubectl, kubelet, kubeadm, kube-proxy, etcd)" build_k8s
  fi
  if missing kwok; then step "kwok $KWOK_VERSION" build_kwok; fi
  [ -s "$OUT/kwok-stages.yaml" ] || kwok_stages
  [ -s "$OUT/prometheus-operator-crds.yaml" ] || prometheus_crds

  if [ -n "${FERRYMQ_K8S_REPORT:-}" ] || ! grep -q '^sizes' "$LOG" 2>/dev/null; then
    { echo "sizes $(date -u +%FT%TZ):"; (cd "$BIN" && ls -l | awk 'NR>1 {printf "  %-26s %6.1f MB\n", $9, $5/1048576}');
      echo "  total $(du -sh "$BIN" | cut -f1)"; } | tee -a "$LOG"
  fi
  # A link in the git-ignored .cache/ makes the binaries easy to find from the clone.
  mkdir -p "$HERE/../../.cache" && ln -sfn "$OUT" "$HERE/../../.cache/k8s"
  echo "$BIN"
}

# Everything above is definitions: bash has parsed the whole file before main runs, so an
# edit to this script during a long build cannot derail the running one.
main "$@"
exit
