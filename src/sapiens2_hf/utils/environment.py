"""What a bug report needs to know about the machine and the installation (`sapiens2-hf env`).

The packages are read from this installation's own metadata (`importlib.metadata.requires("sapiens2_hf")`), so the
report lists exactly what the project declares, each with its installed version, whether it lies in the declared
range and, for optional ones, whether it imports. Module level imports only the standard library and `packaging`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import sys
from dataclasses import asdict, dataclass, field

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

DISTRIBUTION = "sapiens2_hf"

#: Packages sapiens2_hf does not declare but that change what it runs: transformers >= 5.25 requires `kernels` and turns
#: hub kernels on by default in `from_pretrained` (README, "Hub kernels").
RELATED_PACKAGES = ("kernels",)

#: Environment variables that change what the library or its dependencies do (offline Hub, hub kernels, threads,
#: CPU kernels, caches); the report shows the ones that are set.
ENVIRONMENT_VARIABLES = (
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_HOME",
    "USE_HUB_KERNELS",
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_ENABLE_MPS_FALLBACK",
    "TORCHINDUCTOR_CACHE_DIR",
    "SAPIENS2_HF_COMPILE_CACHE",
)


@dataclass(frozen=True)
class PackageReport:
    """One declared dependency: its `name` as declared, the `extra` that installs it (`None`: the core), the declared
    range `specifier`, the installed `version` and whether it is `in_range` (both `None` when not installed), and for
    an installed optional package the one-line `import_error` of importing it (`None` when it imports or untried)."""

    name: str
    extra: str | None
    specifier: str
    version: str | None
    in_range: bool | None
    import_error: str | None = None

    @property
    def status(self) -> str:
        if self.version is None:
            return "not installed"
        if self.import_error is not None:
            return f"{self.version} (installed but fails to import: {self.import_error})"
        if not self.in_range:
            return f"{self.version} (OUTSIDE the declared {self.specifier})"
        return self.version


@dataclass
class EnvironmentReport:
    """The machine and installation, as `sapiens2-hf env` prints it (`to_text`) or writes it (`asdict`)."""

    sapiens2_hf: str
    platform: str
    python: str
    packages: list[PackageReport] = field(default_factory=list)
    related: dict[str, str | None] = field(default_factory=dict)
    extras: dict[str, bool] = field(default_factory=dict)
    cpu: dict[str, object] = field(default_factory=dict)
    threads: dict[str, object] = field(default_factory=dict)
    accelerators: dict[str, object] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        report = asdict(self)
        report["packages"] = [{**asdict(package), "status": package.status} for package in self.packages]
        return report

    def to_text(self) -> str:
        """Markdown-style `- key: value` lines, ready to paste into an issue (as `transformers env` prints them)."""
        lines = [f"- sapiens2_hf version: {self.sapiens2_hf}", f"- Platform: {self.platform}",
                 f"- Python version: {self.python}"]
        for package in self.packages:
            where = f" [{package.extra}]" if package.extra else ""
            lines.append(f"- {package.name}{where}: {package.status}")
        for name, version in self.related.items():
            lines.append(f"- {name} (not declared; used by transformers): {version or 'not installed'}")
        lines.append("- Extras importable: " + ", ".join(
            f"{extra} {'yes' if usable else 'no'}" for extra, usable in self.extras.items()))
        for section, values in (("CPU", self.cpu), ("Threads", self.threads), ("Accelerators", self.accelerators)):
            lines.append(f"- {section}: " + "; ".join(f"{key} {value}" for key, value in values.items()))
        lines.append("- Environment variables: " + (
            "; ".join(f"{key}={value}" for key, value in self.environment.items()) or "none of the relevant ones set"))
        return "\n".join(lines)


def declared_requirements(distribution: str = DISTRIBUTION) -> list[tuple[Requirement, str | None]]:
    """`(requirement, extra or None)` for every dependency `distribution` declares, in declaration order; an extra
    that only gathers other extras (`all`, `test`'s `sapiens2_hf[all]`) contributes its own packages only."""
    extras = importlib.metadata.metadata(distribution).get_all("Provides-Extra") or []
    declared = []
    seen = set()
    for line in importlib.metadata.requires(distribution) or ():
        requirement = Requirement(line)
        if requirement.name.replace("-", "_").lower() == distribution.lower() or requirement.name.lower() in seen:
            continue
        seen.add(requirement.name.lower())
        declared.append((requirement, _extra_of(requirement, extras)))
    return declared


def _extra_of(requirement: Requirement, extras: list[str]) -> str | None:
    """The extra whose `extra == "..."` marker selects `requirement`, or None for the core (no marker, or one that
    holds without any extra)."""
    marker = requirement.marker
    if marker is None or marker.evaluate({"extra": ""}):
        return None
    return next((extra for extra in extras if marker.evaluate({"extra": extra})), None)


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _import_names() -> dict[str, list[str]]:
    """Distribution name (normalised) -> the top-level modules it installs (`opencv-python-headless` -> `cv2`)."""
    names: dict[str, list[str]] = {}
    for module, distributions in importlib.metadata.packages_distributions().items():
        if module.startswith("_") or module.endswith(".pth"):
            continue
        for distribution in distributions:
            names.setdefault(canonicalize_name(distribution), []).append(module)
    return names


def _import_error(modules: list[str]) -> str | None:
    """None when the main module of a distribution imports, else its error in one line."""
    # A distribution may install helper modules beside its package (`onnxruntime` ships only `onnxruntime`, `av` also
    # `av.libs`); the shortest name is the package users import.
    module = min(modules, key=len)
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - any failure to import is what the report is for
        return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
    return None


def package_reports(check_imports: bool = True) -> list[PackageReport]:
    """A `PackageReport` for every declared dependency; optional packages are imported when `check_imports`."""
    import_names = _import_names() if check_imports else {}
    reports = []
    for requirement, extra in declared_requirements():
        version = _installed_version(requirement.name)
        in_range = None
        if version is not None:
            try:
                in_range = requirement.specifier.contains(Version(version), prereleases=True)
            except InvalidVersion:
                in_range = False
        import_error = None
        if check_imports and extra is not None and version is not None:
            modules = import_names.get(canonicalize_name(requirement.name))
            import_error = _import_error(modules) if modules else None
        reports.append(PackageReport(requirement.name, extra, str(requirement.specifier), version, in_range,
                                     import_error))
    return reports


def _extras_usable(packages: list[PackageReport]) -> dict[str, bool]:
    """Extra -> whether every package it declares is installed, in range and importable (the test-only extras
    `test` and `dev` are left out: they are for this repository's suite)."""
    usable: dict[str, bool] = {}
    for package in packages:
        if package.extra is None or package.extra in ("test", "dev"):
            continue
        ok = package.version is not None and bool(package.in_range) and package.import_error is None
        usable[package.extra] = usable.get(package.extra, True) and ok
    return usable


def _processor_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo; elsewhere what `platform` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith(("model name", "hardware")):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_section(torch) -> dict[str, object]:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "machine": platform.machine(),
        "processor": _processor_name(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "logical cores": os.cpu_count(),
        "cores usable by this process": affinity,
    }


def _threads_section(torch) -> dict[str, object]:
    return {
        "torch intra-op": torch.get_num_threads(),
        "torch inter-op": torch.get_num_interop_threads(),
        "OpenMP": torch.backends.openmp.is_available(),
        "MKL": torch.backends.mkl.is_available(),
        "MKL-DNN": torch.backends.mkldnn.is_available(),
    }


def _accelerators_section(torch) -> dict[str, object]:
    section: dict[str, object] = {}
    if torch.cuda.is_available():
        section["CUDA"] = f"{torch.version.cuda} ({torch.cuda.device_count()} devices: " + ", ".join(
            torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())) + ")"
        section["cuDNN"] = torch.backends.cudnn.version()
    else:
        section["CUDA"] = f"not available (torch built with CUDA {torch.version.cuda})" if torch.version.cuda \
            else "not available (CPU build of torch)"
    mps = getattr(torch.backends, "mps", None)
    section["MPS"] = bool(mps is not None and mps.is_available())
    xpu = getattr(torch, "xpu", None)
    section["XPU"] = bool(xpu is not None and xpu.is_available())
    return section


def collect_environment(check_imports: bool = True) -> EnvironmentReport:
    """The report `sapiens2-hf env` prints. Imports torch; with `check_imports`, every installed optional package."""
    import torch

    packages = package_reports(check_imports=check_imports)
    return EnvironmentReport(
        sapiens2_hf=_installed_version(DISTRIBUTION) or "not installed (run from a source tree)",
        platform=platform.platform(),
        python=sys.version.split()[0],
        packages=packages,
        related={name: _installed_version(name) for name in RELATED_PACKAGES},
        extras=_extras_usable(packages),
        cpu=_cpu_section(torch),
        threads=_threads_section(torch),
        accelerators=_accelerators_section(torch),
        environment={name: os.environ[name] for name in ENVIRONMENT_VARIABLES if name in os.environ},
    )
