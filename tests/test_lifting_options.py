"""Lifting parameters are checked where they enter (`lift_keypoints`, the 3D pipeline): a NaN threshold, a
negative depth jump or NaN joint depths would otherwise mark keypoints valid or flag all of them, silently."""

from importlib import resources

import numpy as np
import pytest

import sapiens2_hf
from sapiens2_hf.hub.tiny_models import save_tiny_model
from sapiens2_hf.pose3d.lifting import lift_keypoints

pytestmark = pytest.mark.usefixtures("one_thread")

PHOTO = resources.files("sapiens2_hf") / "assets" / "demo" / "astronaut.png"


def _plane(height=40, width=40, depth=2.0):
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)
    return np.stack([(xs - width / 2) * 0.01, (ys - height / 2) * 0.01, np.full_like(xs, depth)], axis=-1)


KEYPOINTS = np.array([[10.0, 10.0], [20.0, 20.0], [30.0, 15.0]])
SCORES = np.array([0.1, 0.9, 0.8])


@pytest.mark.parametrize("options, message", [
    ({"score_threshold": float("nan")}, r"score_threshold must be a finite number >= 0.0 and <= 1.0, got nan"),
    ({"score_threshold": 1.5}, r"score_threshold must be .* <= 1.0, got 1.5"),
    ({"depth_jump": -1}, r"depth_jump must be a finite number > 0.0, got -1"),
    ({"depth_jump": float("inf")}, r"depth_jump must be a finite number > 0.0, got inf"),
    ({"window_radius": float("nan")}, r"window_radius must be a finite number >= 0.0, got nan"),
    ({"window_radius": 2.5}, r"window_radius is in whole pixels, got 2.5"),
    ({"min_person_fraction": 2}, r"min_person_fraction must be .* <= 1.0, got 2"),
    ({"joint_depths": float("nan")}, r"joint_depths must be finite metres >= 0"),
    ({"joint_depths": [0.01, 0.02]}, r"joint_depths has shape \(2,\); pass one number or 3 per keypoint"),
    ({"joint_depths": "deep"}, None),  # a string other than the pipeline's "auto" reaches lift_keypoints as metres
])
def test_bad_lifting_options_are_refused_naming_the_parameter(options, message):
    if message is None:
        with pytest.raises(ValueError, match="joint_depths must be metres"):
            lift_keypoints(KEYPOINTS, SCORES, _plane(), **options)
        return
    with pytest.raises(ValueError, match=message):
        lift_keypoints(KEYPOINTS, SCORES, _plane(), **options)


def test_valid_options_still_lift():
    """Control: the defaults, a number and one depth per keypoint lift the two confident points, not the weak one."""
    for depths in (None, 0.02, [0.0, 0.01, 0.02]):
        lifted = lift_keypoints(KEYPOINTS, SCORES, _plane(), window_radius=2, joint_depths=depths)
        assert lifted.status == ["low_score", "valid", "valid"]
        assert np.isfinite(lifted.keypoints_3d[1:]).all()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {task: save_tiny_model(task, root / task) for task in ("pose", "pointmap")}


def test_the_3d_pipeline_checks_before_inference_and_takes_one_mask_for_all_images(tiny):
    pipe = sapiens2_hf.pipeline("sapiens2-pose-3d", model=tiny["pose"], pointmap_model=tiny["pointmap"])
    box = [[40.0, 20.0, 400.0, 500.0]]
    with pytest.raises(ValueError, match="depth_jump must be a finite number > 0.0, got -1"):
        pipe(str(PHOTO), boxes=box, depth_jump=-1)
    mask = np.zeros((512, 512), bool)
    mask[20:500, 40:400] = True
    one = pipe(str(PHOTO), boxes=box, foreground_mask=mask, window_radius=2)
    assert one["mask"].shape == (512, 512) and one["mask"].sum() == mask.sum()
    both = pipe([str(PHOTO), str(PHOTO)], boxes=[box, box], foreground_mask=mask, window_radius=2)
    assert [r["mask"].sum() for r in both] == [mask.sum(), mask.sum()]
    # control: one mask per image still works, and differs where the masks differ
    per_image = pipe([str(PHOTO), str(PHOTO)], boxes=[box, box], foreground_mask=[mask, None], window_radius=2)
    assert per_image[0]["mask"].sum() == mask.sum() and per_image[1]["mask"] is None
