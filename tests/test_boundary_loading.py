"""Every public loading entry point (our classes' `from_pretrained`, transformers' Auto classes, `transformers.pipeline`
and `sapiens2_hf.pipeline`) runs the same checks before work starts, and a refusal is never turned into a load with
another class: transformers' pipeline factory, when the registered class refuses a checkpoint, tries the classes named
by config.json's `architectures` (transformers' own Sapiens2 classes bear our class names), which used to run a folder
we had refused. Each test pairs its refusal with a healthy control through the same path."""

import json
import shutil

import pytest
import torch
import transformers
from official_cases import load_case
from safetensors.torch import load_file, save_file

import sapiens2_hf
from sapiens2_hf import Sapiens2ForSemanticSegmentation
from sapiens2_hf.modeling.configuration_sapiens2_hf import tiny_config
from sapiens2_hf.processing import Sapiens2HFImageProcessor


pytestmark = pytest.mark.usefixtures("one_thread")

SEG_PIPELINE = "sapiens2-segmentation"
FOLDER_FACTORIES = ("class", "auto", "transformers.pipeline", "sapiens2_hf.pipeline")
PIPELINE_FACTORIES = ("transformers.pipeline", "sapiens2_hf.pipeline")


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def _load(factory: str, source) -> torch.nn.Module:
    """The model that `factory` builds from `source` (a folder or an official file) for segmentation."""
    if factory == "class":
        return Sapiens2ForSemanticSegmentation.from_pretrained(source)
    if factory == "auto":
        return transformers.AutoModelForSemanticSegmentation.from_pretrained(source)
    if factory == "transformers.pipeline":
        return transformers.pipeline(SEG_PIPELINE, model=str(source), device="cpu").model
    if factory == "sapiens2_hf.pipeline":
        return sapiens2_hf.pipeline(SEG_PIPELINE, model=str(source), device="cpu").model
    raise AssertionError(factory)


def _seg_folder(folder, processor: bool = True):
    torch.manual_seed(0)
    Sapiens2ForSemanticSegmentation(tiny_config("seg")).save_pretrained(folder)
    if processor:
        Sapiens2HFImageProcessor(task="seg", size={"height": 64, "width": 48}).save_pretrained(folder)
    return folder


def _check_healthy(factory: str, source) -> None:
    """Control: `source` loads through `factory` as our class with the stored weights."""
    model = _load(factory, source)
    assert type(model) is Sapiens2ForSemanticSegmentation
    if source.is_dir():
        stored = load_file(source / "model.safetensors")
        name = next(key for key in sorted(stored) if key.startswith("decode_head") and key.endswith("weight"))
        torch.testing.assert_close(model.state_dict()[name], stored[name], rtol=0, atol=0)
    else:  # an official file: its tensors have the original names; the head's classifier is the one of its shape
        stored = load_file(source)
        name = next(key for key in sorted(stored) if key.startswith("decode_head") and key.endswith("weight"))
        ours = [t for t in model.state_dict().values() if t.shape == stored[name].shape]
        assert any(torch.equal(t, stored[name].float()) for t in ours), name


def _edit_config(folder, **fields) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))


# ---------------------------------------------------------------------------- 1: a refusal is final, whatever loads it


@pytest.mark.parametrize("processor", [True, False], ids=["with-preprocessor", "without-preprocessor"])
@pytest.mark.parametrize("factory", FOLDER_FACTORIES)
def test_a_non_finite_folder_is_refused_by_every_factory_never_loaded_by_another_class(factory, processor, tmp_path):
    _check_healthy(factory, _seg_folder(tmp_path / "healthy", processor))
    folder = _seg_folder(tmp_path / "nan", processor)
    state = load_file(folder / "model.safetensors")
    name = sorted(key for key in state if key.startswith("decode_head") and key.endswith("weight"))[0]
    state[name].view(-1)[3] = float("nan")
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    # our message (not transformers' fallback warning, not a missing image processor), naming the tensor
    with pytest.raises(ValueError, match="NaN or infinite") as error:
        _load(factory, folder)
    assert name in _one_line(error) and str(folder) in _one_line(error)


def test_a_foreign_model_built_from_our_folder_is_refused_by_our_pipelines(tmp_path):
    """transformers' own class reading our config.json (model type `sapiens2_hf`, not its `sapiens2`) is what the
    pipeline factory's fallback builds; handed to our pipeline as an object it is refused too, with the reason our
    class gives for the folder."""
    folder = _seg_folder(tmp_path / "nan")
    state = load_file(folder / "model.safetensors")
    name = sorted(state)[-1]
    state[name].view(-1)[0] = float("inf")
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    foreign = transformers.Sapiens2ForSemanticSegmentation.from_pretrained(folder)
    with pytest.raises(ValueError, match="NaN or infinite") as error:
        transformers.pipeline(SEG_PIPELINE, model=foreign, device="cpu")
    assert name in _one_line(error)
    # control: transformers' class loaded from transformers' own config.json is welcome
    native_config = {k: v for k, v in tiny_config("seg").to_dict().items() if k not in ("model_type", "rope_dtype")}
    transformers.Sapiens2ForSemanticSegmentation(transformers.Sapiens2Config.from_dict(native_config)).save_pretrained(
        tmp_path / "native")
    native = transformers.Sapiens2ForSemanticSegmentation.from_pretrained(tmp_path / "native")
    processor = Sapiens2HFImageProcessor(task="seg", size={"height": 64, "width": 48})
    assert transformers.pipeline(SEG_PIPELINE, model=native, image_processor=processor, device="cpu").model is native


# ------------------------------------------------------------------------------- 2: a config of another model type


@pytest.mark.parametrize("factory", ["class", *PIPELINE_FACTORIES])
def test_a_config_of_another_model_type_is_refused_naming_it(factory, tmp_path):
    _check_healthy(factory, _seg_folder(tmp_path / "healthy"))
    folder = _seg_folder(tmp_path / "bert")
    _edit_config(folder, model_type="bert")
    with pytest.raises(ValueError, match="`bert`") as error:
        _load(factory, folder)
    assert "sapiens2_hf" in _one_line(error)  # what is expected


# ------------------------------------------------------------------------------------ 3: a config of another task


@pytest.mark.parametrize("factory", ["class", *PIPELINE_FACTORIES])
def test_a_config_of_another_task_is_refused_naming_both_tasks_and_the_pipeline(factory, tmp_path):
    _check_healthy(factory, _seg_folder(tmp_path / "healthy"))
    folder = _seg_folder(tmp_path / "pose")  # segmentation weights under a config that says pose
    _edit_config(folder, task="pose")
    with pytest.raises(ValueError, match="`pose` checkpoint, not a `seg` one") as error:
        _load(factory, folder)
    assert "sapiens2-pose" in _one_line(error)


# --------------------------------------------------------------------------- 4: corrupt .safetensors files, checked


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _header_longer_than_the_file(data: bytes) -> bytes:
    return (len(data) * 4).to_bytes(8, "little") + data[8:]


def _header_not_json(data: bytes) -> bytes:
    length = int.from_bytes(data[:8], "little")
    return data[:8] + b"{" * length + data[8 + length:]


def _offsets_beyond_the_data(data: bytes) -> bytes:
    """The header is intact and says more data than there is: the tail of the tensors is gone."""
    return data[:-64]


# corruption -> (how, what our check says of it)
CORRUPTIONS = {
    "zero-bytes": (lambda data: b"", "it is 0 bytes long"),
    "truncated": (_truncated, "past the end of the data"),
    "header-length-past-the-end": (_header_longer_than_the_file, "runs past the end of the file"),
    "header-not-json": (_header_not_json, "header is not JSON"),
    "offsets-beyond-the-data": (_offsets_beyond_the_data, "past the end of the data"),
}


def _corrupt(path, corruption: str) -> None:
    path.write_bytes(CORRUPTIONS[corruption][0](path.read_bytes()))


# transformers' pipeline factory answers our refusal (a ValueError) by trying transformers' own class, whose
# safetensors error the factory's loop does not catch: the weights are checked when the factory reads the config
# (`Sapiens2Config.check_weights_beside`), before any class is tried.


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@pytest.mark.parametrize("factory", FOLDER_FACTORIES)
def test_a_corrupt_weights_file_in_a_folder_is_refused_naming_file_and_fix(factory, corruption, tmp_path):
    _check_healthy(factory, _seg_folder(tmp_path / "healthy"))
    folder = _seg_folder(tmp_path / "corrupt")
    weights = folder / "model.safetensors"
    _corrupt(weights, corruption)
    with pytest.raises(ValueError, match="truncated or corrupt") as error:
        _load(factory, folder)
    message = _one_line(error)
    assert str(weights) in message and CORRUPTIONS[corruption][1] in message
    assert "download it again" in message and "save_pretrained" in message


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@pytest.mark.parametrize("factory", ["class", "sapiens2_hf.pipeline"])
def test_a_corrupt_official_file_is_refused_naming_file_and_fix(factory, corruption, tmp_path):
    _, _, official = load_case("seg")
    healthy = tmp_path / "healthy" / official.name
    healthy.parent.mkdir()
    shutil.copy(official, healthy)
    _check_healthy(factory, healthy)
    crafted = tmp_path / "corrupt" / official.name
    crafted.parent.mkdir()
    shutil.copy(official, crafted)
    _corrupt(crafted, corruption)
    with pytest.raises(ValueError, match="truncated or corrupt") as error:
        _load(factory, crafted)
    message = _one_line(error)
    assert str(crafted) in message and CORRUPTIONS[corruption][1] in message and "download it again" in message


def test_the_header_check_passes_healthy_files_and_names_a_lying_offset(tmp_path):
    """The cheap check (length, JSON, offsets against the file size) accepts what safetensors writes, including an
    empty state dict, metadata and several dtypes, and names the first fault of a crafted one."""
    from sapiens2_hf.modeling.loading_sapiens2_hf import CorruptCheckpointError, check_safetensors_file

    path = tmp_path / "mixed.safetensors"
    save_file({"a": torch.zeros(3, 2), "b": torch.ones(5, dtype=torch.bfloat16), "c": torch.arange(4)}, path,
              metadata={"format": "pt"})
    check_safetensors_file(path)
    save_file({}, tmp_path / "empty.safetensors")
    check_safetensors_file(tmp_path / "empty.safetensors")
    header = json.dumps({"a": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24]},
                         "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 48]}}).encode()
    lying = tmp_path / "lying.safetensors"
    lying.write_bytes(len(header).to_bytes(8, "little") + header + bytes(40))  # `b` ends 8 bytes past the data
    with pytest.raises(CorruptCheckpointError, match=r"tensor 'b' .*past the end") as error:
        check_safetensors_file(lying)
    assert str(lying) in _one_line(error)
    assert issubclass(CorruptCheckpointError, ValueError)
