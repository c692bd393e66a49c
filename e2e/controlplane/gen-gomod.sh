#!/usr/bin/env bash
# Regenerate go.mod of the wrapper module for K8S_VERSION (versions.env): require
# k8s.io/kubernetes at that tag and replace every staging module it maps to ./staging/...
# by the published v0.<minor>.<patch>. Generated from k/k's own go.mod so the staging list
# follows upstream (1.32 added externaljwt, 1.36 cri-streaming and streaming, ...).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/versions.env"
export GOTOOLCHAIN=local
kk_mod="$(cd /tmp && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
staging_version="v0.${K8S_VERSION#v1.}"
go_line="$(grep -m1 '^go ' "$kk_mod")"
godebug_line="$(grep -m1 '^godebug ' "$kk_mod" || true)"
{
  echo "// Wrapper module: builds the test control plane from the Go module proxy (see build.sh)."
  echo "// Regenerate with ./gen-gomod.sh after changing K8S_VERSION in versions.env."
  echo "module ferrymq.io/e2e/controlplane"
  echo
  echo "$go_line"
  echo
  [ -n "$godebug_line" ] && { echo "$godebug_line"; echo; }
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "tool ("
  for t in go.etcd.io/etcd/server/v3 k8s.io/kubernetes/cmd/kube-apiserver \
           k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
           k8s.io/kubernetes/cmd/kubectl; do printf '\t%s\n' "$t"; done
  echo ")"
  echo
  echo "replace ("
  grep -E '^\s+k8s.io/[a-z0-9-]+ => ./staging/src/' "$kk_mod" \
    | awk -v v="$staging_version" '{printf "\t%s => %s %s\n", $1, $1, v}'
  echo ")"
} > "$HERE/go.mod"
rm -f "$HERE/go.sum"   # build.sh (-mod=mod) re-resolves it from the proxy
echo "wrote $HERE/go.mod for $K8S_VERSION (staging $staging_version)"
