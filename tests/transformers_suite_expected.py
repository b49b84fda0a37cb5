"""Where our classes deliberately differ under transformers' test mixins: test id -> why, for both suites of
tests/transformers_suite.py.

- `MIXIN_EXPECTED_FAILURES`, `MIXIN_SKIP_REASONS`: our own cases on the shared mixins
  (tests/transformers_mixin_cases.py), checked in CI by tests/test_transformers_mixins.py. Exact in both directions:
  a test that fails and is not listed fails the run, and so does a listed test that now passes (delete its entry)
  or no longer fails (stale); a skip passes only with a reason matched by `MIXIN_SKIP_REASONS` (the machine lacks
  something, or the test does not apply to a vision model without token embeddings).
- `EXPECTED_FAILURES`, `EXPECTED_SKIPS`: transformers' own tests/models/sapiens2/ files (the `upstream` suite, a
  measurement: `HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/transformers_suite_counts.py --suite upstream` prints
  what changed). Ids there are `<file>::<class>::<test>` as transformers' files name them; only tests that pass on
  transformers' own classes belong there.

Only decided differences belong here; anything else that fails is a bug to fix (or a difference to decide first).
"""

import re

_CONFIG_HEAD_DIM = (
    "config validation: ConfigTester builds Sapiens2Config(hidden_size=32) with the default num_attention_heads=16 "
    "(head dim 2); ours requires a head dim divisible by 4 (2-D RoPE) and raises, transformers accepts it"
)
_STRICT_MISSING = (
    "strict from_pretrained: tensors missing from the checkpoint raise ValueError ('missing tensors (would stay "
    "randomly initialised)') instead of being reported in loading_info['missing_keys'] as transformers does"
)
_INTEGER_TENSORS = (
    "checkpoint validation: the test replaces model.safetensors by a placeholder int64 tensor and expects every "
    "parameter in missing_keys; ours refuses integer tensors first (OfficialCheckpointError 'not floating point')"
)
_SAVE_OUR_NAMES = (
    "serialization: save_pretrained writes our (= transformers' port's) module names by default "
    "(save_original_format=False), so the saved keys are not the original-checkpoint names the registered "
    "conversion mapping reverses to; save_pretrained(..., save_original_format=True) writes those"
)
_LOSS_NOT_IMPLEMENTED = (
    "labels: transformers raises NotImplementedError for labels on this head; ours computes the official loss"
)
_POINTMAP_LOSS = (
    "labels: transformers raises NotImplementedError for pointmap labels; ours computes the pointmap loss, which "
    "needs target_scales with labels (ValueError)"
)
_MATTING_LOSS = (
    "labels: transformers raises NotImplementedError for matting labels; ours computes the matting loss and refuses "
    "the test's 4-channel target for a 1-channel alpha (ValueError)"
)

_RGB_ONLY = (
    "RGB models: a 4-channel image is reduced to RGB (alpha dropped, or composited over white with do_convert_rgb), "
    "so the test's 4-value image_mean/image_std is refused with a ValueError naming it; transformers' processor "
    "normalises and returns 4 channels, which no Sapiens2 model takes"
)

_MODELING = "test_modeling_sapiens2.py::Sapiens2ModelTest::"

# test id -> reason: fails (or errors) on our classes, passes on transformers' own (last measured on the hand-cached
# stand-in of test_modeling_sapiens2.py, see tests/transformers_suite.py; there are no image-processing ids: that
# file was not available).
EXPECTED_FAILURES = {
    _MODELING + "test_config": _CONFIG_HEAD_DIM,
    _MODELING + "test_correct_missing_keys": _STRICT_MISSING,
    _MODELING + "test_model_weights_reload_no_missing_tied_weights": _INTEGER_TENSORS,
    _MODELING + "test_for_normal_estimation": _LOSS_NOT_IMPLEMENTED,
    _MODELING + "test_for_pointmap_estimation": _POINTMAP_LOSS,
    _MODELING + "test_for_matting": _MATTING_LOSS,
    _MODELING + "test_reverse_loading_mapping": _SAVE_OUR_NAMES,
}

# test id -> reason: skipped on our classes, passes on transformers' own.
EXPECTED_SKIPS = {}


# --- our cases on the shared mixins (tests/transformers_mixin_cases.py) -------------------------------------------

_CASES = "transformers_mixin_cases.py::"
_MODEL_CASES = ("Sapiens2ModelTest", "Sapiens2AlbedoModelTest")

# test id -> reason: fails on our classes, deliberately.
MIXIN_EXPECTED_FAILURES = {
    _CASES + "Sapiens2ConfigTest::test_common_with_the_transformers_tester_kwargs": _CONFIG_HEAD_DIM,
    **{_CASES + f"{case}::test_correct_missing_keys": _STRICT_MISSING for case in _MODEL_CASES},
    **{_CASES + f"{case}::test_model_weights_reload_no_missing_tied_weights": _INTEGER_TENSORS
       for case in _MODEL_CASES},
    **{_CASES + f"{case}::test_reverse_loading_mapping": _SAVE_OUR_NAMES for case in _MODEL_CASES},
    **{_CASES + f"Sapiens2{task}ImageProcessingTest::test_call_numpy_4_channels": _RGB_ONLY
       for task in ("Pretrain", "Pose", "Seg", "Normal", "Pointmap", "Albedo", "Matting")},
}
# Also deliberate, and checked as such rather than listed: with labels, our task models compute the official task
# losses, where transformers raises NotImplementedError (normal, pointmap, matting) or uses plain cross-entropy
# (seg): `Sapiens2ModelTest::test_labels_give_the_task_loss`. One image processor per task: one test class per task
# (`Sapiens2<Task>ImageProcessingTest`), each with the processor of its task.

# Skips accepted on our classes: (test name, reason) regular expressions, matched at the start of the test's name
# (the method name, with its parameter suffix) and of the reason pytest reports; an empty test pattern matches every
# test. What the machine lacks, and tests that do not apply to these models. Any other skip fails the run.
_ANY = ""
MIXIN_SKIP_REASONS = {
    "the machine": (
        (_ANY, r"test is slow"),
        (_ANY, r"test requires (accelerator|multiple accelerators|MPS|deepspeed|the kernels library)"),
        (_ANY, r"test requires Flash Attention"), (_ANY, r"test requires .*GPU"), (_ANY, r"test requires CUDA"),
        (_ANY, r"b?float16 not supported on"),
    ),
    "a vision model without token embeddings, cache or language-modelling head": (
        (_ANY, r"This model doesn't use `inputs_embeds`"), (_ANY, r"test_resize_embeddings is set to `False`"),
        (_ANY, r"Model does not have position embeddings"), (_ANY, r"Do not take a cache as input to forward"),
        (_ANY, r"No decoder-only language modeling head to check"),
        (_ANY, r"No sequence-to-sequence language modeling head to check"),
    ),
    "architecture features these models do not have": (
        (r"test_attn_implementation_composite_models", r"Model is not a composite model"),
        (r"test_can_set_attention_dynamically_composite_model", r"This model is not composite"),
        (r"test_sdpa_can_dispatch_composite_models", r".* does not support SDPA$"),
        (r"test_eager_matches_batched_and_grouped_inference", r".* does not support grouped_mm"),
        (_ANY, r"This model has no sparse experts"), (_ANY, r"This model has no `output_router_logits` in its config"),
        (_ANY, r"Model does not support sliding window mask"), (_ANY, r"Model does not have a TP plan"),
        (_ANY, r"No `_keep_in_fp32_modules_strict` defined"), (_ANY, r".* has no _keep_in_fp32_modules"),
        (_ANY, r".* class has no _keep_in_fp32_modules"),
        # RoPE over a 2-D patch grid: none of the 1-D RoPE variants these tests exercise
        (_ANY, r"This model does not support RoPE scaling"), (_ANY, r"This model has no `base_model_class` defined"),
        (r"test_model_rope_with_partial_rotation", r"This model does not have RoPE"),
        (r"test_vision_axial_rope", r".* has no axial RoPE layer defined"),
    ),
    "settings of the cases (tests/transformers_mixin_cases.py), as in transformers' own Sapiens2 tests": (
        (_ANY, r"ModelTester is not configured to run training tests"),
        (r"test_feed_forward_chunking", r"Sapiens2 has no feed-forward chunking"),
    ),
    "one image-processor class (the torchvision backend) serving every task": (
        (_ANY, r"Skipping backends equivalence test as there are less than 2 backends"),
        (_ANY, r"Skipping backend save/load test as there are less than 2 backends"),
        (r"test_image_processor_preprocess_arguments", r"No validation found for `preprocess` method"),
    ),
    "transformers' torchvision processors keep `size` as a SizeDict and `image_mean` as a tuple": (
        (r"test_override_instance_attributes_does_not_affect_other_instances",
         r"Skipping test as the image processor does not have dict size or list image_mean attributes"),
    ),
}
_SKIP_PATTERNS = [
    (re.compile(test), re.compile(reason)) for entries in MIXIN_SKIP_REASONS.values() for test, reason in entries
]


def accepted_skip(test_id: str, reason: str) -> bool:
    """Whether a skip of `test_id` for `reason` (the first line pytest reports) is one of `MIXIN_SKIP_REASONS`."""
    name = test_id.rsplit("::", 1)[-1]
    return any(test.match(name) and pattern.match(reason) for test, pattern in _SKIP_PATTERNS)
