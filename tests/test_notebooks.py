"""Every notebook runs top to bottom against the Sandbox (a broken notebook fails CI), and gives
the text outputs it is committed with (figures aside): a reader sees what a fresh run shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, List, Tuple

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


#: A progress bar (tqdm's text, or its widget): drawn with the machine's speed, not a result.
PROGRESS = re.compile(r"^[^\n]*\d+%\|")


def text_outputs(notebook: Any) -> List[List[Tuple[str, ...]]]:
    """Each code cell's outputs as text: streams, errors, and the text forms of each result. A
    figure (a PNG, and a text/plain that only says its size) is left aside: its pixels follow
    matplotlib's version and fonts; so is a progress bar."""
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs: List[Tuple[str, ...]] = []
        for output in cell.get("outputs", []):
            kind = output["output_type"]
            if kind == "stream":
                if outputs and outputs[-1][:2] == (kind, output["name"]):
                    # One stream, however the kernel happened to flush it: as Jupyter shows it.
                    outputs[-1] = (kind, output["name"], outputs[-1][2] + output["text"])
                else:
                    outputs.append((kind, output["name"], output["text"]))
            elif kind == "error":
                outputs.append((kind, output["ename"], output["evalue"]))
            else:
                data = output.get("data", {})
                progress = "application/vnd.jupyter.widget-view+json" in data or PROGRESS.match(
                    str(data.get("text/plain", ""))
                )
                if "image/png" not in data and not progress:
                    outputs.append((kind, *(f"{key}: {data[key]}" for key in sorted(data) if key.startswith("text/"))))
        cells.append(outputs)
    return cells


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEFILENS_API_KEY", raising=False)
    notebook = nbformat.read(path, as_version=4)
    committed = text_outputs(notebook)
    NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    if "screen" in path.name or "markets" in path.name:
        assert any("image/png" in o.get("data", {}) for o in outputs), "expected a plot"
    fresh = text_outputs(notebook)
    differ = [i for i, (then, now) in enumerate(zip(committed, fresh, strict=False)) if then != now]
    assert len(committed) == len(fresh) and not differ, (
        f"{path.name}: code cell {differ[0] if differ else len(committed)} gives other text than the committed "
        f"notebook shows (regenerate it: python notebooks/make_notebooks.py {path.name}):\n"
        f"committed: {committed[differ[0]] if differ else committed}\nfresh:     {fresh[differ[0]] if differ else fresh}"
    )


def test_there_are_at_least_three_notebooks() -> None:
    assert len(NOTEBOOKS) >= 3
