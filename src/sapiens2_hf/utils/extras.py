"""Optional packages (layer 1): the one way a feature imports a package of an extra (setup.cfg `extras_require`).

`pip install sapiens2_hf` is the inference core: the models, processors, pipelines and the CLI's predict and convert
commands. Training, video, export and the demo need an extra; each imports its packages where it runs, through
`require`, so a missing one is a `MissingExtraError` whose one-line message names the pip command (the CLI prints it
and exits with 2):

    >>> peft = require("peft", feature="LoRA")   # MissingExtraError: LoRA needs peft: pip install 'sapiens2_hf[train]'

`EXTRAS` maps each optional import name to its extra; tests/test_extras.py checks it against setup.cfg.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: import name -> the extra that installs it (setup.cfg `[options.extras_require]`).
EXTRAS = {
    "accelerate": "train",
    "datasets": "train",
    "evaluate": "train",
    "peft": "train",
    "av": "video",
    "onnx": "export",
    "onnxscript": "export",
    "onnxruntime": "export",
    "gradio": "app",
}


class MissingExtraError(ImportError):
    """A feature's optional package is not installed; the message is one line ending with the pip command."""


def require(*names: str, feature: str) -> ModuleType | tuple[ModuleType, ...]:
    """Imports the optional packages `names` (keys of `EXTRAS`) that `feature` (the subject of "needs", e.g.
    `"LoRA"`) needs; returns one module, or a tuple in the order given.

    Raises:
        `MissingExtraError`: any of them is not installed ("<feature> needs <missing>: pip install
            'sapiens2_hf[<extra>]'"). A package that is installed but fails to import keeps its own error.
    """
    extra_of = {name: EXTRAS[name] for name in names}  # a KeyError for a name no extra installs: a bug here
    modules, missing = [], []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as error:
            if error.name is None or error.name.partition(".")[0] != name:  # the package's own dependency is missing
                raise
            missing.append(name)
    if missing:
        extras = ",".join(dict.fromkeys(extra_of[name] for name in missing))
        raise MissingExtraError(f"{feature} needs {', '.join(missing)}: pip install 'sapiens2_hf[{extras}]'",
                                name=missing[0])
    return modules[0] if len(modules) == 1 else tuple(modules)
