"""Packaging: every package the code imports is declared in pyproject.toml, in the right extra, and
the core (grammars, converters, ``lint``, ``convert``) runs on a machine without torch."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
MODEL_PACKAGES = {"torch", "transformers", "tokenizers"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "", name.lower())


def requirement_name(requirement: str) -> str:
    return normalized(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])


def declared(*groups: str) -> set[str]:
    """Distribution names declared by the core (``""``) and the named extras, extras they name included."""
    names: set[str] = set()
    pending = list(groups)
    while pending:
        group = pending.pop()
        for requirement in PROJECT["dependencies"] if group == "" else PROJECT["optional-dependencies"][group]:
            if requirement.startswith("structspec["):
                pending += requirement[len("structspec[") : requirement.index("]")].split(",")
            else:
                names.add(requirement_name(requirement))
    return names


def local_modules() -> set[str]:
    """Modules of this repository that files import by bare name (tests' and tools' helpers)."""
    names = {"structspec"}
    for folder in ("tests", "tools", "examples"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
                names.add(path.stem)
    return names


def imported_packages(folder: str) -> set[str]:
    """Top-level third-party modules imported anywhere under ``folder``, lazy imports included."""
    skip = set(sys.stdlib_module_names) | local_modules() | {"__future__"}
    found: set[str] = set()
    for path in (REPO / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - skip


def distributions(module: str) -> set[str]:
    installed = importlib.metadata.packages_distributions().get(module)
    return {normalized(name) for name in installed} if installed else {normalized(module)}


@pytest.mark.parametrize(
    ("folder", "groups"),
    [
        ("structspec", ("", "generation", "server", "parquet", "ray")),
        ("tests", ("", "dev")),
        ("examples", ("", "dev")),
        ("tools", ("", "dev", "bench")),
    ],
)
def test_every_imported_package_is_declared(folder: str, groups: tuple[str, ...]) -> None:
    available = declared(*groups)
    missing = sorted(module for module in imported_packages(folder) if not distributions(module) & available)
    assert missing == [], f"imported under {folder}/ but not declared in {groups}"


def test_the_core_needs_no_torch() -> None:
    core = declared("")
    assert not core & {normalized(name) for name in MODEL_PACKAGES}
    assert {normalized(name) for name in MODEL_PACKAGES} <= declared("generation")
    assert declared("generation") <= declared("server") <= declared("dev")


CORE_SCRIPT = textwrap.dedent(
    """
    import glob, importlib.abc, os, sys

    class Absent(importlib.abc.MetaPathFinder):
        # as on a machine where only the core dependencies are installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ImportError(f"No module named {{name!r}} (blocked by the test)")

    sys.meta_path.insert(0, Absent())
    import structspec
    from structspec import Grammar
    from structspec.cli import main

    assert main(["lint", *sorted(glob.glob("grammars/*.gbnf"))]) == 0
    assert main(["convert", "examples/invoice.schema.json"]) == 0
    assert main(["convert", "--regex", "[a-z]+@[a-z]+"]) == 0
    assert Grammar.from_json_schema({{"type": "array", "items": {{"type": "integer"}}}}).matches("[1,2]")
    assert structspec.Grammar.from_regex("a+").matches("aaa")
    assert main(["extract", "--schema", "examples/invoice.schema.json", "--text", "examples/invoice.txt"]) == 2
    out = {output!r}
    assert main(["batch", "--schema", "examples/invoice.schema.json", "--input", {records!r}, "--output", out]) == 2
    assert not os.path.exists(out)  # refused before the output file is made
    print("loaded:", sorted(name for name in sys.modules if name.split(".")[0] in {blocked!r}))
    """
)


def test_lint_and_convert_run_without_torch(tmp_path: Path) -> None:
    records = tmp_path / "docs.jsonl"
    records.write_text('{"id": 1, "text": "Invoice INV-1"}\n')
    script = CORE_SCRIPT.format(blocked=sorted(MODEL_PACKAGES | {"fastapi", "starlette", "uvicorn"}),
                                records=str(records), output=str(tmp_path / "out.jsonl"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout
    assert done.stderr.count("structspec[generation]") == 2  # extract and batch say what to install
