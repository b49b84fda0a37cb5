"""Visualisation helpers: sizes, a few pixel values, official colours, PLY export, atomic writes."""

import json

import numpy as np
import pytest
from official_cases import FIXTURES
from PIL import Image

from sapiens2_hf import visualization as vis
from sapiens2_hf.utils.atomic_io import atomic_write


SPEC = FIXTURES.parent / "spec"


def test_styles_match_the_spec_files():
    keypoints = json.loads((SPEC / "keypoints308.json").read_text())
    seg = json.loads((SPEC / "seg29.json").read_text())
    assert [list(c) for c in vis.KEYPOINT_COLORS_RGB] == keypoints["keypoint_colors_rgb"]
    assert [list(link) for link in vis.SKELETON_LINKS] == keypoints["skeleton_links"]
    assert [list(c) for c in vis.SKELETON_LINK_COLORS_RGB] == keypoints["skeleton_link_colors_rgb"]
    assert [list(c) for c in vis.SEGMENTATION_PALETTE_RGB] == seg["palette_rgb"]
    assert list(vis.SEGMENTATION_CLASS_NAMES) == seg["names"]


def test_draw_keypoints_uses_official_colours_and_thresholds():
    image = np.zeros((100, 120, 3), np.uint8)
    keypoints = np.full((308, 2), np.nan)
    scores = np.zeros(308, np.float32)
    keypoints[13], keypoints[11] = (20, 80), (20, 40)  # left ankle -> left knee: link 0, green
    scores[[13, 11]] = 0.9
    keypoints[12], scores[12] = (90, 50), 0.1  # below the threshold: not drawn
    out = vis.draw_keypoints(image, [{"keypoints": keypoints, "scores": scores, "bbox": [5, 5, 110, 95]}],
                             radius=2, thickness=1)
    assert out.size == (120, 100)
    pixels = np.asarray(out)
    assert tuple(pixels[60, 20]) == vis.SKELETON_LINK_COLORS_RGB[0] == (0, 255, 0)
    assert tuple(pixels[80, 20]) == vis.KEYPOINT_COLORS_RGB[13]
    assert tuple(pixels[50, 90]) == (0, 0, 0)
    assert tuple(pixels[5, 50]) == (0, 255, 0)  # the box outline
    assert np.asarray(image).sum() == 0  # input untouched


def test_segmentation_colours_overlay_and_legend():
    seg = np.zeros((30, 40), np.int64)
    seg[:, 20:] = 3  # Face_Neck
    seg[0, 0] = 99  # unknown id: black
    colours = np.asarray(vis.colorize_segmentation(seg))
    assert tuple(colours[5, 25]) == vis.SEGMENTATION_PALETTE_RGB[3]
    assert tuple(colours[5, 5]) == vis.SEGMENTATION_PALETTE_RGB[0] and tuple(colours[0, 0]) == (0, 0, 0)
    image = np.full((30, 40, 3), 100, np.uint8)
    overlay = vis.overlay_segmentation(image, seg, alpha=0.5, legend=False)
    assert overlay.size == (40, 30)
    expected = np.round(np.array([100.0] * 3) * 0.5 + np.array(vis.SEGMENTATION_PALETTE_RGB[3]) * 0.5)
    assert tuple(np.asarray(overlay)[10, 30]) == tuple(expected.astype(int))
    assert tuple(np.asarray(overlay)[10, 5]) == (100, 100, 100)  # background left as is
    with_legend = vis.overlay_segmentation(image, seg)
    assert with_legend.size[1] == 30 and with_legend.size[0] > 40
    legend = np.asarray(with_legend)[:, 40:]
    assert (legend == np.array(vis.SEGMENTATION_PALETTE_RGB[3], np.uint8)).all(-1).any()
    with pytest.raises(ValueError, match="does not match"):
        vis.overlay_segmentation(image, seg[:10])


def test_normals_depth_albedo_images():
    normals = np.zeros((4, 5, 3), np.float32)
    normals[..., 2] = -1.0
    normals[0, 0] = (1.0, 0.0, 0.0)
    rgb = np.asarray(vis.normals_to_rgb(normals))
    assert rgb.shape == (4, 5, 3)
    assert tuple(rgb[0, 0]) == (255, 127, 127) and tuple(rgb[1, 1]) == (127, 127, 0)
    depth = np.tile(np.linspace(1.0, 5.0, 6, dtype=np.float32), (3, 1))
    mask = np.ones_like(depth, bool)
    mask[0, 0] = False
    coloured = np.asarray(vis.depth_to_rgb(depth, mask))
    assert coloured.shape == (3, 6, 3) and tuple(coloured[0, 0]) == (0, 0, 0)
    assert coloured[1, 1, 0] > coloured[1, 1, 2]  # near: warm
    assert coloured[1, 4, 2] > coloured[1, 4, 0]  # far: cool
    pointmap = np.stack([np.zeros_like(depth), np.zeros_like(depth), depth], -1)
    assert np.array_equal(np.asarray(vis.pointmap_to_depth_image(pointmap)), np.asarray(vis.depth_to_rgb(depth)))
    albedo = np.full((2, 3, 3), 0.5, np.float32)
    albedo[0, 0] = (1.2, -0.1, 0.999)
    image = np.asarray(vis.albedo_to_image(albedo))
    assert tuple(image[1, 1]) == (127, 127, 127) and tuple(image[0, 0]) == (255, 0, 254)  # truncation


@pytest.mark.parametrize("binary", [True, False])
def test_ply_export(tmp_path, binary):
    points = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3)
    points[0, 1] = np.nan
    colors = np.full((2, 3, 3), 7, np.uint8)
    mask = np.ones((2, 3), bool)
    mask[1, 2] = False
    count = vis.save_ply(tmp_path / "cloud.ply", points, colors=colors, mask=mask, binary=binary)
    assert count == 4
    header = vis.read_ply_header(tmp_path / "cloud.ply")
    assert "element vertex 4" in header and header[-1] == "end_header"
    assert ("format binary_little_endian 1.0" in header) == binary
    data = (tmp_path / "cloud.ply").read_bytes()
    body = data[data.index(b"end_header\n") + len(b"end_header\n"):]
    if binary:
        records = np.frombuffer(body, dtype=[("xyz", "<f4", 3), ("rgb", "u1", 3)])
        assert np.array_equal(records["xyz"][1], points[0, 2]) and (records["rgb"] == 7).all()
    else:
        lines = body.decode().strip().splitlines()
        assert lines[0] == "0 1 2 7 7 7" and len(lines) == 4
    assert [p.name for p in tmp_path.iterdir()] == ["cloud.ply"]  # no temporary file left behind


def test_atomic_writes_leave_no_partial_file(tmp_path):
    vis.save_image(np.zeros((3, 4, 3), np.uint8), tmp_path / "a.png")
    assert Image.open(tmp_path / "a.png").size == (4, 3)
    vis.save_json({"a": 1}, tmp_path / "sub" / "a.json")
    assert json.loads((tmp_path / "sub" / "a.json").read_text()) == {"a": 1}
    vis.save_npy(np.arange(3), tmp_path / "a.npy")
    assert np.load(tmp_path / "a.npy").tolist() == [0, 1, 2]

    def failing(file):
        file.write(b"partial")
        raise RuntimeError("disk full")

    (tmp_path / "keep.bin").write_bytes(b"old")
    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "keep.bin", failing)
    assert (tmp_path / "keep.bin").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "a.png", "keep.bin", "sub"]
    with pytest.raises(ValueError, match="suffix"):
        vis.save_image(np.zeros((2, 2, 3), np.uint8), tmp_path / "noext")
