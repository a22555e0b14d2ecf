# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP_FLAGS ?= --disable-pip-version-check --no-input

.PHONY: venv libero-env py310-env expectation-env test-tools demo demo-local demo-standin test test-fast test-libero lint format bench gpu-wheels clean clean-results

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_FLAGS) -q --upgrade pip==25.3
	$(BIN)/pip install $(PIP_FLAGS) -q -c constraints.txt -e '.[dev]'
	# An independent openpi client for the wire-format test (its numpy<2 pin is wrong, so no deps).
	$(BIN)/pip install $(PIP_FLAGS) -q --no-deps openpi-client==0.1.2
	touch $(STAMP)

venv: $(STAMP)

# The LIBERO simulator's own environment .venv-libero (offline, idempotent; no Snakemake in it, no simulator in
# .venv): see scripts/setup_libero.sh. Configs point benchmarks.libero.python at it.
libero-env: venv
	bash scripts/setup_libero.sh

# Debian tools the tests run for real: nginx (the TLS reverse proxy in front of a Labtasker server) and openssl
# (the tests' own certificates), chromium (the report opened in a real browser), Slurm 22.05 with munge (a single-node
# Slurm the tests start to run scripts/slurm/*.sbatch: tests/slurmkit.py). Installed if missing (root), like the
# simulator's packages.
test-tools:
	bash scripts/apt_install.sh test-tools nginx openssl chromium slurmctld slurmd slurm-client munge

# The light core's oldest interpreter .venv-py310 (Python 3.10, numpy 1.26, the light core only; offline, idempotent;
# fails when no Python 3.10 is found): see scripts/setup_py310_env.sh. Lint checks the light core there, tests run
# the RoboTwin stand-in through it.
py310-env:
	bash scripts/setup_py310_env.sh

# The side environment .venv-expectation (Python 3.12, the `expectation` library, pinned; idempotent; fails when no
# Python 3.12 is found): tests/report/test_sequential_vs_expectation.py checks evalwf/report/sequential.py against it.
expectation-env:
	bash scripts/setup_expectation_env.sh

# The main job on the embedded default: a LIBERO mini-campaign through a local Labtasker server and two
# local workers, then the summary tables.
demo: venv libero-env
	$(BIN)/evalwf demo

# The same campaign without a queue (Snakemake's local executor), and the stand-in campaign through the queue.
demo-local: venv libero-env
	$(BIN)/snakemake --profile profiles/local --configfile config/demo.yaml

demo-standin: venv
	$(BIN)/evalwf demo config/standin.yaml

# `snakemake --lint` of each shipped configuration's shape: the three single-benchmark configs (LIBERO, stand-in,
# RoboTwin stand-in: each benchmark's own rules), the two benchmarks each with its own policy, and the same with the
# openpi policy file (its commands parsed by the workflow). Each is a Snakemake start (1.3 CPU s, most of its 3 s
# waiting): they run three at a time, each one's output printed only when it fails, with the light-core check.
LINT_CONFIGS := config/demo.yaml config/standin.yaml config/robotwin-standin.yaml \
	"config/libero.yaml config/robotwin.yaml config/policies/standin.yaml" \
	"config/libero.yaml config/robotwin.yaml config/policies/openpi.yaml"

lint: venv py310-env
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check workflow
	light_log=$$(mktemp); $(BIN)/python scripts/light_core.py --check .venv-py310/bin/python > $$light_log 2>&1 & \
	light=$$!; printf '%s\n' $(LINT_CONFIGS) | xargs -P 3 -I{} sh -c 'out=$$($(BIN)/snakemake --lint --configfile {} \
		2>&1) || { printf "snakemake --lint --configfile {} failed:\n%s\n" "$$out"; exit 1; }'; linted=$$?; \
	wait $$light; checked=$$?; cat $$light_log; rm -f $$light_log; test $$linted = 0 && test $$checked = 0

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
	$(BIN)/snakefmt workflow

# Three pytest workers on the two cores: the suite waits on real processes (servers starting, status rounds, stand-in
# episodes that sleep) and used about 1.3 cores with two (docs/test-suite.md). TEST_WORKERS=1: one process, in file
# order. A file's tests stay on one worker, so its module fixtures (a finished run shared by its tests) are built
# once. Files go out slowest first (--no-loadscope-reorder keeps the order tests/file_order.py sets), so the run
# does not end on one busy core.
# What the tests need is built three targets at a time (pip and apt wait on the network, the disk and each other's
# unpacking more than on a core; apt_install.sh waits for dpkg's lock), each target's output kept together.
TEST_WORKERS ?= 3
test:
	$(MAKE) -j3 --output-sync=target lint libero-env test-tools py310-env expectation-env
	$(BIN)/python -m pytest -ra --durations=30 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-fast: venv
	$(BIN)/python -m pytest -ra -m "not slow" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Only the real-simulator tests, inside the LIBERO interpreter (make test runs them there too).
test-libero: libero-env
	REQUIRE_LIBERO=1 .venv-libero/bin/python -m pytest -ra tests/benchmarks/libero/test_libero_sim.py

# The wheelhouse scripts/gpu_proof.sh installs from on a GPU machine without network (cp312 manylinux wheels of what
# a machine with Python 3.12, torch, numpy and msgpack lacks), into the ignored .gpu-wheels/; its size is checked
# (the work tree travels with at most 64 MiB). Then: bash scripts/gpu_proof.sh there.
gpu-wheels: venv
	scripts/gpu_wheels.sh .gpu-wheels

# Stops the embedded Labtasker server of this directory and removes state only: Snakemake's (.snakemake: metadata,
# locks, job, worker and task logs), the queue's (.labtasker: database, token) and the tools' caches. Every result
# stays (a failed batch's cause too: its failure record is under results/); `make clean-results` is the one target
# that deletes them. Refused while a worker of this directory is alive (named, with how to stop it); FORCE=1 cleans
# anyway (evalwf/cli/clean_guard.py).
clean:
	@if test -x $(BIN)/python; then $(BIN)/python -m evalwf.cli.clean_guard $(if $(filter 1,$(FORCE)),--force); fi
	-test -x $(BIN)/labtasker-server && $(BIN)/labtasker-server stop --labtasker-root .labtasker
	rm -rf .snakemake .labtasker .pytest_cache .ruff_cache

# Deletes every result under results/: all runs (batches, summaries, manifests, logs, videos) and the manifest
# cache results/.manifest-cache, naming each path it deletes; results/README.md stays. Results written elsewhere
# (a config's results_dir / manifest_cache outside results/) are not touched.
clean-results:
	@echo "clean-results: deleting every run and the manifest cache under results/:"
	find results -mindepth 1 -maxdepth 1 ! -name README.md -print -exec rm -rf {} +
