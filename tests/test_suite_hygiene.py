"""Rules for the test suite itself: no test module imports another (shared code lives in helper modules such as
toy_records.py and official_cases.py, shared fixtures in conftest.py), distributed launches take a free port from
the `free_port` fixture instead of a fixed one, and the child processes run beside the tests report what happened."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from worker_pool import EarlyChildren

THIS = Path(__file__).resolve()
TESTS = THIS.parent
ROOT = TESTS.parent
# Helpers and benchmarks count too: importing a test module from them runs its collection-time code and couples
# files that pytest treats as independent. This file is left out: its controls spell the forbidden forms in strings.
SOURCES = sorted(path for path in [*TESTS.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")] if path != THIS)
# Worker scripts kept in strings (written to a file and run with torchrun) import at top level.
_SCRIPT_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.MULTILINE)
_LAUNCHERS = ("torch.distributed.run", "torchrun", "accelerate launch")
_FIXED_PORT = re.compile(r"""master_port["']?\s*[,=:]?\s*["']?\d{2,5}|MASTER_PORT["']?\s*[,=:]\s*["']?\d{2,5}""")


# transformers' own test package, fetched from its sdist at run time (tests/transformers_suite.py `MIXIN_PACKAGE`):
# tests/transformers_mixin_cases.py imports its shared mixins (test_modeling_common, ...) on purpose; the rule is
# about this repository's test modules.
_FOREIGN_TEST_PACKAGES = ("transformers_tests",)


def _is_test_module(dotted: str) -> bool:
    if dotted.split(".")[0] in _FOREIGN_TEST_PACKAGES:
        return False
    return any(part.startswith("test_") or part == "conftest" for part in dotted.split("."))


def test_module_imports(source: str) -> list[str]:
    """Every test module (`test_*`) or conftest that `source` imports, in code or in an embedded worker script."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if _is_test_module(module):
                found.append(module)
            else:  # `from . import test_x`, `from tests import test_x`
                found += [f"{module}.{alias.name}" for alias in node.names if _is_test_module(alias.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in _SCRIPT_IMPORT.finditer(node.value):
                name = match.group(1) or match.group(2)
                if _is_test_module(name):
                    found.append(name)
    return found


test_module_imports.__test__ = False  # a checker, not a test, despite its name


def test_the_checker_catches_every_form():
    caught = [
        "import test_data_tasks",
        "from test_data_tasks import toy",
        "from . import test_data_tasks",
        "import tests.test_data_tasks as t",
        "from tests import test_data_tasks",
        "from conftest import free_port",
        "WORKER = '''\nimport torch\nfrom test_data_tasks import toy\n'''",
    ]
    for source in caught:
        assert test_module_imports(source), source
    allowed = ("import pytest\nfrom toy_records import TOY_RECORDS\nfrom official_cases import load_case\nx = 'test_x'\n"
               "from transformers_tests.test_modeling_common import ModelTesterMixin")
    assert not test_module_imports(allowed)


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_imports_a_test_module(path):
    found = test_module_imports(path.read_text())
    assert not found, (
        f"{path.relative_to(ROOT)} imports {found}: move the shared code into a helper module in tests/ (not named "
        "test_*) or a fixture in tests/conftest.py"
    )


def test_distributed_launches_use_a_free_port():
    assert _FIXED_PORT.search('"--master_port", "29517"') and _FIXED_PORT.search("MASTER_PORT=29500")  # control
    launching = []
    for path in sorted(path for path in TESTS.glob("test_*.py") if path != THIS):
        text = path.read_text()
        where = path.relative_to(ROOT)
        assert not _FIXED_PORT.search(text), f"{where} fixes a rendezvous port: take one from the `free_port` fixture"
        if any(launcher in text for launcher in _LAUNCHERS):
            launching.append(path.name)
            assert "free_port" in text, f"{where} launches processes without the `free_port` fixture"
    assert len(launching) >= 2  # the gloo fine-tuning and pretraining tests; the scan must see them


def test_early_children_report_what_happened(tmp_path):
    """tests/worker_pool.py `EarlyChildren` (conftest.py `early_child`): each child's exit code and output reach the
    test that asks, a child that cannot start raises there, and an undeclared name is a clear error."""
    children = EarlyChildren(timeout=60)
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    children.add("fails", tmp_path, {"args": [sys.executable, "-c", script]})
    children.add("ok", tmp_path, {"args": [sys.executable, "-c", "print(42)"]})
    children.add("missing", tmp_path, {"args": [str(tmp_path / "no-such-program")]})
    children.start()
    try:
        failed = children.result("fails")
        assert isinstance(failed, subprocess.CompletedProcess)
        assert (failed.returncode, failed.stdout, failed.stderr) == (3, "out\n", "err\n")
        assert children.result("ok").stdout == "42\n" and children.folders["ok"] == tmp_path
        with pytest.raises(FileNotFoundError):
            children.result("missing")
        with pytest.raises(KeyError, match="declare it in the module's EARLY_CHILDREN"):
            children.result("never-added")
    finally:
        children.stop()
