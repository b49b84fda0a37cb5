"""Render the example grid of docs/synthetic_data.md: one row per sample, columns RGB | segmentation overlay (official
palette) | normals | depth (pointmap Z) | visible keypoints and boxes.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/make_synthetic_grid.py [--output docs/images/synthetic_grid.png]
        [--seeds 1,3,5,7] [--height 320 --width 240]
"""

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from sapiens2_hf.data.synthetic import render_sample
from sapiens2_hf.visualization.drawing import depth_to_rgb, draw_keypoints, normals_to_rgb, overlay_segmentation
from sapiens2_hf.visualization.io import save_image

COLUMNS = ("RGB", "segmentation", "normals (x,y,z -> R,G,B)", "depth", "keypoints (visible)")


def grid(seeds, height, width):
    rows = []
    for seed in seeds:
        s = render_sample(seed, height, width)
        mask = s["mask"][..., None]
        normals = np.asarray(normals_to_rgb(s["normals"])) * mask
        people = [{"keypoints": s["keypoints"][p], "scores": (s["keypoint_visibility"][p] == 2).astype(np.float32),
                   "bbox": s["boxes"][p]} for p in range(s["num_people"])]
        tiles = [
            s["image"],
            np.asarray(overlay_segmentation(s["image"], s["segmentation"], alpha=0.6, legend=False)),
            normals.astype(np.uint8),
            np.asarray(depth_to_rgb(s["depth"], s["mask"])),
            np.asarray(draw_keypoints(s["image"], people, score_threshold=0.5, radius=2, thickness=1)),
        ]
        rows.append(np.concatenate(tiles, axis=1))
    body = np.concatenate(rows, axis=0)
    header = Image.new("RGB", (body.shape[1], 18), (255, 255, 255))
    draw = ImageDraw.Draw(header)
    for i, title in enumerate(COLUMNS):
        draw.text((i * width + 4, 3), title, fill=(0, 0, 0))
    out = Image.new("RGB", (body.shape[1], body.shape[0] + 18))
    out.paste(header, (0, 0))
    out.paste(Image.fromarray(body), (0, 18))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="docs/images/synthetic_grid.png")
    parser.add_argument("--seeds", default="1,3,5,7")
    parser.add_argument("--height", type=int, default=320)
    parser.add_argument("--width", type=int, default=240)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    path = save_image(grid(seeds, args.height, args.width), Path(args.output))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
