"""`pip install sapiens2_hf` is inference only; training, video and export are extras (setup.cfg).

Without any extra (a child interpreter whose `sys.meta_path` hides every package of `EXTRAS`, as if uninstalled:
no module, no spec, no distribution metadata) the models save and load, the pose and seg pipelines run and give the
numbers they give with everything installed, and `sapiens2-hf seg` writes its outputs. A feature that needs an extra
fails with one line naming the pip command, and the CLI prints it with exit status 2. setup.cfg and the `require`
table agree, and no module imports an optional package when it is imported.
"""

import ast
import configparser
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement
from PIL import Image

import sapiens2_hf
from sapiens2_hf.utils.extras import EXTRAS, MissingExtraError, require


pytestmark = [pytest.mark.compat, pytest.mark.usefixtures("one_thread")]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "sapiens2_hf"
# Hides the optional packages from the imports of the code after it, the way an environment without them would.
BLOCKER = textwrap.dedent(f"""
    import importlib.abc, sys

    BLOCKED = {sorted(EXTRAS)!r}

    class _Uninstalled(importlib.abc.MetaPathFinder):
        def __init__(self, finders):
            self.finders = finders

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                return None
            for finder in self.finders:
                spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
                if spec is not None:
                    return spec
            return None

        def find_distributions(self, context=None):
            import importlib.metadata
            context = context or importlib.metadata.DistributionFinder.Context()
            for finder in self.finders:
                for distribution in getattr(finder, "find_distributions", lambda context: ())(context):
                    if (distribution.metadata["Name"] or "").lower().replace("_", "-") not in BLOCKED:
                        yield distribution

    sys.meta_path[:] = [_Uninstalled(list(sys.meta_path))]
""")
ENV_CODE = "import os; os.environ.update(HF_HUB_OFFLINE='1', OMP_NUM_THREADS='1')\n"


def _run_without_extras(code: str, *args) -> dict:
    """Runs `code` after the blocker in a fresh interpreter; returns the JSON it prints as its last stdout line."""
    result = subprocess.run([sys.executable, "-c", ENV_CODE + BLOCKER + textwrap.dedent(code), *map(str, args)],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


INFERENCE = """
    import importlib, importlib.metadata, importlib.util, json
    from pathlib import Path

    import numpy as np
    from PIL import Image

    # Control: the blocker really hides them (no spec, no metadata, the import fails).
    for name in BLOCKED:
        assert importlib.util.find_spec(name) is None, name
    try:
        import peft
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError("peft imported through the blocker")
    try:
        importlib.metadata.version("accelerate")
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        raise AssertionError("accelerate's metadata seen through the blocker")

    import sapiens2_hf
    import sapiens2_hf_cli

    out = Path(sys.argv[1])
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 48, 3), dtype=np.uint8))
    image.save(out / "person.png")
    sapiens2_hf.Sapiens2ForPoseEstimation(sapiens2_hf.tiny_config("pose")).save_pretrained(out / "pose")
    sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg")).save_pretrained(out / "seg")
    people = sapiens2_hf.pipeline("sapiens2-pose", model=str(out / "pose"))(image, boxes=[[4, 4, 40, 56]])
    np.save(out / "keypoints.npy", np.stack([person["keypoints"] for person in people]))
    seg = sapiens2_hf.pipeline("sapiens2-segmentation", model=str(out / "seg"))(image)["segmentation"]
    np.save(out / "seg.npy", np.asarray(seg))
    sys.argv = ["sapiens2-hf", "seg", str(out / "person.png"), "--model", str(out / "seg"), "--out", str(out / "cli"),
                "--threads", "1", "--quiet"]
    status = sapiens2_hf_cli.main()
    print(json.dumps({"status": status, "imported": sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)}))
"""


def test_inference_runs_without_any_extra(tmp_path):
    report = _run_without_extras(INFERENCE, tmp_path)
    assert report == {"status": 0, "imported": []}
    # the same numbers as with everything installed (this process)
    image = Image.open(tmp_path / "person.png")
    people = sapiens2_hf.pipeline("sapiens2-pose", model=str(tmp_path / "pose"))(image, boxes=[[4, 4, 40, 56]])
    keypoints = np.load(tmp_path / "keypoints.npy")
    assert keypoints.shape == (1, 308, 2)
    np.testing.assert_allclose(keypoints, np.stack([person["keypoints"] for person in people]), rtol=0, atol=1e-4)
    seg = np.load(tmp_path / "seg.npy")
    assert seg.shape == (64, 48)
    segmenter = sapiens2_hf.pipeline("sapiens2-segmentation", model=str(tmp_path / "seg"))
    np.testing.assert_array_equal(seg, np.asarray(segmenter(image)["segmentation"]))
    np.testing.assert_array_equal(np.load(tmp_path / "cli" / "person_seg.npy"), seg)
    assert (tmp_path / "cli" / "person_seg.png").is_file()


FEATURES = """
    import contextlib, io, json

    import sapiens2_hf
    from sapiens2_hf.cli.main import main
    from sapiens2_hf.utils.extras import MissingExtraError

    folder = sys.argv[1]
    report = {}
    try:
        from sapiens2_hf.training import apply_lora

        apply_lora(sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg")), "seg")
    except MissingExtraError as error:
        report["apply_lora"] = str(error)
    for name, argv in json.loads(sys.argv[2]).items():
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            status = main(argv)
        report[name] = [status, stderr.getvalue()]
    print(json.dumps(report))
"""


def test_features_needing_an_extra_fail_in_one_line_naming_the_pip_command(tmp_path):
    seg = tmp_path / "seg"
    sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg")).save_pretrained(seg)
    image = tmp_path / "person.png"
    Image.new("RGB", (48, 64)).save(image)
    (tmp_path / "clip.mp4").write_bytes(b"not decoded: the video reader asks for PyAV before it opens the file")
    adapter = tmp_path / "adapter"  # what save_lora_adapter writes, less the weights (peft is asked for first)
    adapter.mkdir()
    (adapter / "config.json").write_text((seg / "config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(seg)}))
    commands = {
        "video": ["seg", str(tmp_path / "clip.mp4"), "--model", str(seg), "--quiet", "--threads", "1"],
        "export": ["export", str(seg), "--format", "onnx", "--threads", "1"],
        "merge": ["merge", str(adapter), "--threads", "1"],
        "adapter": ["seg", str(image), "--model", str(adapter), "--quiet", "--threads", "1"],
        "demo": ["demo"],
    }
    commands = {name: [*argv, "--out", str(tmp_path / f"out_{name}")] for name, argv in commands.items()}
    report = _run_without_extras(FEATURES, tmp_path, json.dumps(commands))

    assert report.pop("apply_lora") == "LoRA needs peft: pip install 'sapiens2_hf[train]'"
    expected = {
        "video": "sapiens2-hf seg: error: reading or writing video needs av: pip install 'sapiens2_hf[video]'",
        "export": "sapiens2-hf export: error: ONNX export needs onnx, onnxscript, onnxruntime: pip install "
                  "'sapiens2_hf[export]'",
        "merge": "sapiens2-hf merge: error: LoRA needs peft: pip install 'sapiens2_hf[train]'",
        # the Hub-shippable loader cannot use `require` (it may run without sapiens2_hf): its own pip command
        "adapter": f"sapiens2-hf seg: error: {adapter} is a LoRA adapter; loading it needs peft (`pip install peft`).",
        "demo": "sapiens2-hf demo: error: the demo (it pretrains, then fine-tunes with LoRA) needs accelerate, peft: "
                "pip install 'sapiens2_hf[train]'",
    }
    for name, line in expected.items():
        status, stderr = report[name]
        assert status == 2 and "Traceback" not in stderr and stderr.splitlines().count(line) == 1, (name, stderr)


def test_require_names_the_missing_packages_and_their_extras(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "peft", None)  # None in sys.modules: the import fails as for a missing package
    with pytest.raises(MissingExtraError) as caught:
        require("peft", feature="LoRA")
    assert str(caught.value) == "LoRA needs peft: pip install 'sapiens2_hf[train]'"
    assert isinstance(caught.value, ImportError) and caught.value.name == "peft"

    monkeypatch.setitem(sys.modules, "av", None)
    fake_onnx = type(sys)("onnx")
    monkeypatch.setitem(sys.modules, "onnx", fake_onnx)
    with pytest.raises(MissingExtraError, match=r"^X needs peft, av: pip install 'sapiens2_hf\[train,video\]'$"):
        require("onnx", "peft", "av", feature="X")  # only the missing ones are named
    assert require("onnx", feature="X") is fake_onnx

    # an installed package that fails on a missing dependency of its own keeps that error
    (tmp_path / "peft").mkdir()
    (tmp_path / "peft" / "__init__.py").write_text("import a_dependency_that_is_not_installed\n")
    monkeypatch.delitem(sys.modules, "peft")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as caught:
        require("peft", feature="LoRA")
    assert type(caught.value) is ModuleNotFoundError and caught.value.name == "a_dependency_that_is_not_installed"

    with pytest.raises(KeyError):  # a package that no extra installs is a bug in the caller
        require("json", feature="X")


def _requirements(lines: str) -> list[Requirement]:
    return [Requirement(line) for line in lines.strip().splitlines() if line.strip()]


def test_setup_cfg_extras_match_the_require_table():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    core = {requirement.name for requirement in _requirements(config["options"]["install_requires"])}
    extras = {name: _requirements(value) for name, value in config["options.extras_require"].items()}

    def packages(extra: str) -> set[str]:  # an extra's packages, through its references to sapiens2_hf[...]
        found = set()
        for requirement in extras[extra]:
            if requirement.name == "sapiens2_hf":
                for inner in requirement.extras:
                    found |= packages(inner)
            else:
                found.add(requirement.name)
        return found

    assert not core & set(EXTRAS), "an optional package is an install requirement"
    assert {"torch", "torchvision", "transformers", "safetensors", "huggingface-hub", "pillow", "numpy",
            "opencv-python-headless", "tqdm", "filelock"} == core  # filelock: the run lock (utils/run_lock.py)
    for name, extra in EXTRAS.items():
        assert name in packages(extra), (name, extra)
    assert set(EXTRAS) == packages("all")
    assert set(EXTRAS) | {"pytest", "pycocotools", "scipy"} <= packages("test")  # CI and scripts/setup.sh: .[test]


def _module_level_imports(tree: ast.Module):
    """Import statements that run when the module is imported (not in functions, not under `if TYPE_CHECKING`)."""
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            is_type_checking = isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            pending += node.orelse if is_type_checking else node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body]
        elif isinstance(node, (ast.With, ast.ClassDef)):
            pending += node.body


def test_no_module_imports_an_optional_package_at_import_time():
    # the evaluate scripts are run by `evaluate.load` (an extra's own loader), never imported by the package
    scripts = PACKAGE / "metrics" / "evaluate_modules"
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if scripts in path.parents and path.parent != scripts:
            continue
        for node in _module_level_imports(ast.parse(path.read_text(), str(path))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if getattr(node, "level", 0) == 0 and any(name.partition(".")[0] in EXTRAS for name in names):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []
    # control: the check sees a module-level import
    assert list(_module_level_imports(ast.parse("try:\n    import peft\nexcept ImportError:\n    pass\n")))
