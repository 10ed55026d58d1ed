#!/usr/bin/env bash
# test.sh — what `make test` (and so CI) runs: prepare every dependency, then lint, type-check
# and run the whole pytest suite (unit, integration on a real control plane, end-to-end with
# the real frameworks). Each step prints how long it took. Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$(dirname "$here")"
t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0))s so far)"; }

step "dev virtualenv"
venv=$(scripts/dev-venv.sh)
step "control plane binaries (kube-apiserver, controller-manager, scheduler, kubectl, etcd, kwok)"
# The build prints what it builds and how long each binary took; show it, keep the last line.
bin=$(scripts/build-control-plane.sh | tee /dev/stderr | tail -n 1)
export TRAINJOBS_CONTROL_PLANE_BIN=$bin
step "gang schedulers (scheduler-plugins' Coscheduling, Volcano's vc-scheduler)"
# Progress (what is built, how long each binary took) goes to the log; nothing is kept.
for gang in coscheduling volcano; do scripts/build-gang-schedulers.sh "$gang" >&2; done
step "kueue v0.19.2 (sigs.k8s.io/kueue ./cmd/kueue, its CRDs and webhook manifests)"
scripts/build-kueue.sh >&2
step "helm (built from the Go module proxy)"
scripts/get-helm.sh >/dev/null
step "redis-server"
scripts/ensure-redis.sh >/dev/null
step "framework virtualenvs (mxnet, tensorflow, gloo)"
for fw in mxnet tensorflow gloo; do scripts/framework-venv.sh "$fw" >/dev/null; done
step "ruff"
"$venv/bin/ruff" check .
step "mypy --strict"
"$venv/bin/mypy"
step "pytest"
"$venv/bin/pytest" tests "$@"
step "done"
