#!/usr/bin/env bash
# Builds Kubeflow's training-operator (github.com/kubeflow/training-operator,
# ./cmd/training-operator.v1) at a pinned version from the Go module proxy into the same cache
# as the control plane, Kueue and the gang schedulers, and copies the module's kubeflow.org/v1
# CRDs (manifests/base/crds) and its validating webhooks (manifests/base/webhook/manifests.yaml)
# beside the binary, so the benchmarks install the manifests of exactly the version they run.
# The last line of stdout is the directory (bin/training-operator, crds/, webhook/).
#
# For the benchmarks only (bench.fanout's training-operator baseline): `make test` does not
# build it. Like the gang schedulers it is built from a throwaway helper module whose go.mod
# *is* the upstream go.mod renamed, plus a require of the upstream module itself: the same
# dependency graph as upstream's own build, and the binary's build info names
# github.com/kubeflow/training-operator at the pinned version (the operator has no --version
# flag and logs no version; the check below reads the build info). A second run finds the
# binary and does nothing; a lock serialises concurrent runs; the binary goes to bin.partial
# and is renamed to bin at the end.
set -euo pipefail
# shellcheck source=../trainjobs/testing/_gobuild.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/trainjobs/testing/_gobuild.sh"

MODULE=github.com/kubeflow/training-operator
VERSION="${TRAINING_OPERATOR_VERSION:-v1.9.4}"
CACHE="${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}"
DEST="$CACHE/training-operator/training-operator-$VERSION"
BIN="$DEST/bin"
CMD="$MODULE/cmd/training-operator.v1"

have_all() {
  [ -x "$BIN/training-operator" ] && [ -f "$DEST/crds/kubeflow.org_tfjobs.yaml" ] \
    && [ -f "$DEST/webhook/manifests.yaml" ]
}

gobuild_begin training-operator "$DEST" "$DEST"
start=$(date +%s)
PARTIAL="$DEST/bin.partial"
rm -rf "$PARTIAL" "$BIN" "$DEST/crds" "$DEST/crds.partial" "$DEST/webhook"
mkdir -p "$PARTIAL"
work="$DEST/build"
rm -rf "$work"
mkdir -p "$work"
cd "$work"

echo "building $MODULE $VERSION into $BIN"
t0=$(date +%s)
# The upstream module's go.mod and source (exact version: the proxy refuses @latest here).
info=$(go mod download -json "$MODULE@$VERSION")
upstream_mod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p' <<<"$info")
upstream_dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")
got=$(sed -n 's/^[[:space:]]*"Version": "\(.*\)",*$/\1/p' <<<"$info")
[ -f "$upstream_mod" ] && [ -d "$upstream_dir" ] && [ "$got" = "$VERSION" ] \
  || { echo "error: go mod download $MODULE@$VERSION gave no go.mod/source:" >&2; echo "$info" >&2; exit 1; }
cp "$upstream_mod" go.mod
cp "$upstream_dir/go.sum" go.sum
chmod u+w go.mod go.sum
go mod edit -module trainjobs.local/training-operator -require "$MODULE@$VERSION" \
  -toolchain none go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$CMD" > tools.go
go mod tidy >/dev/null 2>&1 || go mod tidy
echo "  resolved modules (go mod tidy) in $(( $(date +%s) - t0 ))s"

t0=$(date +%s)
go build -trimpath -ldflags "-s -w" -o "$PARTIAL/training-operator" "$CMD"
echo "  built training-operator in $(( $(date +%s) - t0 ))s"

# The binary must be the module's cmd/training-operator.v1 at the pinned version (its build
# info's "mod" line: the module that holds the main package).
built=$(reports go version -m "$PARTIAL/training-operator")
[[ "$built" == *"path	$CMD"* ]] && [[ "$built" == *"mod	$MODULE	$VERSION	"* ]] \
  || { echo "error: bin/training-operator is not $CMD at $VERSION:" >&2
       echo "$built" | head -5 >&2; exit 1; }
mkdir -p "$DEST/crds.partial/webhook"
cp "$upstream_dir"/manifests/base/crds/kubeflow.org_*.yaml "$DEST/crds.partial/"
cp "$upstream_dir/manifests/base/webhook/manifests.yaml" "$DEST/crds.partial/webhook/"
chmod -R u+w "$DEST/crds.partial"
mv "$DEST/crds.partial/webhook" "$DEST/webhook"
mv "$DEST/crds.partial" "$DEST/crds"
mv "$PARTIAL" "$BIN"
cd "$DEST"
rm -rf "$work"

echo "training-operator built in $(( $(date +%s) - start ))s: $DEST"
echo "$DEST"
