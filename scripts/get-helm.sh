#!/usr/bin/env bash
# Installs a pinned Helm (v3) into the tools cache and prints its path as the last line.
#
#   scripts/get-helm.sh            # -> $TRAINJOBS_CACHE/tools/helm-v3.22.0/helm
#   HELM_VERSION=v3.21.4 scripts/get-helm.sh
#
# Why from source: our machines reach the Go module proxy but no download site for release
# binaries, and helm.sh/helm/v3 has no replace directives, so `go install helm.sh/helm/v3/
# cmd/helm@VERSION` builds it (checksums verified by the Go checksum database). The ldflags are
# the ones Helm's own Makefile sets, so `helm version` reports the real version and
# `.Capabilities.KubeVersion` in `helm template`/`helm lint` matches the client-go it was built
# with. A second run finds the binary and only prints its path. Parallel runs build once
# (flock). Cold build: a few minutes on two cores; the Go build cache makes rebuilds fast.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}"
DEST="$CACHE/tools/helm-$HELM_VERSION"
HELM="$DEST/helm"

case "$HELM_VERSION" in
  v3.*) ;;
  *) echo "error: HELM_VERSION must be a Helm v3 release (v3.X.Y), got '$HELM_VERSION'" >&2; exit 2 ;;
esac

installed() { [ -x "$HELM" ] && "$HELM" version --short 2>/dev/null | grep -Eq "^${HELM_VERSION//./\\.}(\\+|\$)"; }

if installed; then
  echo "$HELM"
  exit 0
fi

command -v go >/dev/null || { echo "error: 'go' is required to build Helm $HELM_VERSION" >&2; exit 1; }
mkdir -p "$DEST"
exec 9>"$DEST/.lock"
flock 9
if installed; then  # another run built it while we waited for the lock
  echo "$HELM"
  exit 0
fi

start=$(date +%s)
tmp="$(mktemp -d "$DEST/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mod="helm.sh/helm/v3"
echo "building Helm $HELM_VERSION from the Go module proxy into $DEST" >&2

# The Kubernetes minor version Helm assumes for `helm template`/`lint` without a cluster: the
# client-go it pins (v0.N.x -> 1.N), as in Helm's Makefile.
GOFLAGS="-buildvcs=false" go mod download -json "$mod@$HELM_VERSION" > "$tmp/mod.json"
modfile="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' "$tmp/mod.json")"
k8s_minor="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$modfile" | head -1)"
[ -n "$k8s_minor" ] || { echo "error: cannot read client-go's version from $modfile" >&2; exit 1; }

ldflags="-s -w -X $mod/internal/version.version=$HELM_VERSION"
ldflags+=" -X $mod/internal/version.metadata= -X $mod/internal/version.gitTreeState=clean"
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X $mod/$pkg.k8sVersionMajor=1 -X $mod/$pkg.k8sVersionMinor=$k8s_minor"
done

GOBIN="$tmp" GOFLAGS="-buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-local}" \
  go install -trimpath -ldflags "$ldflags" "$mod/cmd/helm@$HELM_VERSION"
mv -f "$tmp/helm" "$HELM"
"$HELM" version --short >&2
echo "built Helm $HELM_VERSION in $(( $(date +%s) - start ))s" >&2
echo "$HELM"
