# Developer shortcuts; the README's two commands and .ci/run are the source of truth.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: develop test test-rust test-python lint stubs bench notebooks

develop:            ## rebuild the extension into the venv (reuses target/)
	$(VENV)/bin/maturin develop --release

test: test-rust test-python stubs

test-rust:
	cargo test --release --lib

test-python:
	$(VENV)/bin/pytest

stubs:              ## the .pyi stubs against the compiled module, and the Python layer
	$(PY) -m mypy.stubtest defilens._core --allowlist .ci/stubtest-allowlist.txt
	$(PY) -m mypy python/defilens

lint:
	cargo fmt --check
	cargo clippy --release --features python -- -D warnings

bench:              ## by hand (needs the bench extra); writes benchmarks/RESULTS.md
	$(PY) benchmarks/run_all.py

notebooks:
	$(PY) notebooks/make_notebooks.py
