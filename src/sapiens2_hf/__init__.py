"""sapiens2_hf: Sapiens2 human-centric vision models, first-class in the Hugging Face ecosystem.

Importing the package is cheap (no torch, no transformers): its public names (`__all__`) and its sub-packages are
imported on first use (PEP 562 module `__getattr__`), so that `sapiens2-hf --help`, which imports
`sapiens2_hf.cli.main` and therefore this file, answers without loading the model code.

Registration with transformers (Auto classes, image processor, pipeline tasks: `_registration.register`) must still
happen before transformers can be asked for our types. Everything that can ask needs transformers imported, so it is
done:
- at once, when transformers is already imported when this package is;
- otherwise right after transformers is first imported, by a one-shot import hook (`_RegistrationHook`, removed once
  registration is done). This keeps the documented `import sapiens2_hf; from transformers import pipeline;
  pipeline("sapiens2-pose", ...)` working. When transformers is first imported from inside one of our own modules
  (`from sapiens2_hf.modeling import ...`), registration, which imports those modules, waits until the outermost of
  our imports in progress has finished, so that it never sees one of them half-initialised;
- and on first access to a public name (a no-op when done already).
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import TYPE_CHECKING

from . import _registration

__version__ = "0.1.0"

# Public name -> sub-module defining it. The generic names are listed here; the per-task ones (model and output
# classes, our Auto classes) are derived from the task registry, read without importing torch (`task_public_names`).
_GENERIC_NAMES = {
    "HEAD_PRESETS": "modeling",
    "TASKS": "modeling",
    "VARIANTS": "modeling",
    "Sapiens2Backbone": "modeling",
    "Sapiens2Config": "modeling",
    "Sapiens2HeadConfig": "modeling",
    "Sapiens2Model": "modeling",
    "Sapiens2PreTrainedModel": "modeling",
    "model_class_for_task": "modeling",
    "tiny_config": "modeling",
    "pipeline": "pipeline_factory",
    "prepare_for_inference": "inference_recipe",
    "to_json_compatible": "serialization",
    "image_from_json": "serialization",
}
_LAZY_NAMES = {**_GENERIC_NAMES, **_registration.task_public_names()}

__all__ = [*_LAZY_NAMES, "__version__"]

# For type checkers and IDEs only (at run time these are resolved by `__getattr__`): static analysis cannot follow the
# derived names, so the per-task ones are spelled out here too; tests/test_task_registry.py checks that these imports
# are exactly `_LAZY_NAMES`, and names the ones a new task must add.
if TYPE_CHECKING:
    from .auto import AutoModelForAlbedoEstimation
    from .inference_recipe import prepare_for_inference
    from .modeling import (
        HEAD_PRESETS,
        TASKS,
        VARIANTS,
        Sapiens2Backbone,
        Sapiens2Config,
        Sapiens2ForAlbedoEstimation,
        Sapiens2ForImageMatting,
        Sapiens2ForNormalEstimation,
        Sapiens2ForPointmapEstimation,
        Sapiens2ForPoseEstimation,
        Sapiens2ForSemanticSegmentation,
        Sapiens2HeadConfig,
        Sapiens2Model,
        Sapiens2PreTrainedModel,
        model_class_for_task,
        tiny_config,
    )
    from .modeling.modeling_sapiens2_hf import (
        Sapiens2AlbedoEstimatorOutput,
        Sapiens2ImageMattingOutput,
        Sapiens2NormalEstimatorOutput,
        Sapiens2PointmapEstimatorOutput,
        Sapiens2PoseEstimatorOutput,
    )
    from .pipeline_factory import pipeline
    from .serialization import image_from_json, to_json_compatible


def __getattr__(name: str):
    """Imports a public name (or a sub-package, as `sapiens2_hf.processing`) on first access and caches it."""
    if name.startswith("_"):  # dunder probes (copy, pickle, pytest, inspect) must not import anything
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY_NAMES[name]}"), name)
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":  # the sub-module exists but something it imports is missing
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    _register_when_safe()
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# ---------------------------------------------------------------------------------------------------------------
# registration with transformers, as soon as transformers is imported (see the module docstring)
# ---------------------------------------------------------------------------------------------------------------

# Per thread: `count`, the imports of our modules running now, counted by the hook, and `registering`. Per thread
# because what registration must not see is a module half-initialised by its own thread (another thread's import is
# waited for by importlib's module locks).
_in_progress = threading.local()
_transformers_imported = False  # set by the hook once `transformers` itself has finished importing


def _transformers_ready() -> bool:
    if _transformers_imported:
        return True
    module = sys.modules.get("transformers")
    # `_initializing` is set by importlib while a module's code runs: a half-imported transformers cannot register.
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def _register_when_safe() -> None:
    """Registers now unless it is done, transformers is not imported yet, or one of our imports is in progress (then
    the end of the outermost one calls this again)."""
    if _registration._registered:
        return
    if getattr(_in_progress, "count", 0) or getattr(_in_progress, "registering", False) or not _transformers_ready():
        return
    _RegistrationHook.uninstall()  # first, so that the imports registration does are plain imports
    _in_progress.registering = True  # registration's own `from . import auto` comes back through `__getattr__`
    try:
        _registration.register()
    finally:
        _in_progress.registering = False


class _RegistrationHook:
    """A `sys.meta_path` finder that finds nothing itself: for `transformers` and our own modules it asks the finders
    after it and wraps the loader's `exec_module` of the spec found, to run `_register_when_safe` once the module has
    been imported. Every other import passes straight through (one string comparison)."""

    @classmethod
    def install(cls) -> None:
        cls.uninstall()  # at most one, also when this package is reloaded
        sys.meta_path.insert(0, cls)

    @classmethod
    def uninstall(cls) -> None:
        for finder in list(sys.meta_path):
            if getattr(finder, "_sapiens2_hf_registration_hook", False):
                try:
                    sys.meta_path.remove(finder)
                except ValueError:  # removed meanwhile by another thread
                    pass

    _sapiens2_hf_registration_hook = True

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        ours = fullname.startswith(__name__ + ".")
        if not (ours or fullname == "transformers"):
            return None
        try:
            after = sys.meta_path[sys.meta_path.index(cls) + 1:]
        except ValueError:  # uninstalled meanwhile (registration done in another thread)
            after = list(sys.meta_path)
        for finder in after:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is not None and not isinstance(loader, type) and hasattr(loader, "exec_module"):
            cls._wrap(loader, ours)
        return spec

    @staticmethod
    def _wrap(loader, ours: bool) -> None:
        """Shadows `exec_module` on this loader instance (one per module file), and removes the shadow after use, so
        `module.__loader__` stays the original loader object of its original type."""
        original = loader.exec_module

        def exec_module(module):
            global _transformers_imported
            vars(loader).pop("exec_module", None)
            if ours:
                _in_progress.count = getattr(_in_progress, "count", 0) + 1
            try:
                original(module)
            finally:
                if ours:
                    _in_progress.count -= 1
            if not ours:
                _transformers_imported = True
            _register_when_safe()

        try:
            loader.exec_module = exec_module
        except AttributeError:  # a loader with __slots__: not wrapped; the other triggers still register
            pass


if _transformers_ready():
    _register_when_safe()  # transformers is loaded already: nothing to save by waiting
else:
    _RegistrationHook.install()
