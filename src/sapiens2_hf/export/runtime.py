"""Exported Sapiens2 models as drop-in models for the pipelines and the CLI.

`OnnxRuntimeSapiens2Model.from_pretrained(folder)` (and `TorchExportSapiens2Model` for `model.pt2`,
`AotiSapiens2Model` for `model_aoti.pt2`) load a folder written by `export_model` and return, from
`model(pixel_values=...)`, the output dataclasses of the torch models, so `pipeline("sapiens2-pose", model=...)` works
unchanged. transformers' `Pipeline` needs no `PreTrainedModel`: these classes give what it and our pipelines read
(`device`, `to()`, `config`, `dtype`, `eval()`, the call; float32 only, `to()` refusing what the runtime cannot do),
and nothing else. Which class runs which format is a row of `formats.py`; `backends.py` loads them.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from transformers import modeling_outputs

from ..modeling import TASK_MODEL_CLASSES, Sapiens2Config, modeling_sapiens2_hf
from ..utils.extras import require
from .formats import EXPORT_FORMAT_TABLE
from .info import INFO_FILE, read_export_info


def _output_class(name: str, task: str | None = None):
    """The output dataclass named `name`: ours, transformers', or one beside the model class of a task registered
    with `sapiens2_hf.register_task` (the user's module)."""
    modules = [modeling_sapiens2_hf, modeling_outputs]
    if task in TASK_MODEL_CLASSES:
        modules.append(sys.modules.get(TASK_MODEL_CLASSES[task].__module__))
    for module in modules:
        if hasattr(module, name):
            return getattr(module, name)
    raise ValueError(f"unknown output class {name!r} in {INFO_FILE}; was the folder exported by a newer sapiens2_hf?")


class ExportedSapiens2Model:
    """Common part of the exported-model runtimes: config, output dataclasses, input checks, pipeline duck-typing.

    Attributes:
        config (`Sapiens2Config`): the exported model's config (`image_size` is the exported input size).
        input_size (`(height, width)`): the fixed input size.
        output_names (`tuple[str, ...]`): the output fields, in graph order.
        format (`str`): `"onnx"`, `"torch-export"` or `"aoti"`.
    """

    main_input_name = "pixel_values"
    format = ""

    def __init__(self, folder, info: dict, config: Sapiens2Config):
        self.folder = Path(folder)
        self.info = info
        self.config = config
        self.input_size = tuple(info["input_size"])
        self.output_names = tuple(info["output_names"])
        self._output_class = _output_class(info["output_class"], config.task)
        self._device = torch.device("cpu")
        self.training = False

    # -- what pipelines read ------------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def eval(self):
        return self

    def can_generate(self) -> bool:
        return False

    def to(self, *args, **kwargs):
        """Accepts the CPU and float32 (what the artefact runs on); anything else is an error naming why."""
        for value in list(args) + list(kwargs.values()):
            if isinstance(value, str) and isinstance(getattr(torch, value, None), torch.dtype):
                value = getattr(torch, value)
            if isinstance(value, torch.dtype):
                if value != torch.float32:
                    raise ValueError(f"an exported {self.format} model runs in float32; it cannot be cast to {value}. "
                                     "Use dtype=float32 (or the int8 ONNX file for a quantized model).")
            elif isinstance(value, (str, int, torch.device)) and not isinstance(value, bool):
                self._move(torch.device(value))
        return self

    def _move(self, device: torch.device) -> None:
        if device.type != "cpu":
            raise ValueError(f"this exported {self.format} model runs on the CPU here; it cannot move to {device}. "
                             "Use device='cpu'.")

    def __call__(self, pixel_values=None, **kwargs):
        return self.forward(pixel_values=pixel_values, **kwargs)

    def forward(self, pixel_values: torch.Tensor, return_dict: bool | None = None, **kwargs):
        """The eager model's output dataclass (a tuple with `return_dict=False`) for `pixel_values`
        `(batch_size, 3, height, width)` at the exported `input_size`, on `pixel_values`' device."""
        for flag in ("output_hidden_states", "output_attentions", "labels"):
            if kwargs.get(flag):
                raise ValueError(f"{flag} is not available from an exported model; use the torch model.")
        outputs = self._output_class(**self.run(pixel_values))
        return outputs if return_dict is not False else outputs.to_tuple()

    def run(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """`{output name: tensor}` for `pixel_values`, on its device."""
        self._check_input(pixel_values)
        outputs = self._run(pixel_values.detach().to("cpu", torch.float32).contiguous())
        return {name: value.to(pixel_values.device) for name, value in outputs.items()}

    def _check_input(self, pixel_values) -> None:
        if not isinstance(pixel_values, torch.Tensor):
            raise TypeError(f"pixel_values must be a torch.Tensor, got {type(pixel_values).__name__}.")
        expected = (self.config.num_channels, *self.input_size)
        if pixel_values.ndim != 4 or tuple(pixel_values.shape[1:]) != expected or pixel_values.shape[0] < 1:
            raise ValueError(
                f"this exported model takes pixel_values of shape (batch_size, {expected[0]}, {expected[1]}, "
                f"{expected[2]}), got {tuple(pixel_values.shape)}. Its input size is fixed at export: use the image "
                f"processor saved beside it (preprocessor_config.json), or export again with input_size=(H, W)."
            )

    def _run(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def get_feature_map(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Backbone exports: the patch tokens on their grid, `(batch_size, hidden_size, height / stride, width /
        stride)` (as `Sapiens2Model.get_feature_map`)."""
        if "last_hidden_state" not in self.output_names:
            raise ValueError("get_feature_map needs an exported backbone (task None).")
        tokens = self.run(pixel_values)["last_hidden_state"]
        grid = (self.input_size[0] // self.config.feature_stride[0], self.input_size[1] // self.config.feature_stride[1])
        patches = tokens[:, self.config.num_prefix_tokens:]
        return patches.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[-1], *grid)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(folder={str(self.folder)!r}, task={self.config.task!r}, "
                f"input_size={self.input_size}, outputs={self.output_names})")

    @classmethod
    def _read(cls, folder) -> tuple[dict, Sapiens2Config]:
        """The folder's export_info.json and config, refused unless its format is one this class runs (a row of the
        format table naming it)."""
        info = read_export_info(folder)
        formats = [row.name for row in EXPORT_FORMAT_TABLE.values()
                   if row.runtime.rpartition(":")[2] == cls.__name__ and row.load("runtime") is cls]
        if info.get("format") not in formats:
            raise ValueError(f"{folder} holds a {info.get('format')!r} export, not {' or '.join(map(repr, formats))}; "
                             "load it with sapiens2_hf.export.load_exported(folder).")
        return info, Sapiens2Config.from_pretrained(folder)


class OnnxRuntimeSapiens2Model(ExportedSapiens2Model):
    """An exported ONNX Sapiens2 model run by onnxruntime (see the module docstring).

    Attributes:
        session (`onnxruntime.InferenceSession`): the underlying session.
        precision (`str`): `"fp32"` or `"int8"`.
    """

    format = "onnx"

    def __init__(self, folder, info, config, session, precision: str):
        super().__init__(folder, info, config)
        self.session = session
        self.precision = precision
        self._session_args = None

    @classmethod
    def from_pretrained(cls, folder, precision: str = "fp32", num_threads: int | None = None,
                        providers: list | None = None, session_options=None,
                        memory_arena: bool = False) -> "OnnxRuntimeSapiens2Model":
        """Loads an exported folder.

        Args:
            folder: written by `export_model(..., format="onnx")`.
            precision (`str`): `"fp32"` (`model.onnx`) or `"int8"` (`model_int8.onnx`, from `quantize=`).
            num_threads (`int`, *optional*): onnxruntime intra-op threads (default: onnxruntime's, the physical cores).
            providers (`list`, *optional*): onnxruntime execution providers (default: CPU).
            session_options (`onnxruntime.SessionOptions`, *optional*): used as given (num_threads is then ignored).
            memory_arena (`bool`, *optional*, defaults to `False`): onnxruntime's CPU memory arena, off because it
                never returns blocks: a process grows to the sum of its calls' peaks (README); ignored with
                `session_options`.
        """
        ort = require("onnxruntime", feature="the onnxruntime backend")
        info, config = cls._read(folder)
        files = info.get("files", {})
        if precision not in files:
            raise ValueError(f"{folder} has no {precision!r} model (it has {sorted(files)}); export it with "
                             "quantize='int8-dynamic' for an int8 one.")
        if session_options is None:
            session_options = ort.SessionOptions()
            session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            session_options.enable_cpu_mem_arena = bool(memory_arena)
            if num_threads is not None:
                session_options.intra_op_num_threads = int(num_threads)
                session_options.inter_op_num_threads = 1
        providers = providers or ["CPUExecutionProvider"]
        session = ort.InferenceSession(os.fspath(Path(folder) / files[precision]), sess_options=session_options,
                                       providers=providers)
        model = cls(folder, info, config, session, precision)
        model._session_args = (os.fspath(Path(folder) / files[precision]), session_options)
        return model

    def _move(self, device: torch.device) -> None:
        if device.type == "cpu":
            self._device = device
            return
        import onnxruntime as ort

        if device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            path, options = self._session_args
            self.session = ort.InferenceSession(
                path, sess_options=options,
                providers=[("CUDAExecutionProvider", {"device_id": device.index or 0}), "CPUExecutionProvider"])
            self._device = device
            return
        raise ValueError(f"this onnxruntime build cannot run on {device} (providers: "
                         f"{ort.get_available_providers()}); use device='cpu' or install onnxruntime-gpu.")

    def _run(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        values = self.session.run(list(self.output_names), {self.info["input_name"]: pixel_values.numpy()})
        return {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in zip(self.output_names, values)}


class TorchExportSapiens2Model(ExportedSapiens2Model):
    """An exported `torch.export` program (`model.pt2`), run by torch on the CPU, with the same interface."""

    format = "torch-export"

    def __init__(self, folder, info, config, module):
        super().__init__(folder, info, config)
        self.module = module

    @classmethod
    def from_pretrained(cls, folder, num_threads: int | None = None, precision: str = "fp32") -> "TorchExportSapiens2Model":
        if precision != "fp32":
            raise ValueError("torch-export folders hold a float32 program only; quantize an ONNX export instead.")
        info, config = cls._read(folder)
        with warnings.catch_warnings():
            # torch 2.14 warns when a saved weight shares storage with no other tensor ("No complete tensor found
            # in the group"); it concerns weights saved off the CPU, never the case here
            warnings.filterwarnings("ignore", message="No complete tensor found in the group")
            program = torch.export.load(os.fspath(Path(folder) / info["files"]["fp32"]))
        return cls(folder, info, config, program.module())

    def _run(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            values = self.module(pixel_values)
        return dict(zip(self.output_names, values))
