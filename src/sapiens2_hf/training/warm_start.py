"""Warm-started heads (`--init_head_from MODEL`): a new head for your own keypoints or classes starts from a trained
Sapiens2 head (the official 308-keypoint pose or 29-class segmentation model, or any model of the task) instead of
random weights.

The new head copies the source head's layers, and each output channel of its last layer (`decode_head.predictor`)
starts from the source channel(s) it corresponds to:

* a keypoint whose 308 source is one of the source model's keypoints (the keypoint set's `sources`), or a class of
  the same name (case, `-`, `_` and spaces ignored): the channel is copied, so at step 0 it gives exactly the source
  model's output for it (same backbone);
* a keypoint the tables derive as the midpoint of two 308 points: the mean of the two channels' weights and biases
  (its heatmap starts as the mean of theirs: near the right place, not its argmax);
* a class that is a union of source classes (`--label_map`, a JSON `{new class: [source classes]}`): the mean of the
  members' weights and biases, so its logit starts as the mean of theirs. Measured (benchmarks/bench_warm_start.py,
  29 classes merged into 6): step-0 mIoU 16.3, as good as the source's own predictions merged (15.7). Adding
  `log(n)` (the log-sum-exp of the members' logits where they agree) made the big unions win everywhere: 4.8;
* anything else starts from the new head's own initialisation (reported as fresh).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

PREDICTOR = "predictor"


@dataclass
class WarmStartReport:
    """What `warm_start_head` did: per output channel of the new head, how it started."""

    copied: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    fresh: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{len(self.copied)} channel(s) copied, {len(self.merged)} made from several source channels, "
                f"{len(self.fresh)} fresh" + (f" ({', '.join(self.fresh[:8])}{', ...' if len(self.fresh) > 8 else ''})"
                                              if self.fresh else ""))


def _normalised(name: str) -> str:
    return str(name).lower().replace("-", "_").replace(" ", "_")


def read_label_map(value: str | dict | None) -> dict[str, list[str]]:
    """`--label_map`: a JSON object `{new class: [source classes]}`, inline or in a file."""
    if value is None or isinstance(value, dict):
        data = value or {}
    else:
        text = Path(value).read_text() if Path(value).is_file() else value
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ValueError(f"--label_map {value!r} is neither a JSON object nor a JSON file: {error}.") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) and v for v in data.values()):
        raise ValueError("--label_map must map each new class to a non-empty list of source classes.")
    return {str(key): [str(v) for v in values] for key, values in data.items()}


def channel_sources(new_config, source_config, task_kind: str, label_map=None) -> list[list[int]]:
    """Per output channel of the new head, the source head's channels it starts from (empty: fresh).

    Args:
        task_kind (`str`): `"keypoints"` (matched through the new keypoint set's 308 sources, else by name) or
            `"classes"` (by name, or `label_map`).
    """
    source_names = [source_config.id2label[i] for i in range(source_config.num_labels)]
    new_names = [new_config.id2label[i] for i in range(new_config.num_labels)]
    index = {_normalised(name): i for i, name in enumerate(source_names)}
    if task_kind == "keypoints":
        from ..data.keypoint_sets import KeypointSet

        new_set = KeypointSet.from_config(new_config)
        groups = new_set.sources or tuple((name,) for name in new_names)
        return [[index[_normalised(n)] for n in group] if all(_normalised(n) in index for n in group) else []
                for group in groups]
    label_map = read_label_map(label_map)
    unknown = sorted(set(label_map) - set(new_names))
    if unknown:
        raise ValueError(f"--label_map names {unknown}, which are not classes of the new model {new_names}.")
    sources = []
    for name in new_names:
        members = label_map.get(name, [name])
        missing = [m for m in members if _normalised(m) not in index]
        if missing and name in label_map:
            raise ValueError(f"--label_map: {name!r} is made of {missing}, which the source model does not have "
                             f"(its classes: {source_names}).")
        sources.append([] if missing else [index[_normalised(m)] for m in members])
    return sources


def warm_start_head(model, source, task_kind: str, label_map=None) -> WarmStartReport:
    """Initialises `model.decode_head` from `source`'s head (a model, or a folder / file `from_pretrained` loads into
    `type(model)` with its own labels): every layer but the last copied (the layouts must match), the last layer's
    channels as the module docstring says. In place; returns what was done."""
    if not hasattr(source, "decode_head"):
        source = type(model).from_pretrained(source)
    new_state, source_state = model.decode_head.state_dict(), source.decode_head.state_dict()
    for key, value in new_state.items():
        if key.startswith(f"{PREDICTOR}."):
            continue
        if key not in source_state or source_state[key].shape != value.shape:
            got = tuple(source_state[key].shape) if key in source_state else "no such layer"
            raise ValueError(f"--init_head_from: the source head's layer {key} is {got}, the new head's "
                             f"{tuple(value.shape)}: the head layouts differ. Use the source's size (--head_preset "
                             "or a backbone of its size).")
    sources = channel_sources(model.config, source.config, task_kind, label_map)
    weight, bias = source_state[f"{PREDICTOR}.weight"], source_state.get(f"{PREDICTOR}.bias")
    new_weight = new_state[f"{PREDICTOR}.weight"].clone()
    new_bias = new_state.get(f"{PREDICTOR}.bias")
    new_bias = None if new_bias is None else new_bias.clone()
    report = WarmStartReport()
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    for k, members in enumerate(sources):
        if not members:
            report.fresh.append(names[k])
            continue
        new_weight[k] = weight[members].mean(dim=0)
        if new_bias is not None and bias is not None:
            new_bias[k] = bias[members].mean()
        (report.copied if len(members) == 1 else report.merged).append(names[k])
    state = {key: value for key, value in source_state.items() if not key.startswith(f"{PREDICTOR}.")}
    state[f"{PREDICTOR}.weight"] = new_weight
    if new_bias is not None:
        state[f"{PREDICTOR}.bias"] = new_bias
    with torch.no_grad():
        model.decode_head.load_state_dict(state, strict=True)
    return report
