"""The supported versions setup.cfg declares are true, and `sapiens2-hf env` reports what is installed.

- setup.cfg's `python_requires` and dependency floors agree with what transformers itself requires at our
  transformers floor (tests/fixtures/transformers_floor_metadata.json, checked against the installed transformers'
  own metadata on the oldest CI leg, where that floor is what is installed).
- Every installed dependency lies inside its declared range; on the oldest leg (`SAPIENS2_HF_TEST_LEG=oldest`, set by
  .ci/run) each one is exactly its declared floor, so that leg cannot silently test newer versions.
- scripts/oldest_constraints.py pins every floor and refuses a requirement without one.
- transformers >= 5.25 turns hub kernels on in `from_pretrained`: on our classes that replaces nothing (they declare no
  kernel layer), checked against transformers' own class, which does declare one (its RMSNorm).
"""

import configparser
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import sapiens2_hf
from sapiens2_hf.utils import environment

pytestmark = pytest.mark.compat

ROOT = Path(__file__).resolve().parents[1]
FLOOR_METADATA = json.loads((Path(__file__).parent / "fixtures" / "transformers_floor_metadata.json").read_text())
OLDEST_LEG = os.environ.get("SAPIENS2_HF_TEST_LEG") == "oldest"


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


oldest_constraints = _load_script("oldest_constraints")


def _setup_cfg(text: str | None = None) -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    if text is None:
        parser.read(ROOT / "setup.cfg", encoding="utf-8")
    else:
        parser.read_string(text)
    return parser


def _floor(specifier: str) -> Version:
    floors = [Version(spec.version) for spec in SpecifierSet(specifier) if spec.operator == ">="]
    assert len(floors) == 1, specifier
    return floors[0]


def disagreements_with_transformers(setup_cfg_text: str, floor_metadata: dict) -> list[str]:
    """What setup.cfg (its text) declares that transformers at our floor (its metadata) contradicts: a Python range
    wider than transformers', a transformers floor other than the release the metadata describes, a shared
    dependency's floor below transformers' own."""
    parser = _setup_cfg(setup_cfg_text)
    problems = []
    ours_python, theirs_python = parser["options"]["python_requires"], floor_metadata["requires_python"]
    if _floor(ours_python) != _floor(theirs_python):
        problems.append(f"python_requires {ours_python} vs transformers {floor_metadata['version']}'s {theirs_python}")
    declared = {Requirement(line).name.lower(): Requirement(line)
                for line in parser["options"]["install_requires"].split("\n") if line.strip()}
    if _floor(str(declared["transformers"].specifier)) != Version(floor_metadata["version"]):
        problems.append(f"transformers floor {declared['transformers'].specifier} vs {floor_metadata['version']}")
    for name, theirs in floor_metadata["requires"].items():
        if name in declared and _floor(str(declared[name].specifier)) < _floor(theirs):
            problems.append(f"{name} {declared[name].specifier} admits versions below transformers' {theirs}")
    return problems


def test_python_and_floors_agree_with_transformers_own_metadata():
    setup_cfg = (ROOT / "setup.cfg").read_text(encoding="utf-8")
    assert disagreements_with_transformers(setup_cfg, FLOOR_METADATA) == []
    # controls: each kind of disagreement is found
    assert disagreements_with_transformers(
        setup_cfg.replace("python_requires = >=3.11", "python_requires = >=3.10"), FLOOR_METADATA)
    assert disagreements_with_transformers(
        setup_cfg.replace("huggingface-hub>=1.31.0", "huggingface-hub>=1.0"), FLOOR_METADATA)
    assert disagreements_with_transformers(
        setup_cfg.replace("transformers>=5.23.0", "transformers>=5.22.0"), FLOOR_METADATA)


def test_installed_transformers_requires_no_newer_python_than_declared():
    """Whatever transformers is installed (both legs), our `python_requires` floor is not below its own."""
    theirs = importlib.metadata.metadata("transformers")["Requires-Python"]
    assert _floor(_setup_cfg()["options"]["python_requires"]) >= _floor(theirs), theirs


@pytest.mark.skipif(not OLDEST_LEG, reason="the oldest CI leg installs the transformers floor (.ci/run)")
def test_floor_metadata_snapshot_is_the_installed_transformers_own():
    metadata = importlib.metadata.metadata("transformers")
    assert metadata["Version"] == FLOOR_METADATA["version"]
    assert metadata["Requires-Python"] == FLOOR_METADATA["requires_python"]
    requires = {Requirement(line).name.lower(): str(Requirement(line).specifier)
                for line in metadata.get_all("Requires-Dist") if "extra ==" not in line}
    for name, specifier in FLOOR_METADATA["requires"].items():
        assert SpecifierSet(requires[name]) == SpecifierSet(specifier), (name, requires[name])


def _declared() -> list[Requirement]:
    return oldest_constraints.declared_requirements(ROOT / "setup.cfg")


def test_installed_dependencies_lie_in_the_declared_ranges():
    outside = []
    for requirement in _declared():
        version = importlib.metadata.version(requirement.name)
        if not requirement.specifier.contains(version, prereleases=True):
            outside.append(f"{requirement.name} {version} not in {requirement.specifier}")
    assert outside == []


@pytest.mark.skipif(not OLDEST_LEG, reason="the oldest CI leg pins every floor (.ci/run)")
def test_oldest_leg_runs_every_floor():
    pinned = {}
    for requirement in _declared():
        if requirement.name.lower() not in oldest_constraints.KEPT_AT_PINNED_BUILD:
            pinned[requirement.name] = importlib.metadata.version(requirement.name)
    assert {name: Version(version) for name, version in pinned.items()} == {
        requirement.name: Version(oldest_constraints.floor(requirement)) for requirement in _declared()
        if requirement.name in pinned}


def test_oldest_constraints_pin_every_floor(tmp_path):
    lines = oldest_constraints.oldest_constraints(ROOT / "setup.cfg")
    names = {line.partition("==")[0].lower() for line in lines}
    declared = {requirement.name.lower() for requirement in _declared()}
    assert names == declared - {"torch", "torchvision"}
    assert "transformers==5.23.0" in lines and "huggingface-hub==1.31.0" in lines
    # control: a requirement without a floor cannot be tested at its oldest version and is refused
    broken = tmp_path / "setup.cfg"
    broken.write_text((ROOT / "setup.cfg").read_text(encoding="utf-8").replace("tqdm>=4.66.3", "tqdm"))
    with pytest.raises(ValueError, match="tqdm"):
        oldest_constraints.oldest_constraints(broken)


# ------------------------------------------------------------------------------------------------ sapiens2-hf env


def test_env_command_reports_the_installation_and_machine():
    cli = Path(sys.executable).with_name("sapiens2-hf")
    command = [str(cli)] if cli.exists() else [sys.executable, "-m", "sapiens2_hf_cli"]
    result = subprocess.run([*command, "env", "--json"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["sapiens2_hf"] == sapiens2_hf.__version__
    assert report["python"] == sys.version.split()[0]
    packages = {package["name"]: package for package in report["packages"]}
    assert set(packages) == {requirement.name for requirement in _declared()}
    for name in ("torch", "transformers", "huggingface-hub", "safetensors"):
        assert packages[name]["version"] == importlib.metadata.version(name)
        assert packages[name]["in_range"] is True
    for name in ("accelerate", "peft", "av", "onnxruntime", "gradio", "faiss-cpu"):
        assert packages[name]["extra"] is not None and packages[name]["import_error"] is None
    assert report["extras"] == {"train": True, "video": True, "export": True, "app": True, "curation": True}
    assert report["cpu"]["capability"] == torch.backends.cpu.get_cpu_capability()
    assert isinstance(report["threads"]["torch intra-op"], int) and report["threads"]["torch intra-op"] >= 1
    assert "CUDA" in report["accelerators"]
    assert report["environment"]["HF_HUB_OFFLINE"] == "1"
    # the text form names the same facts, one `- key: value` line each
    text = subprocess.run([*command, "env", "--no-import-check"], capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    assert f"- transformers: {importlib.metadata.version('transformers')}" in text.stdout.splitlines()
    assert f"capability {torch.backends.cpu.get_cpu_capability()}" in text.stdout


def test_env_report_flags_missing_broken_and_out_of_range_packages(monkeypatch, tmp_path):
    (tmp_path / "broken_optional_pkg.py").write_text("raise RuntimeError('compiled for another numpy')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    declared = [
        "torch>=999",  # installed, outside the range
        "surely-not-installed-pkg>=1.0; extra == \"video\"",
        "pytest>=1.0; extra == \"export\"",  # installed and importable, beside the broken one below
        "broken-optional-pkg>=0.1; extra == \"export\"",
        "numpy>=1.0; extra == \"train\"",
    ]
    monkeypatch.setattr(environment.importlib.metadata, "requires", lambda name: declared)
    real_version = importlib.metadata.version
    monkeypatch.setattr(environment, "_installed_version",
                        lambda name: "0.1" if name == "broken-optional-pkg" else
                        (real_version(name) if name != "surely-not-installed-pkg" else None))
    monkeypatch.setattr(environment, "_import_names", lambda: {"broken-optional-pkg": ["broken_optional_pkg"],
                                                               "pytest": ["pytest"], "numpy": ["numpy"]})
    packages = {package.name: package for package in environment.package_reports()}
    assert packages["torch"].in_range is False and "OUTSIDE" in packages["torch"].status
    assert packages["surely-not-installed-pkg"].status == "not installed"
    assert "compiled for another numpy" in packages["broken-optional-pkg"].status
    assert packages["pytest"].import_error is None and packages["numpy"].import_error is None
    assert environment._extras_usable(list(packages.values())) == {"video": False, "export": False, "train": True}


# ------------------------------------------------------------------------------------------------ hub kernels


def _kernel_layers(model: torch.nn.Module) -> list[str]:
    """Modules whose class declares a hub-kernel layer name (what `kernels.kernelize` may replace)."""
    return [name for name, module in model.named_modules() if getattr(type(module), "kernel_layer_name", None)]


def test_hub_kernels_replace_nothing_in_our_classes(tmp_path):
    import transformers

    config = sapiens2_hf.tiny_config("seg")
    torch.manual_seed(0)
    sapiens2_hf.Sapiens2ForSemanticSegmentation(config).save_pretrained(tmp_path / "ours")
    default = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path / "ours").eval()
    off = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path / "ours", use_kernels=False).eval()
    assert _kernel_layers(default) == []
    pixel_values = torch.randn(1, 3, 64, 48, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(default(pixel_values).logits, off(pixel_values).logits)
    # control: transformers' own class declares its RMSNorm as a hub-kernel layer (Liger's on CUDA), so the check sees
    # kernel layers where there are some
    theirs = transformers.Sapiens2ForSemanticSegmentation(transformers.Sapiens2Config.from_dict(config.to_dict()))
    assert any(name.endswith("norm1") for name in _kernel_layers(theirs)) or not _kernels_installed()


def _kernels_installed() -> bool:
    try:
        importlib.metadata.version("kernels")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
