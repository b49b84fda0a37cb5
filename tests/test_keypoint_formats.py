"""308 Sapiens2 keypoints -> COCO-17, COCO-WholeBody-133, OpenPose BODY_25: names and order against the formats' public
definitions (written out below), sources against the spec's 308 names, left/right consistency, missing points,
scores, numpy/torch agreement, the processor/pipeline option and the generated docs page."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from model_folders import tiny_pose_pipeline

from sapiens2_hf.data import keypoint_formats as formats
from sapiens2_hf.data.keypoint_formats import (
    KEYPOINT_FORMAT_MAPPINGS,
    KEYPOINT_FORMATS,
    KeypointSource,
    convert_keypoints,
    format_keypoint_names,
    missing_keypoint_indices,
    people_in_format,
    post_process_in_format,
)


ROOT = Path(__file__).resolve().parents[1]
SPEC = json.loads((Path(__file__).parent / "fixtures" / "spec" / "keypoints308.json").read_text())
TARGETS = ("coco17", "coco_wholebody133", "body25")

# -- the formats' public definitions -----------------------------------------------------------------------------------
# COCO person keypoints (the `keypoints` list of the COCO annotation files' person category).
COCO17 = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
          "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle",
          "right_ankle"]
COCO17_FLIP = [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14), (15, 16)]
# OpenPose BODY_25 (poseParameters: POSE_BODY_25_BODY_PARTS).
BODY25 = ["Nose", "Neck", "RShoulder", "RElbow", "RWrist", "LShoulder", "LElbow", "LWrist", "MidHip", "RHip", "RKnee",
          "RAnkle", "LHip", "LKnee", "LAnkle", "REye", "LEye", "REar", "LEar", "LBigToe", "LSmallToe", "LHeel",
          "RBigToe", "RSmallToe", "RHeel"]
BODY25_FLIP = [(2, 5), (3, 6), (4, 7), (9, 12), (10, 13), (11, 14), (15, 16), (17, 18), (19, 22), (20, 23), (21, 24)]
# COCO-WholeBody: body 17, foot_kpts 6, face_kpts 68 (iBUG-68), lefthand_kpts 21, righthand_kpts 21 (mmpose's names).
FEET = ["left_big_toe", "left_small_toe", "left_heel", "right_big_toe", "right_small_toe", "right_heel"]
HAND = ["hand_root"] + [f"{finger}{joint}" for finger in ("thumb", "forefinger", "middle_finger", "ring_finger",
                                                          "pinky_finger") for joint in (1, 2, 3, 4)]
WHOLEBODY = (COCO17 + FEET + [f"face-{i}" for i in range(68)] + [f"left_{p}" for p in HAND]
             + [f"right_{p}" for p in HAND])
# iBUG-68 mirror pairs: jaw, eyebrows, lower nose, eyes, outer lip, inner lip (centre-line points map to themselves).
IBUG68_FLIP = ([(i, 16 - i) for i in range(8)] + [(17, 26), (18, 25), (19, 24), (20, 23), (21, 22), (31, 35), (32, 34)]
               + [(36, 45), (37, 44), (38, 43), (39, 42), (40, 47), (41, 46)]
               + [(48, 54), (49, 53), (50, 52), (55, 59), (56, 58), (60, 64), (61, 63), (65, 67)])
WHOLEBODY_FLIP = (COCO17_FLIP + [(17, 20), (18, 21), (19, 22)] + [(23 + a, 23 + b) for a, b in IBUG68_FLIP]
                  + [(91 + k, 112 + k) for k in range(21)])
OFFICIAL = {"coco17": (COCO17, COCO17_FLIP), "body25": (BODY25, BODY25_FLIP),
            "coco_wholebody133": (WHOLEBODY, WHOLEBODY_FLIP)}


def _permutation(pairs, count):
    perm = np.arange(count)
    for a, b in pairs:
        perm[a], perm[b] = b, a
    return perm


def _flip(keypoints, scores, perm, width):
    """Mirror a pose horizontally: swap left/right channels and reflect x."""
    out = keypoints[..., perm, :].copy()
    out[..., 0] = width - out[..., 0]
    return out, scores[..., perm]


def _pose(seed=0, shape=(4,)):
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 500, (*shape, 308, 2)), rng.uniform(0.05, 1, (*shape, 308))


def _flip_mismatch(target):
    """Max |convert(flip(pose)) - flip(convert(pose))| (coordinates and scores) and the target points that differ."""
    keypoints, scores = _pose()
    width = 640.0
    flip_308 = np.asarray(SPEC["flip_indices"])
    flip_target = _permutation(OFFICIAL[target][1], len(OFFICIAL[target][0]))
    a = convert_keypoints(*_flip(keypoints, scores, flip_308, width), target, missing_value=np.nan)
    b = _flip(*convert_keypoints(keypoints, scores, target, missing_value=np.nan), flip_target, width)
    diff = np.maximum(np.nan_to_num(np.abs(a[0] - b[0]), nan=np.inf).max(axis=(0, 2)),
                      np.abs(a[1] - b[1]).max(axis=0))
    # NaN (missing) must meet NaN: a missing point mirrored onto a present one is a mismatch
    diff[(np.isnan(a[0]) != np.isnan(b[0])).any(axis=(0, 2))] = np.inf
    both_nan = np.isnan(a[0]).all(axis=(0, 2)) & np.isnan(b[0]).all(axis=(0, 2))
    diff[both_nan] = np.abs(a[1] - b[1]).max(axis=0)[both_nan]
    return float(diff.max()), [KEYPOINT_FORMATS[target][k] for k in np.flatnonzero(diff > 1e-9)]


@pytest.fixture
def broken_table(monkeypatch):
    """Swap in a deliberately wrong table for one target (plans are cached: cleared before and after)."""

    def install(target, index, sources):
        points = list(KEYPOINT_FORMAT_MAPPINGS[target])
        points[index] = KeypointSource(points[index].name, sources)
        monkeypatch.setitem(KEYPOINT_FORMAT_MAPPINGS, target, tuple(points))
        formats._plan.cache_clear()

    yield install
    monkeypatch.undo()
    formats._plan.cache_clear()


# -- names, order, sources ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_names_are_the_official_list_in_official_order(target):
    assert list(KEYPOINT_FORMATS[target]) == OFFICIAL[target][0]
    assert [p.name for p in KEYPOINT_FORMAT_MAPPINGS[target]] == OFFICIAL[target][0]


def test_sources_are_spec_names_and_the_module_reads_the_spec_layout():
    assert tuple(SPEC["names"]) == formats.POSE_KEYPOINT_NAMES
    names = set(SPEC["names"])
    for target in TARGETS:
        for point in KEYPOINT_FORMAT_MAPPINGS[target]:
            assert len(point.sources) <= 2 and set(point.sources) <= names, (target, point)
        formats._plan(target)  # builds (raises on a bad table)


def test_wholebody_agrees_with_the_spec_name_for_name_map():
    """The spec's COCO-WholeBody -> 308 table (53 points with identical names) is what the mapping copies."""
    index = {name: i for i, name in enumerate(SPEC["names"])}
    table = KEYPOINT_FORMAT_MAPPINGS["coco_wholebody133"]
    assert len(SPEC["coco_wholebody_to_308"]) == 53
    for wholebody, sapiens in SPEC["coco_wholebody_to_308"].items():
        assert [index[s] for s in table[int(wholebody)].sources] == [sapiens], table[int(wholebody)]


def test_hands_run_from_wrist_to_tip_along_the_official_skeleton():
    links = {tuple(link) for link in SPEC["skeleton_link_names"]}
    table = {p.name: p.sources for p in KEYPOINT_FORMAT_MAPPINGS["coco_wholebody133"]}
    for side in ("left", "right"):
        for finger in ("thumb", "forefinger", "middle_finger", "ring_finger", "pinky_finger"):
            chain = [table[f"{side}_hand_root"][0]] + [table[f"{side}_{finger}{j}"][0] for j in (1, 2, 3, 4)]
            assert chain[-1] == f"{side}_{finger}4"  # the tip
            assert all((a, b) in links for a, b in zip(chain, chain[1:])), chain


# -- left/right consistency --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_flipping_commutes_with_converting(target):
    worst, bad = _flip_mismatch(target)
    assert worst < 1e-9 and not bad, (worst, bad)


def test_flip_check_catches_a_wrong_side_or_a_wrong_mean(broken_table):
    broken_table("coco_wholebody133", 23 + 37, ("r_midpoint_1_of_upper_lash_line",))  # not the mirror of face-44
    assert _flip_mismatch("coco_wholebody133")[1] == ["face-37", "face-44"]
    broken_table("body25", 1, ("left_shoulder",))  # a Neck on one shoulder is not mirror-symmetric
    assert _flip_mismatch("body25")[1] == ["Neck"]
    broken_table("coco17", 3, ("right_ear",))
    assert set(_flip_mismatch("coco17")[1]) == {"left_ear", "right_ear"}


# -- values: copies, means, scores, missing points ---------------------------------------------------------------------

def test_copies_means_and_scores_carry_numbers():
    keypoints, scores = _pose(1, (2,))
    index = {name: i for i, name in enumerate(SPEC["names"])}
    out, out_scores = convert_keypoints(keypoints, scores, "body25")
    hips = [index["left_hip"], index["right_hip"]]
    np.testing.assert_array_equal(out[:, 8], (keypoints[:, hips[0]] + keypoints[:, hips[1]]) / 2)  # MidHip
    np.testing.assert_array_equal(out_scores[:, 8], scores[:, hips].min(axis=1))
    shoulders = [index["left_shoulder"], index["right_shoulder"]]
    np.testing.assert_array_equal(out[:, 1], keypoints[:, shoulders].mean(axis=1))  # Neck
    np.testing.assert_array_equal(out_scores[:, 1], scores[:, shoulders].min(axis=1))
    for k, name in enumerate(BODY25):
        sources = KEYPOINT_FORMAT_MAPPINGS["body25"][k].sources
        if len(sources) == 1:  # copies are bit-exact, scores included
            assert np.array_equal(out[:, k], keypoints[:, index[sources[0]]])
            assert np.array_equal(out_scores[:, k], scores[:, index[sources[0]]])
    coco, coco_scores = convert_keypoints(keypoints, scores, "coco17")
    body = SPEC["groups"]["body"]  # the spec's COCO-order body indices (wrists 62 and 41)
    np.testing.assert_array_equal(coco, keypoints[:, body])
    np.testing.assert_array_equal(coco_scores, scores[:, body])


def test_missing_points_are_flagged_zero_by_default_or_the_given_value():
    face_missing = [*range(0, 8), *range(9, 17), 28, 29, 32, 34]
    assert missing_keypoint_indices("coco_wholebody133") == tuple(23 + i for i in face_missing)
    assert missing_keypoint_indices("coco17") == () and missing_keypoint_indices("body25") == ()
    keypoints, scores = _pose(2)
    missing = list(missing_keypoint_indices("coco_wholebody133"))
    present = [k for k in range(133) if k not in missing]
    out, out_scores = convert_keypoints(keypoints, scores, "coco_wholebody133")
    assert np.all(out[:, missing] == 0) and np.all(out_scores[:, missing] == 0)  # COCO / OpenPose: (0, 0), score 0
    assert np.all(out[:, present] > 0) and np.all(out_scores[:, present] > 0)
    nan_out, nan_scores = convert_keypoints(keypoints, scores, "coco_wholebody133", missing_value=float("nan"))
    assert np.isnan(nan_out[:, missing]).all() and not np.isnan(nan_out[:, present]).any()
    np.testing.assert_array_equal(nan_scores, out_scores)


def test_a_nan_keypoint_stays_in_its_own_targets():
    keypoints, scores = _pose(3, (1,))
    keypoints[0, SPEC["names"].index("r_point_2_of_inner_helix")] = np.nan  # used by no format
    keypoints[0, SPEC["names"].index("left_hip")] = np.nan
    out, _ = convert_keypoints(keypoints, scores, "body25")
    assert [BODY25[k] for k in np.flatnonzero(np.isnan(out[0]).any(axis=1))] == ["MidHip", "LHip"]


def test_numpy_and_torch_agree_batched_with_dtype_and_gradients():
    keypoints, scores = _pose(4, (2, 3))
    for target in TARGETS:
        ref, ref_scores = convert_keypoints(keypoints, scores, target)
        out, out_scores = convert_keypoints(torch.from_numpy(keypoints), torch.from_numpy(scores), target)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float64 and out.shape == (2, 3, len(ref[0, 0]), 2)
        np.testing.assert_array_equal(out.numpy(), ref)
        np.testing.assert_array_equal(out_scores.numpy(), ref_scores)
        one, one_scores = convert_keypoints(keypoints[1, 2], scores[1, 2], target)  # unbatched = a batch row
        np.testing.assert_array_equal(one, ref[1, 2])
        np.testing.assert_array_equal(one_scores, ref_scores[1, 2])
    f32, s32 = convert_keypoints(keypoints.astype(np.float32), scores.astype(np.float32), "body25")
    assert f32.dtype == np.float32 and s32.dtype == np.float32
    only, none = convert_keypoints(keypoints, None, "coco17")
    assert none is None and only.shape == (2, 3, 17, 2)
    leaf = torch.from_numpy(keypoints).requires_grad_()
    convert_keypoints(leaf, None, "body25")[0][..., 8, 0].sum().backward()  # MidHip x: half of each hip's x
    grad = leaf.grad[0, 0, :, 0]
    assert grad[9] == 0.5 and grad[10] == 0.5 and grad.abs().sum() == 1.0


def test_errors_name_the_problem_and_the_fix():
    keypoints, scores = _pose(5, (1,))
    with pytest.raises(ValueError, match=r"unknown keypoint format 'coco'.*coco17"):
        convert_keypoints(keypoints, scores, "coco")
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 308, D\).*\(1, 17, 2\)"):
        convert_keypoints(keypoints[:, :17], scores[:, :17], "coco17")
    with pytest.raises(ValueError, match=r"scores must have shape \(1, 308\)"):
        convert_keypoints(keypoints, scores[0], "coco17")
    with pytest.raises(TypeError, match="floating point.*astype"):
        convert_keypoints(keypoints.astype(np.int64), scores, "coco17")
    with pytest.raises(TypeError, match="same type as keypoints"):
        convert_keypoints(keypoints, torch.from_numpy(scores), "coco17")
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        convert_keypoints(keypoints.tolist(), None, "coco17")


# -- docs --------------------------------------------------------------------------------------------------------------

def _docs_script():
    spec = importlib.util.spec_from_file_location("generate_keypoint_format_docs",
                                                  ROOT / "scripts" / "generate_keypoint_format_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_page_is_the_generated_text(tmp_path, monkeypatch):
    script = _docs_script()
    text = script.render()
    assert (ROOT / "docs" / "keypoint_formats.md").read_text() == text, \
        "docs/keypoint_formats.md is stale: run python scripts/generate_keypoint_format_docs.py"
    for target in TARGETS:  # every target name is in its table
        assert all(f"| `{name}` |" in text for name in KEYPOINT_FORMATS[target])
    # control: the --check mode sees a stale page
    stale = tmp_path / "keypoint_formats.md"
    stale.write_text(text.replace("mean of", "average of", 1))
    monkeypatch.setattr(script, "DOC", stale)
    assert script.main(["--check"]) == 1
    stale.write_text(text)
    assert script.main(["--check"]) == 0


# -- processor and pipeline option -------------------------------------------------------------------------------------

def test_processor_option_equals_converting_its_308_output():
    from sapiens2_hf.processing import Sapiens2HFImageProcessor

    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48})
    heatmaps = torch.rand(3, 308, 16, 12, generator=torch.Generator().manual_seed(0))
    outputs = type("Outputs", (), {"heatmaps": heatmaps})()
    geometry = {"bbox_center": torch.tensor([[30.0, 40.0], [60.0, 50.0], [20.0, 25.0]]),
                "bbox_scale": torch.tensor([[45.0, 60.0], [30.0, 40.0], [24.0, 32.0]]),
                "image_index": torch.tensor([0, 0, 1])}
    native = processor.post_process_pose_estimation(outputs, crops=geometry)
    for target in TARGETS:
        converted = post_process_in_format(processor, outputs, target, crops=geometry)
        assert [len(people) for people in converted] == [2, 1]
        for people, native_people in zip(converted, native):
            for person, reference in zip(people, native_people):
                keypoints, scores = convert_keypoints(reference["keypoints"], reference["scores"], target)
                assert torch.equal(person["keypoints"], keypoints) and torch.equal(person["scores"], scores)
                assert person["keypoints"].dtype == torch.float64 and person["scores"].dtype == torch.float32
                assert torch.equal(person["labels"], torch.arange(len(KEYPOINT_FORMATS[target])))
                assert torch.equal(person["bbox"], reference["bbox"])
        assert list(format_keypoint_names(target)) == list(KEYPOINT_FORMATS[target])
    # the threshold applies to the converted scores: missing points (score 0) drop out with it
    kept = post_process_in_format(processor, outputs, "coco_wholebody133", threshold=0.0, crops=geometry)[0][0]
    assert set(kept["labels"].tolist()) == set(range(133)) - set(missing_keypoint_indices("coco_wholebody133"))
    with pytest.raises(ValueError, match="keypoint_format='openpose' is not known.*body25"):
        post_process_in_format(processor, outputs, "openpose", crops=geometry)
    with pytest.raises(ValueError, match="308 Sapiens2 keypoints, but the heatmaps hold 17"):
        post_process_in_format(processor, type("Outputs", (), {"heatmaps": heatmaps[:, :17]})(), "coco17",
                               crops=geometry)


def test_pose_pipeline_option():
    pipe = tiny_pose_pipeline()
    image = np.random.default_rng(0).integers(0, 256, (70, 50, 3), dtype=np.uint8)
    boxes = [[2.0, 3.0, 40.0, 60.0], [10.0, 5.0, 30.0, 30.0]]
    native = pipe(image, boxes=boxes, flip_test=False)
    people = people_in_format(pipe(image, boxes=boxes, flip_test=False), "body25")
    assert len(people) == 2
    for person, reference in zip(people, native):
        keypoints, scores = convert_keypoints(reference["keypoints"], reference["scores"], "body25")
        np.testing.assert_array_equal(person["keypoints"], keypoints)
        np.testing.assert_array_equal(person["scores"], scores)
        assert person["labels"] == BODY25
        np.testing.assert_array_equal(person["bbox"], reference["bbox"])
