#!/usr/bin/env bash
# Build the offline kind node image (no container registry is reachable here) and print its name.
#
#   1. binaries: Kubernetes (e2e/controlplane/build.sh), kind/crictl/CoreDNS/local-path/pause
#      (e2e/kind/build-tools.sh), all cached under ~/.cache/ferrymq-k8s;
#   2. the images kubeadm and the node manifests expect, under exactly the names kubeadm 1.36
#      asks for (static binaries FROM scratch; kube-proxy on the Debian base for iptables);
#   3. the node stage (e2e/kind/node/Dockerfile: Debian bookworm + systemd + containerd + kind's
#      node files + kubelet/kubeadm/kubectl);
#   4. those images imported into the node's containerd (k8s.io namespace), then `docker commit`.
# The tag carries a hash of every input file, so an unchanged second run reuses the image.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
source "$REPO/e2e/controlplane/versions.env"
log() { echo "node-image: $*" >&2; }
fail() { echo "node-image: FAILED at step: $*" >&2; exit 1; }

inputs_hash() {
  (cd "$REPO" && cat e2e/controlplane/versions.env e2e/kind/build-node-image.sh \
     $(find e2e/kind/node -type f | sort) | sha256sum | cut -c1-12)
}
NODE_IMAGE="ferrymq.local/kind-node:$K8S_VERSION-$(inputs_hash)"
if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then log "reusing $NODE_IMAGE"; echo "$NODE_IMAGE"; exit 0; fi

t0=$SECONDS
K8S_BIN="$(bash "$REPO/e2e/controlplane/build.sh" | tail -1)" || fail "Kubernetes binaries"
TOOLS_BIN="$(bash "$HERE/build-tools.sh" | tail -1)" || fail "kind tools"
BASE="$(bash "$REPO/e2e/images/debian-base.sh")" || fail "Debian base image"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"; docker rm -f ferrymq-node-preload >/dev/null 2>&1 || true' EXIT

# --- 2. component images --------------------------------------------------------------------
static_image() {  # static_image NAME BINARY_PATH ENTRYPOINT_JSON
  local name="$1" bin="$2" entry="$3" ctx="$WORK/ctx-$(basename "$2")"
  if docker image inspect "$name" >/dev/null 2>&1; then return 0; fi
  mkdir -p "$ctx" && cp "$bin" "$ctx/"
  printf 'FROM scratch\nCOPY %s /usr/local/bin/%s\nENV PATH=/usr/local/bin:/usr/bin:/bin\nENTRYPOINT %s\n' \
    "$(basename "$bin")" "$(basename "$bin")" "$entry" | docker build -q -t "$name" -f - "$ctx" >/dev/null \
    || fail "image $name"
  log "built $name"
}
R=registry.k8s.io
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  static_image "$R/$c:$K8S_VERSION" "$K8S_BIN/$c" "[\"/usr/local/bin/$c\"]"
done
static_image "$R/etcd:$ETCD_IMAGE_TAG" "$K8S_BIN/etcd" '["/usr/local/bin/etcd"]'
static_image "$R/coredns/coredns:$COREDNS_VERSION" "$TOOLS_BIN/coredns" '["/usr/local/bin/coredns"]'
static_image "$R/pause:$PAUSE_VERSION" "$TOOLS_BIN/pause" '["/usr/local/bin/pause"]'
static_image "ferrymq.local/local-path-provisioner:$LOCAL_PATH_VERSION" "$TOOLS_BIN/local-path-provisioner" \
  '["/usr/local/bin/local-path-provisioner"]'
if ! docker image inspect "$R/kube-proxy:$K8S_VERSION" >/dev/null 2>&1; then
  mkdir -p "$WORK/ctx-proxy" && cp "$K8S_BIN/kube-proxy" "$WORK/ctx-proxy/"
  docker build -q -t "$R/kube-proxy:$K8S_VERSION" -f - "$WORK/ctx-proxy" >/dev/null <<DOCKERFILE || fail "image kube-proxy"
FROM $BASE
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables conntrack ipset kmod iproute2 >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY kube-proxy /usr/local/bin/kube-proxy
DOCKERFILE
  log "built $R/kube-proxy:$K8S_VERSION"
fi
if ! docker image inspect ferrymq.local/ferrynet:v1 >/dev/null 2>&1 || \
   [ "$(docker image inspect -f '{{index .Config.Labels "ferrymq.inputs"}}' ferrymq.local/ferrynet:v1)" != "$(inputs_hash)" ]; then
  mkdir -p "$WORK/ctx-ferrynet" && install -m 0755 "$HERE/node/ferrynet.sh" "$WORK/ctx-ferrynet/ferrynet"
  docker build -q -t ferrymq.local/ferrynet:v1 -f - "$WORK/ctx-ferrynet" >/dev/null <<DOCKERFILE || fail "image ferrynet"
FROM $BASE
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables iproute2 curl jq >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY ferrynet /usr/local/bin/ferrynet
LABEL ferrymq.inputs=$(inputs_hash)
DOCKERFILE
  log "built ferrymq.local/ferrynet:v1"
fi
PRELOAD=("$R/kube-apiserver:$K8S_VERSION" "$R/kube-controller-manager:$K8S_VERSION" "$R/kube-scheduler:$K8S_VERSION"
         "$R/kube-proxy:$K8S_VERSION" "$R/etcd:$ETCD_IMAGE_TAG" "$R/coredns/coredns:$COREDNS_VERSION"
         "$R/pause:$PAUSE_VERSION" "ferrymq.local/local-path-provisioner:$LOCAL_PATH_VERSION" "$BASE" ferrymq.local/ferrynet:v1)

# --- 3. node stage --------------------------------------------------------------------------
KIND_FILES="$(cd /tmp && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/images/base/files"
[ -d "$KIND_FILES" ] || fail "kind's node files (sigs.k8s.io/kind@$KIND_VERSION/images/base/files)"
CTX="$WORK/node"
cp -r "$HERE/node" "$CTX"
cp -r "$KIND_FILES" "$CTX/kind-files" && chmod -R u+w "$CTX/kind-files"
mkdir -p "$CTX/bin" && cp "$K8S_BIN/kubelet" "$K8S_BIN/kubeadm" "$K8S_BIN/kubectl" "$TOOLS_BIN/crictl" "$CTX/bin/"
log "building the node stage (Debian packages, kind's node files, kubelet/kubeadm/kubectl)"
docker build -q --build-arg "BASE_IMAGE=$BASE" -t ferrymq.local/kind-node-stage:latest "$CTX" >/dev/null \
  || fail "node stage (docker build e2e/kind/node)"

# --- 4. preload and commit ------------------------------------------------------------------
log "importing ${#PRELOAD[@]} images into the node's containerd"
docker save -o "$WORK/images.tar" "${PRELOAD[@]}" || fail "docker save"
docker rm -f ferrymq-node-preload >/dev/null 2>&1 || true
docker run -d --privileged --name ferrymq-node-preload -v "$WORK/images.tar:/images.tar:ro" \
  --entrypoint /usr/bin/containerd ferrymq.local/kind-node-stage:latest >/dev/null || fail "preload container"
for _ in $(seq 60); do docker exec ferrymq-node-preload ctr version >/dev/null 2>&1 && break; sleep 0.5; done
docker exec ferrymq-node-preload ctr -n k8s.io images import --all-platforms --no-unpack --digests /images.tar >/dev/null \
  || fail "ctr images import"
docker exec ferrymq-node-preload ctr -n k8s.io images ls -q | sed 's/^/node-image:   /' >&2
docker stop -t 30 ferrymq-node-preload >/dev/null
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
  ferrymq-node-preload "$NODE_IMAGE" >/dev/null || fail "docker commit"
log "built $NODE_IMAGE in $((SECONDS - t0)) s ($(docker image inspect -f '{{.Size}}' "$NODE_IMAGE" | awk '{printf "%.0f MB", $1/1048576}'))"
echo "$NODE_IMAGE"
