#!/usr/bin/env bash
# smoke-frameworks.sh [SCENARIO ...] [--steps N] [--keep-logs] — run the example training
# programs as local processes with the contract environment and check that they train
# (loss falls, identical parameters on every replica). Scenarios: mxnet tf-mwms
# tf-mwms-master tf-ps gloo-redis gloo-file (default: all). See scripts/smoke_frameworks.py.
# gloo-redis needs redis-server: scripts/ensure-redis.sh installs Debian's when missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

scenarios=0 redis=0 skip=0
for a in "$@"; do
  if [[ $skip == 1 ]]; then skip=0; continue; fi
  case "$a" in
    --steps|--timeout) skip=1 ;;
    -*) ;;
    gloo-redis) scenarios=1 redis=1 ;;
    *) scenarios=1 ;;
  esac
done
if [[ $scenarios == 0 || $redis == 1 ]]; then
  "$here/ensure-redis.sh" >/dev/null
fi
exec python3 "$here/smoke_frameworks.py" "$@"
