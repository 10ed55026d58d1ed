#!/usr/bin/env bash
# framework-venv.sh NAME — create (once) the virtualenv for one training framework and
# print its path as the last line of stdout. NAME is one of: mxnet, tensorflow, gloo.
#
#   venv = ${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}/venvs/NAME-<12 hex of sha256(requirements)>
#
# The requirements (scripts/requirements/NAME.txt) are complete pinned locks, installed
# with --no-deps. A second run finds the ready marker and returns at once without running
# Python. Concurrent runs for the same NAME serialise on a lock file; a half-built venv
# (no marker) is removed and rebuilt.
#
# Environment:
#   TRAINJOBS_CACHE             cache root (default $HOME/.cache/trainjobs)
#   TRAINJOBS_PYTHON            interpreter for the venv (default: python3.11, else python3)
#   TRAINJOBS_VENV_INSTALLER    uv (default) | pip
#   UV_CACHE_DIR                uv's wheel cache (default $TRAINJOBS_CACHE/uv-cache, same
#                               filesystem as the venvs so uv can hard-link instead of copying)
# All installer output goes to stderr; stdout carries only the venv path.
set -euo pipefail

usage() { echo "usage: $0 mxnet|tensorflow|gloo" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
name=$1
case "$name" in mxnet|tensorflow|gloo) ;; *) usage ;; esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
req="$here/requirements/$name.txt"
[[ -f $req ]] || { echo "framework-venv: missing $req" >&2; exit 1; }

cache=${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}
hash=$(sha256sum "$req" | cut -c1-12)
venv="$cache/venvs/$name-$hash"
marker="$venv/.trainjobs-ready"

# Fast path: no lock, no Python. (-x follows the bin/python symlink: a venv whose base
# interpreter has gone is rebuilt.)
if [[ -f $marker && -x $venv/bin/python ]]; then
  echo "$venv"
  exit 0
fi

mkdir -p "$cache/venvs"
exec 9>"$cache/venvs/.$name-$hash.lock"
flock 9
if [[ -f $marker && -x $venv/bin/python ]]; then   # built by another process meanwhile
  echo "$venv"
  exit 0
fi

log() { echo "framework-venv[$name]: $*" >&2; }

py=${TRAINJOBS_PYTHON:-}
if [[ -z $py ]]; then
  if command -v python3.11 >/dev/null 2>&1; then py=python3.11; else py=python3; fi
fi
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { log "$py is older than Python 3.11"; exit 1; }
py=$("$py" -c "import sys; print(sys.executable)")

installer=${TRAINJOBS_VENV_INSTALLER:-uv}
uv=""
if [[ $installer == uv ]]; then
  # A pinned uv in its own tool venv under the cache (scripts/uv.sh, bootstrapped once).
  if uv=$("$here/uv.sh") && [[ -x $uv ]]; then
    :
  else
    log "could not get uv; falling back to pip"
    installer=pip
  fi
fi

start=$SECONDS
rm -rf "$venv"
log "creating $venv with $installer ($py)"
if [[ $installer == uv ]]; then
  export UV_CACHE_DIR=${UV_CACHE_DIR:-$cache/uv-cache}
  "$uv" venv --quiet --python "$py" "$venv" >&2
  "$uv" pip install --python "$venv/bin/python" --no-deps -r "$req" >&2
else
  "$py" -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --no-deps -r "$req" >&2
fi

# Check that the framework really imports before declaring the venv ready.
case "$name" in
  mxnet)      check='import mxnet; print("mxnet", mxnet.__version__)' ;;
  tensorflow) check='import os; os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf, tf_keras; assert tf.keras.Sequential is tf_keras.Sequential
print("tensorflow", tf.__version__, "tf_keras", tf_keras.__version__)' ;;
  gloo)       check='import torch, torch.distributed as d, redis; assert d.is_gloo_available(), "no gloo"; print("torch", torch.__version__, "gloo ok")' ;;
esac
TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/python" -c "$check" >&2 \
  || { log "import check failed; removing $venv"; rm -rf "$venv"; exit 1; }

{
  echo "requirements_sha256_12=$hash"
  echo "installer=$installer"
  echo "python=$py"
  echo "seconds=$((SECONDS - start))"
} > "$marker"
log "ready in $((SECONDS - start))s"
echo "$venv"
