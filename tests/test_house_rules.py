"""The house's rules hold, and the check that enforces them catches a breach."""

from __future__ import annotations

import ast
import importlib.machinery
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / ".ci" / "check-dependencies"


def _check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True)


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "src", copy / "src")
    shutil.copytree(
        ROOT / "python" / "defilens", copy / "python" / "defilens", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    return copy


def test_the_checkout_keeps_the_rules() -> None:
    run = _check(ROOT)
    assert run.returncode == 0, run.stderr


def test_a_production_import_of_the_sandbox_is_caught(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    columns = copy / "src" / "frames" / "columns.rs"
    columns.write_text("use crate::sandbox::Candle;\n" + columns.read_text())
    run = _check(copy)
    assert run.returncode == 1 and "src/frames/columns.rs: production code names crate::sandbox" in run.stderr


def test_a_binding_calling_up_into_python_and_a_circle_are_caught(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    binding = copy / "src" / "python" / "client.rs"
    binding.write_text(binding.read_text() + '\nfn up(py: Python<\'_>) { let _ = py.import("defilens._frames"); }\n')
    model = copy / "src" / "model" / "interval.rs"
    model.write_text("use crate::parse::listing::ListingBody;\n" + model.read_text())
    frames = copy / "python" / "defilens" / "_frames.py"
    frames.write_text(frames.read_text() + "\nfrom ._parsing import parse_token\n")
    run = _check(copy)
    assert run.returncode == 1
    assert "import the Python module defilens._frames" in run.stderr
    assert "Rust modules import each other in a circle" in run.stderr and "model" in run.stderr
    assert "Python modules import each other in a circle: defilens._frames <-> defilens._parsing" in run.stderr


def test_type_only_and_parenthesised_imports_are_edges(tmp_path: Path) -> None:
    """A module typed against another knows its insides: a `TYPE_CHECKING` import is an edge, and
    so is an import in parentheses (a regex read neither, and let the circle client -> history ->
    client through type-only imports pass)."""
    copy = _copy(tmp_path)
    settings = copy / "python" / "defilens" / "history" / "_settings.py"
    settings.write_text(
        settings.read_text()
        + "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .._client import Client\n"
    )
    frames = copy / "python" / "defilens" / "_frames.py"
    frames.write_text(frames.read_text() + "\nfrom ._parsing import (\n    parse_token,\n)\n")
    run = _check(copy)
    assert run.returncode == 1
    assert "defilens._client" in run.stderr and "defilens.history._settings" in run.stderr, run.stderr
    assert "Python modules import each other in a circle: defilens._frames <-> defilens._parsing" in run.stderr


def test_a_circle_through_super_super_is_caught(tmp_path: Path) -> None:
    """`super::super::x` names the grandparent's `x` (as rustc resolves it), and a module using
    its child's items is an edge too: a circle through either is caught."""
    copy = _copy(tmp_path)
    # client/limiter.rs -> super::super::batch::job (batch -> client exists already).
    limiter = copy / "src" / "client" / "limiter.rs"
    limiter.write_text("use super::super::batch::job::Job;\n" + limiter.read_text())
    run = _check(copy)
    assert run.returncode == 1 and "circle" in run.stderr and "batch" in run.stderr and "client" in run.stderr, (
        run.stderr
    )


def test_a_parent_using_its_child_is_an_edge(tmp_path: Path) -> None:
    """model (mod.rs) -> model::interval -> frames -> model: a circle only if the edge from a
    module to one below it counts, as it must (the parent really uses the child's items)."""
    copy = _copy(tmp_path)
    model = copy / "src" / "model" / "mod.rs"
    model.write_text("use crate::model::interval::INTERVAL_MS as _LENGTHS;\n" + model.read_text())
    interval = copy / "src" / "model" / "interval.rs"
    interval.write_text("use crate::frames::FRAME_NAMES;\n" + interval.read_text())
    run = _check(copy)
    assert run.returncode == 1 and "circle" in run.stderr and "model" in run.stderr, run.stderr


def test_every_folder_has_its_row_in_the_map() -> None:
    """ARCHITECTURE.md names every folder of the Rust crate and the Python package (a folder
    added without a row is a room nobody can find)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    folders = [
        path
        for base in (ROOT / "src", ROOT / "python" / "defilens")
        for path in [base, *base.rglob("*")]
        if path.is_dir() and path.name not in ("__pycache__", "samples") and path != ROOT / "src"
    ]
    missing = [
        str(folder.relative_to(ROOT)) + "/"
        for folder in folders
        if f"`{folder.relative_to(ROOT)}/`" not in text and f"`{folder.name}/`" not in text
    ]
    assert not missing, f"ARCHITECTURE.md has no row for {', '.join(missing)}"


def _dependency_checker() -> types.ModuleType:
    """`.ci/check-dependencies` as a module, reading this checkout: the map is held to the same
    import graph the dependency rules are checked on."""
    loader = importlib.machinery.SourceFileLoader("check_dependencies", str(CHECK))
    module = types.ModuleType(loader.name)
    argv, sys.argv = sys.argv, [str(CHECK), str(ROOT)]
    try:
        loader.exec_module(module)
    finally:
        sys.argv = argv
    return module


def modules_as_mapped() -> Dict[str, Dict[str, Set[str]]]:
    """Folder -> file -> what the file may use, as ARCHITECTURE.md's module lines must say it: a
    Python module's imports of the package (a sibling by its bare name, anything else by its
    dotted name, ``defilens.`` in a subpackage), a Rust file's rooms outside its own (production code)."""
    checker = _dependency_checker()
    mapped: Dict[str, Dict[str, Set[str]]] = {}
    package = ROOT / "python" / "defilens"
    edges = checker.python_edges()
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        home = (name if path.name == "__init__.py" else name.rsplit(".", 1)[0]).removeprefix("defilens").lstrip(".")
        shown = set()
        for target in edges[name]:
            relative = target.removeprefix("defilens.")
            if home and relative.startswith(home + ".") and "." not in relative[len(home) + 1 :]:
                shown.add(relative[len(home) + 1 :])
            else:
                shown.add(f"defilens.{relative}" if home else relative)
        mapped.setdefault(str(path.parent.relative_to(ROOT)), {})[path.name] = shown
    modules = checker.rust_modules()
    rust_edges = checker.rust_edges(modules)
    for path in sorted((ROOT / "src").rglob("*.rs")):
        module = checker.module_of(path)
        room = module.split("::")[0]
        rooms = (
            {target.split("::")[0] for target in rust_edges.get(module, ())}
            if path.name not in checker.TEST_FILES
            else set()
        )
        mapped.setdefault(str(path.parent.relative_to(ROOT)), {})[path.name] = rooms - {room, ""}
    return mapped


#: A module's line in ARCHITECTURE.md: "- `name.py`: what it holds. Imports `a`, `b`." (Rust:
#: "Uses `model`.").
MODULE_LINE = re.compile(r"^- `(?P<file>[\w.]+)`: (?P<what>.+?)(?: (?:Imports|Uses) (?P<names>`.+`)\.)?$")


def modules_in_the_map(text: str) -> Dict[str, Dict[str, Set[str]]]:
    found: Dict[str, Dict[str, Set[str]]] = {}
    section = None
    for line in text.splitlines():
        heading = re.fullmatch(r"### `(?P<folder>[\w/]+)/`", line)
        if heading:
            section = found.setdefault(heading["folder"], {})
        elif line.startswith("#"):
            section = None
        elif section is not None and line.startswith("- `"):
            match = MODULE_LINE.match(line)
            assert match, f"ARCHITECTURE.md: a module line not of the form '- `file`: what. Imports `a`.': {line}"
            section[match["file"]] = set(re.findall(r"`([\w.]+)`", match["names"] or ""))
    return found


def test_every_module_has_its_line_in_the_map_with_what_it_imports() -> None:
    """Each Rust file and Python module has one line under its folder's heading in ARCHITECTURE.md,
    and the line names exactly what it imports (a map that says less, or more, fails here)."""
    mapped = modules_in_the_map((ROOT / "ARCHITECTURE.md").read_text())
    actual = modules_as_mapped()
    problems = []
    for folder, files in sorted(actual.items()):
        listed = mapped.get(folder)
        if listed is None:
            problems.append(f"no heading ### `{folder}/`")
            continue
        for name, imports in sorted(files.items()):
            if name not in listed:
                problems.append(f"{folder}/{name}: no line")
            elif listed[name] != imports:
                problems.append(
                    f"{folder}/{name}: the map says {sorted(listed[name])}, the code imports {sorted(imports)}"
                )
        problems += [
            f"{folder}/{name}: a line for a file that does not exist" for name in sorted(set(listed) - set(files))
        ]
    problems += [
        f"### `{folder}/`: a heading for a folder with no modules" for folder in sorted(set(mapped) - set(actual))
    ]
    assert not problems, "ARCHITECTURE.md's module map is out of date:\n" + "\n".join(problems)


#: What a history root holds besides its tables, as the package's source may spell it.
ROOT_LAYOUT_NAMES = re.compile(r"_spool\b|_defilens/|_audit/")


def test_what_a_root_holds_is_named_in_one_module() -> None:
    """Every path under a history root (`_spool`, `_defilens/...`, `_audit/...`) is written in one
    module; the others use its names. Docstrings may mention them; code may not spell them."""
    package = ROOT / "python" / "defilens"
    naming: Dict[str, List[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and ROOT_LAYOUT_NAMES.search(node.value)
            ):
                naming.setdefault(str(path.relative_to(package)), []).append(node.value)
    assert len(naming) == 1, f"the root's layout is spelled in several modules: {naming}"


#: Where a subpackage's namespace imports its own private modules, the rest of the package may not.
SUBPACKAGES = ("history", "research", "_cli")


def _imported(path: Path, package: Path, node: ast.AST) -> "tuple[tuple[str, ...], List[str]]":
    """The module an import names, as parts under ``defilens`` (``("history", "_collect")``), and
    the names it takes from it."""
    if isinstance(node, ast.ImportFrom):
        here = path.relative_to(package).parts[:-1]
        if node.level:
            base = here[: len(here) - (node.level - 1)]
        else:
            if not (node.module or "").startswith("defilens"):
                return (), []
            base = ()
        module = tuple((node.module or "").split(".")) if node.module else ()
        if not node.level:
            module = module[1:]
        return base + module, [alias.name for alias in node.names]
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith("defilens."):
                return tuple(alias.name.split(".")[1:]), []
    return (), []


def test_every_module_imports_a_subpackage_by_its_public_names_only() -> None:
    """Outside `history`, `research` and the command line (`_cli`), a module reads each through
    its namespace, never its private modules or private names, so each can change inside without
    the others noticing; `history` gives the research and the command line what they need as
    names of its own (outside `__all__`)."""
    package = ROOT / "python" / "defilens"
    private = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).parts
        home = parts[0] if len(parts) > 1 else None
        for node in ast.walk(ast.parse(path.read_text())):
            module, names = _imported(path, package, node)
            if not module or module[0] not in SUBPACKAGES or module[0] == home:
                continue
            if len(module) > 1 or any(name.startswith("_") for name in names):
                shown = "." * node.level + (node.module or "") if isinstance(node, ast.ImportFrom) else ".".join(module)
                private.append(f"{'/'.join(parts)}: from {shown} import {', '.join(names)}")
    assert private == [], private


def test_commit_messages_keep_the_house_rules(tmp_path: Path) -> None:
    """pre-commit's commit-msg stage (.ci/check-commit-msg): a subject of at most 72 characters,
    a blank line after it, a body when more than 3 files change."""
    script = Path(__file__).resolve().parent.parent / ".ci" / "check-commit-msg"

    def check(message: str, files: int) -> "tuple[int, str]":
        path = tmp_path / "MSG"
        path.write_text(message)
        done = subprocess.run([sys.executable, str(script), str(path), str(files)], capture_output=True, text=True)
        return done.returncode, done.stderr

    assert check("Labels on the rounds made\n\nWhy, and what was measured.\n", 12) == (0, "")
    assert check("A one-file fix\n", 1) == (0, "")
    assert check("A one-file fix\n# a comment git strips\n", 1) == (0, "")
    code, said = check("x" * 73 + "\n\nbody\n", 1)
    assert code == 1 and "73 characters" in said
    code, said = check("Many files, no word why\n", 4)
    assert code == 1 and "touches 4 files and the message has no body" in said
    code, said = check("Subject\nbody right under it\n", 1)
    assert code == 1 and "one blank line" in said
    assert check("\n# only comments\n", 1)[0] == 1
