# FerryMQ developer entry points. `make run` and `make test` work on a fresh machine.
# PYTHON: the interpreter the virtualenv is made from. By default the distribution's CPython 3.11
# where it is installed with venv support and its headers (the C codecs compile against them), else
# python3 from the PATH. Distribution builds are optimised with PGO and LTO (Debian's, Ubuntu's, as
# the official python images the broker's image starts from); pyenv's default build is not, and the
# broker spends about 80 % of its CPU in the interpreter: 20-25 % less CPU per message on Debian's
# (docs/operations.md#the-interpreter). Changing it rebuilds the virtualenv.
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for p in /usr/bin/python3.11; do $$p -c 'import ensurepip, os, sysconfig; \
  assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null \
  && echo $$p && exit; done; echo python3)
endif
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test venv unit compat bench bench-quick clean

# The stamp holds the interpreter the virtualenv was made from; another one remakes it.
ifneq ($(shell cat $(STAMP) 2>/dev/null),$(PYTHON))
.PHONY: $(STAMP)
endif
$(STAMP): pyproject.toml ferrymq/common/_message_codec.c ferrymq/remoting/_header_codec.c ferrymq/grpc/_hpack.c
	@if [ -d $(VENV) ] && [ "$$(cat $(STAMP) 2>/dev/null)" != "$(PYTHON)" ]; then \
	  echo "venv: making $(VENV) again from $(PYTHON)"; rm -rf $(VENV); fi
	@test -x $(PY) || { echo "venv: $(VENV) from $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -e '.[dev,spark]'
	@echo '$(PYTHON)' > $(STAMP)

venv: $(STAMP)

## run: start a standalone name server + broker under ./.data, run a demo, keep serving
run: $(STAMP)
	@$(PY) -m ferrymq.cli.main standalone --data-dir .data --demo

## test: the full suite (unit, integration, compatibility with the official Java client,
## Spark local mode) but for its few tests of 25 s or more (test-slow); the Kubernetes layer
## has its own target, k8s-test
## TEST_WORKERS: pytest processes for make test, each taking whole modules (a module's fixtures, a
## JVM, stay in one process; all Spark modules share one), longest first (tests/parallel_schedule.py);
## 1 runs the suite in one process
TEST_WORKERS ?= 3
TEST_ARGS = -q -ra --ignore=tests/k8s -m "not slow" $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
test: $(STAMP) chromium
	@$(PY) -m pytest --durations=25 $(TEST_ARGS)

## test-durations: run make test's suite and record each module's time in tests/module_durations.json,
## which make test uses to start the longest modules first (commit it when modules grew or moved)
.PHONY: test-durations
test-durations: $(STAMP) chromium
	@$(PY) -m pytest $(TEST_ARGS) --record-module-durations tests/module_durations.json

## test-slow: the single tests of 25 s or more (kill -9 with failover or under SYNC_FLUSH load, the controller down for
## long, a promoted slave firing timers, a consumer moving to the slave, the gRPC Java client's
## push/FIFO/simple consumers, the Node.js client, 100 000 messages read by Spark, a Spark job
## crashing between write and commit, the Topic's publish job run four times, the short fuzzing run, the chaos tests of tests/chaos with
## the official Java workload), about 10 min; CI runs it after make test
.PHONY: test-slow
test-slow: $(STAMP)
	@$(PY) -m pytest -q -ra --durations=10 --ignore=tests/k8s -m slow

## chromium: Debian's chromium for the console's browser tests (Playwright drives it; no browser
## download), installed with apt when missing
.PHONY: chromium
chromium:
	@bash tests/console/ensure-chromium.sh || echo "chromium: not installed; the console's browser tests say what is missing"

## unit: the tests not marked integration or compat (no separate broker processes, no Java or Apache peers)
unit: $(STAMP)
	@$(PY) -m pytest -q -m "not integration and not compat"

## bench: benchmarks, printing figures and the ratio against Apache RocketMQ
bench: $(STAMP)
	@$(PY) bench/run_all.py

## bench-quick: the same benchmarks with small counts (a few minutes)
bench-quick: $(STAMP)
	@$(PY) bench/run_all.py --quick

## bench-sweep: issue 33's sweep, FerryMQ against Apache RocketMQ 5.3.1 and 4.9.7 (body sizes,
## sender counts, batches in flight, each consumer kind, SYNC_FLUSH; one axis at a time around
## 1 KiB x 64 senders), median of 3 rounds, one table of ratios and broker CPU per message and the
## worst point; every round in bench/results/sweep-<date>-<time>.json; 15-23 min
.PHONY: bench-sweep bench-sweep-quick
bench-sweep: $(STAMP)
	@$(PY) bench/sweep_bench.py

## bench-sweep-quick: the sweep on 4 points, one round, short bounds (a few minutes)
bench-sweep-quick: $(STAMP)
	@$(PY) bench/sweep_bench.py --quick

clean:
	rm -rf $(VENV) .pytest_cache

## k8s-test: the operator on a local control plane (etcd, kube-apiserver, controller-manager,
## scheduler, kwok, helm built once from the Go module proxy into ~/.cache/ferrymq-k8s)
.PHONY: k8s-test e2e-kind
k8s-test: $(STAMP)
	@bash e2e/controlplane/build.sh
	@FERRYMQ_K8S_TESTS=1 $(PY) -m pytest -q -ra tests/operator tests/k8s

## e2e-kind: the user story on a real kind cluster built offline here (Docker engine, node image,
## images, cluster of 1 control plane + 3 workers, helm install, scenarios, then one fault of each kind (10)
## (e2e/kind/test_kind_chaos.py); caches under ~/.cache/ferrymq-k8s, see docs/contributing.md#testing-the-operator)
e2e-kind: $(STAMP)
	@bash e2e/kind/run.sh

## chaos-kind: node faults on the kind cluster for longer (e2e/kind/test_kind_chaos.py alone, without the
## scenarios): CHAOS_KIND_FAULTS random faults (the master's node paused, killed, cut off or drained, its
## broker killed or its pod deleted, master and slave cut from each other, the controllers and operator
## deleted for 2 min, a broker image rolled) from CHAOS_KIND_SEED under the RocketMQ 4.9.7 Java client's
## producer and push consumer and the 5.x gRPC client's push consumer, results in
## bench/results/chaos-kind-<date>.json (docs/chaos.md), about 2-3 min a fault. CHAOS_KIND_MODE=Async:
## an ASYNC_MASTER Broker, its acknowledged loss counted and reported but not failing the run
## (bench/results/chaos-kind-async-<date>.json); Sync (the default) fails on any loss
CHAOS_KIND_FAULTS ?= 30
CHAOS_KIND_SEED   ?= 1
CHAOS_KIND_MODE   ?= Sync
.PHONY: chaos-kind
chaos-kind: $(STAMP)
	@FERRYMQ_KIND_SUITES=chaos FERRYMQ_KIND_CHAOS_FAULTS=$(CHAOS_KIND_FAULTS) FERRYMQ_KIND_CHAOS_SEED=$(CHAOS_KIND_SEED) \
	    FERRYMQ_KIND_CHAOS_MODE=$(CHAOS_KIND_MODE) \
	    FERRYMQ_KIND_CHAOS_RESULTS=$(CURDIR)/bench/results/chaos-kind$(if $(filter Async,$(CHAOS_KIND_MODE)),-async)-$$(date +%Y-%m-%d).json \
	    bash e2e/kind/run.sh

## images: FerryMQ's broker, operator and Spark images (FERRYMQ_IMAGE_TAG, FERRYMQ_PYTHON_IMAGE)
.PHONY: images
images:
	@bash e2e/images/build-images.sh

## chaos: the fault-injection suite on local processes (name server, controller, two brokers in
## controller mode, the official Java client producing and consuming): 30 random single faults
## under SYNC_MASTER (kill -9 or freeze of master or slave, kill -9 of the controller, alone or with
## the master), then 12 under ASYNC_MASTER (its loss reported); the group heals between faults;
## one table each, results in bench/results/chaos-local-{sync,async}-<date>.json (CHAOS_FAULTS,
## CHAOS_ASYNC_FAULTS, CHAOS_SEED; docs/chaos.md), about 15 min; first the tests marked chaos (tests/chaos)
CHAOS_FAULTS       ?= 30
CHAOS_ASYNC_FAULTS ?= 12
CHAOS_SEED         ?= 1
.PHONY: chaos
chaos: $(STAMP)
	@$(PY) -m pytest -q -ra -s tests/chaos -m chaos; t=$$?; d=$$(date +%Y-%m-%d); \
	$(PY) -m e2e.chaos.local_suite --role SYNC_MASTER --faults $(CHAOS_FAULTS) --seed $(CHAOS_SEED) \
	    --results bench/results/chaos-local-sync-$$d.json; s=$$?; echo; \
	$(PY) -m e2e.chaos.local_suite --role ASYNC_MASTER --faults $(CHAOS_ASYNC_FAULTS) --seed $(CHAOS_SEED) \
	    --results bench/results/chaos-local-async-$$d.json; a=$$?; \
	exit $$((t | s | a))

## soak: the kill -9 crash test for longer (200 SYNC_FLUSH and 50 ASYNC_FLUSH kill/restart cycles;
## FERRYMQ_CRASH_CYCLES / FERRYMQ_CRASH_SEED to change them)
.PHONY: soak
soak: $(STAMP)
	@FERRYMQ_CRASH_CYCLES=$${FERRYMQ_CRASH_CYCLES:-200} $(PY) -m pytest -q -s -ra --timeout 3600 tests/integration/test_store_crash.py

## fuzz: coverage-guided fuzzing of every decoder (atheris), FUZZ_RUNS inputs per target
## (default 1 000 000); findings land in .cache/fuzz/findings, see fuzz/run.py
.PHONY: fuzz
fuzz: $(STAMP)
	@$(PY) -m fuzz.run --runs $${FUZZ_RUNS:-1000000}
