"""How long does `sapiens2-hf --help` take to answer, against a bare interpreter and an interpreter importing torch?

The three commands run in interleaved rounds in one session (so machine load hits them alike), each in a fresh
interpreter; the best of the rounds is the figure (start-up has no useful "typical" value on a shared machine: the
best is the least disturbed), the median is printed beside it. Target (issue 14): `--help` under 1 s.

Usage:
    .venv/bin/python benchmarks/bench_cli_startup.py                      # 5 rounds
    .venv/bin/python benchmarks/bench_cli_startup.py --rounds 10 --json benchmarks/results/cli_startup.json
    # before/after in one session: also time the CLI of another source tree, e.g. the last commit's
    git archive HEAD src | tar -x -C /tmp/before && .venv/bin/python benchmarks/bench_cli_startup.py --src /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HELP_FROM_SOURCE = "import sys; from sapiens2_hf.cli.main import main; sys.exit(main(['--help']))"


def commands(src: str | None) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Name -> (argv, environment) of each timed command."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    script = Path(sys.executable).parent / "sapiens2-hf"
    timed = {
        "python -c pass": ([sys.executable, "-c", "pass"], env),
        "python -c 'import torch'": ([sys.executable, "-c", "import torch"], env),
        # the installed console script when there is one (what users run), else the same entry point from Python
        "sapiens2-hf --help": ([str(script), "--help"] if script.is_file() else
                               [sys.executable, "-c", HELP_FROM_SOURCE], env),
    }
    if src:
        # PYTHONPATH comes before site-packages (and the editable install's path), so `src`'s package is the one run
        path = os.pathsep.join(filter(None, [str(Path(src).resolve()), env.get("PYTHONPATH")]))
        timed[f"sapiens2-hf --help ({src})"] = ([sys.executable, "-c", HELP_FROM_SOURCE], {**env, "PYTHONPATH": path})
    return timed


def run_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--src", default=None, help="also time the CLI of this source folder (the one holding "
                                                    "sapiens2_hf/), e.g. an older checkout")
    parser.add_argument("--json", default=None, help="write the figures and the environment to this file")
    args = parser.parse_args()

    timed = commands(args.src)
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    for _ in range(args.rounds):
        for name, (argv, env) in timed.items():
            seconds[name].append(run_once(argv, env))
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None

    torch_best = min(seconds["python -c 'import torch'"])
    print(f"{'command':<48} {'best s':>8} {'median s':>9} {'best / import torch':>20}   all rounds (s)")
    for name, values in seconds.items():
        print(f"{name:<48} {min(values):>8.3f} {statistics.median(values):>9.3f} {min(values) / torch_best:>20.2f}   "
              + " ".join(f"{v:.2f}" for v in values))
    help_best = min(seconds["sapiens2-hf --help"])
    print(f"\nsapiens2-hf --help: best of {args.rounds} {help_best:.3f} s (target < 1 s: "
          f"{'met' if help_best < 1.0 else 'NOT met'}); 1-min load average {load_before} -> {load_after}, "
          f"{os.cpu_count()} CPUs")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "seconds": seconds,
            "best": {name: min(values) for name, values in seconds.items()},
            "median": {name: statistics.median(values) for name, values in seconds.items()},
            "environment": {"python": sys.version.split()[0], "platform": platform.platform(),
                            "cpus": os.cpu_count(), "load_average_before": load_before,
                            "load_average_after": load_after},
        }, indent=1))


if __name__ == "__main__":
    main()
