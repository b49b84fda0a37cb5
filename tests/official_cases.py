"""Access to the official-code fixtures copied into tests/fixtures/official (see its README.md for provenance)."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

FIXTURES = Path(__file__).parent / "fixtures" / "official"

# case -> (class name, {our output field: fixture tensor name})
MODEL_CASES = {
    "pretrain": ("Sapiens2Model", {"last_hidden_state": "last_hidden_state"}),
    "pose": ("Sapiens2ForPoseEstimation", {"heatmaps": "heatmaps"}),
    "seg": ("Sapiens2ForSemanticSegmentation", {"logits": "logits"}),
    "normal": ("Sapiens2ForNormalEstimation", {"normals": "normals"}),
    "pointmap": ("Sapiens2ForPointmapEstimation", {"pointmaps": "pointmaps", "scales": "scales"}),
    "albedo": ("Sapiens2ForAlbedoEstimation", {"albedos": "albedo"}),
}
ROPE_SUFFIX = {"bfloat16": "", "float32": "_rope_fp32"}


def case_dir(case: str) -> Path:
    path = FIXTURES / case
    if not path.is_dir():
        raise FileNotFoundError(f"Fixture case {case} is missing from {FIXTURES}; the suite must be self-contained.")
    return path


def load_case(case: str) -> tuple[dict, dict[str, torch.Tensor], Path]:
    """Returns (meta, reference tensors, weights file path) of a fixture case."""
    folder = case_dir(case)
    meta = json.loads((folder / "meta.json").read_text())
    return meta, load_file(folder / "case.safetensors"), folder / meta["weights_file"]


def compare(actual: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    diff = (actual.double() - reference.double()).abs()
    return {
        "max_abs": diff.max().item(),
        "mean_abs": diff.mean().item(),
        "rel_l2": (diff.norm() / reference.double().norm()).item(),
    }


def within(stats: dict[str, float], tolerance: dict[str, float]) -> bool:
    return all(stats[key] <= tolerance[key] for key in ("max_abs", "mean_abs", "rel_l2"))


# Cases whose official Hub repo also carries transformers-format files (transformers has no albedo or 4K classes).
HUB_LAYOUT_CASES = {
    "pretrain": "Sapiens2Model",
    "pose": "Sapiens2ForPoseEstimation",
    "seg": "Sapiens2ForSemanticSegmentation",
    "normal": "Sapiens2ForNormalEstimation",
    "pointmap": "Sapiens2ForPointmapEstimation",
}


def make_official_hub_folder(case: str, folder: Path, files: tuple[str, ...] = ("hf", "official"),
                             image_size: tuple[int, int] | None = None) -> Path:
    """Lays out `folder` like Meta's official Hub repos (facebook/sapiens2-<task>-<size>).

    - `"hf"`: config.json and model.safetensors written by transformers' own classes, and preprocessor_config.json
      written by transformers' stock `Sapiens2ImageProcessor`;
    - `"official"`: the original `sapiens2_<size>_<task>.safetensors` file;
    - `"bare"`: no config.json or preprocessor_config.json at all (with `"official"`: the original file alone).
    Without `"hf"` but not bare, the two configs are still written beside the original file (a repo whose
    transformers-format weights were not uploaded). `image_size` (height, width): the input size the configs record
    (default: the original file's own, 1024x768 for most cases).
    """
    import shutil

    import transformers

    import sapiens2_hf

    meta, _, weights = load_case(case)
    folder.mkdir(parents=True, exist_ok=True)
    size = {} if image_size is None else {"image_size": list(image_size)}
    ours = getattr(sapiens2_hf, HUB_LAYOUT_CASES[case]).from_pretrained(weights, **size)
    if "bare" not in files:
        # What transformers' conversion script writes: its own config class (no rope_dtype/task fields), its own
        # model class's save_pretrained, and the stock processor at the model's input size.
        known = set(transformers.Sapiens2Config.__dataclass_fields__)
        fields = {k: v for k, v in ours.config.to_dict().items() if k in known and k not in ("model_type", "architectures", "transformers_version")}
        head = fields.pop("head_config", None)
        if head is not None:
            head_known = set(transformers.models.sapiens2.configuration_sapiens2.Sapiens2HeadConfig.__dataclass_fields__)
            fields["head_config"] = {k: v for k, v in head.items() if k in head_known and k not in ("model_type", "transformers_version")}
        fields.pop("pos_embed_rescale", None)  # transformers' own default (2.0) is what its files carry
        config = transformers.Sapiens2Config(**fields)
        model = getattr(transformers, HUB_LAYOUT_CASES[case])(config)
        model.load_state_dict(ours.state_dict(), strict=True)
        model.save_pretrained(folder)
        if "hf" not in files:
            (folder / "model.safetensors").unlink()
        height, width = ours.config.image_size_hw
        transformers.Sapiens2ImageProcessor(size={"height": height, "width": width}).save_pretrained(folder)
    if "official" in files:
        shutil.copy(weights, folder / weights.name)
    return folder


def e2e_case(task):
    """(folder, meta, reference tensors, eager model at the fixture's input size) of an `*_e2e` fixture."""
    import sapiens2_hf

    folder = FIXTURES / f"{task}_e2e"
    meta = json.loads((folder / "meta.json").read_text())
    size = [meta["input"]["height"], meta["input"]["width"]]
    model = sapiens2_hf.model_class_for_task(task).from_pretrained(folder / meta["weights_file"], image_size=size)
    return folder, meta, load_file(folder / "case.safetensors"), model.eval()


#: Share of keypoints that must lie within their own `per_keypoint_tolerance_px` when a pipeline's keypoints are
#: compared with the fixture's (computed on another machine). That tolerance comes from four 1-ulp input
#: perturbations on one machine; other kernels (another CPU, ATEN_CPU_CAPABILITY=avx2, onnxruntime) round elsewhere
#: and, on this random model's flat heatmaps, move a few near-tied keypoints past their floor: 5 of 308 with the flip
#: test under ATEN_CPU_CAPABILITY=avx2 on an AVX-512 CPU, 6 with onnxruntime. The aggregate tolerance holds as well.
POSE_KEYPOINTS_WITHIN_OWN_TOLERANCE = 0.97


def pose_keypoints_within(keypoints, meta: dict, ref: dict, name: str) -> tuple[bool, dict[str, float]]:
    """Whether one person's `(308, 2)` keypoints match the e2e fixture's `keypoints_image{name}` as far as the fixture
    allows across machines: the aggregate `recommended_tolerance` (max-abs, mean-abs, rel-L2) and at least
    `POSE_KEYPOINTS_WITHIN_OWN_TOLERANCE` of the keypoints within their own per-keypoint tolerance. Returns
    `(ok, stats)`, the stats naming what was measured."""
    reference = ref["keypoints_image" + name][0]
    keypoints = torch.as_tensor(keypoints).to(reference.dtype)
    stats = compare(keypoints, reference)
    own = torch.tensor(meta["noise_floor"]["per_keypoint_tolerance_px"]["keypoints_image" + name][0])
    stats["within_own_tolerance"] = ((keypoints - reference).abs().amax(-1) <= own).float().mean().item()
    ok = (within(stats, meta["noise_floor"]["recommended_tolerance"]["keypoints_image" + name])
          and stats["within_own_tolerance"] >= POSE_KEYPOINTS_WITHIN_OWN_TOLERANCE)
    return ok, stats
