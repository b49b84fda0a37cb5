"""How much pose post-processing does decoding only the asked keypoints save?

`post_process_in_format(processor, outputs, keypoint_format)` decodes only the heatmap channels the format reads
(`source_keypoint_indices`: 17 of 308 for coco17). This measures post-processing time per person at the official
1024x768 input (heatmaps 308 x 256 x 192 per person, the flip test's two sets) for:
- all 308 keypoints (`post_process_pose_estimation`), the baseline;
- each format (coco17, body25, coco_wholebody133), decoded from its channels only;
and prints the ratio 308 / format, with a check that the format's results equal decoding all 308 then converting.

Usage (CPU defaults; GPU via --device):
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_keypoint_subset_decode.py \
        --out benchmarks/results/bench_keypoint_subset_decode_cpu.json
Times: median and IQR of --repeats runs after --warmup runs, with device synchronisation; one process, one run.
"""

from __future__ import annotations

import argparse
import platform
import sys
import types
from pathlib import Path

import torch

from sapiens2_hf.modeling.post_processing_sapiens2_hf import FlippedCropOutputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_record  # noqa: E402
from bench_processing import synthetic_heatmaps, timed  # noqa: E402


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--formats", nargs="+", default=["coco17", "body25", "coco_wholebody133"])
    parser.add_argument("--no-flip-test", action="store_true", help="decode one set of heatmaps, not two averaged")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--out", default=None, help="write the JSON here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    from sapiens2_hf.data.keypoint_formats import convert_keypoints, post_process_in_format, source_keypoint_indices
    from sapiens2_hf.processing import Sapiens2HFImageProcessor

    processor = Sapiens2HFImageProcessor(task="pose", size={"height": 1024, "width": 768})
    rows = []
    for people in args.people:
        heatmaps = synthetic_heatmaps(people, device=device)
        flipped = synthetic_heatmaps(people, seed=1, device=device)
        raw_flipped = FlippedCropOutputs(types.SimpleNamespace(heatmaps=flipped))
        extra = {} if args.no_flip_test else {"outputs_flipped": raw_flipped}
        geometry = {"bbox_center": torch.tensor([[300.0 + 20 * k, 400.0] for k in range(people)]),
                    "bbox_scale": torch.tensor([[450.0, 600.0]] * people)}
        outputs = types.SimpleNamespace(heatmaps=heatmaps)

        def decode(keypoint_format):
            if keypoint_format is None:
                return processor.post_process_pose_estimation(outputs, crops=geometry, **extra)
            return post_process_in_format(processor, outputs, keypoint_format, crops=geometry, **extra)

        full_time = timed(lambda: decode(None), device, args.warmup, args.repeats)
        full = decode(None)[0]
        for keypoint_format in args.formats:
            subset_time = timed(lambda: decode(keypoint_format), device, args.warmup, args.repeats)
            subset = decode(keypoint_format)[0]
            equal = all(
                torch.equal(person["keypoints"], keypoints) and torch.equal(person["scores"], scores)
                for person, reference in zip(subset, full)
                for keypoints, scores in [convert_keypoints(reference["keypoints"], reference["scores"],
                                                            keypoint_format)])
            rows.append({
                "people": people, "keypoint_format": keypoint_format,
                "channels_decoded": len(source_keypoint_indices(keypoint_format)),
                "full_308_ms_per_person": 1e3 * full_time["median_s"] / people,
                "full_308_iqr_ms": 1e3 * full_time["iqr_s"] / people,
                "subset_ms_per_person": 1e3 * subset_time["median_s"] / people,
                "subset_iqr_ms": 1e3 * subset_time["iqr_s"] / people,
                "ratio_308_over_subset": full_time["median_s"] / subset_time["median_s"],
                "equal_to_full_decode_then_convert": equal,
            })

    print(f"pose post-processing per person, 1024x768 input (heatmaps 308x256x192), flip test "
          f"{'off' if args.no_flip_test else 'on'}, {device}, {torch.get_num_threads()} threads")
    print(f"{'people':>6} {'format':>18} {'channels':>8} {'308 ms':>9} {'subset ms':>10} {'308/subset':>10} "
          f"{'equal':>6}")
    for row in rows:
        print(f"{row['people']:>6} {row['keypoint_format']:>18} {row['channels_decoded']:>8} "
              f"{row['full_308_ms_per_person']:>9.1f} {row['subset_ms_per_person']:>10.1f} "
              f"{row['ratio_308_over_subset']:>9.1f}x {str(row['equal_to_full_decode_then_convert']):>6}")
    import transformers

    record = {
        "benchmark": "keypoint_subset_decode",
        "environment": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "python": platform.python_version(), "device": str(device),
                        "threads": torch.get_num_threads(), "dtype": "float32", "input_size": [1024, 768],
                        "heatmap_size": [256, 192], "flip_test": not args.no_flip_test,
                        "warmup": args.warmup, "repeats": args.repeats},
        "results": rows,
    }
    write_record(args.out, record)
    return record


if __name__ == "__main__":
    main()
