"""Seeded property tests of the Sapiens2 processor: invariants that must hold for any input."""

import numpy as np
import pytest
import torch

from sapiens2_hf.modeling.sapiens2_label_data import POSE_FLIP_PAIRS
from sapiens2_hf.processing import Sapiens2HFImageProcessor
from sapiens2_hf.modeling import sapiens2_processing_ops as ops


def _outputs(**fields):
    return type("Outputs", (), fields)()


def test_encode_decode_round_trip_within_one_heatmap_pixel():
    """Keypoints -> UDP Gaussian targets (the processor's `keypoints=` path) -> official decode -> same keypoints."""
    generator = np.random.default_rng(1234)
    for input_size in ((128, 96), (256, 192), (96, 128)):
        processor = Sapiens2HFImageProcessor(task="pose", size={"height": input_size[0], "width": input_size[1]},
                                             box_format="xyxy")
        image = np.zeros((300, 400, 3), np.uint8)
        boxes, people = [], []
        for _ in range(4):
            x0, y0 = generator.uniform(-20, 250), generator.uniform(-20, 150)
            w, h = generator.uniform(30, 200), generator.uniform(30, 200)
            boxes.append([x0, y0, x0 + w, y0 + h])
            # keypoints inside the box (the crop window contains the box)
            kps = np.stack([generator.uniform(x0, x0 + w, 17), generator.uniform(y0, y0 + h, 17), np.ones(17)], 1)
            people.append(kps.tolist())
        batch = processor(image, boxes=[boxes], keypoints=[people])
        heatmaps = torch.stack(batch["labels"])  # (num_people, 17, height / 4, width / 4)
        decoded = processor.post_process_pose_estimation(
            _outputs(heatmaps=heatmaps), crops=batch)[0]
        hm_h, hm_w = heatmaps.shape[-2:]
        for person, kps, scale in zip(decoded, people, batch["bbox_scale"]):
            error = (person["keypoints"] - torch.tensor(kps, dtype=torch.float64)[:, :2]).abs()
            heatmap_pixel = scale.double() / torch.tensor([hm_w - 1, hm_h - 1], dtype=torch.float64)
            assert (error / heatmap_pixel).max() < 1.0
            assert torch.allclose(person["scores"], torch.ones(17), atol=0.05)


def test_flip_back_twice_is_identity_and_flip_pairs_are_an_involution():
    generator = torch.Generator().manual_seed(0)
    indices = ops.flip_pairs_to_indices(POSE_FLIP_PAIRS, 308)
    assert sorted(indices) == list(range(308))
    assert [indices[i] for i in indices] == list(range(308))
    heatmaps = torch.randn(2, 308, 8, 6, generator=generator)
    once = ops.flip_back_heatmaps(heatmaps, indices)
    assert not torch.equal(once, heatmaps)
    assert torch.equal(ops.flip_back_heatmaps(once, indices), heatmaps)
    with pytest.raises(ValueError, match="flip_indices"):
        ops.flip_back_heatmaps(heatmaps, indices[:10])


def test_letterbox_then_unpad_restores_the_size():
    generator = np.random.default_rng(7)
    processor = Sapiens2HFImageProcessor(task="normal", size={"height": 64, "width": 48})
    for _ in range(20):
        height, width = (int(v) for v in generator.integers(5, 300, 2))
        input_h, input_w = (int(v) for v in generator.integers(2, 40, 2) * 4)
        (new_h, new_w), (left, right, top, bottom) = ops.letterbox_geometry((height, width), (input_h, input_w))
        assert new_h + top + bottom == input_h and new_w + left + right == input_w
        assert 0 <= left <= right <= left + 1 and 0 <= top <= bottom <= top + 1
        normals = torch.randn(1, 3, input_h, input_w, dtype=torch.float64)
        out = processor.post_process_normal_estimation(_outputs(normals=normals), source_sizes=[(height, width)])
        assert tuple(out[0]["normals"].shape) == (3, height, width)
        assert out[0]["normals"].dtype == torch.float64
        cropped = ops.remove_padding(normals, (left, right, top, bottom))
        assert tuple(cropped.shape[-2:]) == (new_h, new_w)


def test_letterbox_places_the_image_in_the_middle():
    image = np.full((50, 100, 3), 200, np.uint8)
    out, padding = ops.letterbox(image, (64, 48))
    assert padding == (0, 0, 20, 20)  # 48 / 100 -> 24 rows, 40 rows of padding split evenly
    assert (out[:20] == 0).all() and (out[44:] == 0).all() and (out[20:44] == 200).all()


def test_batched_decode_equals_per_item_decode():
    generator = torch.Generator().manual_seed(3)
    heatmaps = torch.randn(5, 308, 16, 12, generator=generator).abs()
    heatmaps[2, 7] = -torch.rand(16, 12, generator=generator)  # a negative channel: (-1, -1) and wrapped neighbours
    heatmaps[0, 0] = -torch.rand(16, 12, generator=generator)  # the first channel wraps to the crop's last one
    batched = ops.decode_udp_heatmaps(heatmaps, (64, 48))
    for i in range(5):
        single = ops.decode_udp_heatmaps(heatmaps[i : i + 1], (64, 48))
        for name in ("keypoints_heatmap", "keypoints_input", "scores"):
            assert torch.equal(batched[name][i], single[name][0]), name


def test_negative_channel_refinement_wraps_like_numpy():
    """A (-1, -1) argmax reads neighbours at negative flat indices; numpy wraps them within the crop's maps."""
    generator = torch.Generator().manual_seed(5)
    heatmaps = torch.rand(1, 3, 6, 5, generator=generator)
    heatmaps[0, 0] = -1.0
    locations, scores = ops.heatmap_argmax(heatmaps)
    refined = ops.refine_keypoints_dark_udp(locations, heatmaps, 3)
    # reference with the literal numpy recipe (flattened padded maps of this crop, negative indices wrap)
    blurred = ops.gaussian_blur_preserve_max(heatmaps[0], 3).numpy()
    padded = np.pad(np.log(np.clip(blurred, 1e-3, 50.0)), ((0, 0), (1, 1), (1, 1)), mode="edge").ravel()
    width = 5
    index = int(-1 + 1 + (-1 + 1) * (width + 2))
    values = {name: padded[index + off] for name, off in
              (("i", 0), ("x1", 1), ("x1_", -1), ("y1", width + 2), ("y1_", -width - 2), ("x1y1", width + 3),
               ("x1_y1_", -width - 3))}
    dx, dy = 0.5 * (values["x1"] - values["x1_"]), 0.5 * (values["y1"] - values["y1_"])
    dxx = values["x1"] - 2 * values["i"] + values["x1_"]
    dyy = values["y1"] - 2 * values["i"] + values["y1_"]
    dxy = 0.5 * (values["x1y1"] - values["x1"] - values["y1"] + 2 * values["i"] - values["x1_"] - values["y1_"]
                 + values["x1_y1_"])
    hessian = np.array([[dxx, dxy], [dxy, dyy]], np.float64) + np.finfo(np.float32).eps * np.eye(2)
    expected = (np.array([-1.0, -1.0]) - np.linalg.inv(hessian) @ np.array([dx, dy], np.float64)).astype(np.float32)
    assert np.allclose(refined[0, 0].numpy(), expected, atol=1e-4)


def test_dense_batched_equals_per_item_with_mixed_sizes():
    generator = torch.Generator().manual_seed(11)
    processor = Sapiens2HFImageProcessor(task="pointmap", size={"height": 64, "width": 48})
    pointmaps = torch.randn(3, 3, 64, 48, generator=generator)
    scales = torch.rand(3, 1, generator=generator) + 0.5
    sizes = [(120, 96), (30, 20), (120, 96)]
    together = processor.post_process_pointmap_estimation(_outputs(pointmaps=pointmaps, scales=scales),
                                                          source_sizes=sizes)
    for i, size in enumerate(sizes):
        alone = processor.post_process_pointmap_estimation(
            _outputs(pointmaps=pointmaps[i : i + 1], scales=scales[i : i + 1]), source_sizes=[size])[0]
        assert torch.equal(together[i]["pointmap"], alone["pointmap"])
        assert tuple(alone["pointmap"].shape) == (3, *size)
        assert torch.equal(alone["depth"], alone["pointmap"][2])
    same = [(120, 96)] * 3
    fast = processor.post_process_pointmap_estimation(_outputs(pointmaps=pointmaps, scales=scales),
                                                      source_sizes=same)
    slow = [processor.post_process_pointmap_estimation(_outputs(pointmaps=pointmaps[i : i + 1],
                                                                scales=scales[i : i + 1]),
                                                       source_sizes=[same[i]])[0] for i in range(3)]
    for a, b in zip(fast, slow):
        assert torch.equal(a["pointmap"], b["pointmap"])


def test_segmentation_labels_in_range_and_normals_unit_before_resize():
    generator = torch.Generator().manual_seed(2)
    seg = Sapiens2HFImageProcessor(task="seg", size={"height": 64, "width": 48})
    maps = seg.post_process_semantic_segmentation(_outputs(logits=torch.randn(2, 29, 64, 48, generator=generator)),
                                                  target_sizes=[(100, 80), (33, 17)])
    assert [tuple(m.shape) for m in maps] == [(100, 80), (33, 17)]
    assert all(m.dtype == torch.int64 and m.min() >= 0 and m.max() <= 28 for m in maps)
    normal = Sapiens2HFImageProcessor(task="normal", size={"height": 64, "width": 48})
    out = normal.post_process_normal_estimation(_outputs(normals=torch.randn(2, 3, 64, 48, generator=generator)))
    norms = torch.stack([o["normals"] for o in out]).norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-6)
    albedo = Sapiens2HFImageProcessor(task="albedo", size={"height": 64, "width": 48})
    out = albedo.post_process_albedo_estimation(_outputs(albedos=3 * torch.randn(1, 3, 64, 48, generator=generator)),
                                                source_sizes=[(90, 70)])
    assert out[0]["albedo"].min() >= 0 and out[0]["albedo"].max() <= 1 and out[0]["albedo"].shape == (3, 90, 70)


def test_pose_boxes_empty_edge_and_tiny():
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48}, box_format="xyxy")
    image = np.random.default_rng(0).integers(0, 256, (80, 60, 3), dtype=np.uint8)
    batch = processor([image, image, image], boxes=[[], [[-30, -30, 10, 10], [59, 79, 60, 80]], [[1, 1, 1.5, 1.5]]])
    assert batch["pixel_values"].shape == (3, 3, 64, 48)
    assert batch["image_index"].tolist() == [1, 1, 2]
    assert torch.isfinite(batch["pixel_values"]).all()
    heatmaps = torch.rand(3, 308, 16, 12)
    results = processor.post_process_pose_estimation(
        _outputs(heatmaps=heatmaps), crops=batch, source_sizes=batch["original_sizes"])
    assert [len(r) for r in results] == [0, 2, 1]
    assert torch.equal(results[1][0]["bbox"], torch.tensor([-30.0, -30.0, 10.0, 10.0]))
    # the whole image is the box when none is given (official demo fallback)
    whole = processor(image)
    assert whole["boxes_xyxy"].tolist() == [[0.0, 0.0, 60.0, 80.0]]
    with pytest.raises(ValueError, match="one list of boxes per image"):
        processor([image, image], boxes=[[[0, 0, 5, 5]]])


def test_decode_keeps_device_and_float64_output():
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48})
    heatmaps = torch.rand(1, 308, 16, 12, dtype=torch.bfloat16)
    out = processor.post_process_pose_estimation(_outputs(heatmaps=heatmaps), boxes=[[[0, 0, 30, 40]]],
                                                 box_format="xywh")
    person = out[0][0]
    assert person["keypoints"].dtype == torch.float64 and person["keypoints"].device == heatmaps.device
    assert person["scores"].dtype == torch.float32


def test_target_sizes_rescale_keypoints():
    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 64, "width": 48})
    heatmaps = torch.rand(1, 308, 16, 12, generator=torch.Generator().manual_seed(0))
    base = processor.post_process_pose_estimation(_outputs(heatmaps=heatmaps), boxes=[[[0, 0, 30, 40]]],
                                                  box_format="xywh")[0][0]
    scaled = processor.post_process_pose_estimation(_outputs(heatmaps=heatmaps), boxes=[[[0, 0, 30, 40]]],
                                                    box_format="xywh", source_sizes=[(100, 50)],
                                                    target_sizes=[(200, 150)])[0][0]
    assert torch.allclose(scaled["keypoints"], base["keypoints"] * torch.tensor([3.0, 2.0], dtype=torch.float64))


def test_processor_round_trips_through_save_pretrained(tmp_path):
    processor = Sapiens2HFImageProcessor(task="albedo", size={"height": 64, "width": 48}, geometry_backend="torch")
    processor.save_pretrained(tmp_path)
    loaded = Sapiens2HFImageProcessor.from_pretrained(tmp_path)
    assert (loaded.task, loaded.input_size, loaded.geometry_backend, loaded.do_pad) == ("albedo", (64, 48), "torch",
                                                                                         True)
    bigger = Sapiens2HFImageProcessor.from_pretrained(tmp_path, size={"height": 128, "width": 96})
    assert bigger.input_size == (128, 96)
    image = np.random.default_rng(0).integers(0, 256, (50, 40, 3), dtype=np.uint8)
    assert torch.equal(loaded(image)["pixel_values"], processor(image)["pixel_values"])
    with pytest.raises(ValueError, match="not a Sapiens2 task"):
        Sapiens2HFImageProcessor(task="depth")


def test_image_inputs_are_equivalent(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(4)
    array = rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)
    Image.fromarray(array).save(tmp_path / "x.png")
    processor = Sapiens2HFImageProcessor(task="seg", size={"height": 32, "width": 32})
    reference = processor(array)["pixel_values"]
    for variant in (Image.fromarray(array), str(tmp_path / "x.png"), tmp_path / "x.png",
                    torch.from_numpy(array).permute(2, 0, 1), array.astype(np.float32) / 255.0):
        assert torch.equal(processor(variant)["pixel_values"], reference)
    with pytest.raises(ValueError, match="could not read"):
        processor(str(tmp_path / "missing.png"))


def test_rotated_warp_emulation_matches_opencv():
    cv2 = pytest.importorskip("cv2")
    image = np.random.default_rng(9).integers(0, 256, (70, 90, 3), dtype=np.uint8)
    matrix = cv2.getRotationMatrix2D((40, 30), 23.0, 1.7).astype(np.float32)
    for kind, flag in (("linear", cv2.INTER_LINEAR), ("cubic", cv2.INTER_CUBIC)):
        ours = ops._warp_affine_torch(image, matrix, (50, 60), kind)
        assert np.array_equal(ours, cv2.warpAffine(image, matrix, (60, 50), flags=flag))


def _reference_refine(locations, heatmaps, kernel=11):
    """The official recipe, literally: whole-map blur + rescale, clip, log, edge pad, flat numpy indexing."""
    num_crops, num_keypoints, height, width = heatmaps.shape
    out = locations.clone().double()
    for n in range(num_crops):
        blurred = ops.gaussian_blur_preserve_max(heatmaps[n], kernel).numpy()
        padded = np.pad(np.log(np.clip(blurred, 1e-3, 50.0)), ((0, 0), (1, 1), (1, 1)), mode="edge").ravel()
        w2 = width + 2
        for k in range(num_keypoints):
            x, y = (int(v) for v in locations[n, k])
            i = x + 1 + (y + 1) * w2 + k * w2 * (height + 2)
            v = {o: padded[i + o] for o in (0, 1, -1, w2, -w2, w2 + 1, -w2 - 1)}
            dx, dy = 0.5 * (v[1] - v[-1]), 0.5 * (v[w2] - v[-w2])
            dxx, dyy = v[1] - 2 * v[0] + v[-1], v[w2] - 2 * v[0] + v[-w2]
            dxy = 0.5 * (v[w2 + 1] - v[1] - v[w2] + 2 * v[0] - v[-1] - v[-w2] + v[-w2 - 1])
            hessian = np.array([[dxx, dxy], [dxy, dyy]], np.float64) + np.finfo(np.float32).eps * np.eye(2)
            out[n, k] -= torch.from_numpy(np.linalg.inv(hessian) @ np.array([dx, dy], np.float64))
    return out.float()


def test_fast_refinement_equals_whole_map_reference():
    """The refinement blurs only a box around each peak; it must equal blurring whole maps, also for maps whose
    blurred maximum lies far from the raw maximum (a one-pixel spike next to a broad blob), flat noise, negative
    maps and peaks on borders and corners."""
    generator = torch.Generator().manual_seed(21)
    height, width = 32, 24
    ys = torch.arange(height).float()[:, None]
    xs = torch.arange(width).float()[None, :]

    def blob(cx, cy, sigma, peak):
        return peak * torch.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * sigma**2))

    maps = [
        blob(10.3, 12.7, 3.0, 1.0),
        blob(0.0, 0.0, 2.0, 0.8),
        blob(23.0, 31.0, 4.0, 0.5),
        blob(5.0, 20.0, 6.0, 0.9),  # broad blob ...
        torch.rand(height, width, generator=generator) * 0.05,  # flat noise
        -torch.rand(height, width, generator=generator),  # negative: (-1, -1)
        blob(12.0, 3.0, 1.0, 0.002),  # tiny values: the clip at 1e-3 matters
    ]
    # a weak broad blob plus a slightly higher one-pixel spike far away: the raw and blurred maxima are far apart,
    # and the spike's neighbourhood lands near the 1e-3 clip, so the rescale (from the blurred maximum) matters
    spike = blob(5.0, 20.0, 6.0, 0.02)
    spike[2, 20] = 0.021
    maps.append(spike)
    heatmaps = torch.stack(maps)[None]
    heatmaps[:, :7] += 0.001 * torch.randn(1, 7, height, width, generator=generator)
    locations, _ = ops.heatmap_argmax(heatmaps)
    assert locations[0, -1].tolist() == [20.0, 2.0]
    fast = ops.refine_keypoints_dark_udp(locations, heatmaps)
    reference = _reference_refine(locations, heatmaps)
    assert (fast - reference).abs().max() < 1e-4
    # control: rescaling the spike map by a blurred maximum taken near its raw maximum only changes the answer
    local = heatmaps.clone()
    local[0, -1, 15:, :12] = 0  # what a search restricted to the spike's surroundings would see
    wrong = ops.refine_keypoints_dark_udp(locations[:, -1:], local[:, -1:])
    assert (wrong[0, 0] - reference[0, -1]).abs().max() > 1e-3


def test_argmax_takes_the_first_maximum_like_numpy():
    generator = torch.Generator().manual_seed(8)
    heatmaps = torch.randint(0, 3, (2, 50, 7, 5), generator=generator).float()  # many ties
    locations, scores = ops.heatmap_argmax(heatmaps)
    flat = heatmaps.reshape(2, 50, -1).numpy()
    index = flat.argmax(-1)
    expected = np.stack([index % 5, index // 5], -1).astype(np.float32)
    expected[flat.max(-1) <= 0] = -1
    assert np.array_equal(locations.numpy(), expected)
    assert np.array_equal(scores.numpy(), flat.max(-1))


def test_segmentation_ties_resolve_to_the_first_class_like_argmax():
    generator = torch.Generator().manual_seed(13)
    logits = torch.randint(0, 3, (2, 29, 16, 12), generator=generator).float()  # many exact ties
    processor = Sapiens2HFImageProcessor(task="seg", size={"height": 16, "width": 12})
    maps = processor.post_process_semantic_segmentation(_outputs(logits=logits))
    for m, l in zip(maps, logits):
        assert np.array_equal(m.numpy(), l.numpy().argmax(0))


# ------------------------------------------------------------------------------------------------------------------
# from_image_processor: the one adoption of another Sapiens2 processor (pipelines, save_for_hub, the CLI)
# ------------------------------------------------------------------------------------------------------------------

_CUSTOM = {"size": {"height": 96, "width": 64}, "image_mean": [0.5, 0.4, 0.3], "image_std": [0.2, 0.25, 0.3],
           "rescale_factor": 1 / 250}


def _settings(processor):
    return (processor.input_size, tuple(processor.image_mean), tuple(processor.image_std), processor.rescale_factor)


@pytest.mark.parametrize("task", ["pose", "seg", "normal", "pointmap", "albedo", None])
def test_from_image_processor_adopts_transformers_stock_processor(task, tmp_path):
    """transformers' stock processor (an official repo's preprocessor_config.json): its size and normalisation are
    kept, ours adds the task's policy; the same from the instance and from its saved dict."""
    import transformers

    stock = transformers.Sapiens2ImageProcessor(**_CUSTOM)
    stock.save_pretrained(tmp_path)
    saved, _ = Sapiens2HFImageProcessor.get_image_processor_dict(tmp_path)
    assert "task" not in saved and saved["image_processor_type"] == "Sapiens2ImageProcessor"
    for other in (stock, saved):
        ours = Sapiens2HFImageProcessor.from_image_processor(other, task)
        assert type(ours) is Sapiens2HFImageProcessor and ours.task == (task or "pretrain")
        assert _settings(ours) == ((96, 64), (0.5, 0.4, 0.3), (0.2, 0.25, 0.3), 1 / 250)
        assert ours.do_pad == (task in ("normal", "pointmap", "albedo"))
        assert not hasattr(ours, "image_processor_type")
    # Control: the stock defaults are not these values.
    assert _settings(Sapiens2HFImageProcessor.from_image_processor(None, task)) != _settings(ours)


def test_from_image_processor_keeps_ours_checks_the_task_and_takes_overrides(tmp_path):
    ours = Sapiens2HFImageProcessor(task="pose", bbox_padding=1.5, geometry_backend="torch", box_format="xyxy",
                                    flip_indices=[1, 0], **_CUSTOM)
    ours.register_for_auto_class("AutoImageProcessor")
    ours.save_pretrained(tmp_path)
    saved, _ = Sapiens2HFImageProcessor.get_image_processor_dict(tmp_path)
    assert "auto_map" in saved
    for other in (ours, saved):
        copy = Sapiens2HFImageProcessor.from_image_processor(other, "pose")
        # everything but the remote-code registration, which belongs to the saved repo, not to the settings
        assert copy is not ours and copy.to_dict() == {k: v for k, v in ours.to_dict().items() if k != "auto_map"}
        bigger = Sapiens2HFImageProcessor.from_image_processor(other, "pose", size={"height": 128, "width": 96})
        assert bigger.input_size == (128, 96) and bigger.bbox_padding == 1.5
        with pytest.raises(ValueError, match="image processor is for task 'pose', not 'seg'"):
            Sapiens2HFImageProcessor.from_image_processor(other, "seg")
    image = np.random.default_rng(0).integers(0, 256, (50, 40, 3), dtype=np.uint8)
    assert torch.equal(Sapiens2HFImageProcessor.from_image_processor(saved, "pose")(image)["pixel_values"],
                       ours(image)["pixel_values"])
    fresh = Sapiens2HFImageProcessor.from_image_processor(None, "seg", size={"height": 32, "width": 24})
    assert (fresh.task, fresh.input_size, fresh.bbox_padding) == ("seg", (32, 24), 1.25)
    with pytest.raises(TypeError, match="cannot adopt"):
        Sapiens2HFImageProcessor.from_image_processor([1, 2], "seg")


def test_pipeline_and_save_for_hub_adopt_a_stock_processor(tmp_path):
    """Both adoptions go through `from_image_processor`: a pipeline given transformers' stock processor, and
    `save_for_hub` with it, end with ours for the model's task at the stock processor's size."""
    import transformers
    from transformers import pipeline

    import sapiens2_hf
    from sapiens2_hf.hub import save_for_hub

    torch.manual_seed(0)
    model = sapiens2_hf.Sapiens2ForNormalEstimation(sapiens2_hf.tiny_config("normal")).eval()
    stock = transformers.Sapiens2ImageProcessor(size={"height": 48, "width": 32})
    pipe = pipeline("sapiens2-normal", model=model, image_processor=stock, device="cpu")
    assert isinstance(pipe.image_processor, Sapiens2HFImageProcessor)
    assert (pipe.image_processor.task, pipe.image_processor.input_size) == ("normal", (48, 32))
    assert pipe(np.zeros((40, 30, 3), np.uint8))["normals"].shape == (40, 30, 3)
    folder = save_for_hub(model, tmp_path / "repo", image_processor=stock)
    saved = Sapiens2HFImageProcessor.from_pretrained(folder)
    assert (saved.task, saved.input_size) == ("normal", (48, 32))
    with pytest.raises(ValueError, match="image processor is for task 'seg', not 'normal'"):
        save_for_hub(model, tmp_path / "other", image_processor=Sapiens2HFImageProcessor(task="seg"))
