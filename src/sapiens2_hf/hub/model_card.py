"""Model cards for Sapiens2 checkpoints, rendered from the config (and, when known, training and evaluation facts)."""

from __future__ import annotations

import os
from importlib import resources

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..modeling import Sapiens2Config
from ..modeling.sapiens2_tasks import (
    BACKBONE_DESCRIPTION,
    BACKBONE_MODEL_CLASS,
    BACKBONE_PIPELINE_TAG,
    BACKBONE_TITLE,
    TASK_SPECS,
)


def _task_facts(task: str | None) -> tuple[str, str, str, str]:
    """(Hub pipeline tag, title, model class, output description) of a task (None: the backbone), from the registry."""
    if task is None:
        return BACKBONE_PIPELINE_TAG, BACKBONE_TITLE, BACKBONE_MODEL_CLASS, BACKBONE_DESCRIPTION
    spec = TASK_SPECS[task]
    return spec.pipeline_tag, spec.title, spec.model_class, spec.description


def _transformers_auto(task: str | None) -> str | None:
    """transformers' Auto class for the checkpoints vanilla transformers loads (the tasks its own port has, and the
    backbone); None for the others."""
    if task is None:
        return "AutoModel"
    spec = TASK_SPECS[task]
    return spec.auto_class if spec.in_transformers else None


def is_hub_id(name: str) -> bool:
    """`namespace/name` that is not a local path (the only form the card's `base_model` and `datasets` take)."""
    return name.count("/") == 1 and not os.path.isabs(name) and not os.path.exists(name)


def _template(name: str = "sapiens2_task.md") -> str:
    # model_cards/ at the repository root, shipped inside the package as assets/model_cards (a symlink in the tree).
    return resources.files("sapiens2_hf").joinpath("assets", "model_cards", name).read_text()


def _labels_section(config: Sapiens2Config) -> str:
    spec = TASK_SPECS.get(config.task)
    if spec is not None and spec.top_down:
        names = [config.id2label[i] for i in range(len(config.id2label))]
        return (f"308 keypoints in the official Sapiens2 order (body 17, feet 6, hands 2 x 20, face 238 and more); "
                f"{len(config.flip_pairs or [])} left/right flip pairs travel in config.json. First ten: "
                + ", ".join(f"`{n}`" for n in names[:10]) + ".")
    if spec is not None and spec.class_map:
        return "29 classes (index: name): " + ", ".join(f"{i}: {config.id2label[i]}" for i in range(len(config.id2label))) + "."
    return "Dense regression; no class labels."


def _card_data(config: Sapiens2Config, repo_id: str, pipeline_tag: str, base_model: str | None,
               datasets: list[str] | None, eval_results: dict[str, float] | None, eval_dataset: str | None,
               adapter_base: str | None) -> ModelCardData:
    """The card's YAML header: library, tags, license, base model, datasets and the model-index of `eval_results`."""
    tags = ["sapiens2", "sapiens2_hf", "human-centric", "vision"] + ([config.task] if config.task else [])
    if adapter_base is not None:
        tags += ["lora", "peft"]
    eval_kwargs = {}
    if eval_results:
        eval_kwargs["eval_results"] = [
            EvalResult(task_type=pipeline_tag, dataset_type=eval_dataset or "custom", dataset_name=eval_dataset or "custom",
                       metric_type=name, metric_value=float(value))
            for name, value in eval_results.items()
        ]
        eval_kwargs["model_name"] = repo_id.split("/")[-1]
    return ModelCardData(
        library_name="transformers" if _transformers_auto(config.task) and adapter_base is None else "sapiens2_hf",
        pipeline_tag=pipeline_tag,
        tags=tags,
        license="other",
        license_name="sapiens2-license",
        license_link="https://github.com/facebookresearch/sapiens2/blob/main/LICENSE.md",
        base_model=base_model,
        datasets=datasets,
        **eval_kwargs,
    )


def _architecture_values(config: Sapiens2Config) -> dict:
    """The template's architecture and input fields."""
    height, width = config.image_size_hw
    kv = sorted(set(config.num_key_value_heads_per_layer))
    return {
        "hidden_size": config.hidden_size,
        "num_layers": config.num_hidden_layers,
        "num_heads": config.num_attention_heads,
        "kv_description": "full multi-head attention" if kv == [config.num_attention_heads] else f"key/value heads per layer in {kv}",
        "num_registers": config.num_register_tokens,
        "patch_size": config.patch_size,
        "rope_dtype": config.rope_dtype,
        "input_description": f"RGB {height}x{width} (height x width), ImageNet mean/std normalised",
    }


def _sapiens2_hf_usage(config: Sapiens2Config, class_name: str, repo_id: str) -> str:
    usage = [
        "import sapiens2_hf",
        f"model = sapiens2_hf.{class_name}.from_pretrained({repo_id!r})",
    ]
    pipeline_task = None if config.task is None else TASK_SPECS[config.task].pipeline_name
    if pipeline_task:
        usage += ["from transformers import pipeline", f"predictor = pipeline({pipeline_task!r}, model={repo_id!r})"]
    return "\n".join(usage)


def _transformers_usage(config: Sapiens2Config, repo_id: str) -> str:
    auto_class = _transformers_auto(config.task)
    if not auto_class:
        return ("transformers has no class for this model; load it with `sapiens2_hf`, or with "
                "`trust_remote_code=True` when the repository ships the sapiens2_hf modeling files.")
    return (
        "```python\nfrom transformers import " + auto_class + "\n"
        f"model = {auto_class}.from_pretrained({repo_id!r})\n```\n\n"
        "transformers' own Sapiens2 classes compute RoPE in float32 where the official model uses bfloat16, which moves "
        "outputs by about 0.2-0.5 % (rel. L2); sapiens2_hf reproduces the official numbers."
    )


def _adapter_texts(task_description: str, class_name: str, adapter_base: str) -> tuple[str, str]:
    """The summary and the transformers paragraph of a LoRA adapter's card."""
    summary = (
        f"A LoRA adapter (peft format) for Sapiens2 {task_description.lower()}, trained on top of `{adapter_base}` "
        "(recorded as `base_model_name_or_path` in adapter_config.json); the decode head is stored in full. "
        f"`sapiens2_hf.{class_name}.from_pretrained` and the pipeline load the base, apply the adapter and merge "
        "it; `sapiens2-hf merge <this adapter> --out <folder>` writes the merged model as a plain model folder."
    )
    transformers_usage = (
        "transformers alone does not rebuild this adapter's model (a fresh Sapiens2 head trained in full on top of "
        "the LoRA backbone). Merge it first with `sapiens2-hf merge <this adapter> --out <folder>`; the merged "
        "folder loads with plain transformers like any Sapiens2 checkpoint."
    )
    return summary, transformers_usage


def render_model_card(
    config: Sapiens2Config,
    repo_id: str = "<your-namespace>/<repo-name>",
    num_parameters: int | None = None,
    source: str = "converted with sapiens2_hf",
    base_model: str | None = None,
    datasets: list[str] | None = None,
    eval_results: dict[str, float] | None = None,
    eval_dataset: str | None = None,
    limitations: str = "",
    adapter_base: str | None = None,
) -> ModelCard:
    """Fills the card template from a config. `eval_results` (metric name -> value) go to the YAML model-index.

    With `adapter_base` the card describes a LoRA adapter of that base (a Hub id or a local path): loading, the
    pipeline and `sapiens2-hf merge`. A Hub id also becomes the YAML `base_model` (a local path cannot).
    """
    pipeline_tag, task_description, class_name, output_description = _task_facts(config.task)
    if adapter_base is not None and base_model is None and is_hub_id(adapter_base):
        base_model = adapter_base
    title = f"Sapiens2 {config.variant or 'custom-size'} - {task_description}"
    summary = (f"A Sapiens2 model ({task_description.lower()}) in the Hugging Face format, loadable with "
               "`sapiens2_hf` (exact official numerics) and, for the tasks it supports, plain transformers.")
    transformers_usage = _transformers_usage(config, repo_id)
    if adapter_base is not None:
        title += " (LoRA adapter)"
        summary, transformers_usage = _adapter_texts(task_description, class_name, adapter_base)
    evaluation = (
        "\n".join(f"- {name}: {value:.4g}" for name, value in eval_results.items()) if eval_results else "Not evaluated yet."
    )
    values = {
        "card_data": _card_data(config, repo_id, pipeline_tag, base_model, datasets, eval_results, eval_dataset,
                                adapter_base).to_yaml(),
        "title": title,
        "summary": summary,
        "task_description": task_description,
        **_architecture_values(config),
        "output_description": output_description,
        "num_parameters": f"{num_parameters:,}" if num_parameters else "see config",
        "source": source,
        "usage_sapiens2_hf": _sapiens2_hf_usage(config, class_name, repo_id),
        "usage_transformers": transformers_usage,
        "labels": _labels_section(config),
        "evaluation": evaluation,
        "limitations": limitations,
    }
    text = _template()
    for key, value in values.items():
        text = text.replace("{{ " + key + " }}", str(value))
    return ModelCard(text)
