"""`sapiens2-hf curate INPUT... --out DIR`: a pile of images in, pretraining data out (`sapiens2_hf.curation`).

INPUTs: folders of images, `save_to_disk` folders, `datasets` Hub ids and WebDataset `.tar` shards (a folder of them
or the files). Writes into `--out`: `dataset/` (the kept images, a `datasets.Dataset` that `pretrain.py
--dataset_name DIR/dataset` reads), `records.jsonl` (every image's per-stage scores and verdicts), `report.html` and
`report.png`, `summary.json`; `.curation/` holds the finished chunks, so a killed run resumes where it stopped.
Thresholds: `--threshold NAME=VALUE` (a `CurationConfig` field); stages: `--skip STAGE`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from ..modeling.sapiens2_tasks import looks_local
from ..predict.options import check_local_source, device_name, out_folder, positive_int

_STAGES = ("decode", "size", "quality", "person", "duplicates", "domain", "balance")  # curation.curate.STAGES


def add_curate_subparser(subparsers) -> None:
    from .threads import add_threads_argument

    parser = subparsers.add_parser("curate", help="filter a pile of images into pretraining data (quality, a "
                                   "prominent person, near-duplicates, domain, balance) with a report",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="image folders, save_to_disk folders, datasets ids, WebDataset .tar shards")
    parser.add_argument("--out", type=out_folder, required=True, help="output folder (created; a rerun resumes it)")
    parser.add_argument("--person-model", default=None, metavar="SEG_MODEL",
                        help="Sapiens2 segmentation model for the person stage (folder, Hub id or official file)")
    parser.add_argument("--embedding-model", default=None, metavar="MODEL",
                        help="Sapiens2 checkpoint whose backbone embeds images for the duplicates, domain and balance "
                             "stages (default: the person model's)")
    parser.add_argument("--reference", nargs="+", default=None, metavar="REF",
                        help="images of your domain (folders or datasets): turns the domain stage on")
    parser.add_argument("--skip", nargs="+", default=[], choices=_STAGES, metavar="STAGE",
                        help=f"stages to switch off: {', '.join(_STAGES)}")
    parser.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                        help="set a threshold, e.g. min_short_side=512 or max_blockiness=1.5 (repeatable)")
    parser.add_argument("--chunk-size", type=positive_int, default=64, help="images per resumable chunk")
    parser.add_argument("--image-column", default="image", help="the image column of datasets inputs")
    parser.add_argument("--device", type=device_name, default=None, help="'cpu', 'cuda:0', ... (default: the loader's)")
    parser.add_argument("--no-dataset", action="store_true", help="only the records and the report")
    add_threads_argument(parser)
    parser.set_defaults(handler=run_curate, precheck=check_curate_arguments)


def _thresholds(pairs: list[str]) -> dict:
    from ..curation import CurationConfig

    fields = {f.name: f for f in dataclasses.fields(CurationConfig) if f.name not in ("stages", "cascade")}
    values = {}
    for pair in pairs:
        name, equals, text = pair.partition("=")
        if not equals or name not in fields:
            raise ValueError(f"--threshold {pair!r}: expected NAME=VALUE with NAME one of {', '.join(sorted(fields))}.")
        kind = int if name in ("min_short_side", "max_hash_distance", "reference_k", "clusters", "cluster_cap",
                               "chunk_size", "seed") else float
        try:
            values[name] = kind(text)
        except ValueError:
            raise ValueError(f"--threshold {pair!r}: {text!r} is not {'an integer' if kind is int else 'a number'}.") \
                from None
    return values


def check_curate_arguments(args: argparse.Namespace) -> None:
    from ..curation import CurationConfig

    for entry in args.inputs:  # a local path that is missing is said so, not looked up on the Hub as a dataset id
        if not Path(entry).exists() and looks_local(entry):
            raise ValueError(f"curate {entry}: no such file or folder.")
    check_local_source("--person-model", args.person_model)
    check_local_source("--embedding-model", args.embedding_model)
    CurationConfig(chunk_size=args.chunk_size, **_thresholds(args.threshold))  # each value checked before any work


def run_curate(args: argparse.Namespace) -> int:
    from ..curation import STAGES, CurationConfig, curate
    from ..utils.run_lock import run_folder_lock

    stages = tuple(stage for stage in STAGES if stage not in args.skip
                   and (stage != "domain" or args.reference))
    config = CurationConfig(stages=stages, chunk_size=args.chunk_size, **_thresholds(args.threshold))
    # under `accelerate launch` the main process holds --out for the run; the others write only their chunks
    with run_folder_lock(args.out, enabled=int(os.environ.get("RANK", "0")) == 0):
        result = curate(args.inputs, args.out, config=config, person_model=args.person_model,
                        embedding_model=args.embedding_model, reference=args.reference,
                        image_column=args.image_column, device=args.device, write_dataset=not args.no_dataset)
    summary = result.summary
    if "images" not in summary:  # a process other than the main one: its chunks are written, the main one reports
        return 0
    dropped = ", ".join(f"{stage} {counts['dropped']}" for stage, counts in summary["stages"].items()
                        if counts["dropped"])
    print(f"sapiens2-hf curate: {summary['images']} image(s), kept {summary['kept']} (dropped: {dropped or 'none'}); "
          f"report {args.out}/report.html" + ("; no dataset written: no image was kept" if not summary["kept"] else ""))
    return 0
