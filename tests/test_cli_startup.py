"""`sapiens2-hf` starts without torch or transformers (its console script defers registration); importing the package
registers our types and nothing else (no import hook, transformers' own `sapiens2` entries untouched); the CLI's error
classification.

The import checks run in fresh interpreters (this one has imported everything already). Each has a control that
must see the heavy import, so that a check which cannot see it fails instead of passing.
"""

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sapiens2_hf

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
# How the console script (src/sapiens2_hf_cli.py) starts the CLI: its module is loaded first, and while it runs the
# program the package defers registration (its `DEFERS_REGISTRATION`, read in this process only).
AS_CONSOLE_SCRIPT = "import sapiens2_hf_cli\n"
HEAVY = ("torch", "transformers")
# Prints which of HEAVY the code before it imported, as the last line of stdout.
REPORT_HEAVY = "\nimport sys as _s; print(sorted(m for m in ('torch', 'transformers') if m in _s.modules))"


def _python(code: str, timeout: int = 600, console_script: bool = True) -> subprocess.CompletedProcess:
    code = AS_CONSOLE_SCRIPT + code if console_script else code
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=timeout)


def _heavy_imported(code: str, console_script: bool = True) -> list[str]:
    result = _python(code + REPORT_HEAVY, console_script=console_script)
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.strip().splitlines()[-1])  # a list literal printed by REPORT_HEAVY


def test_parser_help_and_argument_errors_do_not_import_torch_or_transformers():
    code = """
import contextlib, io, sys
import sapiens2_hf.cli.main as m
m.build_parser()
for argv, expected in [(["--help"], 0), (["pose", "--help"], 0), (["convert", "--help"], 0), (["demo", "--help"], 0),
                       (["merge", "--help"], 0), (["env", "--help"], 0),
                       (["seg", "a.png", "--model", "m", "--out", "o", "--threads", "0"], 2),
                       (["pose", "a.png"], 2), (["unknown-command"], 2)]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            m.main(argv)
        except SystemExit as exit:
            assert exit.code == expected, (argv, exit.code)
        else:
            raise AssertionError(argv)
"""
    assert _heavy_imported(code) == []
    assert _heavy_imported("import sapiens2_hf") == []
    # controls: the same check sees the model code's imports, and a plain import (it registers)
    # the model package's face and its task registry are torch-free (lazy, PEP 562); its model code is not
    assert _heavy_imported("import sapiens2_hf.modeling, sapiens2_hf.modeling.sapiens2_tasks") == []
    assert _heavy_imported("import sapiens2_hf.cli.main as m; m.build_parser(); "
                           "import sapiens2_hf.modeling.modeling_sapiens2_hf") == list(HEAVY)
    assert _heavy_imported("import sapiens2_hf", console_script=False) == list(HEAVY)


def _imported_by(argv: list[str]) -> set[str]:
    """Top-level modules an interpreter run imported, from its `-X importtime` report."""
    result = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, env=ENV,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


def test_installed_command_help_does_not_import_torch_or_transformers():
    script = Path(sys.executable).parent / "sapiens2-hf"
    if not script.is_file():
        pytest.skip("the sapiens2-hf console script is not installed next to this interpreter")
    imported = _imported_by([str(script), "--help"])
    assert "sapiens2_hf.cli.main" in imported and not imported & set(HEAVY), sorted(imported & set(HEAVY))
    imported = _imported_by(["-m", "sapiens2_hf_cli", "--help"])  # the script's module run as `python -m`
    assert "sapiens2_hf.cli.main" in imported and not imported & set(HEAVY), sorted(imported & set(HEAVY))
    assert set(HEAVY) <= _imported_by(["-c", "import transformers, torch"])  # control: the report lists them


REGISTERED = """
from transformers import CONFIG_MAPPING
from transformers.pipelines import PIPELINE_REGISTRY
import sys
registration = sys.modules.get('sapiens2_hf._registration')  # read, never imported here: that would register
tasks = PIPELINE_REGISTRY.get_supported_tasks()
print('REGISTERED', getattr(registration, '_registered', False), 'sapiens2_hf' in CONFIG_MAPPING,
      all(t in tasks for t in ('sapiens2-pose', 'sapiens2-segmentation', 'sapiens2-albedo')))
"""


REGISTRATION_CASES = {
    # the README's pattern: import the package, then use transformers' pipeline factory
    "readme": "import sys, sapiens2_hf\nfrom transformers import pipeline",
    # a sub-module imported first
    "submodule-first": "from sapiens2_hf.modeling import Sapiens2Config",
    # transformers imported before the package
    "transformers-first": "import transformers, sapiens2_hf",
    # the CLI's deferred registration, done on the first use of a public name
    "deferred-public-name": "import sapiens2_hf_cli\nimport sapiens2_hf\nsapiens2_hf.Sapiens2Config",
    # the control: without the package
    "unregistered": "import transformers",
}


def _registration_child(code: str):
    """A child that runs `code` (which must not touch transformers' registries itself), then reports whether
    registration had happened by then, read through transformers' own registries."""
    return lambda folder: {"args": [sys.executable, "-c", code + REGISTERED], "env": ENV}


def test_a_command_runs_registered_under_the_console_scripts_deferral():
    """The console script defers registration; every command's handler runs after it (the demo reloads its repo
    through transformers' Auto class, which needs our type registered). Control: before the command, nothing is."""
    code = """
import sapiens2_hf.cli.merge as merge_cli
from sapiens2_hf import _registration
from sapiens2_hf.cli.main import main
assert not _registration._registered
merge_cli.run_merge = lambda args: print("REGISTERED", _registration._registered) or 0
raise SystemExit(main(["merge", "adapter", "--out", "o", "--threads", "1"]))
"""
    result = _python(code)  # as the console script starts it: registration deferred
    assert result.returncode == 0 and "REGISTERED True" in result.stdout, result.stderr[-3000:]


def test_import_changes_nothing_of_transformers_but_adds_our_type():
    """`import sapiens2_hf` leaves `sys.meta_path` and transformers' Auto mappings for its own `sapiens2` type as they
    were (every Auto class, compared before and after in one process), and adds our `sapiens2_hf` type."""
    code = """
import sys
import transformers
from transformers.models.auto import modeling_auto
meta_path = list(sys.meta_path)
mappings = {name: getattr(modeling_auto, name) for name in dir(modeling_auto)
            if name.startswith("MODEL_") and name.endswith("MAPPING") and hasattr(getattr(modeling_auto, name), "keys")}
from transformers import Sapiens2Config
def sapiens2_entries():
    return {name: mapping[Sapiens2Config] for name, mapping in mappings.items() if Sapiens2Config in mapping}
before = sapiens2_entries()
assert before and all(cls.__module__.startswith("transformers.") for cls in before.values()), before
import sapiens2_hf
assert sys.meta_path == meta_path, (meta_path, sys.meta_path)
assert sapiens2_entries() == before
from transformers import CONFIG_MAPPING
assert CONFIG_MAPPING["sapiens2"] is Sapiens2Config and CONFIG_MAPPING["sapiens2_hf"] is sapiens2_hf.Sapiens2Config
assert mappings["MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING"][sapiens2_hf.Sapiens2Config] is \
    sapiens2_hf.Sapiens2ForSemanticSegmentation
print("ok")
"""
    result = _python(code, console_script=False)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


# Every case needs a fresh interpreter (~6 s on one core, mostly importing transformers' pipelines); they run from the
# start of the session, beside the other tests (conftest.py).
EARLY_CHILDREN = {
    name: ("test_registration_check_sees_an_unregistered_process" if name == "unregistered"
           else "test_registration_happens_before_transformers_can_be_asked", _registration_child(code))
    for name, code in REGISTRATION_CASES.items()
}


def _registration_report(early_child, case: str) -> str:
    result, _ = early_child(case)
    assert result.returncode == 0, result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if line.startswith("REGISTERED")][-1]


@pytest.mark.slow
@pytest.mark.parametrize("case", [name for name in REGISTRATION_CASES if name != "unregistered"])
def test_registration_happens_before_transformers_can_be_asked(case, early_child):
    assert _registration_report(early_child, case) == "REGISTERED True True True"


@pytest.mark.slow
def test_registration_check_sees_an_unregistered_process(early_child):
    """Control for the test above: without the package, the same check reports nothing registered."""
    assert _registration_report(early_child, "unregistered") == "REGISTERED False False False"


def test_every_public_name_is_importable_as_before():
    import importlib

    # Every lazy name resolves to the object of the module `_LAZY_NAMES` names, and nothing else is public.
    assert set(sapiens2_hf.__all__) == {*sapiens2_hf._LAZY_NAMES, "__version__"}
    where = {name: importlib.import_module(f"sapiens2_hf.{module}") for name, module in sapiens2_hf._LAZY_NAMES.items()}
    for name in sapiens2_hf.__all__:
        if name == "__version__":
            assert sapiens2_hf.__version__ == "0.1.0"
            continue
        assert getattr(sapiens2_hf, name) is getattr(where[name], name), name
        assert name in dir(sapiens2_hf)
    namespace = {}
    exec("from sapiens2_hf import *", namespace)
    assert set(sapiens2_hf.__all__) <= set(namespace)
    assert sapiens2_hf.processing.Sapiens2HFImageProcessor is not None  # sub-packages stay reachable as attributes
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        sapiens2_hf.not_a_name
    assert not hasattr(sapiens2_hf, "__wrapped__")
    from sapiens2_hf import _registration

    assert _registration._registered


# ---------------------------------------------------------------------------------------------------------------
# error classification (main.py): one line and exit code 2 for the user's input, a traceback for bugs
# ---------------------------------------------------------------------------------------------------------------


def _main_with_handler(monkeypatch, handler, argv):
    import sapiens2_hf.cli.merge as merge_cli
    from sapiens2_hf.cli.main import main

    monkeypatch.setattr(merge_cli, "run_merge", handler)
    return main(argv)


def _raising(error):
    def handler(args):
        raise error

    return handler


def test_conversion_check_errors_are_expected_by_class(monkeypatch, capsys):
    from sapiens2_hf.runs import errors as cli_errors

    # every entry of the table names a class that exists where it says (the conversion code may move)
    for module_name, class_name in cli_errors._EXPECTED_ERRORS:
        assert isinstance(getattr(importlib.import_module(module_name), class_name), type), (module_name, class_name)
    from sapiens2_hf.hub.convert_official import ConversionCheckError

    code = _main_with_handler(monkeypatch, _raising(ConversionCheckError("tensor `x` differs\n after reloading")),
                              ["merge", "adapter", "--out", "o", "--threads", "1"])
    assert code == 2
    assert capsys.readouterr().err == "sapiens2-hf merge: error: tensor `x` differs after reloading\n"
    subclass = type("Mismatch", (ConversionCheckError,), {})
    assert _main_with_handler(monkeypatch, _raising(subclass("bad")), ["merge", "a", "--out", "o"]) == 2
    # controls: a bug keeps its traceback, also when a class of the same name lives elsewhere or in the same module
    for error in (RuntimeError("bug"), type("ConversionCheckError", (RuntimeError,), {"__module__": "elsewhere"})(),
                  type("ConversionCheckError", (RuntimeError,), {"__module__": ConversionCheckError.__module__})()):
        with pytest.raises(RuntimeError):
            _main_with_handler(monkeypatch, _raising(error), ["merge", "adapter", "--out", "o"])


def test_error_classification_imports_nothing():
    """A failure in a process that never imported the conversion code is classified without importing it."""
    code = """
import sys
from sapiens2_hf.runs.errors import is_expected_error
assert not is_expected_error(RuntimeError("bug")) and is_expected_error(ValueError("bad input"))
assert "sapiens2_hf.hub.convert_official" not in sys.modules
"""
    assert _heavy_imported(code) == []
