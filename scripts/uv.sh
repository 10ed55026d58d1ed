#!/usr/bin/env bash
# uv.sh — a pinned uv in its own tool venv under the cache (bootstrapped once with pip).
# Prints the uv binary's path. Why uv: it resolves and installs an order of magnitude faster
# than pip and keeps one hard-linked wheel cache for every venv we make.
set -euo pipefail
UV_VERSION=0.13.9
cache=${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}
uvdir="$cache/tools/uv-$UV_VERSION"
if [[ ! -x $uvdir/bin/uv ]]; then
  echo "uv: bootstrapping uv $UV_VERSION into $uvdir" >&2
  mkdir -p "$cache/tools"
  exec 9>"$cache/tools/.uv.lock"; flock 9
  if [[ ! -x $uvdir/bin/uv ]]; then
    rm -rf "$uvdir"
    py=$(command -v python3.11 || command -v python3)
    "$py" -m venv "$uvdir" >&2
    "$uvdir/bin/python" -m pip install -q "uv==$UV_VERSION" >&2
  fi
fi
echo "$uvdir/bin/uv"
