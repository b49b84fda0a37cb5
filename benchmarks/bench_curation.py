"""How well does each curation stage find the images it is meant for, and how fast is it?

A mixed set built here with known labels (`sapiens2_hf.curation.synthetic_mix`): synthetic humans, and other humans
blurred, JPEG-crushed, darkened, shrunk, copied with a small crop and a colour shift, painted out (no person), or cut
short (undecodable). `curate` runs with `cascade=False`, so every per-image stage measures every decodable image, and
each stage's drops are compared with the images labelled for it:

- precision: of the images the stage drops, the fraction labelled for it (the others were good, or bad for another
  stage's reason: `drops_of_other_kinds` names them);
- recall: of the images labelled for the stage, the fraction it drops.

The person stage runs a tiny Sapiens2 segmentation model (hidden 64, 4 layers, 128x96) fine-tuned on synthetic humans
of other scenes (`bench_temporal_filter.fine_tune`); its backbone gives the embeddings of balancing. The person stage
runs a second time with the renderer's true masks as its segmentation: its rule apart from its model. images/s per stage are wall-clock on this machine (`--threads`).

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_curation.py --threads 2 --model-dir /tmp/curation_models \
        --out benchmarks/results/curation.json --report-picture docs/images/curation_report.png
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_record  # noqa: E402

COUNTS = {"good": 60, "blurred": 15, "jpeg": 15, "dark": 10, "tiny": 15, "duplicate": 20, "no_person": 20,
          "corrupt": 5}
STAGE_KINDS = {"decode": {"corrupt"}, "size": {"tiny"}, "quality": {"blurred", "jpeg", "dark"},
               "person": {"no_person"}, "duplicates": {"duplicate"}}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every count of the mixed set")
    parser.add_argument("--size", type=int, nargs=2, default=[384, 288], metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--steps", type=int, default=300, help="fine-tuning steps of the segmentation model")
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument("--report-picture", default=None, help="copy the run's report.png here")
    args = parser.parse_args(argv)

    import torch

    import bench_temporal_filter as temporal
    from sapiens2_hf.curation import CurationConfig, curate
    from sapiens2_hf.curation.synthetic_mix import write_mixed_set

    torch.set_num_threads(args.threads)
    counts = {kind: max(1, round(count * args.scale)) for kind, count in COUNTS.items()}
    record = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "threads": args.threads,
              "counts": counts, "size": args.size}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        begin = time.perf_counter()
        labels = write_mixed_set(scratch / "mix", counts, height=args.size[0], width=args.size[1], seed=7)
        record["build_seconds"] = round(time.perf_counter() - begin, 1)
        model, _, training = temporal.fine_tune("seg", Path(args.model_dir or scratch / "models"), (256, 192),
                                                args.steps, 0)
        record["segmentation_model"] = training
        config = CurationConfig(stages=("decode", "size", "quality", "person", "duplicates", "balance"),
                                cascade=False, chunk_size=32)
        begin = time.perf_counter()
        result = curate([str(scratch / "mix")], scratch / "out", config=config, person_model=model, device="cpu")
        record["curate_seconds"] = round(time.perf_counter() - begin, 1)
        record["images_per_second"] = result.summary["images_per_second"]
        kind_of = {label["file"]: label["kind"] for label in labels}
        rows = {}
        for stage, kinds in STAGE_KINDS.items():
            dropped = {Path(r["source"]).name for r in result.records
                       if r["stages"].get(stage, {}).get("verdict") == "drop"}
            meant = {name for name, kind in kind_of.items() if kind in kinds}
            others = sorted({kind_of[name] for name in dropped - meant})
            rows[stage] = {"dropped": len(dropped), "meant_for_it": len(meant),
                           "precision": round(len(dropped & meant) / len(dropped), 3) if dropped else None,
                           "recall": round(len(dropped & meant) / len(meant), 3) if meant else None,
                           "drops_of_other_kinds": {kind: sum(kind_of[n] == kind for n in dropped - meant)
                                                    for kind in others}}
        record["stages"] = rows
        kept = {Path(r["source"]).name for r in result.records if r["verdict"] == "keep"}
        record["final"] = {"kept": len(kept), "good_kept": sum(kind_of[n] == "good" for n in kept),
                           "good": counts["good"], "bad_kept": sorted({kind_of[n] for n in kept} - {"good"})}
        record["balance"] = {k: result.summary["stages"]["balance"][k] for k in ("measured", "kept", "dropped")}
        # the person stage's rule apart from its model: the renderer's true masks as the segmentation
        record["person_with_true_masks"] = _person_with_true_masks(labels, scratch, kind_of)
        if args.report_picture:
            Path(args.report_picture).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(scratch / "out" / "report.png", args.report_picture)
    write_record(args.out, record)
    _print(record)
    return record


def _person_with_true_masks(labels, scratch: Path, kind_of: dict) -> dict:
    import hashlib

    import numpy as np

    from sapiens2_hf.curation import CurationConfig, curate, decode_image

    def key(image) -> str:
        return hashlib.sha1(np.ascontiguousarray(image).tobytes()).hexdigest()

    truth = {}
    for label in labels:
        if label["mask"] is not None:
            truth[key(decode_image((scratch / "mix" / label["file"]).read_bytes()))] = label["mask"]

    def true_masks(images):
        return [truth[key(image)] for image in images]

    result = curate([str(scratch / "mix")], scratch / "out_true_masks", person_model=true_masks,
                    config=CurationConfig(stages=("decode", "person"), cascade=False, chunk_size=32),
                    write_dataset=False)
    dropped = {Path(r["source"]).name for r in result.records if r["stages"].get("person", {}).get("verdict") == "drop"}
    meant = {name for name, kind in kind_of.items() if kind == "no_person"}
    return {"dropped": len(dropped), "meant_for_it": len(meant),
            "precision": round(len(dropped & meant) / len(dropped), 3) if dropped else None,
            "recall": round(len(dropped & meant) / len(meant), 3),
            "drops_of_other_kinds": sorted({kind_of[n] for n in dropped - meant})}


def _print(record: dict) -> None:
    print(f"machine: {record['machine']}, {record['threads']} threads; mixed set {record['counts']} at "
          f"{record['size'][0]}x{record['size'][1]}")
    print(f"{'stage':12s} {'precision':>9s} {'recall':>7s} {'dropped':>8s} {'meant':>6s}  other kinds dropped")
    for stage, row in record["stages"].items():
        print(f"{stage:12s} {row['precision']!s:>9s} {row['recall']!s:>7s} {row['dropped']:8d} "
              f"{row['meant_for_it']:6d}  {row['drops_of_other_kinds']}")
    print(f"person stage with the renderer's true masks: {record['person_with_true_masks']}")
    print(f"all stages: kept {record['final']['kept']} ({record['final']['good_kept']} of {record['final']['good']} "
          f"good; bad kinds kept: {record['final']['bad_kept'] or 'none'}); balance {record['balance']}")
    print("images/s:", record["images_per_second"])


if __name__ == "__main__":
    main()
