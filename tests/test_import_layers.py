"""The package's import layers, the only test of them; `LAYERS` below is the table docs/ARCHITECTURE.md shows.

Layer 0 (modeling/, the one model folder) is copied into Hub repos as remote code, so it is flat
and imports only stdlib, torch, torchvision, numpy, PIL, huggingface_hub, safetensors, transformers and its siblings
(`from .x import y`; cv2 only inside try/except ImportError). Above it, a module imports only its own layer or lower
ones (1: data, losses, metrics and other building blocks; 2: training, pretraining, Hub tooling; 3: cli, demo, app), so
each layer can be used, tested and shipped without the ones above it.
"""

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sapiens2_hf"
LAYERS = {
    "modeling": 0,
    # the public import paths of the processor and the pipelines, which live in the one model folder
    "processing": 1, "pipelines": 1,
    "data": 1, "losses": 1, "metrics": 1, "visualization": 1, "utils": 1, "serialization": 1,
    "pretraining": 2, "training": 2, "hub": 2, "export": 2, "video": 2,
    # pipeline_factory applies the inference recipe (`fast=True`), so it sits at the recipe's layer.
    "pipeline_factory": 2, "inference_recipe": 2,
    "cli": 3, "demo": 3, "app": 3,
}
# torchvision: the pose pipeline's NMS (`torchvision.ops.nms`); transformers' torchvision image-processing backend
# needs it anyway, and it is a dependency of the package.
HUB_ALLOWED = {"torch", "numpy", "PIL", "huggingface_hub", "transformers", "safetensors", "torchvision"}


def _python_files(folder):
    return sorted((PACKAGE / folder).rglob("*.py"))


def _imports(tree):
    """(module, level, inside a try/except ImportError) for every import statement."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers
        ):
            for child in node.body:
                for inner in ast.walk(child):
                    guarded.add(id(inner))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, 0, id(node) in guarded
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", node.level, id(node) in guarded


@pytest.mark.parametrize("folder", [f for f, layer in LAYERS.items() if layer == 0])
def test_hub_folders_are_self_contained(folder):
    for path in _python_files(folder):
        text = path.read_text()
        for module, level, guarded in _imports(ast.parse(text)):
            where = f"{path.relative_to(PACKAGE)} imports {'.' * level}{module}"
            if level:
                assert level == 1 and module and "." not in module, f"{where}: only `from .sibling import` is shipped"
                assert (path.parent / f"{module}.py").is_file(), f"{where}: not a sibling file"
                continue
            top = module.split(".")[0]
            assert top != "sapiens2_hf", f"{where}: Hub code must not import the package"
            if top in sys.stdlib_module_names or top in HUB_ALLOWED:
                continue
            assert top == "cv2" and guarded, f"{where}: Hub code may import only stdlib/torch/numpy/PIL/hf/transformers"


def test_lower_layers_never_import_higher_ones():
    for folder, layer in LAYERS.items():
        paths = [PACKAGE / f"{folder}.py"] if (PACKAGE / f"{folder}.py").is_file() else _python_files(folder)
        for path in paths:
            depth = len(path.relative_to(PACKAGE).parts) - 1
            for module, level, _ in _imports(ast.parse(path.read_text())):
                if level == 0:
                    if not module.startswith("sapiens2_hf."):
                        continue
                    target = module.split(".")[1]
                elif level > depth:
                    target = module.split(".")[0]
                else:
                    continue
                if target in LAYERS:
                    assert LAYERS[target] <= layer, f"{path.relative_to(PACKAGE)} (layer {layer}) imports {target} (layer {LAYERS[target]})"


def test_the_model_folder_is_the_only_copy_of_its_files():
    """One model folder, no generated copies: no file of `modeling/` has a namesake elsewhere in the package (a copy
    that a flat Hub folder once needed), and the processor and pipelines are re-exported, not duplicated."""
    shipped = {path.name for path in _python_files("modeling")} - {"__init__.py"}
    namesakes = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                       if path.name in shipped and path.parent.name != "modeling")
    assert not namesakes, namesakes
    assert {"image_processing_sapiens2_hf.py", "pipeline_sapiens2_hf.py", "sapiens2_tasks.py"} <= shipped  # control
    import sapiens2_hf.modeling.image_processing_sapiens2_hf as processing_module
    import sapiens2_hf.modeling.pipeline_sapiens2_hf as pipeline_module
    from sapiens2_hf.pipelines import Sapiens2PosePipeline
    from sapiens2_hf.processing import Sapiens2HFImageProcessor

    assert Sapiens2HFImageProcessor is processing_module.Sapiens2HFImageProcessor
    assert Sapiens2PosePipeline is pipeline_module.Sapiens2PosePipeline
