"""How a run reports a failure: which exceptions are the user's input at fault (one line, exit code 2) and how their
message reads on the command line. Shared by `sapiens2-hf` (cli/main.py), the training scripts and the web app, which
shows the same one-line messages.
"""

import re
import sys
import traceback
from pathlib import Path

from ..modeling.sapiens2_tasks import TASK_SPECS
from ..utils.extras import EXTRAS


# Exception types that report a problem with what the user passed, as (module, class name). They are looked up at
# error time in the modules already imported, never imported here: an error of such a class can only come from a
# process that imported its module, so a command that never loaded the conversion code classifies its failures
# without loading that code (and torch) just to compare classes.
_EXPECTED_ERRORS = (
    ("sapiens2_hf.hub.convert_official", "ConversionCheckError"),
    ("sapiens2_hf.utils.extras", "MissingExtraError"),  # a feature's extra is not installed: the pip command
    # a config.json value of the wrong type or out of range, found by transformers' strict config dataclass
    # (`"hidden_size": "32"`; our own validators' ValueErrors arrive wrapped in it)
    ("huggingface_hub.errors", "StrictDataclassError"),
    ("safetensors", "SafetensorError"),  # a corrupt .safetensors file, or writing one failed (a full disk)
)
# Errors that the arithmetic and parsing of the user's values raise rather than a ValueError: a zero size, head count
# or tensor dimension divides by zero; JSON nested thousands deep overflows json's recursion. They are reported with
# their type and the line that raised them, so that one coming from a bug still says where it is.
_INPUT_ARITHMETIC_ERRORS = (ZeroDivisionError, RecursionError)


def _causes(error: BaseException):
    """`error` and the errors it was raised from (`raise ... from cause`), outermost first."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__


def is_expected_error(error: BaseException) -> bool:
    """Failures that come from what the user passed (a corrupt or mismatched file, a bad size or config value, a
    wrong task, a missing folder, an unreachable Hub, a full disk) or from what is installed (a feature whose extra is
    missing): one line and exit code 2, never a traceback. A library error raised from one of ours (`raise ... from`)
    counts as ours. Anything else is a bug and keeps its traceback."""
    return any(_is_expected_itself(link) for link in _causes(error))


def _is_expected_itself(error: BaseException) -> bool:
    if isinstance(error, (ValueError, OSError, *_INPUT_ARITHMETIC_ERRORS)) or _names_missing_extra(error):
        return True
    for module_name, class_name in _EXPECTED_ERRORS:
        expected = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(expected, type) and isinstance(error, expected):
            return True
    return False


# The library's errors name the Python fix (`overwrite=True`, a class to load with); a command-line user needs the
# flag or command. One table translates them for every command, so the library keeps a single message per error:
# (pattern of the API hint, its command-line form; `{task}` is the task whose class the hint names).
_CLI_HINTS = (
    (r"\boverwrite=True", "--overwrite"),
    (r"(?<!\()\bdevice='([\w:]+)'", r"--device \1"),  # a pipeline's check_device; not `prepare_for_inference(device=`
    (r"\bbackend '([\w-]+)'", r"--backend \1"),
    (r"\bquantize='([\w-]+)'", r"`sapiens2-hf export --format onnx --quantize \1`"),
    (r"\(format onnx: ([^)]*)\)(.*) load it with sapiens2_hf\.export\.load_exported\(folder\)",
     r"(format onnx: \1)\2 run it with `sapiens2-hf <task> --model FOLDER --backend onnxruntime`"),
    (r"\(format aoti: ([^)]*)\)(.*) load it with sapiens2_hf\.export\.load_exported\(folder\)",
     r"(format aoti: \1)\2 run it with `sapiens2-hf <task> --model FOLDER --backend aoti`"),
    (r"load it with sapiens2_hf\.export\.load_exported\(folder\)",
     "the predict commands run ONNX (`--backend onnxruntime`) and AOTInductor (`--backend aoti`) exports; load this "
     "one from Python with sapiens2_hf.export.load_exported(folder)"),
    (r"load it with (Sapiens2For\w+)", "run it with `sapiens2-hf {task}`"),
    (r"start a new (\w+) model from it with \w+\.from_backbone\([^)]*\)(, or load it with Sapiens2Model)?",
     r"fine-tune a \1 model from it first (training_scripts/finetune.py --task \1 --backbone_name_or_path ...)"),
)


def _cli_hints(message: str) -> str:
    """`message` with the API hints of `_CLI_HINTS` replaced by their command-line form."""
    task_of_class = {spec.model_class: name for name, spec in TASK_SPECS.items()}
    for pattern, replacement in _CLI_HINTS:
        if "{task}" in replacement:
            message = re.sub(pattern, lambda match, text=replacement: text.format(
                task=task_of_class.get(match.group(1), "<task>")), message)
        else:
            message = re.sub(pattern, replacement, message)
    return message


def error_message(error: BaseException) -> str:
    """The one line printed for an expected error, its hints in command-line terms (`_CLI_HINTS`)."""
    message = _cli_hints(" ".join(str(error).split()) or type(error).__name__)
    if isinstance(error, _INPUT_ARITHMETIC_ERRORS):
        frame = traceback.extract_tb(error.__traceback__)[-1:] or None
        where = f" at {Path(frame[0].filename).name}:{frame[0].lineno} in {frame[0].name}" if frame else ""
        message = f"{message[:300]} ({type(error).__name__}{where}; from a value of the files or options passed)"
    return message


def run_script(prog: str, main, *args) -> int:
    """The exit code of a script's `main(*args)` (training_scripts/*.py), its failures reported as `sapiens2-hf`
    reports its commands': an expected error (`is_expected_error`) is one line, `<prog>: error: <message>`, on stderr
    and exit code 2; any other error is a bug and keeps its traceback."""
    try:
        main(*args)
    except Exception as error:  # noqa: BLE001 - re-raised below unless it is the user's input at fault
        if not is_expected_error(error):
            raise
        print(f"{prog}: error: {error_message(error)}", file=sys.stderr)
        return 2
    return 0


def _names_missing_extra(error: BaseException) -> bool:
    """An ImportError that code unable to use `sapiens2_hf.utils.extras.require` raised, with its own message, from
    an optional package that is not installed (the Hub-shippable adapter loader: "... needs peft (`pip install
    peft`)"). A bare "No module named ..." is not one: an optional package imported where it should not be is a bug."""
    cause = error.__cause__
    if not isinstance(error, ImportError) or not isinstance(cause, ModuleNotFoundError):
        return False
    return (cause.name or "").partition(".")[0] in EXTRAS
