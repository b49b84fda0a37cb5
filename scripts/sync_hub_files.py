"""Write the byte-identical copies that the flat, Hub-shippable folders need of files that live in `modeling/`.

A Hub repository is one flat folder: remote code there can only import its own siblings, so `processing/` and
`pipelines/` cannot import from `modeling/` and hold copies instead. They must be byte-identical, not merely
equivalent: the model's and the image processor's remote code land in the same repository folder, where a file of one
name can only have one content. tests/test_hub_file_copies.py fails when a copy differs from its source.

Usage:
    python scripts/sync_hub_files.py           # (re)write every copy
    python scripts/sync_hub_files.py --check   # exit 1 and name each stale copy; writes nothing
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sapiens2_hf"

#: (source, copy) paths relative to the package: every copy must equal its source byte for byte.
COPIES = (
    ("modeling/sapiens2_tasks.py", "processing/sapiens2_tasks.py"),
    ("modeling/sapiens2_tasks.py", "pipelines/sapiens2_tasks.py"),
    ("modeling/sapiens2_label_data.py", "processing/sapiens2_label_data.py"),
)


def copy_is_current(source: Path, copy: Path) -> bool:
    """True when `copy` exists and has exactly the bytes of `source`."""
    return copy.is_file() and copy.read_bytes() == source.read_bytes()


def stale_copies(package: Path = PACKAGE, copies=COPIES) -> list[tuple[str, str]]:
    """The `(source, copy)` pairs of `copies` whose copy is missing or differs from its source."""
    return [(source, copy) for source, copy in copies if not copy_is_current(package / source, package / copy)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a copy is stale")
    args = parser.parse_args(argv)
    stale = stale_copies()
    if args.check:
        for source, copy in stale:
            print(f"stale copy: src/sapiens2_hf/{copy} differs from src/sapiens2_hf/{source}; "
                  "run: python scripts/sync_hub_files.py")
        return 1 if stale else 0
    for source, copy in stale:
        shutil.copyfile(PACKAGE / source, PACKAGE / copy)
        print(f"wrote src/sapiens2_hf/{copy} (from {source})")
    if not stale:
        print("every copy is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
