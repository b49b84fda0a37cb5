"""The README, read top to bottom, runs as written: every fenced `bash` and `python` block, in order, in one empty
folder, with nothing edited and no file made by hand (issue 34).

The folder gets what a fresh clone has after the quickstart's setup: `.venv` (this interpreter's environment) and the
repository's `training_scripts/`; `scripts/setup.sh` is a stub there, since this test already runs inside the
environment it builds. A block the test does not run says so just above its fence
(`<!-- not run by tests/test_readme.py: reason -->`), and the list of those is pinned here, so no block is dropped
quietly. Bash blocks run with `-e -o pipefail`; each Python block runs in a fresh interpreter, as a reader pasting
it would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_RUN_MARK = "<!-- not run by tests/test_readme.py:"

# Each block the test leaves out, by the start of its reason: setup that CI runs itself, a GPU, an excerpt, a benchmark.
EXPECTED_NOT_RUN = (
    "it is the command that runs that test",
    "CI's second leg runs it",
    "it needs a CUDA GPU",
    "an excerpt",
    "a benchmark",
)


@dataclass
class Block:
    language: str
    code: str
    line: int  # of the opening fence, 1-based
    not_run_reason: str | None


def readme_blocks(text: str) -> list[Block]:
    """The fenced `bash` / `python` blocks of `text`, each with the reason it is not run, when one precedes it."""
    blocks = []
    pattern = re.compile(r"^```(bash|python)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
    for match in pattern.finditer(text):
        before = text[: match.start()].rstrip()
        reason = None
        if before.endswith("-->") and NOT_RUN_MARK in before[before.rfind("<!--"):]:
            comment = before[before.rfind("<!--"):]
            reason = " ".join(comment[len(NOT_RUN_MARK):-3].split())
        blocks.append(Block(match.group(1), match.group(2), text.count("\n", 0, match.start()) + 1, reason))
    return blocks


def make_fresh_clone_folder(folder: Path) -> Path:
    """An empty folder holding what the README's commands use from a set-up clone."""
    (folder / ".venv").symlink_to(Path(sys.prefix))  # `.venv/bin/...` and `$PWD/.venv/bin` on PATH
    (folder / "training_scripts").symlink_to(ROOT / "training_scripts")
    (folder / "scripts").mkdir()
    (folder / "scripts" / "setup.sh").write_text("#!/bin/bash\n# stub: the environment is already set up\n")
    return folder


def as_shell_script(blocks: list[Block]) -> str:
    """The blocks as one bash session, as a reader pastes them into one terminal: variables and `export`s carry over,
    Python blocks go to the `python` on that shell's PATH. Before each block a marker on stderr names it, so a failure
    (`-e -o pipefail` stops at the first) points at its block."""
    parts = []
    for number, block in enumerate(blocks):
        parts.append(f"echo '@@ block {number}' >&2")
        if block.language == "bash":
            parts.append(block.code)
        else:
            parts.append(f"python - <<'README_PYTHON_BLOCK'\n{block.code}README_PYTHON_BLOCK")
    return "\n".join(parts) + "\n"


def run_blocks(blocks: list[Block], folder: Path, timeout: float = 900) -> tuple[int | None, str]:
    """Runs `blocks` in one bash session in `folder`. Returns the index of the block that failed (None: all ran)
    and the session's output tail."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    # the test's own interpreter is not on PATH: the README's `export PATH=$PWD/.venv/bin:$PATH` must put it there
    env["PATH"] = os.pathsep.join(entry for entry in env.get("PATH", "").split(os.pathsep)
                                  if Path(entry) != Path(sys.prefix) / "bin")
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", as_shell_script(blocks)], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=timeout)
    markers = re.findall(r"^@@ block (\d+)$", result.stderr, re.MULTILINE)
    failed = None if result.returncode == 0 else int(markers[-1]) if markers else 0
    return failed, (result.stdout[-2000:] + "\n" + result.stderr[-4000:])


def test_every_block_not_run_says_why_and_the_list_is_pinned():
    blocks = readme_blocks((ROOT / "README.md").read_text())
    reasons = [block.not_run_reason for block in blocks if block.not_run_reason is not None]
    assert len(reasons) == len(EXPECTED_NOT_RUN), reasons
    for expected in EXPECTED_NOT_RUN:
        assert sum(reason.startswith(expected) for reason in reasons) == 1, (expected, reasons)
    assert len(blocks) - len(reasons) >= 9  # the rest run (9 of the 14 blocks when this was written)


def test_the_runner_fails_on_a_failing_block(tmp_path):
    """Controls: a failing command anywhere in a bash block, in a pipe, or a Python error fails its block; the stub
    setup passes; the session keeps a block's exports for the next (the README's `export PATH=...` line)."""
    folder = make_fresh_clone_folder(tmp_path)
    ok = Block("bash", "bash scripts/setup.sh && .venv/bin/python -c 'pass'\n", 1, None)
    for broken in ("false\ntrue\n", "false | cat\n"):
        assert run_blocks([ok, Block("bash", broken, 1, None), ok], folder)[0] == 1
    assert run_blocks([ok, ok, Block("python", "raise SystemExit('no')\n", 1, None)], folder)[0] == 2
    assert run_blocks([ok], folder)[0] is None
    exported = Block("bash", "export PATH=$PWD/.venv/bin:$PATH\n", 1, None)
    assert run_blocks([exported, Block("python", "import sapiens2_hf\n", 1, None)], folder)[0] is None


@pytest.mark.slow
def test_the_readme_runs_top_to_bottom_as_written(tmp_path):
    blocks = [block for block in readme_blocks((ROOT / "README.md").read_text()) if block.not_run_reason is None]
    assert len(blocks) >= 9
    folder = make_fresh_clone_folder(tmp_path)
    failed, output = run_blocks(blocks, folder)
    assert failed is None, (f"README.md line {blocks[failed].line} ({blocks[failed].language}: "
                            f"{blocks[failed].code.splitlines()[0]!r}) failed:\n{output}")
    # what the blocks were meant to leave behind
    for path in ("demo_output", "models/pose", "models/matting", "photo.png", "outputs/photo_seg.png",
                 "converted-pose/model.safetensors", "seg-onnx", "out/photo_seg.png", "runs/four_classes"):
        assert (folder / path).exists(), path
