"""Loading in the three formats (official file, our folders, transformers' folders), strictness and error messages."""

import json
import shutil

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import sapiens2_hf
from official_cases import MODEL_CASES, compare, load_case

pytestmark = pytest.mark.compat


TASK_CASES = {"pose": "pose", "seg": "seg", "normal": "normal", "pointmap": "pointmap", "albedo": "albedo", None: "pretrain"}
VANILLA_CLASSES = {
    None: transformers.Sapiens2Model,
    "pose": transformers.Sapiens2ForPoseEstimation,
    "seg": transformers.Sapiens2ForSemanticSegmentation,
    "normal": transformers.Sapiens2ForNormalEstimation,
    "pointmap": transformers.Sapiens2ForPointmapEstimation,
}
OUTPUT_FIELD = {None: "last_hidden_state", "pose": "heatmaps", "seg": "logits", "normal": "normals", "pointmap": "pointmaps", "albedo": "albedos"}


def _output(model, pixel_values, task):
    with torch.no_grad():
        return getattr(model(pixel_values), OUTPUT_FIELD[task])


@pytest.mark.parametrize("task", list(TASK_CASES))
def test_folder_with_only_the_official_file(task, tmp_path):
    _, reference, weights = load_case(TASK_CASES[task])
    shutil.copy(weights, tmp_path / weights.name)
    cls = sapiens2_hf.model_class_for_task(task)
    from_file = cls.from_pretrained(weights)
    from_folder = cls.from_pretrained(tmp_path)
    assert torch.equal(_output(from_file, reference["pixel_values"], task), _output(from_folder, reference["pixel_values"], task))


@pytest.mark.parametrize("task", list(TASK_CASES))
def test_save_load_round_trip_is_exact(task, tmp_path):
    _, reference, weights = load_case(TASK_CASES[task])
    cls = sapiens2_hf.model_class_for_task(task)
    model = cls.from_pretrained(weights)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rope_dtype"] == "bfloat16" and config["task"] == task
    assert config["model_type"] == "sapiens2_hf"  # one model type for every task
    reloaded = cls.from_pretrained(tmp_path)
    assert torch.equal(_output(model, reference["pixel_values"], task), _output(reloaded, reference["pixel_values"], task))
    # Label metadata travels with the checkpoint.
    if task == "pose":
        assert len(reloaded.config.id2label) == 308 and len(reloaded.config.flip_pairs) == 146
        assert reloaded.config.id2label[0] == "nose"
    if task == "seg":
        assert reloaded.config.id2label[0] == "Background" and len(reloaded.config.id2label) == 29


@pytest.mark.parametrize("task", [t for t in TASK_CASES if t in VANILLA_CLASSES])
def test_transformers_loads_our_checkpoints_and_we_load_theirs(task, tmp_path):
    """Our saved folders load in vanilla transformers (fp32 RoPE there: a measured drift), and folders saved by
    vanilla transformers load in our classes exactly."""
    meta, reference, weights = load_case(TASK_CASES[task])
    ours = sapiens2_hf.model_class_for_task(task).from_pretrained(weights)
    ours.save_pretrained(tmp_path / "ours")
    vanilla = VANILLA_CLASSES[task].from_pretrained(tmp_path / "ours")
    vanilla.eval()
    pixel_values = reference["pixel_values"]
    ours_fp32 = sapiens2_hf.model_class_for_task(task).from_pretrained(weights, rope_dtype="float32")
    # Vanilla computes RoPE in fp32: it matches our float32 mode, not the official bf16 numbers.
    assert compare(_output(vanilla, pixel_values, task), _output(ours_fp32, pixel_values, task))["max_abs"] < 1e-4
    field = MODEL_CASES[TASK_CASES[task]][1].get(OUTPUT_FIELD[task], OUTPUT_FIELD[task])
    drift = compare(_output(vanilla, pixel_values, task), reference[field])
    assert drift["rel_l2"] > compare(_output(ours, pixel_values, task), reference[field])["rel_l2"]

    vanilla.save_pretrained(tmp_path / "vanilla")
    reloaded = sapiens2_hf.model_class_for_task(task).from_pretrained(tmp_path / "vanilla")
    assert reloaded.config.rope_dtype == "bfloat16" and reloaded.config.pos_embed_rescale is None
    assert reloaded.config.task == task
    assert torch.equal(_output(reloaded, pixel_values, task), _output(ours, pixel_values, task))


def test_backbone_class_takes_the_backbone_of_a_task_checkpoint(tmp_path):
    _, reference, weights = load_case("pose")
    pose = sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(weights)
    backbone = sapiens2_hf.Sapiens2Model.from_pretrained(weights)
    assert backbone.config.task is None
    expected = pose.model.get_feature_map(reference["pixel_values"])
    assert torch.equal(backbone.get_feature_map(reference["pixel_values"]), expected)
    assert compare(expected, reference["feature_map"])["rel_l2"] < 2e-3  # the pose case's recorded tolerance
    pose.save_pretrained(tmp_path)
    from_folder = sapiens2_hf.Sapiens2Model.from_pretrained(tmp_path)
    assert torch.equal(from_folder.get_feature_map(reference["pixel_values"]), expected)


def test_from_backbone_starts_a_task_model_with_a_fresh_head():
    _, reference, weights = load_case("pretrain")
    backbone = sapiens2_hf.Sapiens2Model.from_pretrained(weights)
    head_config = sapiens2_hf.tiny_config("seg").head_config.to_dict()
    config = sapiens2_hf.Sapiens2Config(**{**backbone.config.to_dict(), "task": "seg", "head_config": head_config, "num_labels": 29})
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_backbone(weights, config=config)
    assert torch.equal(model.model.get_feature_map(reference["pixel_values"]), backbone.get_feature_map(reference["pixel_values"]))


# ----------------------------------------------------------------------------------------------- errors


def test_wrong_task_file_names_the_right_class():
    _, _, weights = load_case("pose")
    with pytest.raises(ValueError, match="`pose` checkpoint.*Sapiens2ForPoseEstimation"):
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(weights)


def test_pretrain_file_into_task_class_points_to_from_backbone():
    _, _, weights = load_case("pretrain")
    with pytest.raises(ValueError, match="from_backbone"):
        sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(weights)


def test_wrong_task_folder_is_refused(tmp_path):
    _, _, weights = load_case("normal")
    sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="`normal` checkpoint.*Sapiens2ForNormalEstimation"):
        sapiens2_hf.Sapiens2ForAlbedoEstimation.from_pretrained(tmp_path)


def test_truncated_file(tmp_path):
    _, _, weights = load_case("seg")
    broken = tmp_path / weights.name
    broken.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(broken)


def test_unknown_and_missing_tensors_are_named(tmp_path):
    _, _, weights = load_case("seg")
    state = load_file(weights)
    extra = dict(state, **{"decode_head.extra_layer.weight": torch.zeros(3)})
    save_file(extra, tmp_path / "sapiens2_x_seg.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="decode_head.extra_layer.weight"):
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path / "sapiens2_x_seg.safetensors")
    missing = {k: v for k, v in state.items() if k != "decode_head.conv_seg.bias"}
    save_file(missing, tmp_path / "sapiens2_y_seg.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="predictor.bias"):
        sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path / "sapiens2_y_seg.safetensors")


def test_missing_tensor_in_hf_folder_is_an_error_not_random_weights(tmp_path):
    _, _, weights = load_case("normal")
    sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["decode_head.predictor.weight"]
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="decode_head.predictor.weight"):
        sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(tmp_path)


def test_an_empty_state_dict_initialises_every_weight_as_a_fresh_model(monkeypatch):
    """`from_pretrained(None, config=, state_dict={})` loads nothing, so `_init_weights` initialises every tensor, as
    it does in the constructor (what transformers' `test_can_init_all_missing_weights` checks on every class, with the
    seed set where both paths call `_initialize_weights`); strictness is unchanged for a state dict that lacks some
    tensors."""
    seed = {"value": 0}
    initialize_weights = transformers.PreTrainedModel._initialize_weights

    def seeded(*args, **kwargs):
        torch.manual_seed(seed["value"])
        return initialize_weights(*args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedModel, "_initialize_weights", seeded)
    config = sapiens2_hf.tiny_config("pointmap")
    fresh = sapiens2_hf.Sapiens2ForPointmapEstimation(config).state_dict()
    loaded = sapiens2_hf.Sapiens2ForPointmapEstimation.from_pretrained(None, config=config, state_dict={}).state_dict()
    assert sorted(loaded) == sorted(fresh)
    assert [name for name in fresh if not torch.equal(loaded[name], fresh[name])] == []
    # controls: another seed gives other weights; a partial state dict is still refused, naming what it lacks
    seed["value"] = 1
    other = sapiens2_hf.Sapiens2ForPointmapEstimation.from_pretrained(None, config=config, state_dict={}).state_dict()
    assert not torch.equal(other["decode_head.predictor.weight"], fresh["decode_head.predictor.weight"])
    partial = {name: tensor for name, tensor in fresh.items() if name != "decode_head.predictor.weight"}
    with pytest.raises(ValueError, match="decode_head.predictor.weight"):
        sapiens2_hf.Sapiens2ForPointmapEstimation.from_pretrained(None, config=config, state_dict=partial)


def test_shape_mismatch_is_named(tmp_path):
    _, _, weights = load_case("normal")
    sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["head_config"]["conv_out_channels"] = [8, 8, 8]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises((ValueError, RuntimeError), match="conv_layers.2"):
        sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(tmp_path)


def test_pickled_checkpoints_are_refused(tmp_path):
    path = tmp_path / "sapiens2_1b_pose.pth"
    path.write_bytes(b"not read")
    with pytest.raises(ValueError, match="never pickled"):
        sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(path)


def test_file_name_cross_check(tmp_path):
    _, _, weights = load_case("pose")
    renamed = tmp_path / "sapiens2_1b_pose.safetensors"
    shutil.copy(weights, renamed)
    with pytest.raises(ValueError, match="says Sapiens2-1b"):
        sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(renamed)
    wrong_task = tmp_path / "sapiens2_tinyp_seg.safetensors"
    shutil.copy(weights, wrong_task)
    with pytest.raises(ValueError, match="says `seg`"):
        sapiens2_hf.Sapiens2ForPoseEstimation.from_pretrained(wrong_task)


def test_not_a_checkpoint_folder(tmp_path):
    with pytest.raises(OSError, match="neither a config.json nor an official"):
        sapiens2_hf.Sapiens2Model.from_pretrained(tmp_path)


# ----------------------------------------------------------------------------------------------- Auto classes


def test_auto_classes(tmp_path):
    _, reference, weights = load_case("albedo")
    albedo = sapiens2_hf.Sapiens2ForAlbedoEstimation.from_pretrained(weights)
    albedo.save_pretrained(tmp_path / "albedo")
    loaded = sapiens2_hf.AutoModelForAlbedoEstimation.from_pretrained(tmp_path / "albedo")
    assert type(loaded) is sapiens2_hf.Sapiens2ForAlbedoEstimation
    assert torch.equal(_output(loaded, reference["pixel_values"], "albedo"), _output(albedo, reference["pixel_values"], "albedo"))
    config = transformers.AutoConfig.from_pretrained(tmp_path / "albedo")
    assert type(config) is sapiens2_hf.Sapiens2Config
    # Our types are registered next to transformers' own `sapiens2` type, which still maps to its classes.
    assert type(transformers.AutoModelForPoseEstimation.from_config(sapiens2_hf.tiny_config("pose"))) is sapiens2_hf.Sapiens2ForPoseEstimation
    assert transformers.CONFIG_MAPPING["sapiens2"] is transformers.Sapiens2Config
    vanilla_config = transformers.Sapiens2Config(**{k: v for k, v in sapiens2_hf.tiny_config("pose").to_dict().items() if k != "model_type"})
    assert type(transformers.AutoModelForPoseEstimation.from_config(vanilla_config)) is transformers.Sapiens2ForPoseEstimation


def test_hub_repo_with_only_an_official_file(tmp_path, monkeypatch):
    """A Hub repo without config.json resolves to its official file (Hub calls replaced by a local fake)."""
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    _, reference, weights = load_case("seg")
    repo = tmp_path / "facebook--sapiens2-seg-tiny"
    repo.mkdir()
    shutil.copy(weights, repo / weights.name)

    def fake_download(repo_id, filename, **kwargs):
        assert repo_id == "facebook/sapiens2-seg-tiny"
        if not (repo / filename).is_file():
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        return str(repo / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", lambda self, repo_id, **kw: [weights.name, "README.md"])
    model = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained("facebook/sapiens2-seg-tiny")
    direct = sapiens2_hf.Sapiens2ForSemanticSegmentation.from_pretrained(weights)
    assert torch.equal(_output(model, reference["pixel_values"], "seg"), _output(direct, reference["pixel_values"], "seg"))


def test_dtype_and_device_arguments_for_official_files():
    _, reference, weights = load_case("normal")
    model = sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights, dtype=torch.bfloat16, device_map="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.model.rope_embeddings.periods.dtype == torch.bfloat16
    assert not model.training
    full = _output(sapiens2_hf.Sapiens2ForNormalEstimation.from_pretrained(weights), reference["pixel_values"], "normal")
    half = _output(model, reference["pixel_values"].bfloat16(), "normal").float()
    assert compare(half, full)["rel_l2"] < 5e-2


def test_stored_rope_periods_are_checked_on_every_path(tmp_path):
    """Official files store their RoPE periods; the model recomputes them, so wrong stored periods (another base or
    head dim: a foreign file) must be refused, the same way for a file, a folder, a state dict in memory and a model
    whose own RoPE dtype differs from the stored one."""
    from sapiens2_hf.modeling.official_format_sapiens2_hf import OfficialCheckpointError

    _, reference, weights = load_case("pose")
    state_dict = load_file(weights)
    key = "backbone.rope_embed.periods"
    assert state_dict[key].dtype == torch.bfloat16
    cls = sapiens2_hf.Sapiens2ForPoseEstimation
    from_file = _output(cls.from_pretrained(weights), reference["pixel_values"], "pose")
    # The genuine periods pass on every path, also cast to float32 with the rest of the state dict.
    for good in (state_dict, {name: tensor.float() for name, tensor in state_dict.items()}):
        in_memory = cls.from_official_state_dict(good, filename=weights.name)
        assert torch.equal(_output(in_memory, reference["pixel_values"], "pose"), from_file)
    broken = dict(state_dict, **{key: state_dict[key] * 2})
    (tmp_path / "folder").mkdir()
    save_file(broken, tmp_path / "folder" / weights.name)
    attempts = {
        "state dict": lambda: cls.from_official_state_dict(broken, filename=weights.name),
        "state dict, float32": lambda: cls.from_official_state_dict({k: v.float() for k, v in broken.items()}),
        "file": lambda: cls.from_pretrained(tmp_path / "folder" / weights.name),
        "folder": lambda: cls.from_pretrained(tmp_path / "folder"),
        "file, float32 RoPE model": lambda: cls.from_pretrained(tmp_path / "folder" / weights.name, rope_dtype="float32"),
        "backbone class": lambda: sapiens2_hf.Sapiens2Model.from_official_state_dict(broken),
    }
    for path, load in attempts.items():
        with pytest.raises(OfficialCheckpointError, match="RoPE periods stored in .* differ from the official formula"):
            load()
    # The in-memory path applies the files' dtype policy too: integer tensors are refused with their names.
    quantized = dict(state_dict, **{"backbone.cls_token": state_dict["backbone.cls_token"].to(torch.int8)})
    with pytest.raises(OfficialCheckpointError, match="backbone.cls_token"):
        cls.from_official_state_dict(quantized)
