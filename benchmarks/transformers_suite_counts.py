"""Counts of a transformers-mixins suite (tests/transformers_suite.py) on transformers' classes and on ours, and every
test that fails on ours, grouped by its documented cause (tests/transformers_suite_expected.py) or marked NEW when
undocumented. A measurement tool, not a test:

- `--suite upstream` (default): transformers' own tests/models/sapiens2/ files. The sdist does not ship them: run
  it where they are available, from SAPIENS2_HF_TRANSFORMERS_CHECKOUT (a huggingface/transformers checkout at the
  installed version's tag), GitHub's tag archive, or a folder cached by hand (see tests/transformers_suite.py).
- `--suite mixins`: our own cases on the shared mixins (tests/transformers_mixin_cases.py; CI runs them on ours,
  tests/test_transformers_mixins.py), here also on transformers' own classes: every case should pass there.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/transformers_suite_counts.py [--suite mixins] [--out x.json]
    ... --target sapiens2_hf        # only our run (the run on transformers' classes takes ~2 min)
    ... --from-dir DIR              # re-read DIR/{transformers,sapiens2_hf}/results.json from an earlier run

Per-test outcomes are in <work dir>/<target>/results.json and junit.xml (the work dir is printed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import transformers_suite  # noqa: E402
import transformers_suite_expected as expected  # noqa: E402

TARGETS = ("transformers", "sapiens2_hf")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=transformers_suite.SUITES, default="upstream")
    parser.add_argument("--target", choices=TARGETS, action="append", help="run only these (default: both)")
    parser.add_argument("--work", type=Path, help="folder for the runs (default: a new temporary folder)")
    parser.add_argument("--from-dir", type=Path, help="read the results of an earlier run instead of running")
    parser.add_argument("--out", type=Path, help="also write the summary as JSON")
    args = parser.parse_args(argv)
    targets = args.target or list(TARGETS)
    if args.suite == "mixins":
        expected_failures, expected_skips = expected.MIXIN_EXPECTED_FAILURES, {}
    else:
        expected_failures, expected_skips = expected.EXPECTED_FAILURES, expected.EXPECTED_SKIPS
    work = args.from_dir or args.work or Path(tempfile.mkdtemp(prefix="transformers-suite-"))
    print(f"work dir: {work}")
    results = {}
    for target in targets:
        path = work / target / "results.json"
        if args.from_dir is None:
            try:
                transformers_suite.run_suite(target, work / target, suite=args.suite)
            except transformers_suite.SuiteUnavailable as error:
                print(f"{target}: unavailable: {error}")
                return 1
        results[target] = json.loads(path.read_text())

    first = next(iter(results.values()))
    print(f"transformers {first['transformers_version']}; test files: {first['test_files']}")
    print(f"sources: {first['sources']}")
    if first["shims"]:
        print(f"stand-ins (the sdist lacks these support modules): {first['shims']}")
    if first["missing_test_files"]:
        print(f"PARTIAL: missing test files: {first['missing_test_files']}")
    print(f"\n{'classes':<14}{'passed':>8}{'failed':>8}{'errors':>8}{'skipped':>9}{'wall s':>9}")
    for target, result in results.items():
        c = result["counts"]
        print(f"{target:<14}{c['passed']:>8}{c['failed']:>8}{c['error']:>8}{c['skipped']:>9}{result['wall_s']:>9}")

    summary = {target: {"counts": r["counts"], "wall_s": r["wall_s"]} for target, r in results.items()}
    if "sapiens2_hf" in results:
        ours = results["sapiens2_hf"]
        control = results.get("transformers")
        diff = transformers_suite.compare(ours["outcomes"], control and control["outcomes"], expected_failures,
                                          expected_skips, ours["test_files"])
        groups = defaultdict(list)
        for test_id, entry in sorted(ours["outcomes"].items()):
            if entry["outcome"] in ("failed", "error"):
                groups[expected_failures.get(test_id, "NEW (undocumented): " + entry["message"][:160])].append(test_id)
        print(f"\nfailing on ours: {sum(len(ids) for ids in groups.values())} tests, {len(groups)} causes")
        for cause, ids in sorted(groups.items(), key=lambda item: -len(item[1])):
            print(f"\n[{len(ids)}] {cause}")
            for test_id in ids:
                print(f"    {test_id}")
        if control:
            skipped = [t for t, e in ours["outcomes"].items()
                       if e["outcome"] == "skipped" and control["outcomes"].get(t, {}).get("outcome") == "passed"]
            if skipped:
                print("\nskipped on ours, passing on transformers':")
                for test_id in sorted(skipped):
                    print(f"    {test_id}: {expected_skips.get(test_id) or ours['outcomes'][test_id]['message']}")
        if args.suite == "mixins":
            odd = [t for t, e in ours["outcomes"].items()
                   if e["outcome"] == "skipped" and not expected.accepted_skip(t, e["message"])]
            if odd:
                print("\nskipped on ours for a reason not in MIXIN_SKIP_REASONS:")
                for test_id in sorted(odd):
                    print(f"    {test_id}: {ours['outcomes'][test_id]['message']}")
        print(f"\nagainst tests/transformers_suite_expected.py ({args.suite}):")
        for key, ids in diff.items():
            print(f"  {key}: {len(ids)}" + "".join(f"\n    {t}" for t in ids))
        summary["diff"] = diff
        summary["failure_groups"] = dict(groups)
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
