"""The package's import layers, the only test of them; `LAYERS` below is the table docs/ARCHITECTURE.md shows.

Layer 0 (modeling/, the one model folder) is copied into Hub repos as remote code, so it is flat
and imports only stdlib, torch, torchvision, numpy, PIL, huggingface_hub, safetensors, transformers and its siblings
(`from .x import y`; cv2 only inside try/except ImportError). Above it, a module imports only its own layer or lower
ones (1: data, losses, metrics and other building blocks; 2: training, pretraining, Hub tooling, the prediction
driver; 3: cli, demo, app), so each layer can be used, tested and shipped without the ones above it. Within layer 3
the app and the command line are peers on the driver: neither the app nor the driver imports `cli` (`NO_CLI`).
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
    # the run layer: input enumeration, the file decoder, shards, resume markers, records
    "runs": 1,
    "pretraining": 2, "training": 2, "hub": 2, "export": 2, "video": 2,
    # humans in 3D: the files of `sapiens2-pose-3d` results and 3D tracks, over video smoothing
    "pose3d": 2,
    # pretraining data curation: its stages run the pipelines and the backbone
    "curation": 2,
    # the prediction driver the command line and the web app both run on: typed options, the image and video runs,
    # the writers (over the run layer and the pipelines)
    "predict": 2,
    # pipeline_factory applies the inference recipe (`fast=True`), so it sits at the recipe's layer.
    "pipeline_factory": 2, "inference_recipe": 2,
    # our Auto classes (transformers only); the registration with transformers (model code, pipelines, pretraining);
    # registering a task fills every layer's facet up to training's (the command line's defaults itself)
    "auto": 1, "_registration": 2, "tasks": 2,
    # LoRA adapter folders as `from_pretrained` sources, handed to the model folder's loader at registration
    "adapters": 2,
    "cli": 3, "demo": 3, "app": 3,
}
# Packages that import no module of the command line: the app builds typed options and runs the driver, as the CLI does
NO_CLI = ("app", "predict")
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


def command_line_imports(package: Path, folders=NO_CLI) -> list[str]:
    """`<file> imports <name>` for every import of the command line (`sapiens2_hf.cli...`, `..cli...`, `from .. import
    cli`) in `folders` of `package`, inside functions too."""
    found = []
    for folder in folders:
        for path in sorted((package / folder).rglob("*.py")):
            depth = len(path.relative_to(package).parts) - 1
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and (node.level > depth or not node.level):
                    names = [".".join(filter(None, [node.module, alias.name])) for alias in node.names]
                else:
                    continue
                for name in names:
                    parts = name.split(".")
                    relative = isinstance(node, ast.ImportFrom) and node.level
                    if (parts[1:2] if parts[0] == package.name else parts if relative else [])[:1] == ["cli"]:
                        found.append(f"{path.relative_to(package)} imports {name}")
    return found


def test_the_app_and_the_driver_never_import_the_command_line(tmp_path):
    assert command_line_imports(PACKAGE) == []
    # control: a deliberately broken copy is caught, in each spelling (and a sibling import is not)
    package = tmp_path / "sapiens2_hf"
    (package / "app").mkdir(parents=True)
    (package / "predict").mkdir()
    (package / "app" / "a.py").write_text("from ..cli.options import x\n")
    (package / "predict" / "b.py").write_text("def f():\n    import sapiens2_hf.cli.main\n")
    (package / "predict" / "c.py").write_text("from .. import cli\nfrom .options import y\nimport clinic\n")
    assert command_line_imports(package) == [
        "app/a.py imports cli.options.x", "predict/b.py imports sapiens2_hf.cli.main", "predict/c.py imports cli"]


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


# ------------------------------------------------------------------------------------------------ import cycles


def _module_names(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package `__init__`) for every module under `root` (the package folder)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, from every import statement anywhere in the file (inside functions
    and `if TYPE_CHECKING:` too: an import that only runs later still ties the two modules together). `from .pkg
    import name` points at `pkg.name` when that is a module, and always at the package face `pkg/__init__.py` too:
    the import runs the face (and its PEP 562 `__getattr__` for a name it has not imported yet)."""
    modules = _module_names(root)
    graph = {name: set() for name in modules}
    submodule_imports, hard = set(), set()
    for name, (path, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here[: len(here) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
                if all(f"{base}.{alias.name}" in modules for alias in node.names):
                    submodule_imports.add((name, base))  # `from . import sibling`: through the face
            else:
                continue
            for target in targets:
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != name:
                    graph[name].add(target)
                    if not (target == base and (name, base) in submodule_imports and isinstance(node, ast.ImportFrom)
                            and all(f"{base}.{alias.name}" in modules for alias in node.names)):
                        hard.add((name, target))
    _FACE_ONLY_EDGES[root] = {(name, face) for name, face in submodule_imports if (name, face) not in hard}
    return graph


# root -> the (module, package face) edges that come only from `from <face> import <sub-module>` statements
_FACE_ONLY_EDGES: dict[Path, set[tuple[str, str]]] = {}


def _face_only(component: list[str], graph: dict[str, set[str]], root: Path) -> bool:
    """A package face re-exporting its sub-modules, each of which reaches the face only to import sibling modules
    (`from . import sibling`) and imports no other member: how a package face works, not a cycle between designs."""
    faces = [name for name in component if name.count(".") == 0 or (root.parent / name.replace(".", "/")).is_dir()]
    if len(faces) != 1:
        return False
    rest = set(component) - set(faces)
    soft = _FACE_ONLY_EDGES.get(root, set())
    return all((name, faces[0]) in soft and not graph[name] & rest for name in rest)


def import_cycles(graph: dict[str, set[str]], root: Path = PACKAGE) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), but a package
    face with sub-modules that import only it (`_face_only`)."""
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 and not _face_only(component, graph, root):
                    cycles.append(sorted(component))
    return cycles


def test_no_import_cycles():
    graph = import_graph(PACKAGE)
    assert len(graph) > 100 and "sapiens2_hf.predict.outputs" in graph["sapiens2_hf.predict.video"]  # the graph is read
    assert import_cycles(graph) == []


def test_import_cycle_check_sees_cycles_through_function_level_imports_and_package_faces(tmp_path):
    package = tmp_path / "toy"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from .b import g\n    return g\n")  # a cycle hidden in a function
    (package / "b.py").write_text("from . import a\n\ndef g():\n    return a\n")
    (package / "sub" / "__init__.py").write_text("from .c import C\n")
    (package / "sub" / "c.py").write_text("from ..sub import D\nC = 1\n")  # through the package face
    (package / "sub" / "d.py").write_text("import toy.a\n")
    # `from . import h` depends on the package face, which imports the module that imports this one
    (package / "face").mkdir()
    (package / "face" / "__init__.py").write_text("from .e import E\n")
    (package / "face" / "e.py").write_text("from .g import G\nE = 1\n")
    (package / "face" / "g.py").write_text("from . import h\nG = 1\n")
    (package / "face" / "h.py").write_text("H = 1\n")
    assert import_cycles(import_graph(package), package) == [
        ["toy.a", "toy.b"], ["toy.face", "toy.face.e", "toy.face.g"], ["toy.sub", "toy.sub.c"]]
    # control: a face whose sub-modules import only it is no cycle
    (package / "face" / "g.py").write_text("G = 1\n")
    assert ["toy.face", "toy.face.e", "toy.face.g"] not in import_cycles(import_graph(package), package)
