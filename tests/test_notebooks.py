"""Every notebook runs top to bottom against the Sandbox (a broken notebook fails CI)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEFILENS_API_KEY", raising=False)
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    if "screen" in path.name or "markets" in path.name:
        assert any("image/png" in o.get("data", {}) for o in outputs), "expected a plot"


def test_there_are_at_least_three_notebooks() -> None:
    assert len(NOTEBOOKS) >= 3
