#!/usr/bin/env bash
# `make e2e-kind`: the operator scenarios on a real kind cluster, as a user would run them.
#
#   1. kind cluster "ferrymq-e2e" (created unless it exists; deleted afterwards unless
#      FERRYMQ_KIND_KEEP=1)
#   2. docker build of the operator (./Dockerfile) and broker (broker-image/Dockerfile) images,
#      `kind load docker-image` into the nodes
#   3. `helm upgrade --install` of charts/ferrymq-operator with those images, --wait
#   4. pytest e2e/kind: Broker -> Ready pods with real probes, Topic/ConsumerGroup on the real
#      brokers, deletion, invalid resources rejected
#   On failure: `kind export logs` and a dump of the objects into .cache/kind-logs/.
#
# Without a running Docker engine this prints one line saying so and exits 0.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$REPO/e2e/controlplane/versions.env"
CLUSTER="${FERRYMQ_KIND_CLUSTER:-ferrymq-e2e}"
TAG="e2e"
PY="${PY:-$REPO/.venv/bin/python}"

main() {
  if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
    echo "e2e-kind: SKIPPED - no Docker engine is running on this machine (docker info failed); run make e2e-kind where Docker runs"
    return 0
  fi
  # helm and kubectl: the pinned builds of the local control plane (cached), kind likewise.
  BIN="$(bash "$REPO/e2e/controlplane/build.sh" | tail -1)"
  if ! command -v kind >/dev/null 2>&1; then
    [ -x "$BIN/kind" ] || GOBIN="$BIN" GOTOOLCHAIN=local CGO_ENABLED=0 go install "sigs.k8s.io/kind@$KIND_VERSION"
  fi
  export PATH="$BIN:$PATH"
  local logs="$REPO/.cache/kind-logs"
  export KUBECONFIG="$REPO/.cache/kind-$CLUSTER.kubeconfig"

  if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" --config "$HERE/kind-config.yaml" --kubeconfig "$KUBECONFIG" --wait 180s
  else
    kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG"
  fi
  trap 'on_exit $?' EXIT

  docker build -t "ferrymq/operator:$TAG" "$REPO"
  docker build -f "$REPO/broker-image/Dockerfile" -t "ferrymq/broker:$TAG" "$REPO"
  kind load docker-image --name "$CLUSTER" "ferrymq/operator:$TAG" "ferrymq/broker:$TAG"

  helm upgrade --install ferrymq "$REPO/charts/ferrymq-operator" -n ferrymq-system --create-namespace \
    --set image.tag="$TAG" --set image.pullPolicy=Never --set brokerImage.tag="$TAG" \
    --set resyncSeconds=10 --set brokerResyncSeconds=3 --wait --timeout 300s

  (cd "$REPO" && FERRYMQ_KIND_TESTS=1 PYTHONPATH="$REPO" "$PY" -m pytest -q -ra e2e/kind)
}

on_exit() {
  local rc="$1"
  if [ "$rc" -ne 0 ]; then
    echo "e2e-kind: FAILED (exit $rc); diagnostics in $REPO/.cache/kind-logs"
    mkdir -p "$REPO/.cache/kind-logs"
    kubectl get all,pvc,brokers,topics,consumergroups,events -A -o wide > "$REPO/.cache/kind-logs/objects.txt" 2>&1 || true
    kubectl logs -n ferrymq-system deploy/ferrymq-ferrymq-operator --tail=-1 > "$REPO/.cache/kind-logs/operator.log" 2>&1 || true
    kind export logs --name "$CLUSTER" "$REPO/.cache/kind-logs/kind" >/dev/null 2>&1 || true
  fi
  if [ "${FERRYMQ_KIND_KEEP:-0}" != "1" ]; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
}

main "$@"
