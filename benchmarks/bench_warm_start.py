"""Question: does a head warm-started from a trained Sapiens2 head (`--init_head_from`) learn your own labels faster
than a fresh head on the same backbone?

Pose: a tiny 308-keypoint model fine-tuned on the synthetic humans is the source; the target is the same kind of
humans relabelled to COCO-17 (`KeypointSet.from_308`). Segmentation: a tiny 29-class source, and the 29 classes
merged into 6 (background, hair, face, skin, clothes, shoes; the unions given as a label map). Both target runs
start from the source's backbone; the fresh one has a new random head, the warm one `warm_start_head`'s. The metric
(PCK@0.1, mIoU) is measured at step 0 and every `--eval-every` steps. Target of issue 30: the warm start reaches the
fresh head's final metric in at most half the steps.

    python benchmarks/bench_warm_start.py --output benchmarks/results/warm_start.json
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import PrinterCallback, TrainingArguments

import sapiens2_hf
from sapiens2_hf.data.datasets import Sapiens2TaskDataset
from sapiens2_hf.data.dense import SegTransform
from sapiens2_hf.data.keypoint_sets import KEYPOINT_SET_PRESETS
from sapiens2_hf.data.label_tables import SEG_IGNORE_INDEX
from sapiens2_hf.data.pose import PoseTransform
from sapiens2_hf.data.synthetic_source import SyntheticRecords
from sapiens2_hf.modeling.sapiens2_label_data import SEGMENTATION_CLASS_NAMES
from sapiens2_hf.training import Sapiens2Trainer
from sapiens2_hf.training.label_sets import pose_transform
from sapiens2_hf.training.warm_start import warm_start_head

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_record  # noqa: E402

SIZE, PATCH = (64, 48), 16
SIX = {"background": ["Background"], "hair": ["Hair"], "face": ["Face_Neck", "Eyeglass", "Lower_Lip", "Upper_Lip",
                                                                 "Lower_Teeth", "Upper_Teeth", "Tongue"],
       "clothes": ["Apparel", "Upper_Clothing", "Lower_Clothing"], "shoes": ["Left_Foot", "Right_Foot"]}


def _six_class_table() -> tuple[list[str], dict[str, list[str]], np.ndarray]:
    """The 6 classes, their unions of the 29 (skin: every class not named above) and the id table 29 -> 6."""
    named = {member for members in SIX.values() for member in members}
    label_map = {**SIX, "skin": [name for name in SEGMENTATION_CLASS_NAMES if name not in named]}
    names = ["background", "hair", "face", "skin", "clothes", "shoes"]
    table = np.full(256, SEG_IGNORE_INDEX, np.uint8)
    for new_id, name in enumerate(names):
        for member in label_map[name]:
            table[SEGMENTATION_CLASS_NAMES.index(member)] = new_id
    return names, label_map, table


def _records(task: str, count: int, seed: int, convert=None) -> list[dict]:
    records = [dict(record) for record in SyntheticRecords(task, count, seed=seed, height=96, width=72)]
    return [convert(record) for record in records] if convert else records


def _train(model, task, train, evaluation, steps, learning_rate, eval_every, output):
    args = TrainingArguments(output, per_device_train_batch_size=8, per_device_eval_batch_size=16, max_steps=steps,
                             learning_rate=learning_rate, warmup_steps=0, weight_decay=0.0, optim="adamw_torch",
                             report_to=[], batch_eval_metrics=True, use_cpu=True, save_strategy="no",
                             disable_tqdm=True, seed=0, logging_steps=eval_every or 50,
                             eval_strategy="steps" if eval_every else "no", eval_steps=eval_every or None)
    trainer = Sapiens2Trainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation, task=task,
                              pose_flip_test=False)
    trainer.remove_callback(PrinterCallback)
    return trainer


def _curve(trainer, metric: str) -> list[tuple[int, float]]:
    curve = [(0, trainer.evaluate()[f"eval_{metric}"])]
    trainer.train()
    return curve + [(h["step"], h[f"eval_{metric}"]) for h in trainer.state.log_history if f"eval_{metric}" in h]


def _steps_to_reach(curve, value) -> int | None:
    return next((step for step, metric in curve if metric >= value), None)


def run_pose(options, work: Path) -> dict:
    off = {key: 0.0 for key in PoseTransform.DEFAULT_PROBABILITIES}
    torch.manual_seed(0)
    source = sapiens2_hf.Sapiens2ForPoseEstimation(sapiens2_hf.tiny_config("pose", image_size=list(SIZE),
                                                                           patch_size=PATCH))
    train308 = Sapiens2TaskDataset(_records("pose", 64, 1), PoseTransform(SIZE, sigma=1.0, augment_probabilities=off))
    _train(source, "pose", train308, None, options.source_steps, 1e-2, 0, str(work / "source_pose")).train()
    coco17 = KEYPOINT_SET_PRESETS["coco17"]

    def relabel(record):
        return {**record, "keypoints": coco17.from_308(record["keypoints"])}

    transform = pose_transform(PoseTransform, coco17)
    train = Sapiens2TaskDataset(_records("pose", 64, 3, relabel), transform(SIZE, sigma=1.0,
                                                                            augment_probabilities=off))
    evaluation = Sapiens2TaskDataset(_records("pose", 24, 4, relabel), transform(SIZE, train=False, sigma=1.0))
    curves = {}
    for start in ("fresh", "warm"):
        torch.manual_seed(1)
        config = sapiens2_hf.tiny_config("pose", image_size=list(SIZE), patch_size=PATCH, **coco17.config_kwargs())
        model = sapiens2_hf.Sapiens2ForPoseEstimation.from_backbone(source.model, config=config)
        report = warm_start_head(model, source, "keypoints").summary() if start == "warm" else "fresh head"
        trainer = _train(model, "pose", train, evaluation, options.target_steps, 1e-2, options.eval_every,
                         str(work / f"pose_{start}"))
        curves[start] = {"how": report, "curve": _curve(trainer, "pck_0_1")}
    return {"task": "pose", "metric": "pck_0_1", **curves}


def run_seg(options, work: Path) -> dict:
    off = {key: 0.0 for key in SegTransform.DEFAULT_PROBABILITIES}
    torch.manual_seed(0)
    source = sapiens2_hf.Sapiens2ForSemanticSegmentation(sapiens2_hf.tiny_config("seg", image_size=list(SIZE),
                                                                                 patch_size=8))
    train29 = Sapiens2TaskDataset(_records("seg", 64, 1), SegTransform(SIZE, augment_probabilities=off))
    _train(source, "seg", train29, None, options.source_steps, 5e-3, 0, str(work / "source_seg")).train()
    names, label_map, table = _six_class_table()

    def relabel(record):
        return {**record, "label": table[np.asarray(record["label"], np.uint8)]}

    swap = ()  # the six classes have no left/right pair
    train = Sapiens2TaskDataset(_records("seg", 64, 3, relabel), SegTransform(SIZE, swap_pairs=swap,
                                                                              augment_probabilities=off))
    evaluation = Sapiens2TaskDataset(_records("seg", 24, 4, relabel), SegTransform(SIZE, train=False,
                                                                                   swap_pairs=swap))
    curves = {}
    for start in ("fresh", "warm"):
        torch.manual_seed(1)
        config = sapiens2_hf.tiny_config("seg", image_size=list(SIZE), patch_size=8, id2label=dict(enumerate(names)))
        model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_backbone(source.model, config=config)
        report = warm_start_head(model, source, "classes", label_map).summary() if start == "warm" else "fresh head"
        trainer = _train(model, "seg", train, evaluation, options.target_steps, 5e-3, options.eval_every,
                         str(work / f"seg_{start}"))
        curves[start] = {"how": report, "curve": _curve(trainer, "miou")}
    return {"task": "seg", "metric": "miou", **curves}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-steps", type=int, default=150)
    parser.add_argument("--target-steps", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=None, help="JSON record to write (e.g. benchmarks/results/...)")
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    record = {"environment": {"torch": torch.__version__, "transformers": transformers.__version__,
                              "python": platform.python_version(), "machine": platform.machine(),
                              "threads": options.threads, "source_steps": options.source_steps,
                              "target_steps": options.target_steps}, "results": []}
    with tempfile.TemporaryDirectory() as folder:
        for run in (run_pose, run_seg):
            start = time.perf_counter()
            result = run(options, Path(folder))
            result["seconds"] = round(time.perf_counter() - start, 1)
            fresh, warm = result["fresh"]["curve"], result["warm"]["curve"]
            final = fresh[-1][1]
            reached = _steps_to_reach(warm, final)
            result["fresh_final"], result["warm_steps_to_fresh_final"] = final, reached
            result["target_met"] = reached is not None and reached <= fresh[-1][0] / 2
            record["results"].append(result)
            print(f"{result['task']}: {result['metric']} fresh {fresh[0][1]:.3f} -> {final:.3f} in {fresh[-1][0]} "
                  f"steps; warm {warm[0][1]:.3f} at step 0 ({result['warm']['how']}), reaches {final:.3f} at step "
                  f"{reached}; target (<= half the steps) {'met' if result['target_met'] else 'NOT met'} "
                  f"({result['seconds']} s)")
            print(f"  fresh {fresh}\n  warm  {warm}")
    write_record(options.output, record)


if __name__ == "__main__":
    main()
