"""Prints pip constraints that pin every dependency setup.cfg declares to its declared lower bound, for the
"oldest" CI leg (`scripts/setup_oldest.sh`): transformers, huggingface_hub, safetensors, the core's other packages and
every extra's at the oldest version the project claims to support, so each floor is a version the suite has passed on.

torch and torchvision are left out: they stay at the build `scripts/setup.sh` pins (the only one this machine's local
wheels give; their floors are that build). A requirement without a `>=` floor is an error: every dependency must
declare the oldest version it was tested with.

    python scripts/oldest_constraints.py > constraints.txt
"""

from __future__ import annotations

import configparser
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
#: Kept at the pinned local build (scripts/setup.sh) in both legs.
KEPT_AT_PINNED_BUILD = ("torch", "torchvision")


def declared_requirements(setup_cfg: Path = ROOT / "setup.cfg") -> list[Requirement]:
    """Every requirement of `install_requires` and `extras_require` in `setup_cfg` (extras that only gather other
    extras, `sapiens2_hf[...]`, skipped), each once."""
    parser = configparser.ConfigParser()
    parser.read(setup_cfg, encoding="utf-8")
    lines = parser["options"]["install_requires"].splitlines()
    for extra in parser["options.extras_require"]:
        lines += parser["options.extras_require"][extra].splitlines()
    requirements, seen = [], set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        if requirement.name.lower() in ("sapiens2_hf", "sapiens2-hf") or requirement.name.lower() in seen:
            continue
        seen.add(requirement.name.lower())
        requirements.append(requirement)
    return requirements


def floor(requirement: Requirement) -> str:
    """The version of `requirement`'s `>=` clause; ValueError when it has none."""
    floors = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    if len(floors) != 1:
        raise ValueError(f"setup.cfg: {requirement} must declare exactly one '>=' lower bound (the oldest tested "
                         "version)")
    return floors[0]


def oldest_constraints(setup_cfg: Path = ROOT / "setup.cfg") -> list[str]:
    """`name==floor` for every declared requirement but torch and torchvision."""
    return [f"{requirement.name}=={floor(requirement)}" for requirement in declared_requirements(setup_cfg)
            if requirement.name.lower() not in KEPT_AT_PINNED_BUILD]


if __name__ == "__main__":
    sys.stdout.write("".join(line + "\n" for line in oldest_constraints()))
