"""The offline end-to-end demo (`sapiens2-hf demo`, the README's main job).

On a fresh machine with no network it shows the whole library at work, in a few minutes on 2 CPU cores:

1. renders synthetic humans with exact labels (`sapiens2_hf.data.synthetic`);
2. pretrains a tiny Sapiens2 briefly with the MAE + student-teacher objective (`Sapiens2PreTrainingTrainer`);
3. fine-tunes it for 308-keypoint pose with LoRA (`Sapiens2Trainer`, official heatmap loss), measuring PCK@0.1 on
   held-out synthetic people before and after;
4. merges the adapter, saves the model as a complete Hub repository (weights, config, processor, model card with the
   measured metric, remote code) and reloads it through transformers' Auto class with `trust_remote_code=True`;
5. runs `pipeline("sapiens2-pose")` on held-out synthetic images and on a bundled public-domain photo;
6. writes overlays, JSON and a report to the output folder.

Everything is tiny and trained for seconds: the point is the workflow and a metric that moves, not accuracy.
"""

from __future__ import annotations

import shutil
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm
from transformers import AutoModelForPoseEstimation, PrinterCallback, TrainingArguments, pipeline

from ._registration import register
from .cli.threads import resolve_threads
from .data.datasets import Sapiens2TaskDataset
from .data.synthetic import render_sample
from .data.synthetic_source import SyntheticRecords
from .hub import save_for_hub
from .modeling import Sapiens2ForPoseEstimation
from .processing import image_processor_for_task
from .runs.decode import decode_image
from .serialization import to_json_compatible
from .utils.extras import require
from .visualization import draw_keypoints, enlarge, side_by_side
from .visualization.io import save_image, save_json

# The bundled photo: skimage.data.astronaut() (NASA, public domain), with the person box used by the official fixtures.
PHOTO_BOX_XYXY = [25.3, 9.6, 380.2, 508.7]
INPUT_SIZE = (64, 48)  # (height, width) of the tiny models' input
RENDER_SIZE = (96, 72)


def _pck(predicted: np.ndarray, target: np.ndarray, visible: np.ndarray, box_xyxy, threshold: float = 0.1) -> tuple[int, int]:
    """Correct / counted keypoints within `threshold` x the longer box side."""
    side = max(box_xyxy[2] - box_xyxy[0], box_xyxy[3] - box_xyxy[1])
    distances = np.linalg.norm(predicted - target, axis=-1)
    return int(((distances <= threshold * side) & visible).sum()), int(visible.sum())


def _render_pretraining_images(folder: Path, count: int, seed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index in tqdm(range(count), desc="1/5 rendering synthetic humans", unit="img"):
        sample = render_sample((seed, index), *RENDER_SIZE)
        Image.fromarray(sample["image"]).save(folder / f"{index:04d}.png")


def _pretrain(images: Path, output: Path, steps: int, seed: int) -> Path:
    from .pretraining.run import main as pretrain_main  # the train extra (accelerate, peft, datasets)

    print(f"2/5 pretraining a tiny Sapiens2 for {steps} steps (MAE + DINO/iBOT student-teacher)")
    pretrain_main([
        "--image_folder", str(images), "--output_dir", str(output), "--max_steps", str(steps),
        "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--report_to", "none", "--use_cpu", "true",
        "--dataloader_pin_memory", "false", "--save_strategy", "no", "--logging_steps", str(max(1, steps // 4)),
        "--seed", str(seed),
        "--overwrite_output_dir", "true",  # the demo's own work folder: a rerun into the same --out starts afresh
    ])
    return output / "backbone"


def _finetune_pose(backbone: Path, output: Path, steps: int, seed: int, num_train: int, num_eval: int):
    from .training import Sapiens2Trainer, apply_lora, trainable_parameter_count  # the train extra (peft, ...)
    from .training.tasks import training_task

    torch.manual_seed(seed)
    model = Sapiens2ForPoseEstimation.from_backbone(backbone, head_config="tiny")
    model = apply_lora(model, "pose", rank=8)
    trainable, total = trainable_parameter_count(model)
    transform = training_task("pose").transform
    no_augmentation = {key: 0.0 for key in transform.DEFAULT_PROBABILITIES}
    # A wider target Gaussian than the official sigma scaled to this tiny 16x12 heatmap, which does not learn in
    # seconds (measured in tests/test_training_learning.py).
    train_transform = transform(INPUT_SIZE, augment_probabilities=no_augmentation, sigma=1.0)
    eval_transform = transform(INPUT_SIZE, train=False, sigma=1.0)
    height, width = RENDER_SIZE
    train = Sapiens2TaskDataset(SyntheticRecords("pose", num_train, seed=seed + 1, height=height, width=width), train_transform)
    held_out = Sapiens2TaskDataset(SyntheticRecords("pose", num_eval, seed=seed + 2, height=height, width=width), eval_transform)
    args = TrainingArguments(
        str(output), per_device_train_batch_size=8, per_device_eval_batch_size=16, max_steps=steps,
        learning_rate=1e-2, warmup_steps=0.05, weight_decay=0.0, optim="adamw_torch", report_to=[],
        batch_eval_metrics=True, remove_unused_columns=False, use_cpu=True, save_strategy="no", seed=seed,
        logging_steps=max(1, steps // 5),
    )
    trainer = Sapiens2Trainer(model=model, args=args, train_dataset=train, eval_dataset=held_out, task="pose",
                              official_schedule=True)
    trainer.remove_callback(PrinterCallback)
    before = trainer.evaluate()
    print(f"3/5 fine-tuning for pose with LoRA: {trainable:,} of {total:,} parameters trainable; "
          f"PCK@0.1 before: {before['eval_pck_0_1']:.3f}")
    trainer.train()
    after = trainer.evaluate()
    return trainer.model, before, after, {"trainable": trainable, "total": total}


def run_demo(out_dir: str | Path = "demo_output", seed: int = 0, pretrain_steps: int = 40, finetune_steps: int = 150,
             num_pretrain_images: int = 64, num_train: int = 64, num_eval: int = 16, threads: int | None = None) -> dict:
    """Runs the demo and returns the report dict (also written to `out_dir/report.json` and `report.md`)."""
    require("accelerate", "peft", feature="the demo (it pretrains, then fine-tunes with LoRA)")  # sapiens2_hf[train]
    register()  # as `sapiens2-hf` does: the Auto class and pipeline below find our classes

    if threads is not None:  # for Python callers; `sapiens2-hf demo` sets them for the whole command (cli/threads.py)
        torch.set_num_threads(resolve_threads(threads))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    started = time.perf_counter()
    report = {"seed": seed, "note": "tiny models trained for seconds on synthetic data; random-scale results"}

    _render_pretraining_images(work / "pretrain_images", num_pretrain_images, seed)
    backbone = _pretrain(work / "pretrain_images", work / "pretrain", pretrain_steps, seed)
    lora_model, before, after, counts = _finetune_pose(backbone, work / "finetune", finetune_steps, seed, num_train, num_eval)
    report["pretrain_steps"], report["finetune_steps"] = pretrain_steps, finetune_steps
    report["lora_trainable_parameters"], report["total_parameters"] = counts["trainable"], counts["total"]
    report["pck_0_1_before"], report["pck_0_1_after"] = before["eval_pck_0_1"], after["eval_pck_0_1"]
    report["oks_ap_before"], report["oks_ap_after"] = before.get("eval_oks_ap"), after.get("eval_oks_ap")
    report["metric_notes"] = METRIC_NOTES

    repo = _publish_and_reload(lora_model, out, after, seed, report)
    _run_pose_pipeline(repo, out, seed, report)
    report["seconds"] = round(time.perf_counter() - started, 1)
    save_json(report, out / "report.json", indent=1)
    (out / "report.md").write_text(_markdown(report, repo))
    shutil.rmtree(work / "pretrain_images", ignore_errors=True)
    print(_markdown(report, repo))
    return report


def _publish_and_reload(lora_model, out: Path, after: dict, seed: int, report: dict) -> Path:
    """Step 4: the merged model as a Hub-ready repository, reloaded through the Auto class (into `report`)."""
    print("4/5 merging the adapter, saving a Hub-ready repository and reloading it through the Auto class")
    model = lora_model.merge_and_unload().eval()
    processor = image_processor_for_task("pose", size={"height": INPUT_SIZE[0], "width": INPUT_SIZE[1]})
    # The demo owns this sub-folder of --out: a rerun replaces its files (and keeps anything else put there).
    repo = save_for_hub(model, out / "sapiens2-tiny-pose-synthetic", image_processor=processor, overwrite=True, card_kwargs={
        "repo_id": "your-name/sapiens2-tiny-pose-synthetic", "eval_results": {"pck_0_1": after["eval_pck_0_1"]},
        "eval_dataset": "sapiens2_hf synthetic humans (held out)", "datasets": None,
        "source": "sapiens2_hf demo: pretrained and LoRA-fine-tuned on synthetic humans",
    })
    # sapiens2_hf is installed, so transformers' Auto class builds its registered class; without it, the repository's
    # shipped files serve (`trust_remote_code=True`, tested in tests/test_hub_sharing.py).
    reloaded = AutoModelForPoseEstimation.from_pretrained(repo).eval()
    probe = torch.randn(1, 3, *INPUT_SIZE, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        reload_error = (reloaded(probe).heatmaps - model(probe).heatmaps).abs().max().item()
    report["reloaded_class"] = f"{type(reloaded).__module__}.{type(reloaded).__name__}"
    # the installed package's class, or (sapiens2_hf not registered) the repository's shipped copy, whose module path
    # transformers derives from the folder name (`transformers_modules.<folder>...`): say which, not the path
    installed = type(reloaded).__module__.startswith("sapiens2_hf.")
    report["reloaded_from"] = ("the installed sapiens2_hf package" if installed
                               else "the repository's own modeling files (trust_remote_code)")
    report["reload_max_abs_difference"] = reload_error
    return repo


def _run_pose_pipeline(repo: Path, out: Path, seed: int, report: dict) -> None:
    """Step 5: the registered pipeline on held-out synthetic people (PCK into `report`) and on the bundled photo;
    writes the overlays and keypoints.json."""
    print("5/5 running pipeline('sapiens2-pose') on held-out synthetic people and on the bundled photo")
    # The registered pipeline loads the folder with our model class; its shipped remote code is not needed here.
    pose = pipeline("sapiens2-pose", model=str(repo))
    overlays = out / "overlays"
    results, correct, counted = [], 0, 0
    for index in tqdm(range(4), desc="    pipeline on held-out images", unit="img"):
        sample = render_sample((seed + 3, index), *RENDER_SIZE)
        boxes = [list(map(float, box)) for box in sample["boxes"]]
        people = pose(Image.fromarray(sample["image"]), boxes=boxes)
        for person, keypoints, visibility, box in zip(people, sample["keypoints"], sample["keypoint_visibility"], boxes):
            c, n = _pck(np.asarray(person["keypoints"]), keypoints, visibility > 0, box)
            correct, counted = correct + c, counted + n
        save_image(_ground_truth_beside_prediction(sample, people), overlays / f"synthetic_{index}.png")
        results.append(_keypoints_entry(f"synthetic_{index}", people))
    report["pipeline_pck_0_1_held_out"] = correct / max(counted, 1)
    photo_path = resources.files("sapiens2_hf").joinpath("assets", "demo", "astronaut.png")
    photo = decode_image(photo_path.read_bytes(), name="astronaut.png")
    people = pose(photo, boxes=[PHOTO_BOX_XYXY])
    save_image(side_by_side([("bundled photo, body keypoints", draw_keypoints(photo, _body_only(people),
                                                                               score_threshold=0.0))],
                            caption="a tiny model trained on synthetic humans: shows the format, not the quality"),
               overlays / "astronaut.png")
    results.append(_keypoints_entry("astronaut.png (skimage.data.astronaut, NASA, public domain)", people))
    save_json(results, out / "keypoints.json")


# What the report's numbers mean, written into report.json and report.md.
METRIC_NOTES = {
    "pck_0_1": "PCK@0.1: the fraction (0 to 1) of visible keypoints within 0.1 x the longer side of the person's box",
    "oks_ap": "COCO OKS AP (fraction, 0 to 1) over the 308 keypoints: averaged over OKS thresholds 0.50 to 0.95, "
              "each keypoint within a tolerance of a few percent of the person's size; a tiny model trained for "
              "seconds stays below them, so 0.0 is expected here: PCK@0.1 is the measure that moves",
}


def _ground_truth_beside_prediction(sample: dict, people: list[dict]) -> Image.Image:
    """A held-out synthetic human enlarged to a readable size: its ground-truth skeleton (left) beside the model's
    (right), body keypoints only (`_body_only`)."""
    truth = [{"keypoints": points, "scores": (visibility > 0).astype(np.float32), "bbox": box}
             for points, visibility, box in zip(sample["keypoints"], sample["keypoint_visibility"], sample["boxes"])]
    image, truth = enlarge(sample["image"], _body_only(truth))
    _, predicted = enlarge(sample["image"], _body_only(people))
    return side_by_side([("ground truth", draw_keypoints(image, truth, score_threshold=0.0)),
                         ("prediction", draw_keypoints(image, predicted, score_threshold=0.0))],
                        caption="tiny model fine-tuned for seconds on synthetic humans")


def _keypoints_entry(image: str, people: list[dict]) -> dict:
    """One image of keypoints.json: the keypoint names once (row i of every person's arrays), box format, people."""
    names = list(people[0]["labels"]) if people else []
    return {"image": image, "keypoint_names": names, "bbox_format": "xyxy",
            "people": to_json_compatible([{k: v for k, v in person.items() if k != "labels"} for person in people])}


def _body_only(people: list[dict]) -> list[dict]:
    """The 21 body and foot keypoints (the first channels of the 308): the tiny demo model only learns the keypoints
    the synthetic humans model, and drawing all 308 would bury the skeleton."""
    return [{**person, "keypoints": np.asarray(person["keypoints"])[:21], "scores": np.asarray(person["scores"])[:21]}
            for person in people]


def _number(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _markdown(report: dict, repo: Path) -> str:
    return "\n".join([
        "# sapiens2_hf offline demo",
        "",
        "Tiny models, trained for seconds on synthetic humans: the numbers show the workflow working, not accuracy.",
        "",
        f"- pretraining: {report['pretrain_steps']} steps (MAE + student-teacher)",
        f"- pose fine-tuning with LoRA: {report['finetune_steps']} steps, {report['lora_trainable_parameters']:,} of "
        f"{report['total_parameters']:,} parameters trainable",
        f"- **PCK@0.1 on held-out synthetic people: {report['pck_0_1_before']:.3f} before -> "
        f"{report['pck_0_1_after']:.3f} after**",
        f"- the same through `pipeline('sapiens2-pose')` (crop, flip test, decode, original pixels): "
        f"{report['pipeline_pck_0_1_held_out']:.3f}",
        f"- saved as a Hub repository: `{repo}` (model card, processor, and the model files for users without "
        f"sapiens2_hf: `trust_remote_code=True`); reloaded with `AutoModelForPoseEstimation.from_pretrained(...)` as "
        f"`{report['reloaded_class'].rpartition('.')[2]}` from {report['reloaded_from']}, "
        f"max abs difference {report['reload_max_abs_difference']:.1e}",
        f"- OKS AP: {_number(report['oks_ap_before'])} before -> {_number(report['oks_ap_after'])} after (see the "
        "notes below)",
        "- overlays: `overlays/` (synthetic people: ground truth left, prediction right); keypoints with their names: "
        "`keypoints.json`",
        f"- total time: {report['seconds']} s",
        "",
        "Notes:",
        "",
        *(f"- {note}" for note in report["metric_notes"].values()),
        "",
    ])
