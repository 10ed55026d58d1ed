# Sourced by build-control-plane.sh and build-gang-schedulers.sh: the parts of a cached,
# pinned build from Go modules that both share, so that the cache's promises (a second run
# does nothing, concurrent runs build once, an interrupted build never looks complete) are
# kept in one place. The caller defines have_all (are the finished outputs all there?).

# Ends the script with RESULT as the last line of stdout when have_all holds, before or
# after waiting for a concurrent build of DEST (lock DEST/.build.lock, held on fd 9 until the
# script exits); otherwise returns with the lock held and Go's build settings exported.
gobuild_begin() {
  local label=$1 dest=$2 result=$3
  if have_all; then
    echo "$label already built: $result"
    echo "$result"
    exit 0
  fi
  mkdir -p "$dest"
  exec 9>"$dest/.build.lock"
  if ! flock -n 9; then
    echo "another build of $dest is running; waiting for it" >&2
    flock 9
  fi
  if have_all; then
    echo "$label built by another run: $result"
    echo "$result"
    exit 0
  fi
  command -v go >/dev/null || { echo "error: 'go' is required to build $label" >&2; exit 1; }
  export GOFLAGS="-mod=mod -buildvcs=false"
  export CGO_ENABLED=0
  export GOTOOLCHAIN=local
}

# The -ldflags that stamp a Kubernetes version into component-base and client-go, as
# Kubernetes' own build does: unstamped, components report v0.0.0 and some refuse to start.
k8s_version_ldflags() {
  local version=$1 minor=$2 flags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}

# What a binary prints of itself, read whole: `cmd | grep -q` under pipefail fails at random
# when grep exits at its first match and cmd dies of SIGPIPE writing its next line.
reports() { "$@" 2>&1 || true; }
