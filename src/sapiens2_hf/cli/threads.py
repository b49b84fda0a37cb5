"""`--threads N` for every `sapiens2-hf` command that computes, and the CPU thread defaults.

Defaults (when `--threads` is not given):
- commands that run real checkpoints (`pose`, `seg`, `normal`, `pointmap`, `albedo`, `convert`, `merge`): torch's own
  setting (physical cores, or `OMP_NUM_THREADS` when set), capped at the CPUs this process may use (its CPU affinity
  and, in a container, its cgroup CPU quota), because more threads than CPUs only wait for each other;
- `demo` (tiny models): 1 thread. Their operations are too small to share: on a busy 2-core machine one thread ran
  a tiny pose model's training step 10-40x faster than two (1.0-1.4 s against 11.7-48 s for 10 steps).
On a machine shared with other busy processes `--threads 1` is the safe choice for every command. `--threads` above
`MAX_THREADS_PER_CPU` times the machine's CPUs is an argument error: such counts only wait for each other, and very
large ones exhaust memory while the thread pools start (`--threads 100000` ended in a segmentation fault).

Before torch is first imported, the command also sets `OMP_WAIT_POLICY=PASSIVE` unless the environment sets it:
OpenMP threads that spin while waiting take the CPU from the threads doing the work when other processes compete for
it (the 10-40x above: with PASSIVE the same two-thread run took 1.8-2.0 s). Results do not depend on it.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from typing import Iterator

from ..predict.options import positive_int

DEMO_DEFAULT = 1
AUTO = "auto"
MAX_THREADS_PER_CPU = 4


def max_threads() -> int:
    """The largest `--threads`: `MAX_THREADS_PER_CPU` x the machine's logical CPUs."""
    return MAX_THREADS_PER_CPU * (os.cpu_count() or 1)


def thread_count(text: str) -> int:
    """argparse type of `--threads`: an integer from 1 to `max_threads()`."""
    value, limit = positive_int(text), max_threads()
    if value > limit:
        raise argparse.ArgumentTypeError(f"{value} is more than {MAX_THREADS_PER_CPU} x the {os.cpu_count() or 1} "
                                         f"CPUs of this machine (at most {limit})")
    return value


def add_threads_argument(parser: argparse.ArgumentParser, default: int | str = AUTO) -> None:
    """Adds `--threads N` (N >= 1); `default` is used without it: a count, or `"auto"` (see the module docstring)."""
    default_text = f"{default}" if default != AUTO else "torch's default capped at the CPUs available to the process"
    parser.add_argument("--threads", type=thread_count, default=None, metavar="N",
                        help=f"torch CPU threads (default: {default_text}; use 1 on a machine shared with other busy "
                             "processes)")
    parser.set_defaults(threads_default=default)


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask, lowered by a cgroup CPU quota (containers) when one is set."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        count = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return max(1, min(count, quota) if quota is not None else count)


def _cgroup_cpu_quota() -> int | None:
    """`ceil(quota / period)` from cgroup v2 `cpu.max` or v1 `cpu.cfs_quota_us`; None without a quota."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as file:
            quota, period = file.read().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as quota_file, \
                open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as period_file:
            quota, period = int(quota_file.read()), int(period_file.read())
        return None if quota <= 0 else max(1, math.ceil(quota / period))
    except (OSError, ValueError):
        return None


def resolve_threads(threads: int | None, default: int | str = AUTO) -> int:
    """The thread count a command uses: `threads` when given, else `default` (a count, or `"auto"`)."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}.")
        return threads
    if default != AUTO:
        return int(default)
    import torch

    return max(1, min(torch.get_num_threads(), available_cpus()))


def prefer_passive_waiting() -> None:
    """Sets `OMP_WAIT_POLICY=PASSIVE` unless it is set, and only while torch is not imported yet (OpenMP reads it
    once, when it starts; setting it later would only leak into child processes)."""
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@contextlib.contextmanager
def torch_threads(threads: int | None, default: int | str = AUTO) -> Iterator[int]:
    """Runs the block with `resolve_threads(threads, default)` torch intra-op threads, restoring the previous count
    after it (for callers of `main()` in the same process). The inter-op pool is set to the same count when torch
    still allows it (only before any inter-op work in the process, and only once: it cannot be restored)."""
    prefer_passive_waiting()
    import torch

    count = resolve_threads(threads, default)
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    with contextlib.suppress(RuntimeError):  # "cannot set number of interop threads after parallel work has started"
        if torch.get_num_interop_threads() != count:
            torch.set_num_interop_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(previous)
