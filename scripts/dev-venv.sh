#!/usr/bin/env bash
# dev-venv.sh — the project's own virtualenv (trainjobs editable, with the test extra), in the
# cache outside the repository, keyed by a hash of pyproject.toml and uv.lock. Prints its path
# last. Every package is the version uv.lock pins (`uv sync --locked`: a lock that no longer
# matches pyproject.toml is an error that says to run `make lock`), and nothing else is left in
# it. The sync is refreshed on every call (a no-op in about a second), so a fresh clone in
# another directory points the venv at itself.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cache=${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}
uv=$("$here/uv.sh")
hash=$(cat "$root/pyproject.toml" "$root/uv.lock" | sha256sum | cut -c1-12)
venv="$cache/venvs/dev-$hash"
export UV_CACHE_DIR=${UV_CACHE_DIR:-$cache/uv-cache}
if [[ ! -x $venv/bin/python ]]; then
  echo "dev-venv: creating $venv" >&2
  "$uv" venv --quiet --python "$(command -v python3.11 || command -v python3)" "$venv" >&2
fi
if ! UV_PROJECT_ENVIRONMENT=$venv "$uv" sync --quiet --locked --extra test \
    --project "$root" ${DEV_VENV_EXTRAS:-} >&2; then
  echo "dev-venv: could not install from uv.lock; if pyproject.toml's dependencies changed," \
       "run 'make lock' and commit uv.lock" >&2
  exit 1
fi
echo "$venv"
