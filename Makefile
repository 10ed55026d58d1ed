# trainjobs — the two commands of the quickstart:
#   make demo   runs the distributed MXNet example locally (no cluster needed)
#   make test   builds/installs everything it needs, then runs lint, types and every test
# Everything heavy (control plane binaries, framework venvs, uv's wheel cache) is cached under
# $(TRAINJOBS_CACHE) (default ~/.cache/trainjobs), outside the repository.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export TRAINJOBS_CACHE ?= $(HOME)/.cache/trainjobs
PYTEST_ARGS ?=

.PHONY: test demo bench chaos image multikueue lint unit integration e2e prepare dev control-plane venvs redis crds lock

## make test: the whole suite, exactly as CI runs it.
test:
	scripts/test.sh $(PYTEST_ARGS)

## make demo: MXNet 1 scheduler + 2 servers + 3 workers (kvstore dist_sync) as local processes.
demo:
	@venv=$$(scripts/dev-venv.sh); mx=$$(scripts/framework-venv.sh mxnet); \
	PATH="$$mx/bin:$$PATH" "$$venv/bin/trainjobs" run examples/mxnet/dist-sync.yaml

## make bench: the benchmarks of docs/benchmarks.md (about 95 minutes on 2 CPUs); results and
## plots go to docs/benchmarks/. BENCH_ARGS reach fanout, scale and progress (e.g.
## BENCH_ARGS=--help).
BENCH_ARGS ?=
bench:
	@venv=$$(DEV_VENV_EXTRAS="--extra bench" scripts/dev-venv.sh); \
	export TRAINJOBS_CONTROL_PLANE_BIN=$$(scripts/build-control-plane.sh | tail -n 1); \
	"$$venv/bin/python" -m bench.fanout $(BENCH_ARGS); \
	"$$venv/bin/python" -m bench.scale $(BENCH_ARGS); \
	"$$venv/bin/python" -m bench.gcpause; \
	"$$venv/bin/python" -m bench.progress $(BENCH_ARGS); \
	"$$venv/bin/python" -m bench.preemption; \
	"$$venv/bin/python" -m bench.plot

## make chaos: the long chaos scenarios of tests/chaos (SIGKILL storm of 200 jobs, API server
## and etcd outages, leader kill, 1,000 hostile specs, ownership conflicts; 28 minutes measured
## on 2 shared CPUs, each scenario bounded by its own time budget and pytest-timeout, at most
## ~65 minutes in all). Figures go to docs/reliability.md and docs/reliability/chaos.json; logs
## of the last run stay in $TRAINJOBS_CACHE/chaos-tmp. (`make test` runs small versions.)
chaos:
	@venv=$$(scripts/dev-venv.sh); \
	export TRAINJOBS_CONTROL_PLANE_BIN=$$(scripts/build-control-plane.sh | tail -n 1); \
	"$$venv/bin/pytest" tests/chaos --chaos -m chaos -v --basetemp="$$TRAINJOBS_CACHE/chaos-tmp" \
	  $(PYTEST_ARGS)

## make image: the operator's OCI image without a container engine (scripts/build-image.sh:
## Debian's python3.11 + the locked wheels, assembled by umoci) as
## dist/trainjobs-operator-VERSION.oci.tar, then its proof (tests/image: unpacked and run in a
## chroot as UID 65532 against the test control plane). Push: docs/helm.md.
image:
	@venv=$$(scripts/dev-venv.sh); export IMAGE_ARCHIVE=$$(scripts/build-image.sh | tail -n 1); \
	export TRAINJOBS_CONTROL_PLANE_BIN=$$(scripts/build-control-plane.sh | tail -n 1); \
	"$$venv/bin/pytest" tests/image --image -p no:cacheprovider $(PYTEST_ARGS)

## make multikueue: only the MultiKueue scenarios (tests/integration/test_multikueue.py: a
## manager and two workers, each a whole control plane with Kueue v0.19.2; make test runs
## them too), and scenario e, a worker's API server lost mid-run
## (tests/integration/test_multikueue_worker_lost.py, three clusters of its own; make test
## deselects it, --worker-loss runs it). 362 s as one run on 2 CPUs, warm caches, machine
## otherwise idle (docs/multikueue.md, "Reproduce").
multikueue:
	@venv=$$(scripts/dev-venv.sh); \
	export TRAINJOBS_CONTROL_PLANE_BIN=$$(scripts/build-control-plane.sh | tail -n 1); \
	scripts/build-kueue.sh >/dev/null; \
	"$$venv/bin/pytest" tests/integration -m multikueue --worker-loss -v $(PYTEST_ARGS)

dev:
	@scripts/dev-venv.sh

## make lock: re-resolve uv.lock after a change to pyproject.toml's dependencies, then commit
## it (make test installs only what uv.lock pins, and refuses a lock that does not match).
## LOCK_ARGS="--upgrade" moves every pin to the newest version allowed,
## LOCK_ARGS="--upgrade-package NAME" one package.
LOCK_ARGS ?=
lock:
	@UV_CACHE_DIR=$${UV_CACHE_DIR:-$$TRAINJOBS_CACHE/uv-cache} "$$(scripts/uv.sh)" lock $(LOCK_ARGS)

control-plane:
	@scripts/build-control-plane.sh

venvs:
	@for f in mxnet tensorflow gloo; do scripts/framework-venv.sh $$f; done

redis:
	@scripts/ensure-redis.sh

## Regenerate the checked-in CRDs (a unit test fails when they are stale).
crds:
	@venv=$$(scripts/dev-venv.sh); "$$venv/bin/trainjobs" crds -o crds; cp crds/*.yaml charts/trainjobs/crds/

lint:
	@venv=$$(scripts/dev-venv.sh); "$$venv/bin/ruff" check . && "$$venv/bin/mypy"

unit:
	@venv=$$(scripts/dev-venv.sh); "$$venv/bin/pytest" tests/unit $(PYTEST_ARGS)

integration:
	@venv=$$(scripts/dev-venv.sh); "$$venv/bin/pytest" tests/integration $(PYTEST_ARGS)

e2e:
	@venv=$$(scripts/dev-venv.sh); "$$venv/bin/pytest" tests/e2e $(PYTEST_ARGS)
