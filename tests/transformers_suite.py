"""Runs tests built on transformers' shared test mixins in a child pytest, and fetches what they need. Two suites:

- `mixins` (CI: tests/test_transformers_mixins.py): our own test cases, tests/transformers_mixin_cases.py, written
  on transformers' shared mixins (`ModelTesterMixin`, `BackboneTesterMixin`, `ConfigTester`,
  `ImageProcessingTestMixin`). The mixins come from the sdist of the installed transformers version, which the
  package registry serves; nothing else is needed. Targets: `sapiens2_hf` (ours), `control` (a deliberately broken
  model and processor: named mixin tests must fail) and `transformers` (the same cases on transformers' own Sapiens2
  classes: a measurement, see benchmarks/transformers_suite_counts.py).
- `upstream` (a measurement tool only, benchmarks/transformers_suite_counts.py): transformers' own
  tests/models/sapiens2/ files, run on transformers' classes or on ours (tests/transformers_suite_plugin.py swaps
  the classes in; no test code or assertion is changed). The sdist does not ship those files: they come from
  `SAPIENS2_HF_TRANSFORMERS_CHECKOUT` or GitHub's archive of the tag (see `fetch_upstream`).

    python tests/transformers_suite.py --suite mixins --target sapiens2_hf --out DIR  # -> DIR/results.json
    python tests/transformers_suite.py --suite upstream --target transformers --out DIR

None of transformers' test code is kept in this repository. It is fetched at run time and cached under
`SAPIENS2_HF_TRANSFORMERS_SUITE_CACHE` (default `~/.cache/sapiens2_hf/transformers-suite`), in `<version>/`:
- `sdist/`: the sdist of the installed version, from the package registry
  (`pip download --no-deps --no-binary :all: transformers==<version>`). It ships `tests/*.py` only: the mixins.
- `upstream/` (the `upstream` suite only): what the sdist does not ship, that is `tests/models/sapiens2/` itself and
  the modules the mixins import (`tests/exporters/`, `tests/generation/`, `tests/utils/`, `tests/pipelines/`,
  `utils/fetch_hub_objects_for_ci.py`) and the repository's root `conftest.py`. Taken from the checkout named by
  `SAPIENS2_HF_TRANSFORMERS_CHECKOUT` (a clone of huggingface/transformers at tag `v<version>`) when set, else from
  GitHub's archive of tag `v<version>` (only those paths are kept). A folder holding only some of these files
  without the `.complete` marker (put there by hand, with a PROVENANCE note) is used when the download fails.
- `test-requirements/`: the mixins' test-only requirements (`parameterized`) when the interpreter lacks them.
The support modules the mixins import at module level and the sdist lacks are replaced by the stand-ins of `SHIMS`
below, listed in the results (`shims`); with them the export tests of `ExportTesterMixin` are not run.
When the sdist (or, for `upstream`, the Sapiens2 test files) cannot be had, the run is `unavailable` (the pytest
module skips, giving the reason).

Results (`results.json`): `counts` (passed / failed / error / skipped), `outcomes` (test id -> outcome and the first
line of its failure or skip reason), `sources`, `shims`, the class bindings the plugin saw (`upstream`), and the wall
time. Test ids are `<file>::<class>::<test>`, e.g. `transformers_mixin_cases.py::Sapiens2ModelTest::test_save_load`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ElementTree
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "transformers_suite_plugin.py"
MIXIN_CASES = HERE / "transformers_mixin_cases.py"
SUITES = ("mixins", "upstream")
TARGETS = {"mixins": ("sapiens2_hf", "control", "transformers"), "upstream": ("transformers", "sapiens2_hf")}
# The package the sdist's tests/ folder is laid out as for the `mixins` suite: a name of its own, so that it cannot
# be confused with this repository's tests/ (tests/test_suite_hygiene.py lets tests/transformers_mixin_cases.py
# import its mixin modules by this name).
MIXIN_PACKAGE = "transformers_tests"
# What each `mixins` target runs of tests/transformers_mixin_cases.py: pytest arguments after the file (`-k`
# expressions), or node ids in it. `control` runs two mixin tests that the broken classes must fail and two they
# must pass.
MIXIN_SELECTIONS = {
    "sapiens2_hf": ("-k", "not Broken"),
    "transformers": ("-k", "not Broken"),
    "control": ("::BrokenHiddenStatesModelTest::test_hidden_states_output",
                "::BrokenHiddenStatesModelTest::test_model_main_input_name",
                "::BrokenSizeImageProcessingTest::test_call_pil",
                "::BrokenSizeImageProcessingTest::test_image_processor_to_json_string"),
}

MODEL_TEST_FILES = (
    "tests/models/sapiens2/test_modeling_sapiens2.py",
    "tests/models/sapiens2/test_image_processing_sapiens2.py",
)
TAG_ARCHIVE_URL = "https://codeload.github.com/huggingface/transformers/tar.gz/refs/tags/v{version}"
COMPLETE_MARKER = ".complete"

# Stand-ins for support modules that the mixins import at module level and that the sdist does not ship; used always
# by the `mixins` suite, and by `upstream` when its folder is partial. Each keeps the run honest rather than
# equivalent:
# - ExportTesterMixin adds the export tests to ModelTesterMixin: without the real module they are not run;
# - GenerationTesterMixin is only used in `issubclass` checks (Sapiens2 tests do not inherit it): same behaviour;
# - config_common_kwargs is read only for configs without sub-configs (Sapiens2Config has `head_config`); the stand-in
#   raises if it is ever read, so that a test relying on it errors instead of passing;
# - tiny_model_summary.json: empty, so the pipeline tests find no tiny Hub model (they need timm first anyway);
# - url_to_local_path: returns the URL (the Hub fixtures it maps are only used by image-processing tests).
SHIMS = {
    "tests/exporters/test_export.py": (
        '"""sapiens2_hf suite stand-in: the real module was unavailable, its export tests are not run."""\n\n\n'
        "class ExportTesterMixin:\n    pass\n"
    ),
    "tests/generation/test_utils.py": (
        '"""sapiens2_hf suite stand-in: only `GenerationTesterMixin` (an issubclass check) is read."""\n\n\n'
        "class GenerationTesterMixin:\n    pass\n"
    ),
    "tests/utils/test_configuration_utils.py": (
        '"""sapiens2_hf suite stand-in: `config_common_kwargs` raises when read."""\n\n'
        "from collections.abc import Mapping\n\n\n"
        "class _Unavailable(Mapping):\n"
        "    def _fail(self, *args):\n"
        "        raise RuntimeError('config_common_kwargs: tests/utils/test_configuration_utils.py unavailable')\n\n"
        "    __getitem__ = __iter__ = __len__ = _fail\n\n\n"
        "config_common_kwargs = _Unavailable()\n"
    ),
    "tests/utils/tiny_model_summary.json": "{}\n",
    "utils/fetch_hub_objects_for_ci.py": (
        '"""sapiens2_hf suite stand-in."""\n\n\n'
        "def url_to_local_path(url, return_url_if_not_found=True):\n    return url\n"
    ),
}
# Packages of the test tree that need an __init__.py (upstream has empty ones; the sdist ships none), below the tests
# package (`tests`, or MIXIN_PACKAGE).
PACKAGES = ("", "models", "models/sapiens2", "exporters", "generation", "utils")
# Extra test-only requirement of the mixins, installed into the cache when the interpreter lacks it.
TEST_REQUIREMENTS = ("parameterized",)


class SuiteUnavailable(Exception):
    """The test code could not be had (no registry, no tag archive, no checkout): the pytest module skips."""


def installed_version() -> str:
    return importlib.metadata.version("transformers")


def cache_dir(version: str | None = None) -> Path:
    root = os.environ.get("SAPIENS2_HF_TRANSFORMERS_SUITE_CACHE") or (
        Path.home() / ".cache/sapiens2_hf/transformers-suite")
    return Path(root) / (version or installed_version())


@contextlib.contextmanager
def _locked(folder: Path):
    """One process at a time fills a cache folder (several agents and test runs share it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch_sdist(version: str) -> Path:
    """The sdist of transformers `version`, downloaded once by pip from the package registry."""
    folder = cache_dir(version) / "sdist"
    with _locked(cache_dir(version)):
        found = sorted(folder.glob("transformers-*.tar.gz"))
        if found:
            return found[0]
        partial = Path(tempfile.mkdtemp(prefix="sdist-", dir=cache_dir(version)))
        try:
            # short network timeouts: on a machine without the registry this fails in seconds, not minutes
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                       "--timeout", "20", "--retries", "1", "--disable-pip-version-check",
                       f"transformers=={version}", "-d", str(partial)]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            except subprocess.TimeoutExpired:
                raise SuiteUnavailable(f"`pip download transformers=={version}` (sdist) timed out") from None
            found = sorted(partial.glob("transformers-*.tar.gz"))
            if done.returncode or not found:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise SuiteUnavailable(f"`pip download transformers=={version}` (sdist) failed: {' | '.join(tail)}")
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / found[0].name
            os.replace(found[0], target)
            return target
        finally:
            shutil.rmtree(partial, ignore_errors=True)


def _wanted_upstream(path: str) -> bool:
    """Paths of the tag archive kept in `upstream/` (repository-relative)."""
    if path == "conftest.py" or path == "utils/fetch_hub_objects_for_ci.py" or path.startswith("utils/test_module/"):
        return True
    if not path.startswith("tests/"):
        return False
    if path.startswith("tests/models/"):
        return path == "tests/models/__init__.py" or path.startswith("tests/models/sapiens2/")
    if path.startswith("tests/fixtures/"):
        return path.startswith("tests/fixtures/tests_samples/COCO/")
    return True


def _download_tag_archive(version: str, into: Path) -> None:
    url = TAG_ARCHIVE_URL.format(version=version)
    with urllib.request.urlopen(url, timeout=60) as response, tarfile.open(fileobj=response, mode="r|gz") as archive:
        for member in archive:
            path = member.name.split("/", 1)[1] if "/" in member.name else ""
            if not member.isfile() or not _wanted_upstream(path):
                continue
            target = into / path
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.extractfile(member) as source, open(target, "wb") as stream:
                shutil.copyfileobj(source, stream)
    if not (into / MODEL_TEST_FILES[0]).is_file():
        raise OSError(f"{url} has no {MODEL_TEST_FILES[0]}")


def fetch_upstream(version: str) -> tuple[Path, str]:
    """(folder laid out as the transformers repository, description of where it came from)."""
    checkout = os.environ.get("SAPIENS2_HF_TRANSFORMERS_CHECKOUT")
    if checkout:
        if not (Path(checkout) / MODEL_TEST_FILES[0]).is_file():
            raise SuiteUnavailable(f"SAPIENS2_HF_TRANSFORMERS_CHECKOUT={checkout} has no {MODEL_TEST_FILES[0]}")
        return Path(checkout), f"checkout {checkout} (should be tag v{version})"
    folder = cache_dir(version) / "upstream"
    with _locked(cache_dir(version)):
        if (folder / COMPLETE_MARKER).is_file():
            return folder, f"GitHub archive of tag v{version}"
        partial = Path(tempfile.mkdtemp(prefix="upstream-", dir=cache_dir(version)))
        try:
            _download_tag_archive(version, partial)
        except Exception as error:  # offline, tag missing, archive changed: fall back or give up below
            shutil.rmtree(partial, ignore_errors=True)
            failure = f"{type(error).__name__}: {error}"
        else:
            (partial / COMPLETE_MARKER).write_text(TAG_ARCHIVE_URL.format(version=version) + "\n")
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(partial, folder)
            return folder, f"GitHub archive of tag v{version}"
    if any((folder / path).is_file() for path in MODEL_TEST_FILES):
        note = (folder / "PROVENANCE").read_text().strip() if (folder / "PROVENANCE").is_file() else "no PROVENANCE"
        return folder, f"PARTIAL folder {folder} (tag archive unavailable: {failure}); {note}"
    raise SuiteUnavailable(
        f"transformers' Sapiens2 test files are not in the {version} sdist and the tag archive could not be fetched "
        f"({failure}); set SAPIENS2_HF_TRANSFORMERS_CHECKOUT to a huggingface/transformers checkout at v{version}"
    )


def ensure_test_requirements(version: str) -> list[str]:
    """Folders to put on the child's path for the mixins' test-only requirements this interpreter lacks."""
    missing = [name for name in TEST_REQUIREMENTS if importlib.util.find_spec(name) is None]
    if not missing:
        return []
    folder = cache_dir(version) / "test-requirements"
    with _locked(cache_dir(version)):
        if not all((folder / name).exists() for name in missing):
            command = [sys.executable, "-m", "pip", "install", "--no-deps", "--timeout", "20", "--retries", "1",
                       "--disable-pip-version-check", "--target", str(folder), *missing]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            except subprocess.TimeoutExpired:
                raise SuiteUnavailable(f"`pip install {' '.join(missing)}` timed out") from None
            if done.returncode:
                raise SuiteUnavailable(f"could not install {missing}: {done.stderr.strip().splitlines()[-1:]}")
    return [str(folder)]


def _extract_sdist_tests(sdist: Path, tree: Path, version: str, package: str) -> None:
    """The sdist's `tests/` folder, as `tree/<package>/`."""
    prefix = f"transformers-{version}/tests/"
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.startswith(prefix):
                target = tree / package / member.name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.extractfile(member) as source, open(target, "wb") as stream:
                    shutil.copyfileobj(source, stream)


def _add_support_files(tree: Path, package: str) -> list[str]:
    """Stand-ins for the support modules still missing (returned, as repository paths), the packages'
    `__init__.py`, `src/transformers` (a link to the installed package, which tests/test_pipeline_mixin.py imports
    by path) and a pytest.ini."""
    shims = []
    for relative, text in SHIMS.items():
        path = tree / (package + relative[len("tests"):] if relative.startswith("tests/") else relative)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            shims.append(relative)
    for sub_package in PACKAGES:
        folder = tree / package / sub_package
        if sub_package.startswith("models") and not folder.is_dir():
            continue  # only the upstream files have models/
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").touch()
    import transformers  # noqa: F401 (only its location: the child imports its own)

    (tree / "src").mkdir(exist_ok=True)
    link = tree / "src/transformers"
    if not link.exists():
        link.symlink_to(Path(importlib.util.find_spec("transformers").origin).parent, target_is_directory=True)
    # transformers registers its marks (flash_attn_test, ...) in its root conftest.py, which the sdist lacks
    (tree / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    ignore::pytest.PytestUnknownMarkWarning\n")
    return shims


def assemble_mixins(tree: Path, version: str) -> dict:
    """Lays out, in `tree`, the sdist's shared mixins as the package MIXIN_PACKAGE, with the stand-ins they need.
    Returns what went in."""
    sdist = fetch_sdist(version)
    tree.mkdir(parents=True, exist_ok=True)
    _extract_sdist_tests(sdist, tree, version, MIXIN_PACKAGE)
    shims = _add_support_files(tree, MIXIN_PACKAGE)
    return {"sources": {"sdist": str(sdist)}, "shims": shims, "test_files": [str(MIXIN_CASES)],
            "missing_test_files": []}


def assemble_tree(tree: Path, version: str) -> dict:
    """Lays out, in `tree`, what the `upstream` child pytest runs: the sdist's tests/, the upstream files over them,
    stand-ins for missing support modules and the plugin. Returns what went in."""
    sdist = fetch_sdist(version)
    upstream, upstream_source = fetch_upstream(version)
    tree.mkdir(parents=True, exist_ok=True)
    _extract_sdist_tests(sdist, tree, version, "tests")
    for path in sorted(upstream.rglob("*")):
        relative = path.relative_to(upstream).as_posix()
        if path.is_file() and _wanted_upstream(relative):
            target = tree / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    shims = _add_support_files(tree, "tests")
    shutil.copyfile(PLUGIN, tree / PLUGIN.name)
    test_files = [path for path in MODEL_TEST_FILES if (tree / path).is_file()]
    return {
        "sources": {"sdist": str(sdist), "upstream": upstream_source},
        "shims": shims,
        "test_files": test_files,
        "missing_test_files": [path for path in MODEL_TEST_FILES if path not in test_files],
    }


def _test_id(case: ElementTree.Element) -> str:
    classname, name = case.get("classname", ""), case.get("name", "")
    if not classname:  # a collection error: `name` is the module
        return name
    parts = classname.split(".")
    return f"{parts[-2]}.py::{parts[-1]}::{name}" if len(parts) >= 2 else f"{classname}::{name}"


_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def parse_junit(path: Path) -> dict:
    """test id -> {"outcome": passed/failed/error/skipped, "message": first line}; a test reported twice (a failure
    and a teardown error) keeps the worse outcome."""
    outcomes = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag, name in (("error", "error"), ("failure", "failed"), ("skipped", "skipped")):
            element = case.find(tag)
            if element is not None:
                outcome = name
                message = (element.get("message") or element.text or "").strip().splitlines()
                message = message[0][:300] if message else ""
                break
        test_id = _test_id(case)
        previous = outcomes.get(test_id)
        if previous is None or _RANK[outcome] > _RANK[previous["outcome"]]:
            outcomes[test_id] = {"outcome": outcome, "message": message}
    return outcomes


def count(outcomes: dict) -> dict:
    counts = {name: 0 for name in _RANK}
    for entry in outcomes.values():
        counts[entry["outcome"]] += 1
    return counts


def _child_env(version: str, tree: Path, extra: dict) -> dict:
    env = dict(os.environ)
    for name in ("PYTEST_ADDOPTS", "RUN_SLOW", "PYTHONSTARTUP"):
        env.pop(name, None)
    env.update({
        "PYTHONPATH": os.pathsep.join([str(tree), *ensure_test_requirements(version), env.get("PYTHONPATH", "")]),
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        # one thread: the child runs beside the parent pytest on a 2-core machine; the tiny models do not gain
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        **extra,
    })
    return env


def run_suite(target: str, out: Path, timeout: float = 900, suite: str = "upstream") -> dict:
    """Runs `suite` on `target`; writes and returns `out/results.json` (raises SuiteUnavailable)."""
    if suite not in SUITES:
        raise ValueError(f"suite must be one of {SUITES}, not {suite!r}")
    if target not in TARGETS[suite]:
        raise ValueError(f"target must be one of {TARGETS[suite]} for the {suite} suite, not {target!r}")
    version = installed_version()
    start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    tree = out / "tree"
    junit, report = out / "junit.xml", out / "plugin_report.json"
    common = ["-p", "no:cacheprovider", "-c", str(tree / "pytest.ini"), "-q", "--tb=line", "-rfE",
              f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    if suite == "mixins":
        info = assemble_mixins(tree, version)
        selection = MIXIN_SELECTIONS[target]
        if selection[0].startswith("::"):
            selection = [f"{MIXIN_CASES}{node}" for node in selection]
        else:
            selection = [str(MIXIN_CASES), *selection]
        # rootdir: the cases file's folder, so that test ids read `transformers_mixin_cases.py::...`; --noconftest:
        # that folder's conftest.py belongs to the repository's own run
        command = [sys.executable, "-m", "pytest", *selection, "--rootdir", str(MIXIN_CASES.parent), "--noconftest",
                   *common]
        env = _child_env(version, tree, {"SAPIENS2_HF_MIXINS_TARGET": target})
    else:
        info = assemble_tree(tree, version)
        if not info["test_files"]:
            raise SuiteUnavailable(f"none of {MODEL_TEST_FILES} could be had")
        command = [sys.executable, "-m", "pytest", *info["test_files"], "-p", PLUGIN.stem, "--rootdir", str(tree),
                   *common]
        env = _child_env(version, tree, {"SAPIENS2_HF_SUITE_TARGET": target, "SAPIENS2_HF_SUITE_REPORT": str(report)})
    prepared = time.monotonic() - start
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
        returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        returncode, stdout, stderr = "timeout", str(expired.stdout or ""), str(expired.stderr or "")
    outcomes = parse_junit(junit) if junit.is_file() else {}
    for line in stdout.splitlines():  # a failed unittest subTest: make sure its test counts as failed
        if line.startswith("SUBFAILED") and " " in line:
            node = line.split(" ", 1)[1].split(" - ", 1)[0].strip()
            test_id = node.rsplit("/", 1)[-1]
            if outcomes.get(test_id, {}).get("outcome") in (None, "passed", "skipped"):
                outcomes[test_id] = {"outcome": "failed", "message": f"failed subtests ({line.split(' ', 1)[0]})"}
    results = {
        "suite": suite,
        "target": target,
        "transformers_version": version,
        **info,
        "returncode": returncode,
        "counts": count(outcomes),
        "outcomes": outcomes,
        "plugin_report": json.loads(report.read_text()) if report.is_file() else None,
        "prepare_s": round(prepared, 1),
        "wall_s": round(time.monotonic() - start, 1),
        "output_tail": (stdout + stderr)[-4000:],
    }
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    return results


def _file_of(test_id: str) -> str:
    return test_id.split("::", 1)[0]


def compare(ours: dict, control: dict | None, expected_failures: dict, expected_skips: dict,
            test_files=None) -> dict:
    """How the run on our classes (`ours`: outcomes) departs from the documented lists:
    - `unexpected_failures`: failed or errored, not in `expected_failures`;
    - `now_passing`: in `expected_failures` (or `expected_skips`) and passed: the entry must go;
    - `unexpected_skips`: skipped on ours, passed on transformers' classes (`control`), not in `expected_skips`;
    - `stale`: listed, but neither failed (skipped) nor present, in a file that did run (`test_files`: file names;
      entries of a file that could not be had are left alone)."""
    ran = {Path(path).name for path in test_files} if test_files is not None else {_file_of(t) for t in ours}

    def outcome(test_id):
        return ours.get(test_id, {}).get("outcome")

    bad = {test_id for test_id, entry in ours.items() if entry["outcome"] in ("failed", "error")}
    skipped_not_in_control = {
        test_id for test_id, entry in ours.items()
        if entry["outcome"] == "skipped" and control and control.get(test_id, {}).get("outcome") == "passed"
    }
    listed = {**expected_failures, **expected_skips}
    return {
        "unexpected_failures": sorted(bad - set(expected_failures)),
        "now_passing": sorted(t for t in listed if outcome(t) == "passed"),
        "unexpected_skips": sorted(skipped_not_in_control - set(expected_skips)),
        "stale": sorted(
            t for t in listed if _file_of(t) in ran and (
                outcome(t) is None
                or (t in expected_failures and outcome(t) == "skipped")
                or (t in expected_skips and outcome(t) in ("failed", "error"))
            )
        ),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=SUITES, default="mixins")
    parser.add_argument("--target", required=True, help="mixins: sapiens2_hf, control, transformers; "
                        "upstream: transformers, sapiens2_hf")
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json (or unavailable.json)")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    try:
        results = run_suite(args.target, args.out, args.timeout, args.suite)
    except SuiteUnavailable as error:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "unavailable.json").write_text(json.dumps({"reason": str(error)}))
        print(f"unavailable: {error}")
        return 0
    print(json.dumps({key: results[key] for key in ("suite", "target", "counts", "wall_s", "returncode", "shims")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
