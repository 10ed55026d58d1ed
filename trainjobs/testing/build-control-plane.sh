#!/usr/bin/env bash
# Builds the pinned Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), etcd and KWOK from Go modules into a cache outside the repository.
#
# Why from source: there is no container engine and no download site for prebuilt binaries
# on our machines, but the Go module proxy is reachable. k8s.io/kubernetes cannot be
# `go install`ed (its go.mod replaces 33 staging modules with local paths), so we build it from
# a throwaway helper module that requires it and replaces each staging module with its
# published k8s.io/<m> v0.<minor>.<patch> twin. etcd is built in the same module so it gets the
# version Kubernetes pins. A second run finds the binaries and does nothing.
#
# The binaries are built into bin.partial and renamed to bin at the end, so an interrupted
# build never leaves a bin dir that looks complete; a lock serialises concurrent runs (two
# test sessions starting at once build once). The last line of stdout is the bin dir.
# Measured figures (cold and warm build, disk) are in docs/control-plane.md.
set -euo pipefail
# shellcheck source=_gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/_gobuild.sh"

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
CACHE="${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}"
DEST="$CACHE/control-plane/k8s-$K8S_VERSION-kwok-$KWOK_VERSION"
BIN="$DEST/bin"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)

have_all() {
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
  [ -d "$DEST/kwok-stages" ] || return 1
}

gobuild_begin "control plane" "$DEST" "$BIN"
start=$(date +%s)
PARTIAL="$DEST/bin.partial"
rm -rf "$PARTIAL" "$BIN"
mkdir -p "$PARTIAL"
work="$DEST/build"
mkdir -p "$work"
cd "$work"

staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice
  externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl
  kubelet metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin
  sample-controller streaming)
staging_version="v0.${K8S_VERSION#v1.}"

echo "building Kubernetes $K8S_VERSION (staging $staging_version), etcd (as pinned), KWOK $KWOK_VERSION into $BIN"
{
  echo "module trainjobs.local/controlplane"
  echo
  echo "go 1.26.0"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	k8s.io/$m => k8s.io/$m $staging_version"; done
  echo ")"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
t0=$(date +%s)
go mod tidy >/dev/null 2>&1 || go mod tidy
echo "  resolved modules (go mod tidy) in $(( $(date +%s) - t0 ))s"

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
ldflags=$(k8s_version_ldflags "$K8S_VERSION" "$minor")

for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  t0=$(date +%s)
  go build -trimpath -ldflags "$ldflags" -o "$PARTIAL/$cmd" "k8s.io/kubernetes/cmd/$cmd"
  echo "  built $cmd in $(( $(date +%s) - t0 ))s"
done
t0=$(date +%s)
go build -trimpath -ldflags "-s -w" -o "$PARTIAL/etcd" go.etcd.io/etcd/server/v3
echo "  built etcd ($(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)) in $(( $(date +%s) - t0 ))s"

t0=$(date +%s)
GOBIN="$PARTIAL" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
echo "  built kwok in $(( $(date +%s) - t0 ))s"
# KWOK's stock stage definitions ship in its module zip; keep a copy for reference.
kwok_src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
rm -rf "$DEST/kwok-stages"; cp -r "$kwok_src" "$DEST/kwok-stages"; chmod -R u+w "$DEST/kwok-stages"

# Each binary must report the pinned version (a missing -X flag shows up as v0.0.0).
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  v=$(reports "$PARTIAL/$cmd" --version)
  grep -qF "Kubernetes $K8S_VERSION" <<<"$v" \
    || { echo "error: $cmd reports $v, not $K8S_VERSION" >&2; exit 1; }
done
grep -qF "Client Version: $K8S_VERSION" <<<"$(reports "$PARTIAL/kubectl" version --client)" \
  || { echo "error: kubectl does not report $K8S_VERSION" >&2; exit 1; }
grep -qF "$KWOK_VERSION" <<<"$(reports "$PARTIAL/kwok" --version)" \
  || { echo "error: kwok does not report $KWOK_VERSION" >&2; exit 1; }
grep -q '^etcd Version: 3\.' <<<"$(reports "$PARTIAL/etcd" --version)" \
  || { echo "error: etcd does not report a 3.x version" >&2; exit 1; }
mv "$PARTIAL" "$BIN"

echo "control plane built in $(( $(date +%s) - start ))s: $BIN"
echo "$BIN"
