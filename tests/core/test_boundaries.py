"""recycling_core is a plain library: it never imports the service (app, workers) or its stack."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import recycling_core

FORBIDDEN = ("app", "workers", "fastapi", "sqlalchemy", "celery")
PACKAGE_DIR = Path(recycling_core.__file__).resolve().parent


def _top(name: str) -> str:
    return name.split(".")[0]


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Absolute module names imported by a module: import statements and dynamic imports."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call):
            function = node.func
            name = (
                function.attr
                if isinstance(function, ast.Attribute)
                else getattr(function, "id", None)
            )
            if name in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.append((node.lineno, first.value))
    return found


def test_the_walk_sees_every_module_and_catches_a_forbidden_import() -> None:
    files = sorted(PACKAGE_DIR.rglob("*.py"))
    names = {path.relative_to(PACKAGE_DIR).as_posix() for path in files}
    assert {"pipeline.py", "cli.py", "methods/init.py", "metrics/similarity.py"} <= names
    sample = ast.parse(
        "import app.main\nfrom workers import x\n"
        "import importlib\nimportlib.import_module('celery')\n"
    )
    assert {_top(name) for _, name in _imported_names(sample)} >= {"app", "workers", "celery"}


def test_no_module_of_recycling_core_imports_the_service_stack() -> None:
    offenders = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, name in _imported_names(tree):
            if _top(name) in FORBIDDEN:
                offenders.append(f"{path.relative_to(PACKAGE_DIR.parent)}:{line} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_importing_the_library_loads_none_of_the_service_stack(tmp_path: Path) -> None:
    """A fresh interpreter importing every recycling_core module loads none of them."""
    code = f"""
import json, pkgutil, importlib, sys
import recycling_core.pipeline, recycling_core.cli
for module in pkgutil.walk_packages(recycling_core.__path__, "recycling_core."):
    importlib.import_module(module.name)
forbidden = {FORBIDDEN!r}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in forbidden)))
"""
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=environment,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
