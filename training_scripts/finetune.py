"""Fine-tune a Sapiens2 model on one task with the official recipe (or LoRA), the way transformers' example scripts
(`run_semantic_segmentation.py` and siblings) do: data from `datasets`, `--do_train` / `--do_eval` / `--do_predict`,
the final model in `--output_dir`, `--push_to_hub`.

    python training_scripts/finetune.py --task pose --preset tiny --output_dir runs/pose --max_steps 50
    # any `datasets` source: a Hub id, a local folder (`save_to_disk` folders are detected), imagefolder, synthetic
    python training_scripts/finetune.py --task seg --backbone_name_or_path sapiens2_0.4b_pretrain.safetensors \
        --dataset_name my-org/human-parts --do_train --do_eval --output_dir runs/seg --bf16 --push_to_hub
    python training_scripts/finetune.py --task seg --dataset_name imagefolder --train_dir data/train \
        --validation_dir data/val --label_column_name label ...   # metadata.jsonl with a `label_file_name` column
    # the documented on-disk formats
    python training_scripts/finetune.py --task pose --dataset coco --train_targets ann.json --train_images img/ ...
    accelerate launch --config_file training_scripts/accelerate_configs/fsdp.yaml training_scripts/finetune.py ...
    python training_scripts/finetune.py args.json   # every argument from one JSON file, as transformers' scripts

    # LoRA: the adapter folder records its base and loads with from_pretrained / pipeline; merge it for plain use
    python training_scripts/finetune.py --task pose --backbone_name_or_path runs/pretrain/backbone --use_lora \
        --output_dir runs/pose_lora
    sapiens2-hf merge runs/pose_lora --out runs/pose_merged

Stages: `--do_train`, `--do_eval` and `--do_predict` are followed as given; a run that names none of them trains, then
evaluates when there is evaluation data. `--output_dir` ends as a model repository (weights, config, image processor,
model card; a LoRA run: the adapter) that `pipeline(..., model=output_dir)` loads, beside transformers' run files;
`--push_to_hub` uploads it. An --output_dir holding another run (checkpoints, weights) is refused: pass
`--overwrite_output_dir` (deletes that run's checkpoints, weights and trainer state; other files stay) or
`--resume_from_checkpoint True`, which resumes from the newest complete checkpoint in --output_dir (a checkpoint whose
save was interrupted is skipped). `--seed` is applied before the model and data are built; bad records are skipped
and listed in <output_dir>/skipped_samples.json (`--strict` stops at the first one). Every option:
`python training_scripts/finetune.py --help` (ours plus all of transformers.TrainingArguments). A run holds
--output_dir while it runs (the lock file `_sapiens2_run.lock`): a second run started into it meanwhile is refused. An
error of the arguments, data, model source or --output_dir ends the script in one line with exit code 2. `--task` takes
the official tasks and those of installed packages (entry-point group `sapiens2_hf.tasks`), registered at start.
"""

import json
import os
import sys

from transformers import HfArgumentParser

from sapiens2_hf.runs.errors import run_script
from sapiens2_hf.tasks import load_installed_tasks
from sapiens2_hf.training.arguments import DataArguments, ModelArguments
from sapiens2_hf.training.evaluation import metric_unit
from sapiens2_hf.training.finetune import run_finetune
from sapiens2_hf.training.run_setup import Sapiens2TrainingArguments, check_process_count
from sapiens2_hf.utils.extras import require


_STAGE_FLAGS = ("do_train", "do_eval", "do_predict")


def _stage_flags_given(argv) -> bool:
    """Whether the command line (or the JSON file) names any of --do_train / --do_eval / --do_predict."""
    if len(argv) == 1 and argv[0].endswith(".json"):
        with open(argv[0]) as handle:
            return any(flag in json.load(handle) for flag in _STAGE_FLAGS)
    return any(arg.lstrip("-").split("=")[0].replace("-", "_") in _STAGE_FLAGS for arg in argv if arg.startswith("--"))


def main(argv=None):
    require("accelerate", feature="training")  # before TrainingArguments, whose own error names transformers' pip extra
    check_process_count()
    argv = sys.argv[1:] if argv is None else list(argv)
    load_installed_tasks()  # tasks of installed packages join --task's choices
    parser = HfArgumentParser((ModelArguments, DataArguments, Sapiens2TrainingArguments))
    if len(argv) == 1 and argv[0].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    trainer, metrics = run_finetune(model_args, data_args, training_args,
                                    default_stages=not _stage_flags_given(argv))
    if trainer.is_world_process_zero():  # the final metrics, once (run_finetune saves them without printing)
        for name, value in sorted(metrics.items()):
            unit = metric_unit(name)
            print(f"{name}: {value}" + (f"  ({unit})" if unit else ""))


if __name__ == "__main__":
    # the arguments, data, model source or --output_dir at fault: one line and exit code 2, as `sapiens2-hf`
    sys.exit(run_script("finetune.py", main, sys.argv[1:]))
