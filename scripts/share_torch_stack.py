"""Links the torch stack of one virtual environment into another, so the second costs no extra 5.4 GB on disk.

Usage: <source venv python> scripts/share_torch_stack.py <target site-packages>

Run with the interpreter of the environment that already holds torch (scripts/setup.sh's `.venv`). Every file tree
of the torch, torchvision, triton, nvidia-* and cuda-* distributions (their packages and their .dist-info folders)
gets a symbolic link in the target site-packages, so pip in the target sees them installed and installs only the
rest. scripts/setup_oldest.sh uses it: both CI legs run the same pinned torch build, and a second full copy of it
(CUDA libraries included, even on a CPU machine) once filled CI's disk.

The target must pin the same torch and torchvision (scripts/oldest_constraints.py's constraints do): pip would
otherwise uninstall through the links, inside the source environment.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from pathlib import Path, PurePosixPath

# Distributions that only the pinned torch build pulls in; every other requirement is installed in the target.
SHARED_DISTRIBUTIONS = re.compile(r"^(torch|torchvision|triton|nvidia[-_].*|cuda[-_].*)$", re.IGNORECASE)


def top_level_entries(distribution: importlib.metadata.Distribution) -> set[str]:
    """The first path component of every file the distribution installed inside site-packages."""
    entries = set()
    for file in distribution.files or ():
        first = PurePosixPath(str(file)).parts[0]
        if first != "..":  # console scripts live in bin/, outside site-packages; the target does not need them
            entries.add(first)
    return entries


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    target = Path(sys.argv[1])
    if not target.is_dir():
        print(f"error: {target} is not a folder; pass the target environment's site-packages", file=sys.stderr)
        return 2
    linked = 0
    for distribution in importlib.metadata.distributions():
        if not SHARED_DISTRIBUTIONS.match(distribution.metadata["Name"]):
            continue
        for entry in sorted(top_level_entries(distribution)):
            source = Path(distribution.locate_file(entry)).resolve()
            link = target / entry
            if link.is_symlink() or link.exists():
                continue  # already linked (an earlier run) or installed there; leave it
            os.symlink(source, link, target_is_directory=source.is_dir())
            linked += 1
    print(f"linked {linked} torch-stack entries into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
