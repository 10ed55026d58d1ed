#!/usr/bin/env bash
# dev-venv.sh — the project's own virtualenv (trainjobs editable, with the test extra), in the
# cache outside the repository, keyed by a hash of pyproject.toml. Prints its path last.
# The editable install is refreshed on every call (a no-op in about a second), so a fresh
# clone in another directory points the venv at itself.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cache=${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}
uv=$("$here/uv.sh")
hash=$(sha256sum "$root/pyproject.toml" | cut -c1-12)
venv="$cache/venvs/dev-$hash"
export UV_CACHE_DIR=${UV_CACHE_DIR:-$cache/uv-cache}
if [[ ! -x $venv/bin/python ]]; then
  echo "dev-venv: creating $venv" >&2
  "$uv" venv --quiet --python "$(command -v python3.11 || command -v python3)" "$venv" >&2
fi
"$uv" pip install --quiet --python "$venv/bin/python" -e "$root[test]" >&2
echo "$venv"
