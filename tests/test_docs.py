"""The README's Python examples and the docstrings' ``>>>`` examples run, against a Sandbox."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import polars as pl
import pytest

import defilens
from defilens._pytest_plugin import FIXTURE_NOW
from defilens.testing import Sandbox

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))


def python_blocks(text: str) -> "list[tuple[int, str]]":
    """(line number, source) of every ```python block."""
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        blocks.append((text.count("\n", 0, match.start()) + 2, match.group(1)))
    return blocks


def _replay_fixture(started: "list[Sandbox]"):
    """What the ``defilens_replay`` fixture gives a test."""

    def replay(path: str, **settings: object) -> Sandbox:
        sandbox = Sandbox.replay(path, **settings)
        started.append(sandbox)
        return sandbox

    return replay


WITH_EXAMPLES = [page for page in [README, *PAGES] if python_blocks(page.read_text())]


@pytest.mark.parametrize("page", WITH_EXAMPLES, ids=lambda p: p.name)
def test_python_examples_run(page: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocks = python_blocks(page.read_text())
    monkeypatch.chdir(tmp_path)
    with Sandbox() as sandbox:
        # The examples are written for the real service; the environment points them here.
        monkeypatch.setenv("DEFILENS_BASE_URL", sandbox.url)
        # What the README's `defilens collect ... --out history/` before the history example does.
        defilens.Client().collect(["bitcoin", "ethereum"], "0.1s", count=2, out="history/", raw=True)
        namespace: "dict[str, object]" = {"defilens": defilens, "pl": pl}
        for line, source in blocks:
            code = compile(source, f"{page.name}:{line}", "exec")
            exec(code, namespace)
        # Example tests run as pytest would run them, the fixture included.
        for name, example in list(namespace.items()):
            if not (name.startswith("test_") and callable(example)):
                continue
            parameters = list(inspect.signature(example).parameters)
            if parameters == ["defilens_sandbox"]:
                with Sandbox(now=FIXTURE_NOW) as fixture:
                    example(fixture)
            elif parameters == ["defilens_replay"]:
                started: "list[Sandbox]" = []
                example(_replay_fixture(started))
                for replay in started:
                    replay.stop()
            else:
                assert parameters == [], f"{page.name}: {name} takes {parameters}"
                example()
    frames = namespace.get("frames")
    assert frames is None or isinstance(frames, defilens.Frames)


def test_the_examples_are_found() -> None:
    assert len(python_blocks(README.read_text())) >= 2
    assert sum(len(python_blocks(page.read_text())) for page in PAGES) >= 5


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
    block = re.search(r"```python\ndefilens.Client\((.*?)\n\)", page, re.S)
    assert block is not None
    shown = dict(re.findall(r"^\s+(\w+)=(.+?),\s+#", block.group(1), re.M))
    defaults = defilens._core.DEFAULTS
    for name in ("timeout", "max_retries", "concurrency", "cache_max_bytes", "max_response_bytes", "backoff"):
        assert eval(shown[name]) == defaults[name], (name, shown[name], defaults[name])
    assert shown["base_url"] == "None" and f'"{defaults["base_url"]}"' in block.group(1)
