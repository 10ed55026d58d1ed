#!/usr/bin/env bash
# Builds a pinned gang scheduler from Go modules into the same cache as the control plane:
#   build-gang-schedulers.sh coscheduling   sigs.k8s.io/scheduler-plugins: kube-scheduler (with
#                                           Coscheduling) and controller (PodGroup status)
#   build-gang-schedulers.sh volcano        volcano.sh/volcano: vc-scheduler (it also writes
#                                           PodGroup status; no controller-manager needed)
# and copies the scheduler's PodGroup (and Queue) CRDs from the module beside the binaries.
#
# Like the control plane, these modules cannot be `go install`ed: their go.mod replaces the
# Kubernetes staging modules, and replace directives only apply in the main module. So we
# build from a throwaway helper module whose go.mod *is* the upstream go.mod (same requires,
# replaces and excludes, so the same dependency graph as upstream's own build) renamed, plus
# a require of the upstream module itself. A second run finds the binaries and does nothing;
# a lock serialises concurrent runs; binaries go to bin.partial and are renamed to bin at the
# end. The last line of stdout is the scheduler's dir (bin/ and crds/ under it).
# Measured figures (cold build, disk) are in docs/scheduling.md.
set -euo pipefail
# shellcheck source=_gobuild.sh
source "$(dirname "${BASH_SOURCE[0]}")/_gobuild.sh"

which="${1:-}"
SCHEDULER_PLUGINS_VERSION="${SCHEDULER_PLUGINS_VERSION:-v0.34.7}"
VOLCANO_VERSION="${VOLCANO_VERSION:-v1.10.0}"
CACHE="${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}"

case "$which" in
  coscheduling)
    MODULE=sigs.k8s.io/scheduler-plugins
    VERSION=$SCHEDULER_PLUGINS_VERSION
    DEST="$CACHE/schedulers/scheduler-plugins-$VERSION"
    # binary name => package
    CMDS=("kube-scheduler=$MODULE/cmd/scheduler" "controller=$MODULE/cmd/controller")
    # its controller also watches ElasticQuotas (and logs errors without the CRD)
    CRDS=(config/crd/bases/scheduling.x-k8s.io_podgroups.yaml
      config/crd/bases/scheduling.x-k8s.io_elasticquotas.yaml)
    # The Kubernetes version it is built on goes into component-base, as for the control
    # plane: stamped with scheduler-plugins' own v0.34.7, as its Makefile does, the scheduler
    # refuses to start ("emulation version 0.34 is not between [1.31, 0.34.0]").
    K8S="v1.34.7"
    LDFLAGS=$(k8s_version_ldflags "$K8S" 34)
    # The Go module proxy here refuses these staging modules at v0.34.5-v0.34.7 (403 "not
    # available"), and Go needs the go.mod of every module in the graph: pin them to the
    # nearest patch that answers for all of them. Only csi-translation-lib is compiled in.
    OVERRIDES=()
    for m in cluster-bootstrap cri-client csi-translation-lib endpointslice externaljwt \
      kube-aggregator kube-controller-manager kube-proxy sample-apiserver sample-cli-plugin \
      sample-controller; do OVERRIDES+=("k8s.io/$m=k8s.io/$m@v0.34.3"); done
    ;;
  volcano)
    MODULE=volcano.sh/volcano
    VERSION=$VOLCANO_VERSION
    DEST="$CACHE/schedulers/volcano-$VERSION"
    CMDS=("vc-scheduler=$MODULE/cmd/scheduler")
    # vc-scheduler watches Queues and Numatopologies as well as PodGroups
    CRDS=(config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml
      config/crd/volcano/bases/scheduling.volcano.sh_queues.yaml
      config/crd/volcano/bases/nodeinfo.volcano.sh_numatopologies.yaml)
    LDFLAGS="-s -w -X $MODULE/pkg/version.Version=$VERSION -X $MODULE/pkg/version.GitSHA=module"
    LDFLAGS+=" -X $MODULE/pkg/version.Built=1970-01-01T00:00:00Z"
    OVERRIDES=()
    ;;
  *)
    echo "usage: $0 coscheduling|volcano" >&2
    exit 2
    ;;
esac
BIN="$DEST/bin"

have_all() {
  for c in "${CMDS[@]}"; do [ -x "$BIN/${c%%=*}" ] || return 1; done
  [ -d "$DEST/crds" ] || return 1
}

gobuild_begin "$which" "$DEST" "$DEST"
start=$(date +%s)
PARTIAL="$DEST/bin.partial"
rm -rf "$PARTIAL" "$BIN" "$DEST/crds" "$DEST/crds.partial"
mkdir -p "$PARTIAL"
work="$DEST/build"
rm -rf "$work"
mkdir -p "$work"
cd "$work"

echo "building $MODULE $VERSION ($which) into $BIN"
t0=$(date +%s)
# The upstream module's go.mod and source (exact version: the proxy refuses @latest here).
info=$(go mod download -json "$MODULE@$VERSION")
upstream_mod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p' <<<"$info")
upstream_dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$info")
[ -f "$upstream_mod" ] && [ -d "$upstream_dir" ] \
  || { echo "error: go mod download $MODULE@$VERSION gave no go.mod/source:" >&2; echo "$info" >&2; exit 1; }
cp "$upstream_mod" go.mod
chmod u+w go.mod
cp "$upstream_dir/go.sum" go.sum
chmod u+w go.sum
go mod edit -module "trainjobs.local/$which" -require "$MODULE@$VERSION" -toolchain none go.mod
for o in "${OVERRIDES[@]}"; do go mod edit -replace "$o" go.mod; done
{
  echo "//go:build tools"
  echo
  echo "package tools"
  echo
  echo "import ("
  for c in "${CMDS[@]}"; do echo "	_ \"${c#*=}\""; done
  echo ")"
} > tools.go
go mod tidy >/dev/null 2>&1 || go mod tidy
echo "  resolved modules (go mod tidy) in $(( $(date +%s) - t0 ))s"

for c in "${CMDS[@]}"; do
  t0=$(date +%s)
  go build -trimpath -ldflags "$LDFLAGS" -o "$PARTIAL/${c%%=*}" "${c#*=}"
  echo "  built ${c%%=*} in $(( $(date +%s) - t0 ))s"
done

# Each binary must report the pinned version.
case "$which" in
  coscheduling) reported=$(reports "$PARTIAL/kube-scheduler" --version); want="Kubernetes $K8S" ;;
  volcano) reported=$(reports "$PARTIAL/vc-scheduler" --version); want="Version: $VERSION" ;;
esac
[[ "$reported" == *"$want"* ]] \
  || { echo "error: $which reports '$reported', not '$want'" >&2; exit 1; }
mkdir -p "$DEST/crds.partial"
for f in "${CRDS[@]}"; do cp "$upstream_dir/$f" "$DEST/crds.partial/"; done
chmod -R u+w "$DEST/crds.partial"
mv "$DEST/crds.partial" "$DEST/crds"
mv "$PARTIAL" "$BIN"

echo "$which built in $(( $(date +%s) - start ))s: $DEST"
echo "$DEST"
