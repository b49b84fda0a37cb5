"""Question: how fast does a tiny Sapiens2 model learn each task with the official losses, and how much of full
fine-tuning's gain does LoRA keep?

Trains a tiny model per task (single CPU thread by default), evaluating every `--eval-every` steps, and writes the
learning curves (metric vs step, baseline = the untrained model measured in the same run) plus a LoRA-vs-full
comparison to JSON.

    python benchmarks/bench_training_learning.py --data toy          # the procedural toy records of the tests
    python benchmarks/bench_training_learning.py --data synthetic    # the synthetic humans (slower, harder)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers
from transformers import PrinterCallback, TrainingArguments

import sapiens2_hf
from sapiens2_hf.data.datasets import Sapiens2TaskDataset
from sapiens2_hf.data.synthetic_source import SyntheticRecords
from sapiens2_hf.training import Sapiens2Trainer, apply_lora, trainable_parameter_count
from sapiens2_hf.training.tasks import training_task


METRICS = {"pose": ("pck_0_1", False), "seg": ("miou", False), "normal": ("mean_angular_error_deg", True),
           "pointmap": ("mean_l2_error", True), "albedo": ("psnr", False)}
# task: (toy input size, patch, steps, learning rate) -- the settings of tests/test_training_learning.py
TOY = {"seg": ((32, 32), 8, 100, 1e-2), "normal": ((32, 32), 8, 80, 5e-3), "albedo": ((32, 32), 8, 80, 5e-3),
       "pose": ((64, 48), 16, 100, 1e-2), "pointmap": ((64, 48), 16, 60, 1e-2)}
SYNTHETIC = {"seg": ((64, 48), 8, 150, 5e-3), "normal": ((64, 48), 8, 150, 5e-3), "albedo": ((64, 48), 8, 150, 5e-3),
             "pose": ((64, 48), 16, 150, 1e-2), "pointmap": ((64, 48), 16, 150, 1e-2)}


def datasets_for(task, data, size, canonical_focal):
    transform = training_task(task).transform
    off = {key: 0.0 for key in transform.DEFAULT_PROBABILITIES}
    kwargs = {"sigma": 1.0} if task == "pose" else {"canonical_focal_length": canonical_focal} if task == "pointmap" else {}
    train_t = transform(size, augment_probabilities=off, **kwargs)
    eval_t = transform(size, train=False, **kwargs)
    if data == "toy":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from toy_records import TOY_RECORDS

        record_size = (96, 80) if task == "pose" else size
        return (Sapiens2TaskDataset(TOY_RECORDS[task](64, seed=1, size=record_size), train_t),
                Sapiens2TaskDataset(TOY_RECORDS[task](16, seed=2, size=record_size), eval_t))
    height = 96
    return (Sapiens2TaskDataset(SyntheticRecords(task, 64, seed=1, height=height, width=height * 3 // 4), train_t),
            Sapiens2TaskDataset(SyntheticRecords(task, 16, seed=2, height=height, width=height * 3 // 4), eval_t))


def run(task, data, eval_every, lora_rank=None, steps=None):
    size, patch, default_steps, learning_rate = (TOY if data == "toy" else SYNTHETIC)[task]
    steps = steps or default_steps
    torch.manual_seed(0)
    model = sapiens2_hf.model_class_for_task(task)(sapiens2_hf.tiny_config(task, image_size=list(size), patch_size=patch))
    if lora_rank:
        model = apply_lora(model, task, rank=lora_rank)
    # Canonical focal length: 768 px belongs to the 768-pixel-wide official input; at tiny inputs use the input width
    # (toy camera: its own f = 40 px), so canonical depths stay in metres.
    train, evaluation = datasets_for(task, data, size, 40.0 if data == "toy" else float(size[1]))
    with tempfile.TemporaryDirectory() as output:
        args = TrainingArguments(output, per_device_train_batch_size=8, per_device_eval_batch_size=16, max_steps=steps,
                                 learning_rate=learning_rate, warmup_steps=0.05, weight_decay=0.0, optim="adamw_torch",
                                 report_to=[], batch_eval_metrics=True, use_cpu=True, save_strategy="no",
                                 disable_tqdm=True, seed=0, logging_steps=eval_every, eval_strategy="steps",
                                 eval_steps=eval_every)
        trainer = Sapiens2Trainer(model=model, args=args, train_dataset=train, eval_dataset=evaluation, task=task,
                                  official_schedule=True)
        trainer.remove_callback(PrinterCallback)
        metric = METRICS[task][0]
        curve = [(0, trainer.evaluate()[f"eval_{metric}"])]
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        curve += [(h["step"], h[f"eval_{metric}"]) for h in trainer.state.log_history if f"eval_{metric}" in h]
    trainable, total = trainable_parameter_count(model)
    return {"task": task, "metric": metric, "lower_is_better": METRICS[task][1], "steps": steps,
            "train_seconds_including_evals": round(seconds, 1), "curve": curve, "untrained": curve[0][1],
            "final": curve[-1][1], "trainable_parameters": trainable, "lora_rank": lora_rank}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=("toy", "synthetic"), default="toy")
    parser.add_argument("--tasks", nargs="*", default=sorted(METRICS))
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--lora-task", default="normal")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default="bench_training_learning.json")
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    results = {"environment": {"torch": torch.__version__, "transformers": transformers.__version__,
                               "python": platform.python_version(), "device": "cpu", "threads": options.threads,
                               "batch_size": 8, "data": options.data}, "learning": [], "lora_vs_full": None}
    for task in options.tasks:
        result = run(task, options.data, options.eval_every)
        results["learning"].append(result)
        print(f"{task:9s} {result['metric']:24s} untrained {result['untrained']:.4g} -> {result['final']:.4g} "
              f"after {result['steps']} steps ({result['train_seconds_including_evals']} s); curve {result['curve']}")
    if options.lora_task:
        full = next((r for r in results["learning"] if r["task"] == options.lora_task), None) or run(
            options.lora_task, options.data, options.eval_every)
        lora = run(options.lora_task, options.data, options.eval_every, lora_rank=options.lora_rank)
        gain = lambda r: (r["untrained"] - r["final"]) * (1 if r["lower_is_better"] else -1)  # noqa: E731
        results["lora_vs_full"] = {"full": full, "lora": lora, "gain_ratio": gain(lora) / gain(full),
                                   "trainable_ratio": lora["trainable_parameters"] / full["trainable_parameters"]}
        print(f"LoRA r{options.lora_rank} on {options.lora_task}: {lora['untrained']:.4g} -> {lora['final']:.4g} with "
              f"{lora['trainable_parameters']} trainable vs full {full['untrained']:.4g} -> {full['final']:.4g} with "
              f"{full['trainable_parameters']}: {100 * results['lora_vs_full']['gain_ratio']:.1f} % of the gain, "
              f"{100 * results['lora_vs_full']['trainable_ratio']:.1f} % of the trainable parameters")
    Path(options.output).write_text(json.dumps(results, indent=2))
    print(f"wrote {options.output}")


if __name__ == "__main__":
    main()
