#!/usr/bin/env bash
# smoke-frameworks.sh [SCENARIO ...] [--steps N] [--keep-logs] — run the example training
# programs as local processes with the contract environment and check that they train
# (loss falls, identical parameters on every replica). Scenarios: mxnet tf-mwms tf-ps
# gloo-redis gloo-file (default: all). See scripts/smoke_frameworks.py.
#
# Needs redis-server for gloo-redis: installed from Debian's packages when missing and
# this runs as root with apt-get (set TRAINJOBS_NO_APT=1 to forbid that).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

wants_redis=1
if [[ $# -gt 0 ]]; then
  wants_redis=0
  for a in "$@"; do [[ $a == gloo-redis ]] && wants_redis=1; done
  # no scenario named at all (only options): all scenarios
  named=0; for a in "$@"; do [[ $a != -* && ! $a =~ ^[0-9]+$ ]] && named=1; done
  [[ $named == 0 ]] && wants_redis=1
fi
if [[ $wants_redis == 1 ]] && ! command -v redis-server >/dev/null 2>&1; then
  if [[ ${TRAINJOBS_NO_APT:-0} != 1 && $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "smoke-frameworks: installing redis-server (Debian package)" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2
  else
    echo "smoke-frameworks: redis-server is missing (apt-get install -y redis-server)" >&2
    exit 1
  fi
fi
exec python3 "$here/smoke_frameworks.py" "$@"
