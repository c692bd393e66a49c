#!/usr/bin/env bash
# `make e2e-kind`: FerryMQ's user story on a real kind cluster, built and run offline here.
#
#   1. a Docker engine (e2e/docker/ensure-dockerd.sh installs and starts one when none answers);
#   2. the kind node image (e2e/kind/build-node-image.sh: no registry needed) and FerryMQ's
#      images (e2e/images/build-images.sh, tag "e2e");
#   3. the docker network ferrymq-kind with an explicit subnet, and kind cluster "ferrymq-e2e"
#      (control plane + 3 workers; a cluster of that name left by an earlier run is deleted first),
#      each worker with a small volume file system of its own (small_volumes, loop-mounted here);
#   4. `kind load` of the images, `helm upgrade --install` of charts/ferrymq-operator (its CRDs
#      too: templates of the release, crds.install);
#   5. pytest e2e/kind/test_kind_e2e.py (marker kind): the scenarios, in the cluster, against its
#      own addresses (the last one upgrades, then uninstalls the chart; the CRDs stay, kept by
#      helm.sh/resource-policy);
#   6. the chart installed again (adopting the kept CRDs), then pytest e2e/kind/test_kind_chaos.py: node faults (docker
#      pause / kill / network disconnect of the master's node, the deciders' pods deleted) under a
#      replicated Broker with failover, in the same cluster. FERRYMQ_KIND_CHAOS_FAULTS (default 4:
#      one of each kind) sets how many; `make chaos-kind` runs 30 random ones and writes
#      bench/results/chaos-kind-<date>.json. Its workload is the official RocketMQ 4.9.7 Java client
#      and the 5.x gRPC Java client's push consumer (jars from Maven Central into .cache/, run with the
#      Spark image's JRE on the control-plane node). FERRYMQ_KIND_CHAOS_MODE=Async: an ASYNC_MASTER
#      Broker, its loss counted and reported, not failing the run (docs/chaos.md).
# FERRYMQ_KIND_SUITES (default "e2e chaos") chooses which of 5 and 6 run ("chaos": only the faults).
# On failure: `kind export logs`, the operator's and brokers' logs and an object dump under
# .cache/e2e-logs/. The cluster is deleted at the end unless FERRYMQ_KIND_KEEP=1.
# Per-phase wall times are printed at the end (and appended to .cache/e2e-timings.log).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$REPO/e2e/controlplane/versions.env"
CLUSTER="${FERRYMQ_KIND_CLUSTER:-ferrymq-e2e}"
NETWORK=ferrymq-kind
SUBNET="${FERRYMQ_KIND_SUBNET:-172.29.77.0/24}"
TAG=e2e
PY="${PY:-$REPO/.venv/bin/python}"
LOGS="$REPO/.cache/e2e-logs"
TIMINGS=()
SUITES=" ${FERRYMQ_KIND_SUITES:-e2e chaos} "
phase() {  # phase NAME CMD...
  local t0=$SECONDS name="$1" rc=0; shift
  echo "e2e-kind: == $name" >&2
  "$@" || rc=$?
  TIMINGS+=("$(printf '%-28s %5d s%s' "$name" $((SECONDS - t0)) "$([ $rc -eq 0 ] || echo " (failed, exit $rc)")")")
  return $rc
}

network() {
  local have
  have="$(docker network inspect -f '{{range .IPAM.Config}}{{.Subnet}}{{end}}' "$NETWORK" 2>/dev/null || true)"
  if [ -n "$have" ] && [ "$have" != "$SUBNET" ]; then
    echo "e2e-kind: network $NETWORK has subnet $have, want $SUBNET: recreating" >&2
    docker network rm "$NETWORK" >/dev/null
    have=""
  fi
  [ -n "$have" ] || docker network create --driver bridge --subnet "$SUBNET" \
      -o com.docker.network.bridge.enable_ip_masquerade=true "$NETWORK" >/dev/null
  local bridge others
  bridge="br-$(docker network inspect -f '{{.Id}}' "$NETWORK" | cut -c1-12)"
  others="$(ip -o route show "$SUBNET" | grep -v " dev $bridge " || true)"
  if [ -n "$others" ]; then
    echo "e2e-kind: $SUBNET is also routed elsewhere on this machine ($others); choose another with FERRYMQ_KIND_SUBNET" >&2
    return 1
  fi
}

VOLUMES=/var/lib/ferrymq-kind/volumes  # kind-config.yaml names these paths

drop_small_volumes() {  # unmount and remove what this or an earlier run made
  local n dir img
  for n in 1 2 3; do
    dir="$VOLUMES/worker$n" img="$VOLUMES/worker$n.img"
    if mountpoint -q "$dir" 2>/dev/null; then umount "$dir" 2>/dev/null || umount -l "$dir"; fi
    [ ! -e "$img" ] || losetup -j "$img" | cut -d: -f1 | xargs -r -n1 losetup -d 2>/dev/null || true
    rm -f "$img"
  done
}

small_volumes() {
  # Each worker's own small file system for volumes of the StorageClass ferrymq-small (the fault
  # suite's Broker): its fill-disk fault fills one node's volume to the last block, not this
  # machine's disk. Sparse 2 GiB ext4 loop file systems, no reserved blocks.
  local n dir img
  drop_small_volumes
  for n in 1 2 3; do
    dir="$VOLUMES/worker$n" img="$VOLUMES/worker$n.img"
    mkdir -p "$dir"
    truncate -s 2G "$img"
    mkfs.ext4 -q -F -m 0 "$img"
    mount -o loop "$img" "$dir" || { echo "e2e-kind: cannot loop-mount $img (root and a loop device needed)" >&2; return 1; }
  done
}

create_cluster() {
  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    echo "e2e-kind: deleting cluster $CLUSTER left by an earlier run" >&2
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  # A node container of that name without a cluster (an interrupted create) would make kind fail.
  docker ps -aq --filter "label=io.x-k8s.kind.cluster=$CLUSTER" | xargs -r docker rm -f >/dev/null
  network
  small_volumes
  KIND_EXPERIMENTAL_DOCKER_NETWORK="$NETWORK" kind create cluster --name "$CLUSTER" --image "$NODE_IMAGE" \
    --config "$HERE/kind-config.yaml" --kubeconfig "$KUBECONFIG" --wait 300s --retain
}

install_chart() {
  # The Spark image (1.3 GB) into every node for the scenarios; the node faults' Java workload
  # (its JRE) needs it on the control-plane node only, where its pod runs.
  local images=("ferrymq/operator:$TAG" "ferrymq/broker:$TAG")
  [[ "$SUITES" != *" e2e "* ]] || images+=("ferrymq/spark:$TAG")
  kind load docker-image --name "$CLUSTER" "${images[@]}"
  if [[ "$SUITES" == *" chaos "* && "$SUITES" != *" e2e "* ]]; then
    kind load docker-image --name "$CLUSTER" --nodes "$CLUSTER-control-plane" "ferrymq/spark:$TAG"
  fi
  helm upgrade --install ferrymq "$REPO/charts/ferrymq-operator" -n ferrymq-system --create-namespace \
    --set image.tag="$TAG" --set image.pullPolicy=Never --set brokerImage.tag="$TAG" \
    --set resyncSeconds=10 --set brokerResyncSeconds=3 --wait --timeout 300s
}

run_tests() {  # run_tests FILE [pytest args...]
  local file="$1"; shift
  (cd "$REPO" && FERRYMQ_KIND_TESTS=1 FERRYMQ_IMAGE_TAG="$TAG" PYTHONPATH="$REPO" \
     "$PY" -m pytest -q -ra -p no:cacheprovider "$@" "$file")
}

run_chaos() {
  # The scenarios end with `helm uninstall`: the faults need the operator back (images are loaded;
  # the CRDs, kept by the uninstall, still carry this release's ownership and are taken back).
  helm upgrade --install ferrymq "$REPO/charts/ferrymq-operator" -n ferrymq-system --create-namespace \
    --set image.tag="$TAG" --set image.pullPolicy=Never --set brokerImage.tag="$TAG" \
    --set resyncSeconds=10 --set brokerResyncSeconds=3 --wait --timeout 300s || return $?
  run_tests e2e/kind/test_kind_chaos.py -s
}

diagnostics() {
  rm -rf "$LOGS"; mkdir -p "$LOGS"
  kubectl get nodes,all,pvc,pv,brokers,topics,consumergroups,cronjobs,jobs -A -o wide > "$LOGS/objects.txt" 2>&1 || true
  kubectl get events -A --sort-by=.lastTimestamp > "$LOGS/events.txt" 2>&1 || true
  # every operator replica (one leads, the others stand by), each line prefixed with its pod
  kubectl logs -n ferrymq-system -l app.kubernetes.io/name=ferrymq-operator --prefix --tail=-1 \
    > "$LOGS/operator.log" 2>&1 || true
  local ns pod
  kubectl get pods -A -l app.kubernetes.io/name=ferrymq -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.name}{"\n"}{end}' 2>/dev/null |
    while read -r ns pod; do kubectl logs -n "$ns" "$pod" --all-containers --tail=-1 > "$LOGS/$ns-$pod.log" 2>&1 || true; done
  kind export logs --name "$CLUSTER" "$LOGS/kind" >/dev/null 2>&1 || true
  echo "e2e-kind: diagnostics in $LOGS" >&2
}

on_exit() {
  local rc=$?
  set +e  # collect what can be collected; never stop half-way through the clean-up
  if [ "$rc" -ne 0 ] && [ -n "${KUBECONFIG:-}" ]; then echo "e2e-kind: FAILED (exit $rc)" >&2; diagnostics; fi
  if [ "${FERRYMQ_KIND_KEEP:-0}" != "1" ] && command -v kind >/dev/null 2>&1; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    drop_small_volumes
  fi
  if [ ${#TIMINGS[@]} -gt 0 ]; then
    { echo "e2e-kind timings ($(date -u +%FT%TZ), exit $rc):"; printf '  %s\n' "${TIMINGS[@]}"; } | tee -a "$REPO/.cache/e2e-timings.log" >&2
  fi
}

main() {
  mkdir -p "$REPO/.cache"
  trap on_exit EXIT
  phase "docker engine" bash "$REPO/e2e/docker/ensure-dockerd.sh"
  phase "kind node image" eval 'NODE_IMAGE="$(bash "$HERE/build-node-image.sh")"'
  K8S_BIN="$(bash "$REPO/e2e/controlplane/build.sh" | tail -1)"
  TOOLS_BIN="$(bash "$HERE/build-tools.sh" | tail -1)"
  export PATH="$K8S_BIN:$TOOLS_BIN:$PATH"
  export KUBECONFIG="$REPO/.cache/kind-$CLUSTER.kubeconfig"
  phase "FerryMQ images" env FERRYMQ_IMAGE_TAG="$TAG" bash "$REPO/e2e/images/build-images.sh"
  # The node faults' workload: the RocketMQ 4.9.7 and 5.x Java clients' jars (Maven Central, cached
  # once per machine by testkit.build_cache) and our programs compiled, copied into its pod by the suite
  # (e2e/kind/java_pod.py).
  if [[ "$SUITES" == *" chaos "* ]]; then
    phase "Java clients 4.9.7, 5.x" env PYTHONPATH="$REPO" "$PY" -c \
      'from testkit.java_client import ensure_compat_classes; ensure_compat_classes()
from testkit.grpc_clients import ensure_java5_classes; ensure_java5_classes()'
  fi
  phase "kind create cluster" create_cluster
  phase "load images, helm install" install_chart
  # A failed scenario does not skip the node faults (they use their own namespace and Broker);
  # the run fails at the end if either did.
  local failed=0
  if [[ "$SUITES" == *" e2e "* ]]; then phase "scenarios (pytest)" run_tests e2e/kind/test_kind_e2e.py || failed=1; fi
  if [[ "$SUITES" == *" chaos "* ]]; then phase "node faults (pytest)" run_chaos || failed=1; fi
  return $failed
}

main "$@"
