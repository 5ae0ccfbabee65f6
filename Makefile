# Developer shortcuts; the README's two commands and .ci/run are the source of truth.
VENV ?= .venv
PY := $(VENV)/bin/python
# The wheel's features (pyproject.toml's [tool.maturin]); the Rust tests need the Sandbox too.
WHEEL_FEATURES := python,sandbox

.PHONY: develop test test-rust test-python lint lint-rust lint-python stubs bench notebooks

develop:            ## rebuild the extension into the venv (reuses target/)
	$(VENV)/bin/maturin develop --release

test: test-rust test-python

test-rust:          ## no Python needed
	cargo test --release --lib --features sandbox

test-python:
	$(VENV)/bin/pytest

lint: lint-rust lint-python stubs

lint-rust:          ## formatting, then clippy on the plain core and on the wheel's features
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features $(WHEEL_FEATURES) -- -D warnings

lint-python:
	$(VENV)/bin/ruff check python tests benchmarks notebooks

stubs:              ## the .pyi stubs against the compiled module, and the Python layer
	$(PY) -m mypy.stubtest defilens._core --allowlist .ci/stubtest-allowlist.txt
	$(PY) -m mypy python/defilens

bench:              ## by hand (needs the bench extra); writes benchmarks/RESULTS.md
	$(PY) benchmarks/run_all.py

notebooks:
	$(PY) notebooks/make_notebooks.py
