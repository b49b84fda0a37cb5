"""AOTInductor packages (`export_model(..., format="aoti")`, `backend="aoti"`) and the persistent compile cache of
`prepare_for_inference(compile_cache_dir=...)`.

Compiling is slow on a CPU (inductor's lowering, then a C++ build): measured on the project's 2-core machine while
other jobs kept its load average near 8, the tiny seg model's AOTInductor export took 300 s and the cache test's cold
+ warm `torch.compile` 630 s (17.5 min for the module); at a load average near 4, 82 s and 134 s (235 s for the
module, inductor's /tmp cache warm from earlier runs for the package but not for the cache test). The module therefore
compiles one package (shared by the package tests) and one cold + one warm `torch.compile` (the cache test), all
marked slow; the table, key and error checks compile nothing.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import sapiens2_hf
from sapiens2_hf.export import (
    DEFAULT_TOLERANCES,
    EXPORT_FORMATS,
    RUNTIME_BACKENDS,
    AotiPackageError,
    AotiSapiens2Model,
    ExportCheckError,
    compare_outputs,
    export_model,
    load_backend,
    load_exported,
    read_export_info,
    verify_export,
)


pytestmark = pytest.mark.usefixtures("one_thread")


def _tiny(task="seg", seed=0, **overrides):
    torch.manual_seed(seed)
    return sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task, **overrides)).eval()


@pytest.fixture(scope="module")
def seg_package(tmp_path_factory):
    """A tiny seg model (official bf16 RoPE) and its verified AOTInductor package."""
    model = _tiny("seg")
    result = export_model(model, tmp_path_factory.mktemp("aoti") / "seg-aoti", format="aoti")
    return result, model


# ------------------------------------------------------------------------------------------------ tables, errors


def test_backend_tables_agree():
    from sapiens2_hf.cli.export import BACKENDS, add_export_subparser

    assert "aoti" in EXPORT_FORMATS and RUNTIME_BACKENDS["aoti"] == ("aoti", "fp32")
    assert BACKENDS == ("torch", *RUNTIME_BACKENDS)  # the CLI's torch-free copy of the runtime table
    parser = argparse.ArgumentParser()
    add_export_subparser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["export", "m", "--out", "o", "--format", "aoti", "--device", "cpu"])
    assert args.format == "aoti" and args.device == "cpu"


def test_load_backend_names_the_export_it_needs(tmp_path):
    folder = tmp_path / "onnx-folder"
    folder.mkdir()
    (folder / "export_info.json").write_text(json.dumps({"format": "onnx", "task": "seg"}))
    with pytest.raises(ValueError, match=r"holds a 'onnx' export; backend 'aoti' needs `sapiens2-hf export --format "
                                         r"aoti`"):
        load_backend(folder, "aoti")
    with pytest.raises(ValueError, match="needs a folder written by `sapiens2-hf export --format aoti`"):
        load_backend(tmp_path / "model.safetensors", "aoti")
    with pytest.raises(ValueError, match="unknown backend 'tensorrt'"):
        load_backend(folder, "tensorrt")
    with pytest.raises(ValueError, match="device='cuda' needs format='aoti'"):
        export_model(_tiny(), tmp_path / "x", format="torch-export", device="cuda")
    with pytest.raises(ValueError, match="runs a model compiled at export; drop fast="):
        sapiens2_hf.pipeline("sapiens2-segmentation", model=str(folder), backend="aoti", fast=True)


# ------------------------------------------------------------------------------------------------ the package


@pytest.mark.slow
def test_aoti_package_equals_eager_with_a_dynamic_batch(seg_package):
    result, model = seg_package
    folder = result.folder
    assert {p.name for p in folder.iterdir()} >= {"model_aoti.pt2", "config.json", "preprocessor_config.json",
                                                  "export_info.json"}
    assert not [p for p in folder.parent.iterdir() if ".staging-" in p.name]
    info = read_export_info(folder)
    assert info["format"] == "aoti" and info["files"] == {"fp32": "model_aoti.pt2"}
    assert info["aoti"]["device"] == "cpu" and info["aoti"]["inductor_configs"] == {"emulate_precision_casts": True}
    assert len(info["aoti"]["sha256"]) == 64 and info["aoti"]["bytes"] == (folder / "model_aoti.pt2").stat().st_size
    assert all(figures["ok"] for figures in info["verification"]["outputs"].values())
    runtime = load_exported(folder)
    assert isinstance(runtime, AotiSapiens2Model) and runtime.device == torch.device("cpu")
    generator = torch.Generator().manual_seed(5)
    for batch in (1, 3):  # the package was traced with batch 2: the batch size is dynamic
        pixel_values = torch.randn(batch, 3, 64, 48, generator=generator)
        with torch.no_grad():
            expected = model(pixel_values=pixel_values).logits
        got = runtime(pixel_values=pixel_values).logits
        report = compare_outputs({"logits": got}, {"logits": expected}, DEFAULT_TOLERANCES["bfloat16"])
        assert report["logits"]["ok"], report
        # far inside the bf16-RoPE tolerance: inductor rounds the bf16 RoPE where eager rounds (5e-7 measured)
        assert report["logits"]["max_abs"] < 1e-5 * max(report["logits"]["reference_absmax"], 1.0)
    with pytest.raises(ValueError, match=r"\(batch_size, 3, 64, 48\).*export again with input_size"):
        runtime(pixel_values=torch.zeros(1, 3, 32, 48))
    with pytest.raises(ValueError, match="compiled for cpu; it cannot run on"):
        runtime.to("cuda")


@pytest.mark.slow
def test_aoti_backend_in_the_pipeline_and_the_cli(seg_package):
    import numpy as np

    from sapiens2_hf.predict.run import load_backend_model

    result, model = seg_package
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in ((70, 50, 3), (64, 48, 3))]
    pipe = sapiens2_hf.pipeline("sapiens2-segmentation", model=str(result.folder), backend="aoti", device="cpu")
    assert isinstance(pipe.model, AotiSapiens2Model) and pipe.image_processor.input_size == (64, 48)
    reference = sapiens2_hf.pipeline("sapiens2-segmentation", model=model, image_processor=pipe.image_processor,
                                     device="cpu")
    for image in images:
        ours, theirs = pipe(image)["segmentation"], reference(image)["segmentation"]
        assert ours.shape == image.shape[:2] and (ours == theirs).mean() > 0.999
    args = argparse.Namespace(model=str(result.folder), task="seg", backend="aoti", dtype="float32", threads=1)
    runtime, device = load_backend_model(args, "auto")
    assert isinstance(runtime, AotiSapiens2Model) and device == "cpu"
    with pytest.raises(ValueError, match="exported seg model, not normal"):
        load_backend_model(argparse.Namespace(**{**vars(args), "task": "normal"}), "auto")


@pytest.mark.slow
def test_aoti_broken_controls(seg_package, tmp_path):
    """A package checked against other weights fails verification; a modified package is refused at load."""
    result, model = seg_package
    assert all(figures["ok"] for figures in verify_export(result.folder, model).values())
    other = _tiny("seg", seed=1)  # same architecture, other weights
    with pytest.raises(ExportCheckError, match="aoti model .* logits out of tolerance"):
        verify_export(result.folder, other)
    tampered = tmp_path / "tampered"
    shutil.copytree(result.folder, tampered)
    package = tampered / "model_aoti.pt2"
    data = bytearray(package.read_bytes())
    data[len(data) // 2] ^= 0xFF
    package.write_bytes(bytes(data))
    with pytest.raises(AotiPackageError, match="not the package that was verified at export"):
        load_exported(tampered)
    (tampered / "model_aoti.pt2").unlink()
    with pytest.raises(AotiPackageError, match="has no model_aoti.pt2"):
        load_exported(tampered)


# ------------------------------------------------------------------------------------------------ compile cache


_CACHE_CHILD = textwrap.dedent("""
    import json, sys, torch
    torch.set_num_threads(1)
    import sapiens2_hf
    from sapiens2_hf.inference_recipe import CompileCache, prepare_for_inference
    torch.manual_seed(0)
    model = sapiens2_hf.model_class_for_task("seg")(sapiens2_hf.tiny_config("seg", num_hidden_layers=1)).eval()
    pixel_values = torch.randn(1, 3, 64, 48, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        eager = model(pixel_values=pixel_values).logits
    prepare_for_inference(model, device="cpu", dtype=torch.float32, compile=True, compile_cache_dir=sys.argv[1])
    with torch.no_grad():
        compiled = model(pixel_values=pixel_values).logits
    print(json.dumps({"loaded": model.compile_cache.loaded, "saved": model.compile_cache.saved,
                      "file": str(model.compile_cache.path), "recipe_cache": model.inference_recipe.compile_cache,
                      "max_abs": (compiled - eager).abs().max().item(), **CompileCache.counters()}))
""")


def _cache_child(cache_dir, inductor_dir):
    # an inductor cache folder of its own per process: without it the second process would hit inductor's cache
    # under /tmp whatever the compile cache file holds
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir), "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run([sys.executable, "-c", _CACHE_CHILD, str(cache_dir)], env=env, capture_output=True,
                               text=True, timeout=1200, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stderr


@pytest.mark.slow
def test_compile_cache_makes_a_second_process_hit_the_cache(tmp_path):
    cache_dir = tmp_path / "compile-cache"
    cold, cold_log = _cache_child(cache_dir, tmp_path / "inductor-1")
    # control: the first process compiled from scratch and wrote the file
    assert cold["loaded"] == {} and cold["saved"] >= 1 and cold["fxgraph_cache_miss"] >= 1
    assert cold["fxgraph_cache_hit"] == 0 and os.path.isfile(cold["file"]) and cold["recipe_cache"] == cold["file"]
    assert "compiling Sapiens2ForSemanticSegmentation with torch.compile" in cold_log
    assert "no compile cache yet" in cold_log
    warm, warm_log = _cache_child(cache_dir, tmp_path / "inductor-2")
    # the second process, with an empty inductor folder, finds every graph in the artefacts it loaded
    assert warm["file"] == cold["file"] and warm["loaded"].get("inductor", 0) >= 1
    assert warm["fxgraph_cache_hit"] >= 1 and warm["fxgraph_cache_miss"] == 0
    assert "artefacts loaded" in warm_log
    assert cold["max_abs"] < 1e-5 and warm["max_abs"] < 1e-5


def test_compile_cache_file_is_keyed_and_a_damaged_one_is_ignored(tmp_path, caplog):
    from sapiens2_hf.inference_recipe import CompileCache, _compile_cache_key

    model = _tiny("seg")
    key = _compile_cache_key(model, torch.device("cpu"), torch.float32, mode=None)
    cache = CompileCache(tmp_path, key)
    assert cache.path.parent == tmp_path and cache.path.name.startswith("Sapiens2ForSemanticSegmentation-cpu-")
    assert CompileCache(tmp_path, dict(key)).path == cache.path  # stable across processes (no object ids)
    for other in (_compile_cache_key(model, torch.device("cpu"), torch.bfloat16, mode=None),
                  _compile_cache_key(model, torch.device("cpu"), torch.float32, mode="max-autotune"),
                  _compile_cache_key(_tiny("seg", num_hidden_layers=1), torch.device("cpu"), torch.float32, mode=None)):
        assert CompileCache(tmp_path, other).path != cache.path
    assert cache.load() == {}  # no file yet
    cache.path.write_bytes(b"not a torch cache")
    with caplog.at_level("WARNING"):
        assert cache.load() == {}
    assert "holds no usable artefacts" in caplog.text
