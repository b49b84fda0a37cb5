"""The models keep transformers' own conventions where transformers has one:

- the attention kernel is looked up from the config at every call (`ALL_ATTENTION_FUNCTIONS.get_interface`), and
  every attention module holds the model's config, so `set_attn_implementation` switches every layer;
- hidden states and attention weights are recorded by `_can_record_outputs` / `capture_outputs`, tuples come from
  `can_return_tuple`;
- a task model built from a config with a head but no `task` (as transformers' model tests build them) records its
  task, so it saves and loads back;
- `labels` (and each task's further targets) give `loss`, the official task loss.
"""

import json

import pytest
import torch
import torch.nn.functional as F
from task_targets import TARGET_KEYS, pixel_values, task_targets

import sapiens2_hf
from sapiens2_hf import tiny_config
from sapiens2_hf.modeling import layers_sapiens2_hf as modeling_sapiens2_hf  # the attention functions live beside the layers
from sapiens2_hf.modeling.modeling_sapiens2_hf import Sapiens2Attention
from sapiens2_hf.modeling.sapiens2_tasks import task_spec
from sapiens2_hf.training.tasks import default_loss, task_loss


pytestmark = pytest.mark.usefixtures("one_thread")

TASKS = list(TARGET_KEYS)


def _model(task, **overrides):
    torch.manual_seed(0)
    return sapiens2_hf.model_class_for_task(task)(tiny_config(task, **overrides)).eval()


def _field(task):
    return "last_hidden_state" if task is None else task_spec(task).output_field


@pytest.mark.parametrize(
    "task, overrides, size",
    [(None, {}, (64, 48)), ("pose", {}, (64, 48)), ("pointmap", {}, (64, 48)),
     (None, {"num_tokenizer_layers": 1}, (128, 128))],  # the 4K tokenizer's layers hold the same config
    ids=["backbone", "pose", "pointmap", "backbone-4k"],
)
def test_set_attn_implementation_switches_every_attention_module(task, overrides, size, monkeypatch):
    model = _model(task, **overrides)
    attention_modules = {id(module) for module in model.modules() if isinstance(module, Sapiens2Attention)}
    called = []
    eager = modeling_sapiens2_hf.eager_attention_forward

    def counting_eager(module, *args, **kwargs):
        called.append(id(module))
        return eager(module, *args, **kwargs)

    monkeypatch.setattr(modeling_sapiens2_hf, "eager_attention_forward", counting_eager)
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
    assert type(model)._can_set_attn_implementation()  # transformers' own test of the model file
    assert model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        with_sdpa = model(x)
    assert called == []  # control: sdpa runs no eager kernel

    model.set_attn_implementation("eager")
    assert {module.config._attn_implementation for module in model.modules() if hasattr(module, "config")} == {"eager"}
    with torch.no_grad():
        with_eager = model(x, output_attentions=True)
    assert set(called) == attention_modules  # every layer switched, tokenizer layers included
    assert len(with_eager.attentions) == model.config.num_hidden_layers  # recorded in the encoder only
    torch.testing.assert_close(with_eager[_field(task)], with_sdpa[_field(task)], atol=1e-5, rtol=1e-4)

    called.clear()
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        model(x)
    assert called == []


@pytest.mark.parametrize("task", TASKS)
def test_task_models_record_the_encoder_outputs_and_return_tuples(task):
    model = _model(task)
    model.set_attn_implementation("eager")
    x = pixel_values(2)
    with torch.no_grad():
        full = model(x, output_hidden_states=True, output_attentions=True)
        backbone = model.model(x, output_hidden_states=True, output_attentions=True)
        plain = model(x)
        as_tuple = model(x, return_dict=False)
        model.config.return_dict = False
        from_config = model(x)
    config = model.config
    assert len(full.hidden_states) == config.num_hidden_layers + 1 and len(full.attentions) == config.num_hidden_layers
    assert full.hidden_states[0].shape == (2, config.num_prefix_tokens + 4 * 3, config.hidden_size)
    assert all(torch.equal(a, b) for a, b in zip(full.hidden_states, backbone.hidden_states))
    assert all(torch.equal(a, b) for a, b in zip(full.attentions, backbone.attentions))
    # The last recorded state is the last layer's output, before the final norm.
    assert torch.equal(model.model.norm(full.hidden_states[-1]), backbone.last_hidden_state)
    assert plain.loss is None and plain.hidden_states is None and plain.attentions is None
    field = _field(task)
    for output in (as_tuple, from_config):
        assert isinstance(output, tuple) and len(output) == len(plain.to_tuple())
        assert torch.equal(output[0], plain[field])


@pytest.mark.parametrize("task", TASKS)
def test_a_config_with_a_head_but_no_task_round_trips(task, tmp_path):
    model_class = sapiens2_hf.model_class_for_task(task)
    config = tiny_config(task)
    config.task = None  # how transformers' model tests build a config
    torch.manual_seed(0)
    model = model_class(config).eval()
    assert model.config.task == task
    model.save_pretrained(tmp_path / "saved")
    reloaded = model_class.from_pretrained(tmp_path / "saved").eval()
    x = pixel_values(1)
    with torch.no_grad():
        expected, got = model(x), reloaded(x)
    assert reloaded.config.task == task
    saved_weights, loaded_weights = model.state_dict(), reloaded.state_dict()
    assert saved_weights.keys() == loaded_weights.keys()
    assert all(torch.equal(saved_weights[key], loaded_weights[key]) for key in saved_weights)
    # The same weights give the same outputs up to float32 rounding: loaded tensors sit at other memory alignments,
    # which moves the tiny pointmap scale MLP by ~1e-7 relative (the same with a config that has its task).
    for a, b in zip(expected.to_tuple(), got.to_tuple(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0.0)
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["task"] == task
    # Broken control: the recorded task is checked; the class of another task refuses the folder.
    other_task = next(other for other in TASKS if other != task)
    with pytest.raises(ValueError, match=f"`{task}`"):
        sapiens2_hf.model_class_for_task(other_task).from_pretrained(tmp_path / "saved")


@pytest.mark.parametrize("task", TASKS)
def test_labels_give_the_official_task_loss(task):
    model = _model(task)
    x, targets = pixel_values(2), task_targets(task, 2)
    with torch.no_grad():
        plain = model(x)
        with_labels = model(x, **targets)
        as_tuple = model(x, return_dict=False, **targets)
    # The loss `Sapiens2Trainer` applies to the same output and batch (sapiens2_hf.training.tasks), exactly.
    expected, _ = task_loss(task, default_loss(task), plain, targets)
    assert torch.equal(with_labels.loss, expected) and torch.equal(as_tuple[0], expected)
    assert with_labels.loss.ndim == 0 and with_labels.loss > 0
    assert torch.equal(with_labels[_field(task)], plain[_field(task)])  # targets change nothing else
    if "mask" in targets:  # absent, every pixel is valid
        without_mask = {key: value for key, value in targets.items() if key != "mask"}
        all_valid = {**without_mask, "mask": torch.ones_like(targets["mask"])}
        with torch.no_grad():
            assert torch.equal(model(x, **without_mask).loss, model(x, **all_valid).loss)


@pytest.mark.parametrize("task, key", [("pose", "label_weights"), ("pointmap", "target_scales"),
                                       ("pointmap", "intrinsics")])
def test_a_missing_required_target_is_named(task, key):
    targets = {k: v for k, v in task_targets(task, 1).items() if k != key}
    with pytest.raises(ValueError, match=key):
        _model(task)(pixel_values(1), **targets)


def test_the_seg_loss_is_the_official_one_not_plain_cross_entropy():
    model = _model("seg")
    x, targets = pixel_values(2), task_targets("seg", 2)
    with torch.no_grad():
        output = model(x, **targets)
    # Broken control: transformers' stock segmentation loss (cross-entropy, ignore index 255) is another number.
    plain = F.cross_entropy(output.logits, targets["labels"], ignore_index=255)
    assert not torch.isclose(output.loss, plain, rtol=1e-2)


def test_the_pointmap_loss_needs_the_scale_branch():
    config = tiny_config("pointmap")
    config.head_config.scale_conv_out_channels = None
    model = sapiens2_hf.Sapiens2ForPointmapEstimation(config)
    with pytest.raises(ValueError, match="scale branch"):
        model(pixel_values(1), **task_targets("pointmap", 1))


def test_the_seg_class_weights_apply_to_the_official_label_set_only():
    """The official cross-entropy weights belong to the 29 body-part classes; a model fine-tuned to another label set
    (as transformers' model tests build one, 4 labels) trains with an unweighted cross-entropy instead of failing."""
    from sapiens2_hf.losses import SegmentationLoss

    generator = torch.Generator().manual_seed(0)
    config = tiny_config("seg", num_labels=4, id2label={i: f"part{i}" for i in range(4)})
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation(config).eval()
    labels = torch.randint(0, 4, (2, 64, 48), generator=generator)
    with torch.no_grad():
        output = model(pixel_values(2), labels=labels)
        torch.testing.assert_close(output.loss, SegmentationLoss(class_weights=())(output.logits, labels)[0])
    official = sapiens2_hf.Sapiens2ForSemanticSegmentation(tiny_config("seg")).eval()
    labels = torch.randint(0, 29, (2, 64, 48), generator=generator)
    with torch.no_grad():
        output = official(pixel_values(2), labels=labels)
        weighted = SegmentationLoss()(output.logits, labels)[0]
        torch.testing.assert_close(output.loss, weighted)
        assert not torch.allclose(weighted, SegmentationLoss(class_weights=())(output.logits, labels)[0])  # control
