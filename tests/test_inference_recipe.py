"""The inference recipe (`sapiens2_hf.inference_recipe.prepare_for_inference`) and the factory's `fast=`/`compile=`
flags, on CPU: compiled fp32 equals eager within float tolerance, bf16 stays within the bf16 tolerance, the RoPE keeps
its official precision through any cast, the attention kernel is really switched, clear errors. The GPU figures come
from benchmarks/bench_gpu.py (unrun here: no GPU)."""

import copy
import os
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import sapiens2_hf
from sapiens2_hf.inference_recipe import prepare_for_inference, resolve_dtype, restore_rope_precision
from sapiens2_hf.modeling.modeling_sapiens2_hf import Sapiens2RopePositionEmbedding
from sapiens2_hf.modeling.official_format_sapiens2_hf import compute_rope_periods

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]

# fp32: compiled kernels reorder sums (fused RMSNorm/softmax/matmul epilogues); measured 3.6e-7 on outputs of max
# 0.89. 1e-5 is 25x that and 50x below the smallest real change the control makes (RoPE cos/sin in float32 instead
# of bfloat16: 5e-4).
FP32_TOLERANCE = 1e-5
# bf16: 8 significant bits, so each rounding of weights and activations is up to 2^-9 = 0.2 % relative; over the
# tiny model's ~10 rounded stages the errors add up to ~1 % of the output scale (measured 0.6-0.8 %). The bound, 3 %
# of the largest output, keeps a 3x margin and still fails a model whose fp32 weights carry 2 % noise (the control).
BF16_RELATIVE_TOLERANCE = 3e-2


def _model(task="pose", seed=0, **overrides):
    torch.manual_seed(seed)
    return sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task, **overrides)).eval()


def _pixels(batch=2, seed=1):
    return torch.randn(batch, 3, 64, 48, generator=torch.Generator().manual_seed(seed))


def _heatmaps(model, pixel_values):
    with torch.inference_mode():
        return model(pixel_values=pixel_values.to(model.dtype)).heatmaps.float()


def _max_abs(a, b):
    return (a.float() - b.float()).abs().max().item()


def _rope(model) -> Sapiens2RopePositionEmbedding:
    (rope,) = [m for m in model.modules() if isinstance(m, Sapiens2RopePositionEmbedding)]
    return rope


@pytest.mark.slow  # inductor's first CPU compile of the tiny model: 70-130 s on a loaded 2-core machine
def test_compiled_fp32_matches_eager_within_float_tolerance():
    reference_model = _model()
    pixel_values = _pixels()
    reference = _heatmaps(reference_model, pixel_values)
    model = prepare_for_inference(copy.deepcopy(reference_model), device="cpu", dtype=torch.float32, compile=True)
    assert model.inference_recipe.compiled and model.inference_recipe.fullgraph
    torch._dynamo.utils.counters.clear()
    compiled = _heatmaps(model, pixel_values)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # dynamo really compiled the forward
    error = _max_abs(compiled, reference)
    assert error <= FP32_TOLERANCE, error
    # Broken control: the same check on the model with its weights rounded to float16 and back (a relative change of
    # up to 5e-4 per weight, the size of a precision slip in a compiled kernel) must fail.
    broken = copy.deepcopy(reference_model).to(torch.float16).to(torch.float32)
    assert _max_abs(_heatmaps(broken, pixel_values), reference) > FP32_TOLERANCE


def test_fullgraph_capture_and_a_second_batch_size():
    """Dynamo captures the whole model as one graph (`fullgraph=True`: a graph break would raise) and a new batch size
    recompiles; the `eager` backend runs the captured ops as they are, so the outputs are those of eager."""
    reference_model = _model()
    model = prepare_for_inference(copy.deepcopy(reference_model), device="cpu", dtype="float32", backend="eager")
    for batch in (2, 3):
        pixel_values = _pixels(batch)
        error = _max_abs(_heatmaps(model, pixel_values), _heatmaps(reference_model, pixel_values))
        assert error <= FP32_TOLERANCE, (batch, error)
    assert model.forward is not type(model).forward and hasattr(model.forward, "__wrapped__")
    # Control: a differently seeded model is far outside the tolerance.
    assert _max_abs(_heatmaps(_model(seed=1), _pixels(2)), _heatmaps(reference_model, _pixels(2))) > FP32_TOLERANCE


def test_bf16_on_cpu_within_bf16_tolerance_and_official_rope():
    reference_model = _model()
    pixel_values = _pixels()
    reference = _heatmaps(reference_model, pixel_values)
    model = prepare_for_inference(copy.deepcopy(reference_model), device="cpu", dtype=torch.bfloat16, compile=False)
    assert model.dtype == torch.bfloat16 and model.inference_recipe.dtype == torch.bfloat16
    rope = _rope(model)
    assert rope.periods.dtype == torch.bfloat16 == rope.rope_dtype
    # The RoPE is the official bf16 arithmetic, bit for bit, with bf16 weights as with fp32 ones.
    for got, want in zip(rope(4, 3), _rope(reference_model)(4, 3)):
        assert torch.equal(got, want)
    scale = reference.abs().max().item()
    error = _max_abs(_heatmaps(model, pixel_values), reference)
    assert error <= BF16_RELATIVE_TOLERANCE * scale, (error, scale)
    # Broken control: fp32 weights with 2 % multiplicative noise must fail the same bound.
    noisy = copy.deepcopy(reference_model)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in noisy.parameters():
            parameter.mul_(1 + 0.02 * torch.randn(parameter.shape, generator=generator))
    assert _max_abs(_heatmaps(noisy, pixel_values), reference) > BF16_RELATIVE_TOLERANCE * scale


@pytest.mark.parametrize("rope_dtype, dtype", [("bfloat16", torch.float16), ("float32", torch.bfloat16)])
def test_rope_keeps_its_precision_through_the_cast(rope_dtype, dtype):
    # head dim 32: 8 periods, most of them not representable in bf16 (head dim 8 has only 1 and 10)
    shape = {"rope_dtype": rope_dtype, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_attention_heads": 2}
    reference = _rope(_model(**shape))
    model = prepare_for_inference(_model(**shape), device="cpu", dtype=dtype, compile=False)
    # A plain `.to(dtype)` alone keeps the RoPE dtype (the module's `_apply`), so the recipe has nothing to restore.
    assert model.inference_recipe.rope_restored == 0
    plain = _model(**shape).to(dtype)
    for candidate in (_rope(model), _rope(plain), _rope(plain.to(torch.float32).to(dtype))):
        assert candidate.periods.dtype == reference.rope_dtype
        assert torch.equal(candidate.periods, compute_rope_periods(candidate.head_dim, candidate.config.rope_theta, candidate.rope_dtype))
        for got, want in zip(candidate(4, 3), reference(4, 3)):
            assert got.dtype == want.dtype and torch.equal(got, want)
    # Control: periods moved out of their dtype by assignment (no `_apply`) change the cos/sin, and
    # `restore_rope_precision` puts them back.
    broken = _rope(plain)
    broken.periods = broken.periods.to(dtype)
    assert not all(torch.equal(got.float(), want.float()) for got, want in zip(broken(4, 3), reference(4, 3)))
    assert restore_rope_precision(plain) == 1 and broken.periods.dtype == reference.rope_dtype
    for got, want in zip(broken(4, 3), reference(4, 3)):
        assert torch.equal(got, want)


def test_attention_implementation_is_switched(monkeypatch):
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting_sdpa(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting_sdpa)
    model = prepare_for_inference(_model(), device="cpu", dtype=torch.float32, compile=False, attention="eager")
    pixel_values = _pixels()
    eager_out = _heatmaps(model, pixel_values)
    assert model.config._attn_implementation == "eager" and not calls  # control: eager never calls SDPA
    prepare_for_inference(model, device="cpu", dtype=torch.float32, compile=False, attention="sdpa")
    assert model.config._attn_implementation == "sdpa" == model.inference_recipe.attention
    sdpa_out = _heatmaps(model, pixel_values)
    assert len(calls) == model.config.num_hidden_layers  # one SDPA call per attention layer
    assert _max_abs(sdpa_out, eager_out) <= FP32_TOLERANCE
    kept = prepare_for_inference(_model(), device="cpu", dtype=torch.float32, compile=False, attention=None)
    assert kept.inference_recipe.attention == "sdpa"  # the model's own default, left as it was
    with pytest.raises(ValueError, match="fast_attn.* is not supported"):  # transformers' own check
        prepare_for_inference(_model(), device="cpu", dtype=torch.float32, compile=False, attention="fast_attn")


def test_clear_errors():
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available.*device='cpu'"):
            prepare_for_inference(_model(), device="cuda")
    with pytest.raises(ValueError, match="dtype must be one of"):
        prepare_for_inference(_model(), device="cpu", dtype=torch.int8)
    with pytest.raises(ValueError, match="needs device='cuda'"):
        prepare_for_inference(_model(), device="cpu", dtype=torch.float32, mode="reduce-overhead")
    with pytest.raises(ValueError, match="unknown torch.compile mode"):
        prepare_for_inference(_model(), device="cpu", dtype=torch.float32, mode="fastest")
    with pytest.raises(ValueError, match="pass compile=True"):
        prepare_for_inference(_model(), device="cpu", dtype=torch.float32, compile=False, mode="max-autotune")
    model = prepare_for_inference(_model(), device="cpu", dtype=torch.float32, backend="eager")
    with pytest.raises(RuntimeError, match="already prepared and compiled"):
        prepare_for_inference(model, device="cpu", dtype=torch.float32)
    assert resolve_dtype("bf16") is torch.bfloat16 and resolve_dtype("torch.float16") is torch.float16


def test_pipeline_fast_and_dtype_flags():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (70, 50, 3), dtype=np.uint8)
    plain = sapiens2_hf.pipeline("sapiens2-normal", model=_model("normal"), device="cpu")
    fast = sapiens2_hf.pipeline("sapiens2-normal", model=_model("normal"), fast=True, device="cpu",
                                compile={"backend": "eager"})
    recipe = fast.model.inference_recipe
    assert recipe.compiled and recipe.attention == "sdpa" and recipe.dtype == torch.float32  # CPU: fp32 by default
    error = np.abs(fast(image)["normals"] - plain(image)["normals"]).max()
    assert error <= FP32_TOLERANCE, error
    # torch_dtype= (older name) casts through the pipeline, and the RoPE periods stay in their dtype.
    half = sapiens2_hf.pipeline("sapiens2-normal", model=_model("normal"), device="cpu", torch_dtype="float16")
    assert half.model.dtype == torch.float16 and _rope(half.model).periods.dtype == torch.bfloat16
    assert getattr(half.model, "inference_recipe", None) is None  # neither fast nor compile: no recipe
    with pytest.raises(ValueError, match="compile must be"):
        sapiens2_hf.pipeline("sapiens2-normal", model=_model("normal"), device="cpu", compile="yes")


BENCH = ROOT / "benchmarks" / "bench_gpu.py"
BENCH_ARGS = ["--device", "cpu", "--variant", "tiny", "--rounds", "1"]


def _eager_bench(folder):
    return {"args": [sys.executable, str(BENCH), *BENCH_ARGS, "--compile-backend", "eager"], "cwd": ROOT,
            "env": {**os.environ, "OMP_NUM_THREADS": "1"}}


# The eager-backend bench run (all tasks and dtypes: ten dynamo captures, ~30 s on one core) starts with the session,
# beside the other tests (conftest.py).
EARLY_CHILDREN = {"eager-bench": ("test_bench_gpu_runs_on_cpu_with_tiny_settings", _eager_bench)}


@pytest.mark.slow  # one inductor compile of the tiny pose model
def test_bench_gpu_runs_with_inductor_on_cpu(monkeypatch, capsys):
    """The bench script with inductor, run as `__main__` in this process (a child process would add ~7 s of imports;
    this module already runs on one thread, as OMP_NUM_THREADS=1 would make it)."""
    # batch 2: the graph test_compiled_fp32_matches_eager_within_float_tolerance compiled, so inductor's caches serve
    # it when that test ran first (a cold compile takes over a minute on a loaded 2-core machine)
    argv = [str(BENCH), *BENCH_ARGS, "--tasks", "pose", "--dtypes", "float32", "--batch", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    capsys.readouterr()
    try:
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_path(str(BENCH), run_name="__main__")
    finally:
        torch._dynamo.reset()  # leave no compiled frames behind for the next tests
    out = capsys.readouterr().out
    assert exit_info.value.code == 0, out[-3000:]
    assert "tiny pose" in out and "compiled" in out


@pytest.mark.slow  # 5 tasks x 4 configurations with dynamo capture: ~30 s, beside the other tests (EARLY_CHILDREN)
def test_bench_gpu_runs_on_cpu_with_tiny_settings(early_child):
    done, _ = early_child("eager-bench")
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    for task in ("pose", "seg", "normal", "pointmap", "albedo"):
        assert f"tiny {task}" in out, out
    assert "compiled" in out and "bfloat16" in out and "max|x-fp32|" in out


def test_a_capability_override_without_its_own_compile_cache_is_warned_about(monkeypatch, caplog):
    from sapiens2_hf import inference_recipe

    def warnings_with(environment):
        for name in ("ATEN_CPU_CAPABILITY", "TORCHINDUCTOR_CACHE_DIR"):
            monkeypatch.delenv(name, raising=False)
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        inference_recipe._warn_about_shared_inductor_cache.cache_clear()
        caplog.clear()
        with caplog.at_level("WARNING", logger="sapiens2_hf.inference_recipe"):
            inference_recipe._warn_about_shared_inductor_cache()
        return [record.getMessage() for record in caplog.records]

    (message,) = warnings_with({"ATEN_CPU_CAPABILITY": "avx2"})
    assert "ATEN_CPU_CAPABILITY=avx2" in message and "TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor_avx2" in message
    # controls: a cache of its own, or no override at all, draw no warning
    assert warnings_with({"ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CACHE_DIR": "/tmp/own"}) == []
    assert warnings_with({}) == []
    inference_recipe._warn_about_shared_inductor_cache.cache_clear()
