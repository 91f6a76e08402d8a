# Icefjord: `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY_SOURCES := services shared icefjord contracts
PYTEST_ARGS ?=
# Run again with the warehouse on the local S3 server and the catalog in PostgreSQL.
# The stack's own tests go last: they stop and start it, PostgreSQL included.
S3_SUITE := tests/integration/test_writer.py \
	tests/integration/test_writer_files.py tests/integration/test_writer_bulk.py \
	tests/integration/test_writer_crash.py tests/integration/test_maintainer_execute.py \
	tests/integration/test_maintainer_service.py tests/integration/test_maintainer_warm.py \
	tests/integration/test_spark_cluster.py \
	tests/integration/test_writer_group.py \
	tests/integration/test_demo_e2e.py::test_iceberg_equals_the_source_after_kills_and_a_broker_restart \
	tests/integration/test_readers.py tests/integration/test_images.py \
	tests/integration/test_local_stack.py
# Run again with Kafka's client listener SASL_SSL and the registry behind HTTPS with basic
# auth: the refusals, the command lines, and one short demo through Debezium and the services.
SECURE_SUITE := tests/integration/test_security.py \
	tests/integration/test_demo_e2e.py::test_the_secured_stack_gives_the_same_proof

.DEFAULT_GOAL := help

help: ## Show this help
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}'

# The compiled paths of the normalizer and the writer (native/, Rust): cargo's build is kept
# here between runs.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/icefjord/cargo-target

$(BIN)/icefjord: pyproject.toml constraints.txt native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs) native/icefjord_native.pyi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,bench,readers]'
	@command -v cargo >/dev/null || { echo "building native/ needs Rust's cargo on PATH (https://rustup.rs)" >&2; exit 1; }
	$(BIN)/pip install --quiet ./native
	@touch $@

install: $(BIN)/icefjord ## Create the virtual environment and install Icefjord with dev tools

up: install ## Start the local stack (Kafka, Apicurio Registry, Spark + Iceberg catalog)
	$(BIN)/icefjord local up

down: ## Stop the local stack (data stays in .icefjord/)
	$(BIN)/icefjord local down

status: ## Show each local component and its health
	$(BIN)/icefjord local status

demo: install ## The main job: PostgreSQL -> Debezium -> Icefjord -> Iceberg, live, then proven equal
	$(BIN)/icefjord demo

bench: install ## End-to-end benchmark (normalizer and writer decoder compiled, as the images ship them): snapshot, fixed rates, maximum; report.md + bench.png
	@$(MAKE) --no-print-directory compiled || echo "make compiled failed (it needs gcc and the Python headers): the benchmark runs the plain normalizer"
	$(BIN)/icefjord bench

compiled: install ## The normalizer and the writer's Avro decoder compiled with mypyc (needs gcc), in .icefjord/compiled
	$(BIN)/pip install --quiet 'setuptools==84.2.1'
	rm -rf build .icefjord/compiled .icefjord/wheels
	ICEFJORD_MYPYC=1 $(BIN)/pip wheel --quiet --no-deps --no-build-isolation -w .icefjord/wheels .
	$(BIN)/pip install --quiet --no-deps --target .icefjord/compiled .icefjord/wheels/icefjord-*.whl

bench-normalize: compiled ## The normalizer's changes/s per process, plain and compiled
	$(BIN)/icefjord bench normalize
	cd .icefjord && PYTHONPATH=compiled ../$(BIN)/icefjord bench normalize

images: ## Build the four service images (Docker; local stand-in bases where no registry answers)
	ICEFJORD_IMAGE_CACHE="$${ICEFJORD_IMAGE_CACHE:-$(CURDIR)/.icefjord/images}" deploy/docker/build-images.sh

lint: install ## ruff and mypy --strict
	$(BIN)/ruff check $(PY_SOURCES) tests
	$(BIN)/ruff format --check $(PY_SOURCES) tests
	$(BIN)/mypy --strict services shared icefjord contracts
	$(BIN)/ruff check deploy/validate deploy/docker/lock.py deploy/peer-flink/job.py
	$(BIN)/ruff format --check deploy/validate deploy/docker/lock.py deploy/peer-flink/job.py
	MYPYPATH=deploy/validate $(BIN)/mypy --strict -p deploycheck
	$(BIN)/mypy --strict deploy/docker/lock.py
	$(BIN)/python deploy/docker/lock.py --check
	PATH="$(CURDIR)/$(BIN):$$PATH" deploy/validate/run.sh

# The S3 and the secured suites run, one after the other, beside the main suite, each against
# its own stack on free ports: every suite waits on Kafka, Spark or the store part of the
# time, and the other one fills it (the README's Layout gives the minutes). Their output is
# kept and shown at the end.
TEST_LOGS := .icefjord/test-logs

test: install ## Lint, then unit, integration and e2e tests against a real local stack started for the run; beside them the S3 suite, then the secured one
	$(MAKE) lint
	@mkdir -p $(TEST_LOGS)
	@echo "make test-s3 and make test-secure run beside the main suite; their output: $(TEST_LOGS)/beside.log"
	@{ $(MAKE) --no-print-directory test-s3; s3=$$?; \
	  $(MAKE) --no-print-directory test-secure; secure=$$?; \
	  echo "== make test-s3 exit $$s3, make test-secure exit $$secure"; \
	  [ $$s3 -eq 0 ] && [ $$secure -eq 0 ]; } >$(TEST_LOGS)/beside.log 2>&1 & beside=$$!; \
	$(BIN)/pytest $(PYTEST_ARGS); main=$$?; \
	wait $$beside; beside_code=$$?; \
	echo "== make test-s3, then make test-secure (run beside the main suite)"; \
	cat $(TEST_LOGS)/beside.log; \
	echo "== main suite exit $$main"; \
	[ $$main -eq 0 ] && [ $$beside_code -eq 0 ]

test-s3: install ## The stack's, writer's, maintainer's, fault and image tests with the warehouse on S3 (SeaweedFS) and the catalog in PostgreSQL
	ICEFJORD_TEST_STORAGE=s3 $(BIN)/pytest $(PYTEST_ARGS) $(S3_SUITE)

test-secure: install ## Kafka over SASL_SSL and the registry over HTTPS with basic auth: refusals, no secret on a command line, a short demo proven equal
	ICEFJORD_TEST_SECURITY=sasl_ssl $(BIN)/pytest $(PYTEST_ARGS) $(SECURE_SUITE)

test-e2e: install ## The demo under faults: kill -9 every service, restart Kafka, prove tables equal
	$(BIN)/pytest -m e2e $(PYTEST_ARGS)

test-unit: install ## Unit tests only (no external process)
	$(BIN)/pytest -m unit $(PYTEST_ARGS)

clean: down ## Stop the stack and delete its local state (.icefjord/)
	rm -rf .icefjord

.PHONY: help install up down status demo bench compiled bench-normalize images lint test test-s3 test-secure test-e2e test-unit clean
