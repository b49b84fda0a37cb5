"""pytest plugin of the child pytest that runs transformers' own Sapiens2 tests (see tests/transformers_suite.py, which
copies this file into the assembled test tree and loads it with `-p transformers_suite_plugin`).

`SAPIENS2_HF_SUITE_TARGET=sapiens2_hf`: before any test module is imported, every Sapiens2 name the tests take from
transformers is replaced by sapiens2_hf's class of the same role, in each transformers module that defines or
re-exports it (the top-level `transformers`, `transformers.models.sapiens2` and its `configuration_`, `modeling_` and
`image_processing_sapiens2` modules). Patching the defining modules matters: tests/test_pipeline_mixin.py re-imports
`transformers` (`direct_transformers_import`), and the fresh top-level module resolves each name from its defining
module, so only there does the replacement survive. Nothing else is changed: no test code, no assertion.

`SAPIENS2_HF_SUITE_TARGET=transformers` (the control run): nothing is patched and sapiens2_hf is not imported.

After collection, the plugin checks, in every collected test module, that each of these names is bound to the class of
the target (ours, or transformers' own in the control run) and stops the run if one is not, so that a substitution
that silently did not happen cannot pass for a result. What it replaced and what it saw bound are written as JSON to
`SAPIENS2_HF_SUITE_REPORT` (when set).
"""

import importlib
import json
import os

import pytest

TARGET = os.environ.get("SAPIENS2_HF_SUITE_TARGET", "transformers")

# transformers name -> (sapiens2_hf module, name there)
SUBSTITUTES = {
    "Sapiens2Config": ("sapiens2_hf.modeling", "Sapiens2Config"),
    "Sapiens2HeadConfig": ("sapiens2_hf.modeling", "Sapiens2HeadConfig"),
    "Sapiens2PreTrainedModel": ("sapiens2_hf.modeling", "Sapiens2PreTrainedModel"),
    "Sapiens2Model": ("sapiens2_hf.modeling", "Sapiens2Model"),
    "Sapiens2Backbone": ("sapiens2_hf.modeling", "Sapiens2Backbone"),
    "Sapiens2ForPoseEstimation": ("sapiens2_hf.modeling.modeling_sapiens2_hf", "Sapiens2ForPoseEstimation"),
    "Sapiens2ForSemanticSegmentation": (
        "sapiens2_hf.modeling.modeling_sapiens2_hf", "Sapiens2ForSemanticSegmentation"),
    "Sapiens2ForNormalEstimation": ("sapiens2_hf.modeling.modeling_sapiens2_hf", "Sapiens2ForNormalEstimation"),
    "Sapiens2ForPointmapEstimation": ("sapiens2_hf.modeling.modeling_sapiens2_hf", "Sapiens2ForPointmapEstimation"),
    "Sapiens2ForImageMatting": ("sapiens2_hf.modeling.modeling_sapiens2_hf", "Sapiens2ForImageMatting"),
    "Sapiens2PoseEstimatorOutput": ("sapiens2_hf.modeling.modeling_sapiens2_hf", "Sapiens2PoseEstimatorOutput"),
    "Sapiens2NormalEstimatorOutput": ("sapiens2_hf.modeling.modeling_sapiens2_hf", "Sapiens2NormalEstimatorOutput"),
    "Sapiens2PointmapEstimatorOutput": (
        "sapiens2_hf.modeling.modeling_sapiens2_hf", "Sapiens2PointmapEstimatorOutput"),
    "Sapiens2ImageMattingOutput": ("sapiens2_hf.modeling.modeling_sapiens2_hf", "Sapiens2ImageMattingOutput"),
    "Sapiens2ImageProcessor": ("sapiens2_hf.processing", "Sapiens2HFImageProcessor"),
}

_DEFINING_MODULES = (
    "transformers.models.sapiens2.configuration_sapiens2",
    "transformers.models.sapiens2.modeling_sapiens2",
    "transformers.models.sapiens2.image_processing_sapiens2",
)
_REEXPORTING_MODULES = ("transformers", "transformers.models.sapiens2")

_report = {"target": TARGET, "replaced": {}, "bindings": {}, "missing_ours": []}


def _ours() -> dict:
    found = {}
    for name, (module_name, attribute) in SUBSTITUTES.items():
        value = getattr(importlib.import_module(module_name), attribute, None)
        if value is None:
            _report["missing_ours"].append(name)  # left to transformers' class; reported, and checked below
        else:
            found[name] = value
    return found


def _patch(ours: dict) -> None:
    for module_name in _DEFINING_MODULES:
        module = importlib.import_module(module_name)
        for name, value in ours.items():
            if name in vars(module):
                setattr(module, name, value)
                _report["replaced"].setdefault(name, []).append(module_name)
    for module_name in _REEXPORTING_MODULES:
        module = importlib.import_module(module_name)
        exported = set(getattr(module, "_class_to_module", {})) | set(vars(module))
        for name, value in ours.items():
            if name in exported:
                setattr(module, name, value)
                _report["replaced"].setdefault(name, []).append(module_name)


def _write_report() -> None:
    path = os.environ.get("SAPIENS2_HF_SUITE_REPORT")
    if path:
        with open(path, "w") as stream:
            json.dump(_report, stream, indent=1, sort_keys=True)


def pytest_configure(config):
    import transformers

    _report["transformers_version"] = transformers.__version__
    if TARGET == "sapiens2_hf":
        import sapiens2_hf

        _report["sapiens2_hf_file"] = sapiens2_hf.__file__
        _patch(_ours())
    elif TARGET != "transformers":
        raise pytest.UsageError(f"SAPIENS2_HF_SUITE_TARGET must be 'transformers' or 'sapiens2_hf', not {TARGET!r}")
    _write_report()


def pytest_collection_modifyitems(session, config, items):
    wrong = []
    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        for name in SUBSTITUTES:
            value = vars(module).get(name)
            if value is None:
                continue
            owner = getattr(value, "__module__", "")
            _report["bindings"].setdefault(module.__name__, {})[name] = f"{owner}.{getattr(value, '__name__', '?')}"
            ours = TARGET == "sapiens2_hf" and name not in _report["missing_ours"]
            expected = "sapiens2_hf." if ours else "transformers."
            if not owner.startswith(expected):
                wrong.append(f"{module.__name__}.{name} is {owner} (expected {expected}*)")
    _write_report()
    if wrong:
        raise pytest.UsageError("class substitution did not take:\n" + "\n".join(sorted(wrong)))
