"""Render the README gallery (docs/images/gallery/): what each task's output looks like, through the same visualisers
the CLI uses (`sapiens2_hf.visualization`).

- `synthetic_<task>.png`, one per task: a synthetic human (`sapiens2_hf.data.synthetic`) beside its exact ground truth
  for the task, drawn as the CLI draws a prediction. Real labels, so the pictures mean something offline.
- `photo_pose.png`, `photo_seg.png`: the bundled photo (skimage.data.astronaut, NASA, public domain) through
  `pipeline("sapiens2-pose")` / `pipeline("sapiens2-segmentation")` with the tiny random-weight models bundled for the
  demo (`assets/demo/sapiens2_tinyr_<task>.safetensors`), captioned as such: they show the output format, not the
  quality. With `--demo-dir` (the `--out` of a finished `sapiens2-hf demo`), `photo_pose.png` uses the demo's
  fine-tuned tiny pose model instead (still tiny, still trained on synthetic humans only).

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/make_gallery.py [--out docs/images/gallery] [--demo-dir demo_output]

Each PNG is kept under `--max-kb` (150) by palette quantisation and, if needed, downscaling.
"""

import argparse
import io
from importlib import resources
from pathlib import Path

import numpy as np
from PIL import Image

from sapiens2_hf.data.synthetic import render_sample
from sapiens2_hf.demo import PHOTO_BOX_XYXY, _body_only
from sapiens2_hf.visualization import (albedo_to_image, depth_to_image, draw_keypoints, normals_to_rgb,
                                       overlay_segmentation, side_by_side)
from sapiens2_hf.utils.atomic_io import atomic_write_bytes


SEED, HEIGHT, WIDTH = 3, 256, 192  # one person, full body, readable at this size
SYNTHETIC_CAPTION = "synthetic human with exact labels (sapiens2_hf.data.synthetic), drawn by sapiens2_hf.visualization"
TINY_CAPTION = "tiny random-weight model, shows the format, not the quality"
FINE_TUNED_CAPTION = "tiny model fine-tuned for seconds on synthetic humans (sapiens2-hf demo): format, not quality"


def synthetic_panels(sample: dict) -> dict[str, tuple[np.ndarray, str, Image.Image]]:
    """Per task: (input image, title, ground truth drawn as the CLI draws that task's prediction)."""
    mask = sample["mask"]
    people = [{"keypoints": points, "scores": (visibility == 2).astype(np.float32), "bbox": box}
              for points, visibility, box in zip(sample["keypoints"], sample["keypoint_visibility"], sample["boxes"])]
    normals = np.asarray(normals_to_rgb(sample["normals"])) * mask[..., None]
    green = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    alpha = sample["alpha"][..., None]
    matting = ((sample["foreground"] * alpha + (1.0 - alpha) * green) * 255.0).round().astype(np.uint8)
    image = sample["image"]
    return {
        "pose": (image, "pose: keypoints (visible) and boxes",
                 draw_keypoints(image, people, score_threshold=0.5, radius=2, thickness=1)),
        "seg": (image, "seg: 29 classes", overlay_segmentation(image, sample["segmentation"], alpha=0.6)),
        "normal": (image, "normal: (n + 1) / 2 as RGB", Image.fromarray(normals.astype(np.uint8))),
        "pointmap": (image, "pointmap: depth (Z)", depth_to_image(sample["depth"], mask)),
        "albedo": (image, "albedo", albedo_to_image(sample["albedo"] * mask[..., None])),
        "matting": (sample["matting_image"], "matting: foreground over green", Image.fromarray(matting)),
    }


def photo_panels(demo_dir: Path | None) -> dict[str, Image.Image]:
    """The bundled photo through the pose and seg pipelines of the demo's tiny models."""
    import sapiens2_hf

    assets = resources.files("sapiens2_hf").joinpath("assets", "demo")
    photo = Image.open(assets.joinpath("astronaut.png")).convert("RGB")
    fine_tuned = demo_dir / "sapiens2-tiny-pose-synthetic" if demo_dir is not None else None
    if fine_tuned is not None and fine_tuned.is_dir():
        pose_model, pose_caption = str(fine_tuned), FINE_TUNED_CAPTION
    else:
        pose_model, pose_caption = str(assets.joinpath("sapiens2_tinyr_pose.safetensors")), TINY_CAPTION
    pose = sapiens2_hf.pipeline("sapiens2-pose", model=pose_model)
    people = pose(photo, boxes=[PHOTO_BOX_XYXY])
    seg = sapiens2_hf.pipeline("sapiens2-segmentation", model=str(assets.joinpath("sapiens2_tinyr_seg.safetensors")))
    classes = seg(photo)["segmentation"]
    return {
        "pose": side_by_side([("bundled photo: pose pipeline, body keypoints",
                               draw_keypoints(photo, _body_only(people), score_threshold=0.0))], caption=pose_caption),
        "seg": side_by_side([("bundled photo: segmentation pipeline", overlay_segmentation(photo, classes))],
                            caption=TINY_CAPTION),
    }


def small_png(image: Image.Image, max_bytes: int) -> bytes:
    """PNG bytes under `max_bytes`: 256-colour palette first, then halving the size until it fits."""
    while True:
        buffer = io.BytesIO()
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(buffer, format="PNG", optimize=True)
        if buffer.tell() <= max_bytes or min(image.size) < 64:
            return buffer.getvalue()
        image = image.resize((image.width // 2, image.height // 2), Image.LANCZOS)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/images/gallery", help="output folder")
    parser.add_argument("--demo-dir", type=Path, default=None,
                        help="a finished `sapiens2-hf demo --out DIR`: use its fine-tuned tiny pose model")
    parser.add_argument("--max-kb", type=int, default=150, help="size limit of each PNG, in kB")
    args = parser.parse_args(argv)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # the weight-loading bars of the two tiny models are noise here
    out = Path(args.out)
    sample = render_sample(SEED, HEIGHT, WIDTH, num_people=1)
    images = {f"synthetic_{task}.png": side_by_side([("input", image), (title, truth)], caption=SYNTHETIC_CAPTION)
              for task, (image, title, truth) in synthetic_panels(sample).items()}
    images.update({f"photo_{task}.png": image for task, image in photo_panels(args.demo_dir).items()})
    for name, image in images.items():
        data = small_png(image, args.max_kb * 1000)
        atomic_write_bytes(out / name, data)
        print(f"wrote {out / name} ({len(data) / 1000:.0f} kB, {image.width} x {image.height})")


if __name__ == "__main__":
    main()
