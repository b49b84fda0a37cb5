"""Our classes under transformers' shared test mixins, as libraries outside transformers test their models:
tests/transformers_mixin_cases.py (our tester and test cases on `ModelTesterMixin`, `BackboneTesterMixin`,
`ConfigTester` and `ImageProcessingTestMixin`) runs in a child pytest with the mixins of the installed transformers'
sdist (tests/transformers_suite.py fetches it from the package registry once and caches it). Every test must pass,
except the documented differences of tests/transformers_suite_expected.py (`MIXIN_EXPECTED_FAILURES`, which must
still fail) and skips for the reasons listed there (`MIXIN_SKIP_REASONS`). A control run proves that the mixins
really run and check our classes: a model whose forward drops `output_hidden_states` and a processor that ignores
`size` fail named mixin tests, and pass two they do not break.

Both runs are child processes started at the start of the session (`EARLY_CHILDREN`), one after the other, on the
core pytest leaves idle: ~20 s for the control, ~2.5 min for our classes (single-threaded), plus ~10 s to fetch the
sdist the first time. Skipped, with the reason, when the sdist cannot be had (no registry).

transformers' own tests/models/sapiens2/ files are not in the sdist; running them is a measurement
(benchmarks/transformers_suite_counts.py --suite upstream), not part of this suite.
"""

import json
import os
import sys
from pathlib import Path

import pytest
from transformers_suite import compare, parse_junit
from transformers_suite_expected import MIXIN_EXPECTED_FAILURES, accepted_skip

pytestmark = pytest.mark.compat

HELPER = Path(__file__).resolve().parent / "transformers_suite.py"
CASES = "transformers_mixin_cases.py::"
# Fewer passes than this means the mixins did not really run (transformers 5.24.0: 346 on our classes).
MIN_PASSED = 300
# One test of each mixin that must have run and passed on our classes: the mixins found the classes under test.
MUST_PASS = [
    CASES + "Sapiens2ModelTest::test_save_load",
    CASES + "Sapiens2ModelTest::test_hidden_states_output",
    CASES + "Sapiens2ModelTest::test_attention_outputs",
    CASES + "Sapiens2ModelTest::test_batching_equivalence",
    CASES + "Sapiens2AlbedoModelTest::test_save_load",
    CASES + "Sapiens2BackboneTest::test_backbone_outputs",
    CASES + "Sapiens2ConfigTest::test_common_with_rope_sized_heads",
    *(CASES + f"Sapiens2{task}ImageProcessingTest::test_call_pil"
      for task in ("Pose", "Seg", "Normal", "Pointmap", "Albedo", "Matting", "Pretrain")),
    CASES + "Sapiens2SegImageProcessingTest::test_post_process_semantic_segmentation",
]
# The control: mixin tests the broken classes must fail, and tests they do not break (must pass).
CONTROL_MUST_FAIL = [
    CASES + "BrokenHiddenStatesModelTest::test_hidden_states_output",
    CASES + "BrokenSizeImageProcessingTest::test_call_pil",
]
CONTROL_MUST_PASS = [
    CASES + "BrokenHiddenStatesModelTest::test_model_main_input_name",
    CASES + "BrokenSizeImageProcessingTest::test_image_processor_to_json_string",
]


def _child(target):
    def command(folder):
        return {"args": [sys.executable, str(HELPER), "--suite", "mixins", "--target", target, "--out", str(folder),
                         "--timeout", "600"], "cwd": str(folder)}

    return command


CONTROL_TEST = "test_control_broken_classes_fail_named_mixin_tests"
OURS_TEST = "test_our_classes_pass_the_mixins_except_documented_differences"
EARLY_CHILDREN = {
    "control": (CONTROL_TEST, _child("control")),
    "ours": (OURS_TEST, _child("sapiens2_hf")),
}


def _results(early_child, name) -> dict:
    done, folder = early_child(name)
    assert done.returncode == 0, f"the suite harness crashed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    unavailable = folder / "unavailable.json"
    if unavailable.is_file():
        pytest.skip(f"transformers' test mixins unavailable: {json.loads(unavailable.read_text())['reason']}")
    return json.loads((folder / "results.json").read_text())


def _lines(results: dict, test_ids) -> str:
    return "\n".join(f"  {t}: {results['outcomes'].get(t, {}).get('message', '(not run)')}" for t in test_ids)


def forced_capability_kernel_gap(message: str, environ=os.environ) -> bool:
    """A failure of torch's own kernels under a forced `ATEN_CPU_CAPABILITY` (the suite's portability run, avx2 on an
    AVX-512 CPU): torch 2.14's bfloat16 SDPA then calls its AVX-512-only `pack_vnni2` and raises. Not our classes'
    doing, and not what a real AVX2 CPU runs, so it is not a departure; without the forced capability it is one."""
    return bool(environ.get("ATEN_CPU_CAPABILITY")) and "pack_vnni2 is only supported when avx512" in message


def skip_departures(outcomes: dict) -> list[str]:
    """Skipped tests whose reason is not accepted (tests/transformers_suite_expected.py `MIXIN_SKIP_REASONS`)."""
    return sorted(t for t, entry in outcomes.items()
                  if entry["outcome"] == "skipped" and not accepted_skip(t, entry["message"]))


@pytest.mark.slow
def test_control_broken_classes_fail_named_mixin_tests(early_child):
    results = _results(early_child, "control")
    outcomes = results["outcomes"]
    assert results["returncode"] in (0, 1) and results["counts"]["passed"], results["output_tail"]
    not_failing = [t for t in CONTROL_MUST_FAIL if outcomes.get(t, {}).get("outcome") != "failed"]
    assert not not_failing, f"the broken classes passed (or skipped) these mixin tests:\n{_lines(results, not_failing)}"
    not_passing = [t for t in CONTROL_MUST_PASS if outcomes.get(t, {}).get("outcome") != "passed"]
    assert not not_passing, f"the broken classes fail tests they do not break:\n{_lines(results, not_passing)}"


@pytest.mark.slow
def test_our_classes_pass_the_mixins_except_documented_differences(early_child):
    results = _results(early_child, "ours")
    outcomes = results["outcomes"]
    assert results["returncode"] in (0, 1) and results["counts"]["passed"], results["output_tail"]
    missing = [t for t in MUST_PASS if outcomes.get(t, {}).get("outcome") != "passed"]
    assert not missing, f"mixin tests that must run and pass on our classes:\n{_lines(results, missing)}"
    assert results["counts"]["passed"] >= MIN_PASSED, (results["counts"], results["output_tail"])
    diff = compare(outcomes, None, MIXIN_EXPECTED_FAILURES, {}, results["test_files"])
    diff["unexpected_failures"] = [t for t in diff["unexpected_failures"]
                                   if not forced_capability_kernel_gap(outcomes[t].get("message", ""))]
    report = []
    if diff["unexpected_failures"]:
        report.append("fail on our classes, not in tests/transformers_suite_expected.py MIXIN_EXPECTED_FAILURES:\n"
                      + _lines(results, diff["unexpected_failures"]))
    if diff["now_passing"]:
        report.append("listed in MIXIN_EXPECTED_FAILURES but now pass (delete the entries):\n"
                      + "\n".join(f"  {t}" for t in diff["now_passing"]))
    if diff["stale"]:
        report.append("listed in MIXIN_EXPECTED_FAILURES but skipped or gone:\n" + _lines(results, diff["stale"]))
    skips = skip_departures(outcomes)
    if skips:
        report.append("skipped for a reason not in MIXIN_SKIP_REASONS:\n" + _lines(results, skips))
    assert not report, f"counts {results['counts']}\n" + "\n".join(report)


def test_skips_pass_only_for_the_listed_reasons():
    outcomes = {
        CASES + "T::test_a": {"outcome": "skipped", "message": "test requires accelerator"},
        CASES + "T::test_sdpa_can_dispatch_composite_models": {
            "outcome": "skipped", "message": "Sapiens2Model does not support SDPA"},
        # the same reason from a test where it means a missing feature
        CASES + "T::test_eager_matches_sdpa_inference_00_fp16": {
            "outcome": "skipped", "message": "Sapiens2Model does not support SDPA"},
        CASES + "T::test_b": {"outcome": "skipped", "message": "Model does not support output_attentions"},
        CASES + "T::test_c": {"outcome": "passed", "message": ""},
    }
    assert skip_departures(outcomes) == [
        CASES + "T::test_b", CASES + "T::test_eager_matches_sdpa_inference_00_fp16"]


def test_comparison_reports_every_departure_from_the_lists():
    """The checks of a run on ours, on made-up outcomes: each kind of departure is caught, the rest is quiet."""
    f = "test_modeling_sapiens2.py::T::"
    ours = {f + name: {"outcome": outcome, "message": ""} for name, outcome in [
        ("ok", "passed"), ("known", "failed"), ("new", "error"), ("fixed", "passed"), ("lost", "skipped"),
        ("known_skip", "skipped"), ("no_longer_fails", "skipped"),
    ]}
    control = {test_id: {"outcome": "passed"} for test_id in ours}
    failures = {f + name: "why" for name in ("known", "fixed", "no_longer_fails", "gone")}
    failures["test_image_processing_sapiens2.py::T::not_run_here"] = "why"
    ran = ["tests/models/sapiens2/test_modeling_sapiens2.py"]
    diff = compare(ours, control, failures, {f + "known_skip": "why"}, ran)
    assert diff == {
        "unexpected_failures": [f + "new"],
        "now_passing": [f + "fixed"],
        "unexpected_skips": [f + "lost", f + "no_longer_fails"],
        "stale": [f + "gone", f + "no_longer_fails"],
    }
    assert compare(ours, control, {}, {}, None)["unexpected_failures"] == [f + "known", f + "new"]


def test_junit_outcomes_keep_the_worse_report_of_a_test(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="transformers_mixin_cases.Sapiens2ModelTest" name="test_a"/>'
        '<testcase classname="transformers_mixin_cases.Sapiens2ModelTest" name="test_b">'
        '<failure message="AssertionError: 1 != 2\nmore">tb</failure></testcase>'
        '<testcase classname="transformers_mixin_cases.Sapiens2ModelTest" name="test_b">'
        '<error message="teardown">tb</error></testcase>'
        '<testcase classname="transformers_mixin_cases.Sapiens2ModelTest" name="test_c">'
        '<skipped message="test is slow"/></testcase>'
        '<testcase classname="" name="transformers_mixin_cases"><error message="ImportError: x"/></testcase>'
        '</testsuite></testsuites>'
    )
    assert parse_junit(path) == {
        CASES + "Sapiens2ModelTest::test_a": {"outcome": "passed", "message": ""},
        CASES + "Sapiens2ModelTest::test_b": {"outcome": "error", "message": "teardown"},
        CASES + "Sapiens2ModelTest::test_c": {"outcome": "skipped", "message": "test is slow"},
        "transformers_mixin_cases": {"outcome": "error", "message": "ImportError: x"},
    }


def test_only_a_forced_capability_excuses_torchs_avx512_kernel_gap():
    message = "RuntimeError: pack_vnni2 is only supported when avx512 is supported"
    assert forced_capability_kernel_gap(message, {"ATEN_CPU_CAPABILITY": "avx2"})
    assert not forced_capability_kernel_gap(message, {})  # control: on the machine's own kernels it is a failure
    assert not forced_capability_kernel_gap("AssertionError: outputs differ", {"ATEN_CPU_CAPABILITY": "avx2"})
