"""Every code block of the README and of docs/ runs as a user pastes it, and the docstrings'
``>>>`` examples run, against a Sandbox.

A page's blocks run in order, in one fresh namespace with nothing imported (blocks of a page may
build on each other, as a reader pastes them one after the other into one session): ``python``
blocks are executed, ``sql`` blocks run in DuckDB (in one connection a page, with a home folder of its own: nothing is
loaded or installed but what the page's blocks load and install, offline), ``bash`` blocks run in
bash with ``defilens`` on the PATH. They run in an empty folder, with ``DEFILENS_BASE_URL``
pointing at a Sandbox: a page creates what it reads. Only a page whose own ``defilens collect
... --out history/`` cannot run here (it collects until stopped) gets a short history (`collect`
of two rounds, with ``raw``) in ``history/`` first (`GIVEN_A_HISTORY`).

A block that cannot run here (it builds the package for twenty minutes, collects until stopped,
needs a bucket or a Spark session) carries a marker comment on the line before it, with the reason,
which pytest-codeblocks reads too::

    <!--pytest.mark.skip(reason="collects until stopped")-->

Such a block is still checked: Python compiles, SQL parses, bash passes ``bash -n``. The blocks
are found by pytest-codeblocks's own reader (fences of any length, indented fences, the markers).
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import duckdb
import polars as pl
import pytest
from pytest_codeblocks import extract_from_file

import defilens
from defilens._pytest_plugin import FIXTURE_NOW
from defilens.testing import Sandbox

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
#: The pages that read a ``history/`` their own blocks cannot make, and the block that would.
GIVEN_A_HISTORY = {"history.md": "its first block, `defilens collect ... --out history/`, collects until stopped"}
#: The languages a block may be written in: each is run (or, marked, checked) by the test.
LANGUAGES = ("python", "sql", "bash")
NOT_RUN = re.compile(r"""pytest\.mark\.skip\(reason=(?P<q>["'])(?P<reason>.+)(?P=q)\)""")


@dataclass
class Block:
    page: str
    line: int
    language: str
    code: str
    #: Why the block is not run here, from its marker; None: it runs.
    not_run: Optional[str]

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> List[Block]:
    """Every fenced block of ``page`` that has a language, in order."""
    found = []
    for block in extract_from_file(page):
        reasons = []
        for mark in block.marks:
            matched = NOT_RUN.fullmatch(mark.strip())
            assert matched, (
                f'{page.name}:{block.lineno}: the marker should read pytest.mark.skip(reason="..."), not {mark!r}'
            )
            reasons.append(matched.group("reason"))
        language = (block.syntax or "").strip()
        found.append(Block(page.name, block.lineno, language, block.code, reasons[0] if reasons else None))
    return [block for block in found if block.language]


def _replay_fixture(started: "List[Sandbox]"):
    """What the ``defilens_replay`` fixture gives a test."""

    def replay(path: str, **settings: object) -> Sandbox:
        sandbox = Sandbox.replay(path, **settings)
        started.append(sandbox)
        return sandbox

    return replay


def _check_without_running(block: Block) -> None:
    if block.language == "python":
        compile(block.code, block.where, "exec")
    elif block.language == "sql":
        assert duckdb.connect().extract_statements(block.code), f"{block.where}: no SQL statement"
    else:
        done = subprocess.run(["bash", "-n", "-c", block.code], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{block.where}: {done.stderr}"


def _run_tests_defined(namespace: "Dict[str, object]", page: str) -> None:
    """The example tests a page defines, run as pytest would run them, fixtures included."""
    for name, example in list(namespace.items()):
        if not (name.startswith("test_") and callable(example)):
            continue
        parameters = list(inspect.signature(example).parameters)
        if parameters == ["defilens_sandbox"]:
            with Sandbox(now=FIXTURE_NOW) as fixture:
                example(fixture)
        elif parameters == ["defilens_replay"]:
            started: "List[Sandbox]" = []
            example(_replay_fixture(started))
            for replay in started:
                replay.stop()
        else:
            assert parameters == [], f"{page}: {name} takes {parameters}"
            example()


WITH_BLOCKS = [page for page in PAGES if blocks(page)]


@pytest.mark.parametrize("page", WITH_BLOCKS, ids=lambda p: p.name)
def test_the_blocks_of_a_page_run_as_pasted(page: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    # `defilens` and `python` on the PATH of the shell blocks: this interpreter's.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    # A home of its own: DuckDB finds no extension a page did not install itself (~/.duckdb).
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with Sandbox() as sandbox:
        # The examples are written for the real service; the environment points them here.
        monkeypatch.setenv("DEFILENS_BASE_URL", sandbox.url)
        if page.name in GIVEN_A_HISTORY:
            # What the page's `defilens collect ... --out history/` would have made by now.
            defilens.Client().collect(["bitcoin", "ethereum"], "0.1s", count=2, out="history/", raw=True)
        namespace: "Dict[str, object]" = {"__name__": "__main__"}
        database: "Optional[duckdb.DuckDBPyConnection]" = None
        for block in blocks(page):
            if block.not_run is not None:
                _check_without_running(block)
            elif block.language == "python":
                exec(compile(block.code, block.where, "exec"), namespace)
            elif block.language == "sql":
                if database is None:
                    # Never a download: offline, an extension the page did not install is an error.
                    database = duckdb.connect(config={"autoinstall_known_extensions": False})
                database.execute(block.code).fetchall()
            else:
                done = subprocess.run(
                    ["bash", "-e", "-o", "pipefail", "-c", block.code], capture_output=True, text=True, timeout=120
                )
                assert done.returncode == 0, f"{block.where} exited {done.returncode}: {done.stdout}{done.stderr}"
        _run_tests_defined(namespace, page.name)
    frames = namespace.get("frames")
    assert frames is None or isinstance(frames, defilens.Frames)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_block_has_a_language_the_test_runs(page: Path) -> None:
    """A ```py or ```sh block would pass unseen; text and output blocks have no language."""
    for block in blocks(page):
        assert block.language in LANGUAGES, (
            f"{block.where}: write ```{' or ```'.join(LANGUAGES)}, not ```{block.language}"
        )
        assert block.not_run is None or len(block.not_run) > 10, f"{block.where}: say why it cannot run"


def test_the_blocks_are_found() -> None:
    found = [block for page in PAGES for block in blocks(page)]
    run = [block for block in found if block.not_run is None]
    assert len([block for block in run if block.page == "README.md" and block.language == "python"]) >= 3
    assert {block.language for block in run} == set(LANGUAGES), "every language has a block that runs"
    assert len(run) >= 20 and len(found) - len(run) < len(run), (len(run), len(found))


@pytest.mark.parametrize(
    ("page", "heading"), [(ROOT / "docs" / "index.md", "## Where to go next"), (README, "## Documentation")]
)
def test_the_guides_list_every_page(page: Path, heading: str) -> None:
    """docs/index.md's "Where to go next" and the README's "Documentation" link every page of docs/."""
    section = page.read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    linked = {Path(target).name for target in re.findall(r"\]\(([^)#]+\.md)", section)}
    pages = {path.name for path in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert not pages - linked, f"{page.name} {heading!r} does not link {sorted(pages - linked)}"


def test_a_marker_reaches_the_block_after_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Runs:\n\n```python\nx = 1\n```\n\n"
        '<!--pytest.mark.skip(reason="needs a Spark session")-->\n\n```python\nspark.stop()\n```\n\n'
        "Output:\n\n```\nnot code\n```\n"
    )
    assert [(b.line, b.language, b.not_run) for b in blocks(page)] == [
        (3, "python", None),
        (9, "python", "needs a Spark session"),
    ]
    page.write_text('<!--pytest.mark.skip("why")-->\n```bash\nls\n```\n')
    with pytest.raises(AssertionError, match="should read"):
        blocks(page)


def modules() -> "list[str]":
    names = ["defilens"]
    names += [f"defilens.{m.name}" for m in pkgutil.iter_modules(defilens.__path__) if m.name != "__main__"]
    return names


@pytest.mark.parametrize("name", modules())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name, globs={"defilens": defilens, "pl": pl}):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (see above)"


def family_table() -> str:
    """Which families exist on which interval, from the field catalogue (`_core.FAMILY_INTERVALS`)."""
    groups: "dict[tuple[str, tuple[str, ...]], list[str]]" = {}
    for frame, name, intervals in defilens._core.FAMILY_INTERVALS:
        groups.setdefault((frame, tuple(intervals)), []).append(name)
    header = "| frame | names | " + " | ".join(defilens._core.INTERVALS) + " |"
    lines = [header, "|---|---|" + "---|" * len(defilens._core.INTERVALS)]
    for (frame, intervals), names in groups.items():
        marks = " | ".join("yes" if interval in intervals else "-" for interval in defilens._core.INTERVALS)
        lines.append(f"| `{frame}` | {', '.join(f'`{n}`' for n in names)} | {marks} |")
    return "\n".join(lines)


def test_the_interval_table_of_the_frames_page_is_the_catalogues() -> None:
    page = (ROOT / "docs" / "frames.md").read_text()
    assert family_table() in page, (
        f"docs/frames.md should hold this table, made from the catalogue:\n\n{family_table()}"
    )


def test_the_configuration_page_shows_the_cores_defaults() -> None:
    """docs/configuration.md writes the defaults out for a reader; they are the core's."""
    page = (ROOT / "docs" / "configuration.md").read_text()
    block = re.search(r"```python\nimport defilens\n\ndefilens.Client\((.*?)\n\)", page, re.S)
    assert block is not None
    shown = dict(re.findall(r"^\s+(\w+)=(.+?),\s+#", block.group(1), re.M))
    defaults = defilens._core.DEFAULTS
    for name in ("timeout", "max_retries", "concurrency", "cache_max_bytes", "max_response_bytes", "backoff"):
        assert eval(shown[name]) == defaults[name], (name, shown[name], defaults[name])
    assert shown["base_url"] == "None" and f'"{defaults["base_url"]}"' in block.group(1)
