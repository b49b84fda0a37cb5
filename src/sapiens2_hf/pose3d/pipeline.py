"""`sapiens2-pose-3d`: the pose pipeline with a `sapiens2-pointmap` pipeline inside, keypoints lifted into metres by
`lifting.lift_keypoints`; `COMPOSED_PIPELINES` names it for `_registration` (beside the pose pipeline)."""

from __future__ import annotations

import types

import torch
from torch.utils.data import Dataset

from ..pipelines import Sapiens2PointmapPipeline, Sapiens2PosePipeline
from .lifting import check_lifting_options, joint_depths_for, lift_keypoints


#: The frame and units of `sapiens2-pose-3d` results and of the files written from them.
POSE_3D_FRAME = {"units": "metres", "frame": "camera: X right, Y down, Z forward (the pointmap's frame)",
                 "origin": "the camera centre"}


class Sapiens2Pose3DPipeline(Sapiens2PosePipeline):
    """`pipeline("sapiens2-pose-3d", model=POSE, pointmap_model=POINTMAP)`: each person's keypoints in metres, lifted
    with a pointmap of the same image (the rule: `lifting.lift_keypoints`).

    Construction: `pointmap_model` is a `sapiens2-pointmap` pipeline or a pointmap model (`sapiens2_hf.pipeline`
    also takes a folder, Hub id or official file); `segmenter=` (as the pointmap pipeline takes it) masks the
    pointmap to the people, so keypoints off the person are flagged. Without a segmenter or a `foreground_mask`,
    nothing is flagged `"outside_mask"` (every pixel has a point).

    Call arguments: those of `sapiens2-pose` (`boxes=`, `detector=`, ...), the pointmap's camera
    (`focal_length=`, `intrinsics=`, `foreground_mask=`: one for all images or one per image), and the lifting's
    `score_threshold` (0.3), `window_radius` (pixels; default 2 % of the person box's larger side), `depth_jump`
    (0.1 m), `min_person_fraction` (0.25), `joint_depths` (`"auto"`: `JOINT_DEPTHS_M` by keypoint name; a number
    or one value per keypoint in metres; 0 keeps every keypoint on the skin). Inputs: an image, a list of images or
    of dicts (`{"image", "boxes", "box_scores", "foreground_mask", "focal_length", "intrinsics"}`); a generator or a
    dataset is read into a list first.

    Result per image: `{"people": [...], "pointmap": (height, width, 3) float32, "mask": (height, width) bool or
    None, "focal_length": float or None, **POSE_3D_FRAME}`; each person is the `sapiens2-pose` person plus
    `"keypoints_3d"` `(num_keypoints, 3)` float32 metres (NaN where none), `"keypoint_3d_confidence"`
    `(num_keypoints,)` float32, `"keypoint_3d_valid"` `(num_keypoints,)` bool and `"keypoint_3d_status"` (one of
    `STATUSES` per keypoint).
    """

    def __init__(self, *args, pointmap_model=None, segmenter=None, **kwargs):
        super().__init__(*args, **kwargs)
        if pointmap_model is None:
            raise ValueError("sapiens2-pose-3d lifts keypoints with a pointmap: pass pointmap_model= (a "
                             "sapiens2-pointmap pipeline or model; sapiens2_hf.pipeline also takes a folder, Hub id "
                             "or official file).")
        if isinstance(pointmap_model, Sapiens2PointmapPipeline):
            if segmenter is not None:
                raise ValueError("pass segmenter= to the pointmap pipeline you give (pointmap_model=), not to "
                                 "sapiens2-pose-3d.")
            self.pointmap_pipeline = pointmap_model
        elif isinstance(pointmap_model, torch.nn.Module) and hasattr(pointmap_model, "config"):
            self.pointmap_pipeline = Sapiens2PointmapPipeline(model=pointmap_model, device=self.device,
                                                              segmenter=segmenter)
        else:
            raise ValueError(f"pointmap_model of type {type(pointmap_model).__name__} is not usable here; pass a "
                             "sapiens2-pointmap pipeline or model (sapiens2_hf.pipeline loads names and files).")

    def __call__(self, inputs, *args, boxes=None, box_scores=None, focal_length=None, intrinsics=None,
                 foreground_mask=None, batch_size: int | None = None, crop_batch_size: int | None = None,
                 num_workers: int | None = None, score_threshold: float = 0.3, window_radius: int | None = None,
                 depth_jump: float = 0.1, min_person_fraction: float = 0.25, joint_depths="auto", **kwargs):
        if args:
            raise TypeError(f"{type(self).__name__} takes the inputs as its only positional argument; pass the "
                            "options by name.")
        check_lifting_options(score_threshold=score_threshold, window_radius=window_radius, depth_jump=depth_jump,
                              min_person_fraction=min_person_fraction, joint_depths=joint_depths)  # before inference
        single = not isinstance(inputs, (list, tuple, types.GeneratorType, Dataset)) and not hasattr(inputs, "__next__")
        items = [inputs] if single else list(inputs)
        if not items:
            return []
        if foreground_mask is not None and not isinstance(foreground_mask, (list, tuple)):
            foreground_mask = [foreground_mask] * len(items)  # one mask for all images (the docstring's promise)
        people = super().__call__(items[0] if single else items, boxes=boxes, box_scores=box_scores,
                                  batch_size=batch_size, crop_batch_size=crop_batch_size, num_workers=num_workers,
                                  **kwargs)
        people = [people] if single else people
        camera = {"focal_length": focal_length, "intrinsics": intrinsics, "foreground_mask": foreground_mask}
        maps = self.pointmap_pipeline(
            [self._pointmap_input(item) for item in items],
            **{key: value for key, value in camera.items() if value is not None}, batch_size=batch_size)
        lifting = {"score_threshold": float(score_threshold), "window_radius": window_radius,
                   "depth_jump": float(depth_jump), "min_person_fraction": float(min_person_fraction)}
        results = [self._lift(image_people, image_map, joint_depths, lifting)
                   for image_people, image_map in zip(people, maps)]
        return results[0] if single else results

    @staticmethod
    def _pointmap_input(item):
        if isinstance(item, dict):
            return {key: item[key] for key in ("image", "foreground_mask", "focal_length", "intrinsics") if key in item}
        return item

    def _lift(self, people: list, pointmap_result: dict, joint_depths, lifting: dict) -> dict:
        pointmap, mask = pointmap_result["pointmap"], pointmap_result.get("mask")
        lifted_people = []
        for person in people:
            names = person["labels"]
            depths = joint_depths_for(names) if isinstance(joint_depths, str) and joint_depths == "auto" \
                else joint_depths
            lifted = lift_keypoints(person["keypoints"], person["scores"], pointmap, mask, joint_depths=depths,
                                    box=person["bbox"], **lifting)
            lifted_people.append({**person, "keypoints_3d": lifted.keypoints_3d,
                                  "keypoint_3d_confidence": lifted.confidence, "keypoint_3d_valid": lifted.valid,
                                  "keypoint_3d_status": lifted.status})
        return {"people": lifted_people, "pointmap": pointmap, "mask": mask,
                "focal_length": pointmap_result.get("focal_length"), **POSE_3D_FRAME}


#: Pipelines composed of several task models: pipeline name -> (the task of its `model=`, its class).
COMPOSED_PIPELINES = {"sapiens2-pose-3d": ("pose", Sapiens2Pose3DPipeline)}
