"""The fast-inference recipe: `prepare_for_inference(model, device, dtype, compile, attention)`.

One call turns a loaded Sapiens2 model into the fastest configuration its hardware allows, without changing what it
computes beyond the chosen precision:

1. **Device and precision** (`bfloat16` by default). The RoPE `periods` stay in `config.rope_dtype` (bfloat16, the
   official arithmetic) through any `nn.Module` cast, as the RoPE module recomputes them in its `_apply`; periods
   moved out of it otherwise are recomputed here (`restore_rope_precision`).
2. **Attention kernel** through transformers' `set_attn_implementation`: `"sdpa"` by default, which on CUDA picks
   FlashAttention-2 by itself when it can (fp16/bf16, head dim 64 in every size, no mask).
3. **Compilation**: `torch.compile` of `forward` (the model object stays), `fullgraph=True` by default, with
   inductor's `emulate_precision_casts` so compiled reduced-precision code rounds where eager rounds.
4. **CUDA graphs**, optional (`mode="reduce-overhead"`/`"max-autotune"`): a replay overwrites the previous replay's
   outputs and the pose pipeline runs the model twice per batch (flip test), so outputs are cloned out of the
   graph's memory (`clone_outputs`, on by default with CUDA graphs).
5. **A persistent compile cache** (`CompileCache`, docs/deployment.md).

A second input shape recompiles once with a dynamic batch dimension (torch's `dynamic=None`); `dynamic=False` keeps
one static graph per shape. Layer 2: imports torch, transformers (through the model) and `modeling` only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import is_flash_attn_2_available

from .modeling.modeling_sapiens2_hf import Sapiens2RopePositionEmbedding
from .utils.atomic_io import atomic_write_bytes

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_COMPILE_CACHE_DIR", "CompileCache", "InferenceRecipe", "prepare_for_inference",
           "restore_rope_precision", "resolve_dtype"]

#: Where `prepare_for_inference` keeps compile caches unless told otherwise (`compile_cache_dir=`, `--compile-cache`).
DEFAULT_COMPILE_CACHE_DIR = Path.home() / ".cache" / "sapiens2_hf" / "compile"
#: An environment variable that moves the default compile cache (CI, tests, read-only homes).
COMPILE_CACHE_ENV = "SAPIENS2_HF_COMPILE_CACHE"


def default_compile_cache_dir() -> Path:
    """`$SAPIENS2_HF_COMPILE_CACHE` when set, else `DEFAULT_COMPILE_CACHE_DIR` (read at each call, not at import)."""
    return Path(os.environ.get(COMPILE_CACHE_ENV) or DEFAULT_COMPILE_CACHE_DIR)


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class InferenceRecipe:
    """What `prepare_for_inference` did, kept on the model as `model.inference_recipe`.

    Attributes (beside `prepare_for_inference`'s arguments `device`, `dtype`, `mode`, `fullgraph`):
        attention (`str`): `config._attn_implementation` after the switch.
        compiled (`bool`), cuda_graphs (`bool`): `forward` is `torch.compile`d; its mode records CUDA graphs.
        clone_outputs (`bool`): outputs are copied out of the CUDA graphs' memory.
        rope_restored (`int`): RoPE modules whose periods were put back into `rope_dtype`.
        flash_attention_available (`bool`): this torch build and device can run SDPA's FlashAttention kernel.
        compile_cache (`str` or `None`): the compile-cache file (`CompileCache.path`), `None` without one.
    """

    device: str
    dtype: torch.dtype
    attention: str
    compiled: bool
    mode: str | None
    fullgraph: bool
    cuda_graphs: bool
    clone_outputs: bool
    rope_restored: int
    flash_attention_available: bool
    compile_cache: str | None = None


class CompileCache:
    """One file of torch's portable compile-cache artefacts for one model and compile setting.

    Its name hashes everything that changes the compiled code (torch version, model class and config, device type,
    dtype, compile options, and the CPU capability: see `_warn_about_shared_inductor_cache`), so models can share a
    folder. It is rewritten atomically after every call that compiled; a damaged or foreign file is ignored with a
    warning (the compile runs cold), and torch checks each artefact's key.

    Attributes:
        path (`Path`): the cache file.
        loaded (`dict[str, int]`): artefacts loaded from the file, per kind (`inductor`, `aot_autograd`, ...).
        saved (`int`): how many times the file was written by this process.
    """

    def __init__(self, folder, key: dict):
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
        self.folder = Path(folder).expanduser()
        self.path = self.folder / f"{key.get('model', 'model')}-{key.get('device', 'cpu')}-{digest}.bin"
        self.loaded: dict[str, int] = {}
        self.saved = 0

    def load(self) -> dict[str, int]:
        """Loads the file's artefacts into torch's caches (none when there is no file yet)."""
        if not self.path.is_file():
            return self.loaded
        try:
            info = torch.compiler.load_cache_artifacts(self.path.read_bytes())
        except Exception as error:  # a truncated or foreign file: compile cold rather than fail
            logger.warning("compile cache %s could not be read (%s); compiling without it.", self.path, error)
            return self.loaded
        if info is None:  # torch logs why (a checksum that does not match, for a damaged file) and returns None
            logger.warning("compile cache %s holds no usable artefacts (damaged, or written by another torch); "
                           "compiling without it.", self.path)
        else:
            self.loaded = {kind: len(keys) for kind, keys in info.artifacts.items()}
        return self.loaded

    def save(self) -> bool:
        """Writes every artefact this process compiled or loaded so far; False when torch had none."""
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            return False
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.path, saved[0], durable=False)
        except OSError as error:  # a read-only or full disk costs the next start its cache, not this run its result
            logger.warning("could not write the compile cache %s (%s); the next process will compile again.",
                           self.path, error)
            return False
        self.saved += 1
        return True

    @staticmethod
    def counters() -> dict[str, int]:
        """This process's compile-cache counters (`torch._dynamo.utils.counters`, the figures torch's own cache tests
        read; evidence of cache hits without timing): FX-graph (inductor) and AOTAutograd cache hits and misses, and
        their sum `graphs_compiled` (every graph compiled in this process, from the cache or not)."""
        from torch._dynamo.utils import counters

        figures = {
            "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
            "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
            "autograd_cache_hit": counters["aot_autograd"]["autograd_cache_hit"],
            "autograd_cache_miss": counters["aot_autograd"]["autograd_cache_miss"],
        }
        figures["graphs_compiled"] = sum(figures.values())
        return figures


def _compile_cache_key(model: torch.nn.Module, device: torch.device, dtype: torch.dtype, **options) -> dict:
    config = getattr(model, "config", None)
    return {
        "torch": torch.__version__,
        "model": type(model).__name__,
        "config": config.to_json_string(use_diff=False) if hasattr(config, "to_json_string") else repr(config),
        "device": device.type,
        "dtype": str(dtype),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **options,
    }


def resolve_dtype(dtype) -> torch.dtype:
    """`torch.float32/bfloat16/float16` from a dtype or its name (`"bf16"`, `"fp16"`, `"fp32"` accepted)."""
    if isinstance(dtype, torch.dtype):
        if dtype in _DTYPES.values():
            return dtype
    elif isinstance(dtype, str):
        name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}.get(
            dtype.removeprefix("torch."), dtype.removeprefix("torch.")
        )
        if name in _DTYPES:
            return _DTYPES[name]
    raise ValueError(f"dtype must be one of {sorted(_DTYPES)} (or the torch dtype), got {dtype!r}.")


def _check_device(device) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = torch.version.cuda
            why = (f"this torch build has CUDA {build} but sees no GPU (driver, CUDA_VISIBLE_DEVICES?)" if build
                   else "this torch build has no CUDA support")
            raise RuntimeError(
                f"prepare_for_inference(device={str(device)!r}): CUDA is not available ({why}). Pass device='cpu' "
                "(then dtype=torch.float32: CPUs without bfloat16 units run bfloat16 several times slower), or run on "
                "a machine with an NVIDIA GPU and a CUDA build of torch."
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(f"prepare_for_inference: {device} does not exist, this machine has "
                               f"{torch.cuda.device_count()} CUDA device(s).")
    elif device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise RuntimeError("prepare_for_inference(device='mps'): MPS is not available; pass device='cpu'.")
    return device


def restore_rope_precision(model: torch.nn.Module) -> int:
    """Puts every Sapiens2 RoPE module's `periods` back into its `rope_dtype` (recomputed, as at construction) where
    something moved them out of it; returns how many were restored. `nn.Module` casts (`.to(dtype)`, `.half()`) no
    longer need this (the RoPE module keeps its dtype through them); an assignment or a hook still can."""
    restored = 0
    for module in model.modules():
        if isinstance(module, Sapiens2RopePositionEmbedding) and module.periods.dtype != module.rope_dtype:
            module.reset_periods()
            restored += 1
    return restored


@functools.lru_cache(maxsize=1)
def _warn_about_shared_inductor_cache() -> None:
    # Measured with torch 2.14.1 on an AVX-512 CPU: inductor's on-disk cache does not key CPU kernels on
    # ATEN_CPU_CAPABILITY, so a kernel compiled in a run without it and reused in a run with ATEN_CPU_CAPABILITY=avx2
    # returned NaN for half of its outputs, and the reverse order crashed the process; a precompiled header from
    # another run (kept under the temporary folder whatever the cache folder) broke compiling under "default".
    capability = os.environ.get("ATEN_CPU_CAPABILITY")
    if capability and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        logger.warning(
            "ATEN_CPU_CAPABILITY=%s is set but TORCHINDUCTOR_CACHE_DIR is not: torch's compile cache does not keep "
            "CPU kernels compiled under different capabilities apart, and reusing one compiled under another "
            "setting gave NaN outputs or a crash. Give each setting its own cache, e.g. "
            "TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor_%s (its precompiled headers stay in the temporary folder: "
            "a TMPDIR of its own covers both).", capability, capability,
        )


def _flash_attention_available(device: torch.device, dtype: torch.dtype) -> bool:
    if device.type != "cuda" or dtype == torch.float32:
        return False
    backends = torch.backends.cuda
    built = getattr(backends, "is_flash_attention_available", lambda: True)()
    return bool(built and backends.flash_sdp_enabled() and torch.cuda.get_device_capability(device)[0] >= 8)


def _set_attention(model: torch.nn.Module, attention: str) -> str:
    """Switches `config._attn_implementation` to `attention` through transformers' `set_attn_implementation`, or on
    the config after checking the kernel exists for a model transformers refuses (it looks for
    `ALL_ATTENTION_FUNCTIONS.get_interface(` in the class's source: older remote code lacks it, yet may read the
    config at every call)."""
    config = model.config
    can_set = getattr(type(model), "_can_set_attn_implementation", None)
    if hasattr(model, "set_attn_implementation") and (can_set is None or can_set()):
        # The dict form targets the model's own config only: its `head_config` sub-config has no attention and
        # would only draw a warning.
        model.set_attn_implementation({"": attention})
    elif config._attn_implementation != attention:
        if attention != "eager" and attention not in ALL_ATTENTION_FUNCTIONS:
            raise ValueError(f"unknown attention implementation {attention!r}; choose 'sdpa', 'eager' or one of "
                             f"{sorted(ALL_ATTENTION_FUNCTIONS)}.")
        if attention.startswith("flash_attention"):
            if not is_flash_attn_2_available():
                raise ImportError(f"attention={attention!r} needs the flash-attn package; use attention='sdpa', "
                                  "which runs PyTorch's own FlashAttention kernel on GPUs that have it.")
        config._attn_implementation = attention
    in_use = config._attn_implementation
    if in_use != attention:
        raise RuntimeError(f"asked for attention={attention!r} but the model kept {in_use!r}; "
                           f"{type(model).__name__} may not support it (try 'sdpa' or 'eager').")
    return in_use


def _mode_options(mode: str | None, dynamic: bool | None) -> dict:
    """Inductor options of a torch.compile mode (`None`: the default mode, no options)."""
    import torch._inductor

    # `list_mode_options(None)` answers the table of every mode, not the default one's options.
    try:
        options = torch._inductor.list_mode_options(mode or "default", dynamic)
    except RuntimeError:  # "Unrecognized mode=..."
        options = None
    if not isinstance(options, dict):
        raise ValueError(f"unknown torch.compile mode {mode!r}; choose None, 'default', 'reduce-overhead', "
                         "'max-autotune' or 'max-autotune-no-cudagraphs'.")
    return dict(options)


def _clone_outputs(outputs):
    """Copies the tensors of a `ModelOutput` (or tuple/tensor) out of CUDA-graph memory."""
    if isinstance(outputs, torch.Tensor):
        return outputs.clone()
    if isinstance(outputs, tuple) and not hasattr(outputs, "keys"):
        return type(outputs)(_clone_outputs(value) for value in outputs)
    if hasattr(outputs, "keys"):
        for key in list(outputs.keys()):
            outputs[key] = _clone_outputs(outputs[key])
    return outputs


def _check_request(model: torch.nn.Module, device: torch.device, dtype: torch.dtype, compile: bool,
                   mode: str | None) -> None:
    """The combinations `prepare_for_inference` refuses (or warns about) before it touches the model."""
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise RuntimeError(f"{torch.cuda.get_device_name(device)} has no bfloat16 support; pass dtype=torch.float16 "
                           "(or torch.float32).")
    if device.type == "cpu" and dtype != torch.float32:
        logger.warning("prepare_for_inference: %s on CPU is usually slower than float32 (no bfloat16/float16 units "
                       "on most CPUs); it is meant for GPUs.", dtype)
    if mode is not None and not compile:
        raise ValueError(f"mode={mode!r} is a torch.compile mode; pass compile=True or drop it.")
    if getattr(model, "inference_recipe", None) is not None and model.inference_recipe.compiled:
        raise RuntimeError("this model was already prepared and compiled by prepare_for_inference; prepare a fresh "
                           "model (compiling twice would wrap the compiled forward again).")


def _open_compile_cache(compile_cache_dir, model: torch.nn.Module, device: torch.device, dtype: torch.dtype,
                        **options) -> CompileCache | None:
    """The loaded compile cache of this model and recipe (`compile_cache_dir` as `prepare_for_inference` takes it;
    None for `False`)."""
    if compile_cache_dir is False:
        return None
    folder = default_compile_cache_dir() if compile_cache_dir in (None, True) else compile_cache_dir
    cache = CompileCache(folder, _compile_cache_key(model, device, dtype, **options))
    cache.load()
    return cache


def _caching_forward(model, compiled_forward, cache, clone: bool, backend: str, device, dtype):
    """`compiled_forward` that says (once) that it compiles, saves the compile cache after a new graph and copies
    the outputs out of CUDA-graph memory when `clone`."""
    first_call = [True]

    @functools.wraps(model.forward)
    def forward(*args, **kwargs):
        if first_call[0]:
            first_call[0] = False
            loaded = sum(cache.loaded.values()) if cache is not None else 0
            # compiling takes minutes on a CPU: say so (once) rather than look hung
            logger.warning(
                "compiling %s with torch.compile (%s on %s, %s): the first call takes a while%s.",
                type(model).__name__, backend, device.type, str(dtype).removeprefix("torch."),
                "" if cache is None else (f"; compile cache {cache.path} ({loaded} artefacts loaded)" if loaded
                                          else f"; no compile cache yet, it will be written to {cache.path}"))
        graphs = CompileCache.counters()["graphs_compiled"] if cache is not None else 0
        outputs = compiled_forward(*args, **kwargs)
        if cache is not None and CompileCache.counters()["graphs_compiled"] != graphs:
            cache.save()
        return _clone_outputs(outputs) if clone else outputs

    return forward


def _compile_forward(model: torch.nn.Module, mode_options: dict, clone: bool, *, device: torch.device,
                     dtype: torch.dtype, mode: str | None, fullgraph: bool, dynamic: bool | None, backend: str,
                     exact_casts: bool, compile_cache_dir, attention: str) -> None:
    """Replaces `model.forward` by its `torch.compile`d version (with the compile cache: `model.compile_cache`)."""
    options = None
    if backend == "inductor":
        # Round reduced-precision intermediates where eager rounds (the official bf16 RoPE arithmetic); `mode`
        # and `options` are exclusive in torch.compile, so the mode is spelled out as its options.
        options = {**mode_options, "emulate_precision_casts": bool(exact_casts)}
    if backend == "inductor" and device.type == "cpu":
        _warn_about_shared_inductor_cache()
    compiled_forward = torch.compile(model.forward, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                     options=options)
    model.compile_cache = None if backend != "inductor" else _open_compile_cache(
        compile_cache_dir, model, device, dtype, mode=mode, fullgraph=bool(fullgraph), dynamic=dynamic,
        attention=attention, exact_casts=bool(exact_casts))
    # An instance attribute shadows the class's `forward`; `nn.Module.__call__` (hooks included) calls it.
    model.forward = _caching_forward(model, compiled_forward, model.compile_cache, clone, backend, device, dtype)


def prepare_for_inference(model: torch.nn.Module, device="cuda", dtype=torch.bfloat16, compile: bool = True,
                          attention: str | None = "sdpa", *, mode: str | None = None, fullgraph: bool = True,
                          dynamic: bool | None = None, backend: str = "inductor", clone_outputs: bool | None = None,
                          exact_casts: bool = True,
                          compile_cache_dir: str | os.PathLike | bool | None = None) -> torch.nn.Module:
    """Moves, casts, picks the attention kernel and compiles `model` for inference, in place; returns `model`, in
    eval mode, with `model.inference_recipe` (`InferenceRecipe`) describing it.

    Args:
        model: a Sapiens2 model (any task, or the backbone); transformers' own Sapiens2 classes work too (their RoPE
            is float32 by design and left alone).
        device (`str` or `torch.device`): `"cuda"` (default), `"cuda:1"`, `"cpu"`, ... (`RuntimeError` if absent).
        dtype (`torch.dtype` or name): `torch.bfloat16` (default), `torch.float16` or `torch.float32` weights; the
            RoPE keeps `config.rope_dtype`.
        attention (`str`, *optional*): `"sdpa"` (default; FlashAttention through SDPA on CUDA when possible),
            `"eager"`, `"flash_attention_2"`, `"flex_attention"`; `None` leaves the model's setting.
        mode (`str`, *optional*): `torch.compile` mode: `None` (default), `"reduce-overhead"` (CUDA graphs),
            `"max-autotune"` (autotuned kernels + CUDA graphs), `"max-autotune-no-cudagraphs"`.
        fullgraph (`bool`): require one graph (an error instead of a silent graph break).
        dynamic (`bool`, *optional*): torch.compile's `dynamic` (`None`: static first, dynamic after a new shape).
        backend (`str`): torch.compile backend (`"inductor"`; `"eager"`/`"aot_eager"` to debug capture).
        clone_outputs (`bool`, *optional*): copy outputs out of CUDA-graph memory; default on with CUDA graphs.
        exact_casts (`bool`): inductor's `emulate_precision_casts` (round bf16/fp16 intermediates as eager does).
        compile_cache_dir (`str`, *optional*): the folder of the persistent compile cache (`CompileCache`; inductor
            only); `None`: `$SAPIENS2_HF_COMPILE_CACHE` or `DEFAULT_COMPILE_CACHE_DIR`; `False`: none.
    """
    device, dtype = _check_device(device), resolve_dtype(dtype)
    _check_request(model, device, dtype, compile, mode)
    mode_options = _mode_options(mode, dynamic) if compile and backend == "inductor" else {}
    cuda_graphs = bool(mode_options.get("triton.cudagraphs", False))
    if cuda_graphs and device.type != "cuda":
        raise ValueError(f"mode={mode!r} records CUDA graphs and needs device='cuda'; on {device.type} use mode=None.")
    model.eval()
    model.to(device=device, dtype=dtype)
    rope_restored = restore_rope_precision(model)
    in_use = _set_attention(model, attention) if attention is not None else model.config._attn_implementation
    clone = cuda_graphs if clone_outputs is None else bool(clone_outputs)
    if compile:
        _compile_forward(model, mode_options, clone, device=device, dtype=dtype, mode=mode, fullgraph=fullgraph,
                         dynamic=dynamic, backend=backend, exact_casts=exact_casts,
                         compile_cache_dir=compile_cache_dir, attention=in_use)
    model.inference_recipe = InferenceRecipe(
        device=str(device), dtype=dtype, attention=in_use, compiled=bool(compile), mode=mode,
        fullgraph=bool(fullgraph), cuda_graphs=cuda_graphs, clone_outputs=clone and bool(compile),
        rope_restored=rope_restored, flash_attention_available=_flash_attention_available(device, dtype),
        compile_cache=str(model.compile_cache.path) if getattr(model, "compile_cache", None) is not None else None,
    )
    return model
