#!/usr/bin/env bash
# Builds Kueue (sigs.k8s.io/kueue, ./cmd/kueue) at a pinned version from the Go module proxy
# into the same cache as the control plane and the gang schedulers, and copies the module's
# config/components (CRDs, the webhook configurations, the CRD conversion patches, the
# manager's example Configuration) beside the binary, so the harness installs the manifests
# of exactly the version it runs. The last line of stdout is the directory (bin/kueue,
# config/components/).
#
# Kueue's go.mod has no replace directives, so unlike the control plane it is built inside
# a writable copy of the module itself, with its own go.mod and go.sum: the dependency graph
# of upstream's `make build`. The version is stamped into sigs.k8s.io/kueue/pkg/version as
# upstream's Makefile does (Kueue logs it at start: "Initializing" gitVersion=...). A second
# run finds the binary and does nothing; a lock serialises concurrent runs; the binary goes to
# bin.partial and is renamed to bin at the end. Measured figures are in docs/control-plane.md.
set -euo pipefail
# shellcheck source=_gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/_gobuild.sh"

MODULE=sigs.k8s.io/kueue
VERSION="${KUEUE_VERSION:-v0.19.2}"
CACHE="${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}"
DEST="$CACHE/kueue/kueue-$VERSION"
BIN="$DEST/bin"

have_all() { [ -x "$BIN/kueue" ] && [ -d "$DEST/config/components/crd/bases" ]; }

gobuild_begin kueue "$DEST" "$DEST"
start=$(date +%s)
PARTIAL="$DEST/bin.partial"
rm -rf "$PARTIAL" "$BIN" "$DEST/config" "$DEST/config.partial"
mkdir -p "$PARTIAL"
work="$DEST/build"
rm -rf "$work"

echo "building $MODULE $VERSION into $BIN"
t0=$(date +%s)
# The module's source and go.mod (exact version: the proxy refuses @latest here).
info=$(go mod download -json "$MODULE@$VERSION")
upstream_dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")
commit=$(sed -n 's/^[[:space:]]*"Hash": "\(.*\)",*$/\1/p' <<<"$info")
got=$(sed -n 's/^[[:space:]]*"Version": "\(.*\)",*$/\1/p' <<<"$info")
[ -d "$upstream_dir" ] && [ "$got" = "$VERSION" ] \
  || { echo "error: go mod download $MODULE@$VERSION gave no source:" >&2; echo "$info" >&2; exit 1; }
# The module cache is read-only; go build may write go.sum entries it lacks (-mod=mod).
cp -r "$upstream_dir" "$work"
chmod -R u+w "$work"
cd "$work"
go mod download
echo "  downloaded modules in $(( $(date +%s) - t0 ))s"

t0=$(date +%s)
pkg=$MODULE/pkg/version
go build -trimpath -o "$PARTIAL/kueue" -ldflags "-s -w -X '$pkg.GitVersion=$VERSION' \
  -X '$pkg.GitCommit=${commit:-unknown}' -X '$pkg.BuildDate=1970-01-01T00:00:00Z'" ./cmd/kueue
echo "  built kueue in $(( $(date +%s) - t0 ))s"

# The binary must be the module's cmd/kueue (its build info; -trimpath leaves -ldflags out
# of it) and report the pinned version. Kueue has no --version flag; it logs its version
# ("Initializing" gitVersion=...) before it reads a kubeconfig: started with none (empty
# HOME, no in-cluster variables) it logs that and exits without touching anything.
info=$(reports go version -m "$PARTIAL/kueue")
[[ "$info" == *"path	$MODULE/cmd/kueue"* ]] \
  || { echo "error: bin/kueue is not $MODULE/cmd/kueue:" >&2; echo "$info" | head -3 >&2; exit 1; }
empty_home=$(mktemp -d)
reported=$(reports env -i HOME="$empty_home" PATH=/usr/bin:/bin timeout 60 "$PARTIAL/kueue")
rmdir "$empty_home"
want="\"gitVersion\":\"$VERSION\""
[[ "$reported" == *"$want"* ]] \
  || { echo "error: bin/kueue does not log $want:" >&2; echo "$reported" | head -5 >&2; exit 1; }
mkdir -p "$DEST/config.partial"
cp -r "$upstream_dir/config/components" "$DEST/config.partial/"
chmod -R u+w "$DEST/config.partial"
mv "$DEST/config.partial" "$DEST/config"
mv "$PARTIAL" "$BIN"
cd "$DEST"
rm -rf "$work"

echo "kueue built in $(( $(date +%s) - start ))s: $DEST"
echo "$DEST"
