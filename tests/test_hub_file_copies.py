"""The Hub-shippable folders hold byte-identical copies of modeling/'s task registry and label data
(scripts/sync_hub_files.py writes them): a flat Hub folder can only import its own siblings, and the model's and the
processor's remote code land in one repository folder, where a file name can have only one content."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "sync_hub_files.py"


def _sync_module():
    spec = importlib.util.spec_from_file_location("sync_hub_files", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sync = _sync_module()


@pytest.mark.parametrize("source, copy", sync.COPIES, ids=[copy for _, copy in sync.COPIES])
def test_every_copy_equals_its_source(source, copy):
    assert sync.copy_is_current(sync.PACKAGE / source, sync.PACKAGE / copy), (
        f"src/sapiens2_hf/{copy} differs from src/sapiens2_hf/{source}; run: python scripts/sync_hub_files.py")


def test_check_mode_passes_on_the_tree():
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_modified_or_missing_copy_is_detected(tmp_path):
    """Broken control: the same comparison flags a copy that differs by one byte, and a missing one."""
    for source, copy in sync.COPIES:
        (tmp_path / copy).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sync.PACKAGE / source, tmp_path / source)
        shutil.copyfile(sync.PACKAGE / source, tmp_path / copy)
    assert sync.stale_copies(tmp_path) == []

    edited = tmp_path / sync.COPIES[0][1]
    edited.write_bytes(edited.read_bytes() + b"\n")  # a trailing newline: equal as Python, not as a file
    missing = tmp_path / sync.COPIES[-1][1]
    missing.unlink()
    assert sync.stale_copies(tmp_path) == [sync.COPIES[0], sync.COPIES[-1]]
    assert not sync.copy_is_current(tmp_path / sync.COPIES[0][0], edited)


def test_every_sibling_import_of_a_copy_is_satisfied():
    """Whatever a copied file imports from its folder must exist there too (the copies import nothing today)."""
    import ast

    for _, copy in sync.COPIES:
        path = sync.PACKAGE / copy
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                assert (path.parent / f"{node.module}.py").is_file(), f"{copy} imports .{node.module}, not beside it"
