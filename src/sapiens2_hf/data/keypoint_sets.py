"""Keypoint sets: the names, left/right flip pairs, skeleton and OKS sigmas of a pose model's keypoints, for fine-tuning
on any set (COCO-17, MPII, CrowdPose, a hand, a face, COCO-WholeBody, or your own), not only Sapiens2's 308.

A set comes from the data (a COCO file's person category: `keypoints` and `skeleton`), from a small JSON layout file
(`{"keypoints": [...names], "skeleton": [[a, b], ...], "flip_pairs": ..., "sigmas": ...}`, `skeleton` 1-based as in
COCO files unless `"skeleton_base": 0`), or from a preset (`KEYPOINT_SET_PRESETS`). It travels in the model's
config.json (`id2label`, `flip_pairs`, `skeleton`, `oks_sigmas`), so the pipeline, the command line, drawing, video
smoothing and the metrics follow the model's own set (`KeypointSet.from_config`).

Flip pairs not given are derived from left/right names (`derive_flip_pairs`: `left_x`/`right_x`, `l_x`/`r_x`,
`LShoulder`/`RShoulder`, `x_left`/`x_right`); a set with none trains without flip augmentation (the run says so).
Sigmas not given are derived by name from the official 308 table (`keypoint_sources`: each point's 308 counterpart,
the mean of two for a midpoint); COCO-17 and CrowdPose keep their benchmarks' published sigmas, which the 308 table
repeats for the 17 COCO points.

Each preset point also names the 308 keypoint(s) it is made from (`sources`): what `--init_head_from` copies a
warm-started head's channels from, and what converts a 308 model's output into the set.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..modeling.sapiens2_label_data import POSE_FLIP_PAIRS, POSE_KEYPOINT_NAMES
from .keypoint_formats import KEYPOINT_FORMAT_MAPPINGS
from .label_tables import KEYPOINT_OKS_SIGMAS


@dataclass(frozen=True)
class KeypointSet:
    """A pose model's keypoints.

    Attributes:
        name (`str`): the preset's name, or where the set came from (`"coco file"`, a file name).
        names (`tuple[str, ...]`): keypoint names in channel order.
        flip_pairs (`tuple[tuple[int, int], ...]`): 0-based `(left, right)` pairs that swap under a horizontal flip;
            empty: the set is not mirrored (a single hand), so training does not flip.
        skeleton (`tuple[tuple[int, int], ...]`): 0-based links drawn between keypoints.
        sigmas (`tuple[float, ...]`, *optional*): per-keypoint OKS sigmas (COCO's `k / 2`).
        sources (`tuple[tuple[str, ...], ...]`, *optional*): per keypoint, the 308 names it is made from (one: the
            same landmark; two: their midpoint; none: no counterpart).
    """

    name: str
    names: tuple[str, ...]
    flip_pairs: tuple[tuple[int, int], ...] = ()
    skeleton: tuple[tuple[int, int], ...] = ()
    sigmas: tuple[float, ...] | None = None
    sources: tuple[tuple[str, ...], ...] | None = field(default=None, compare=False)

    def __post_init__(self):
        count = len(self.names)
        if count == 0:
            raise ValueError(f"keypoint set {self.name!r} has no keypoints.")
        if len(set(self.names)) != count:
            duplicates = sorted({n for n in self.names if self.names.count(n) > 1})
            raise ValueError(f"keypoint set {self.name!r} repeats the name(s) {duplicates}; names must be unique.")
        for what, pairs in (("flip_pairs", self.flip_pairs), ("skeleton", self.skeleton)):
            for pair in pairs:
                if len(pair) != 2 or not all(isinstance(i, int) and 0 <= i < count for i in pair):
                    raise ValueError(f"keypoint set {self.name!r}: {what} entry {list(pair)} is not two keypoint "
                                     f"indices in [0, {count}).")
        used = [i for pair in self.flip_pairs for i in pair]
        if len(used) != len(set(used)) or any(a == b for a, b in self.flip_pairs):
            raise ValueError(f"keypoint set {self.name!r}: a keypoint is in two flip pairs, or paired with itself.")
        if self.sigmas is not None and (len(self.sigmas) != count or not all(s > 0 for s in self.sigmas)):
            raise ValueError(f"keypoint set {self.name!r}: {len(self.sigmas)} OKS sigmas for {count} keypoints "
                             "(one positive value each).")
        if self.sources is not None and len(self.sources) != count:
            raise ValueError(f"keypoint set {self.name!r}: {len(self.sources)} sources for {count} keypoints.")

    def __len__(self) -> int:
        return len(self.names)

    # -- builders ----------------------------------------------------------------------------------------------

    @classmethod
    def build(cls, name: str, names, flip_pairs=None, skeleton=(), sigmas=None, sources=None) -> "KeypointSet":
        """A set with the gaps filled: flip pairs from left/right names, sources from the 308 names (a name of the
        308 layout is its own source), sigmas from the sources (`derived_sigmas`)."""
        names = tuple(str(n) for n in names)
        pairs = derive_flip_pairs(names) if flip_pairs is None else tuple(_pairs(flip_pairs))
        if sources is None:
            known = set(POSE_KEYPOINT_NAMES)
            sources = tuple((n,) if n in known else () for n in names)
        sources = tuple(tuple(s) for s in sources)
        if sigmas is None:
            sigmas = derived_sigmas(sources)
        return cls(name, names, pairs, tuple(_pairs(skeleton)), None if sigmas is None else tuple(map(float, sigmas)),
                   sources)

    @classmethod
    def from_coco_category(cls, category: dict, name: str = "coco file") -> "KeypointSet":
        """The set of a COCO keypoint category: its `keypoints` names and 1-based `skeleton`."""
        names = category.get("keypoints")
        if not isinstance(names, list) or not names:
            raise ValueError(f"the COCO category {category.get('name', '?')!r} has no `keypoints` name list; add "
                             "one, or pass --keypoint_set with a preset or a layout file.")
        skeleton = [(int(a) - 1, int(b) - 1) for a, b in category.get("skeleton") or []]
        preset = _preset_with_names(names)
        if preset is not None:  # a known layout (COCO's own person category): its flips, sigmas and sources
            return KeypointSet(name, preset.names, preset.flip_pairs, tuple(skeleton) or preset.skeleton,
                               preset.sigmas, preset.sources)
        return cls.build(name, names, skeleton=skeleton)

    @classmethod
    def from_file(cls, path: str | Path) -> "KeypointSet":
        """A JSON layout file: `{"keypoints": [names], "skeleton": [[a, b], ...] (1-based; `"skeleton_base": 0` for
        0-based), "flip_pairs": [[a, b], ...] (0-based, optional: derived from names), "sigmas": [...] (optional)}`;
        a COCO annotation file works too (its first category with keypoints)."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"keypoint layout file {path}: {error}") from None
        if isinstance(data, dict) and "categories" in data:
            category = next((c for c in data["categories"] if c.get("keypoints")), None)
            if category is None:
                raise ValueError(f"{path} has no category with `keypoints`.")
            return cls.from_coco_category(category, name=path.name)
        if not isinstance(data, dict) or not isinstance(data.get("keypoints"), list):
            raise ValueError(f"keypoint layout file {path} must hold an object with a `keypoints` name list.")
        base = int(data.get("skeleton_base", 1))
        skeleton = [(int(a) - base, int(b) - base) for a, b in data.get("skeleton") or []]
        return cls.build(path.name, data["keypoints"], flip_pairs=data.get("flip_pairs"), skeleton=skeleton,
                         sigmas=data.get("sigmas"))

    @classmethod
    def from_config(cls, config) -> "KeypointSet":
        """The set a pose config describes (`id2label`, `flip_pairs`, `skeleton`, `oks_sigmas`); a 308-keypoint
        config without a skeleton is the official set."""
        names = tuple(config.id2label[i] for i in range(config.num_labels))
        if config.num_labels == len(POSE_KEYPOINT_NAMES) and getattr(config, "skeleton", None) is None:
            return KEYPOINT_SET_PRESETS["sapiens308"]
        preset = _preset_with_names(names)
        if preset is not None and [list(p) for p in preset.flip_pairs] == [list(p) for p in config.flip_pairs or []]:
            return preset  # with its 308 sources (midpoints), which config.json does not store
        sigmas = getattr(config, "oks_sigmas", None)
        return cls.build("model", names, flip_pairs=config.flip_pairs or (), skeleton=getattr(config, "skeleton", None)
                         or (), sigmas=sigmas)

    def from_308(self, keypoints):
        """Keypoints `(..., 308, 3)` (x, y, visibility) of the official layout as this set's `(..., K, 3)`: each point
        its source (a copy), the midpoint of two sources (visibility: the smaller), or absent (zeros) without one."""
        import numpy as np

        keypoints = np.asarray(keypoints, dtype=np.float32)
        if keypoints.shape[-2:] != (len(POSE_KEYPOINT_NAMES), 3):
            raise ValueError(f"from_308 takes (..., 308, 3) keypoints, got {keypoints.shape}.")
        if self.sources is None:
            raise ValueError(f"keypoint set {self.name!r} names no 308 sources for its points.")
        index = {name: i for i, name in enumerate(POSE_KEYPOINT_NAMES)}
        out = np.zeros(keypoints.shape[:-2] + (len(self.names), 3), np.float32)
        for k, group in enumerate(self.sources):
            if group:
                members = keypoints[..., [index[name] for name in group], :]
                out[..., k, :2] = members[..., :2].mean(axis=-2)
                out[..., k, 2] = members[..., 2].min(axis=-1)
        return out

    def config_kwargs(self) -> dict[str, Any]:
        """What a pose config stores of the set (`Sapiens2Config(**set.config_kwargs(), ...)`)."""
        return {"id2label": dict(enumerate(self.names)), "flip_pairs": [list(p) for p in self.flip_pairs],
                "skeleton": [list(link) for link in self.skeleton],
                "oks_sigmas": None if self.sigmas is None else list(self.sigmas)}

    def flip_indices(self) -> list[int] | None:
        """`flip_indices[k]`: the channel keypoint `k` becomes under a flip; None when the set has no pairs."""
        if not self.flip_pairs:
            return None
        indices = list(range(len(self.names)))
        for a, b in self.flip_pairs:
            indices[a], indices[b] = b, a
        return indices

    def body_halves(self) -> tuple[list[int], list[int]]:
        """Upper- and lower-body keypoints for the half-body augmentation, by name (hips, knees, ankles, feet are
        lower; shoulders, elbows, wrists, head and face upper); empty lists when the names say nothing of it."""
        lower_words = ("hip", "knee", "ankle", "heel", "toe", "foot", "pelvis")
        upper_words = ("shoulder", "elbow", "wrist", "nose", "eye", "ear", "head", "neck", "thorax")
        lower = [i for i, n in enumerate(self.names) if any(w in n.lower() for w in lower_words)]
        upper = [i for i, n in enumerate(self.names) if any(w in n.lower() for w in upper_words)]
        return upper, lower


def _pairs(pairs) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in pairs]


# -- left/right names ------------------------------------------------------------------------------------------

# A side word in a name: `left` / `l` as a whole word (between `_`, `-`, spaces or the ends, any case), or `L` /
# `Left` / `left` before a capital (`LShoulder`, `leftEye`; case-sensitive, so that `lateral` is no side word).
_LEFT_WORD = re.compile(r"(?:(?<=^)|(?<=[_\- ]))(left|l)(?=$|[_\- ])", re.IGNORECASE)
_LEFT_CAMEL = re.compile(r"^(L|Left|left)(?=[A-Z])")


def _as_right(word: str) -> str:
    """`word` (a spelling of "left" or "l") as the same spelling of "right" / "r"."""
    right = "right" if len(word) > 1 else "r"
    if word.isupper():
        return right.upper()
    return right.capitalize() if word[0].isupper() else right


def _right_name(name: str) -> str | None:
    match = _LEFT_WORD.search(name) or _LEFT_CAMEL.search(name)
    if match is None:
        return None
    return name[:match.start()] + _as_right(match.group(1)) + name[match.end():]


def derive_flip_pairs(names) -> tuple[tuple[int, int], ...]:
    """`(left, right)` index pairs of names that differ only in their side word (`left_eye` / `right_eye`,
    `l_ear` / `r_ear`, `LShoulder` / `RShoulder`, `hip_left` / `hip_right`); points on the centre line stay."""
    index = {name: i for i, name in enumerate(names)}
    pairs = []
    for i, name in enumerate(names):
        right = _right_name(name)
        if right is not None and right in index and index[right] != i:
            pairs.append((i, index[right]))
    return tuple(pairs)


# -- sigmas from the 308 table ---------------------------------------------------------------------------------

_SIGMA_308 = dict(zip(POSE_KEYPOINT_NAMES, KEYPOINT_OKS_SIGMAS))


def derived_sigmas(sources) -> tuple[float, ...] | None:
    """Per keypoint, the OKS sigma of its 308 counterpart (the mean of two for a midpoint); a point without one takes
    the median of the others. None when no point has a counterpart (give the sigmas, or OKS uses 0.05 each)."""
    values = [sum(_SIGMA_308[s] for s in group) / len(group) if group else None for group in sources]
    known = sorted(v for v in values if v is not None)
    if not known:
        return None
    median = known[len(known) // 2]
    return tuple(round(v if v is not None else median, 4) for v in values)


# -- presets ---------------------------------------------------------------------------------------------------

_COCO17 = KEYPOINT_FORMAT_MAPPINGS["coco17"]
_COCO17_NAMES = tuple(p.name for p in _COCO17)
# COCO's person skeleton (1-based in its files)
_COCO17_SKELETON = tuple((a - 1, b - 1) for a, b in (
    (16, 14), (14, 12), (17, 15), (15, 13), (12, 13), (6, 12), (7, 13), (6, 7), (6, 8), (7, 9), (8, 10), (9, 11),
    (2, 3), (1, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 7)))
# CrowdPose's published OKS sigmas
_CROWDPOSE_SIGMAS = (0.079, 0.079, 0.072, 0.072, 0.062, 0.062, 0.107, 0.107, 0.087, 0.087, 0.089, 0.089, 0.079, 0.079)
_HIPS, _SHOULDERS = ("left_hip", "right_hip"), ("left_shoulder", "right_shoulder")

_MPII = (  # MPII Human Pose's 16 joints, in its order
    ("right_ankle", ("right_ankle",)), ("right_knee", ("right_knee",)), ("right_hip", ("right_hip",)),
    ("left_hip", ("left_hip",)), ("left_knee", ("left_knee",)), ("left_ankle", ("left_ankle",)),
    ("pelvis", _HIPS), ("thorax", _SHOULDERS), ("upper_neck", ("neck",)), ("head_top", ()),
    ("right_wrist", ("right_wrist",)), ("right_elbow", ("right_elbow",)), ("right_shoulder", ("right_shoulder",)),
    ("left_shoulder", ("left_shoulder",)), ("left_elbow", ("left_elbow",)), ("left_wrist", ("left_wrist",)),
)
_MPII_SKELETON = ((0, 1), (1, 2), (2, 6), (6, 3), (3, 4), (4, 5), (6, 7), (7, 8), (8, 9), (10, 11), (11, 12),
                  (12, 7), (7, 13), (13, 14), (14, 15))
_CROWDPOSE = (*((n, (n,)) for n in _COCO17_NAMES[5:]), ("head", ()), ("neck", ("neck",)))
_CROWDPOSE_SKELETON = ((12, 13), (13, 0), (13, 1), (0, 2), (2, 4), (1, 3), (3, 5), (0, 6), (1, 7), (6, 7), (6, 8),
                       (8, 10), (7, 9), (9, 11))
# One hand (wrist, then each finger from the knuckle to the tip), as hand datasets label it; its 308 sources are the
# right hand's (a single-hand set has no side, so it is not flipped).
_FINGERS = ("thumb", "forefinger", "middle_finger", "ring_finger", "pinky_finger")
_HAND = (("wrist", ("right_wrist",)), *((f"{finger}{joint}", (f"right_{finger}{joint}" if joint > 1 else
                                                               f"right_{finger}_third_joint",))
                                        for finger in _FINGERS for joint in (1, 2, 3, 4)))
_HAND_SKELETON = tuple(link for f in range(5) for link in ((0, 1 + 4 * f), (1 + 4 * f, 2 + 4 * f),
                                                           (2 + 4 * f, 3 + 4 * f), (3 + 4 * f, 4 + 4 * f)))
_FACE68 = tuple((p.name, p.sources) for p in KEYPOINT_FORMAT_MAPPINGS["coco_wholebody133"][23:91])


def _face68_flip_pairs(offset: int = 0) -> tuple[tuple[int, int], ...]:
    """The iBUG-68 mirror pairs (jaw, eyebrows, nose, eyes, lips), `offset` added."""
    pairs = [(i, 16 - i) for i in range(8)] + [(17 + i, 26 - i) for i in range(5)] + [(31, 35), (32, 34)]
    pairs += [(36, 45), (37, 44), (38, 43), (39, 42), (40, 47), (41, 46)]
    pairs += [(48, 54), (49, 53), (50, 52), (55, 59), (56, 58), (60, 64), (61, 63), (65, 67)]
    return tuple((a + offset, b + offset) for a, b in pairs)


def _chain(first: int, last: int, closed: bool = False) -> tuple[tuple[int, int], ...]:
    links = tuple((i, i + 1) for i in range(first, last))
    return links + ((last, first),) if closed else links


_FACE68_SKELETON = (_chain(0, 16) + _chain(17, 21) + _chain(22, 26) + _chain(27, 30) + _chain(31, 35)
                    + _chain(36, 41, True) + _chain(42, 47, True) + _chain(48, 59, True) + _chain(60, 67, True))
_WB = KEYPOINT_FORMAT_MAPPINGS["coco_wholebody133"]
_WB_FEET = ((15, 17), (15, 18), (15, 19), (16, 20), (16, 21), (16, 22))
_WB_SKELETON = (_COCO17_SKELETON + _WB_FEET + tuple((a + 23, b + 23) for a, b in _FACE68_SKELETON)
                + tuple((a + 91, b + 91) for a, b in _HAND_SKELETON) + tuple((a + 112, b + 112) for a, b in
                                                                             _HAND_SKELETON))


def _preset(name, points, skeleton, flip_pairs=None, sigmas=None) -> KeypointSet:
    points = tuple(points)
    names = tuple(n for n, _ in points)
    return KeypointSet.build(name, names, flip_pairs=flip_pairs, skeleton=skeleton, sigmas=sigmas,
                             sources=tuple(s for _, s in points))


def _sapiens308() -> KeypointSet:
    from ..visualization.styles import SKELETON_LINKS

    return KeypointSet("sapiens308", tuple(POSE_KEYPOINT_NAMES), tuple(tuple(p) for p in POSE_FLIP_PAIRS),
                       tuple(tuple(link) for link in SKELETON_LINKS), tuple(KEYPOINT_OKS_SIGMAS),
                       tuple((n,) for n in POSE_KEYPOINT_NAMES))


#: Preset -> its set (the names each benchmark's files use; `sources` map the points to the 308).
KEYPOINT_SET_PRESETS: dict[str, KeypointSet] = {
    "coco17": _preset("coco17", ((p.name, p.sources) for p in _COCO17), _COCO17_SKELETON),
    "mpii16": _preset("mpii16", _MPII, _MPII_SKELETON),
    "crowdpose14": _preset("crowdpose14", _CROWDPOSE, _CROWDPOSE_SKELETON, sigmas=_CROWDPOSE_SIGMAS),
    "hand21": _preset("hand21", _HAND, _HAND_SKELETON, flip_pairs=()),
    "face68": _preset("face68", _FACE68, _FACE68_SKELETON, flip_pairs=_face68_flip_pairs()),
    "wholebody133": _preset(
        "wholebody133", ((p.name, p.sources) for p in _WB), _WB_SKELETON,
        flip_pairs=derive_flip_pairs(tuple(p.name for p in _WB)) + _face68_flip_pairs(23)),
    "sapiens308": _sapiens308(),
}


def _preset_with_names(names) -> KeypointSet | None:
    names = tuple(names)
    return next((preset for preset in KEYPOINT_SET_PRESETS.values() if preset.names == names), None)


def keypoint_set(value: "str | Path | KeypointSet") -> KeypointSet:
    """A preset name, a layout (or COCO) file, or a set."""
    if isinstance(value, KeypointSet):
        return value
    if str(value) in KEYPOINT_SET_PRESETS:
        return KEYPOINT_SET_PRESETS[str(value)]
    if Path(value).suffix == ".json" or Path(value).is_file():
        return KeypointSet.from_file(value)
    raise ValueError(f"keypoint set {value!r} is neither a preset ({', '.join(KEYPOINT_SET_PRESETS)}) nor a JSON "
                     "layout file.")


__all__ = ["KEYPOINT_SET_PRESETS", "KeypointSet", "derive_flip_pairs", "derived_sigmas", "keypoint_set"]
