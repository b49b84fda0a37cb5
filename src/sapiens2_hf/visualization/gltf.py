"""3D results as binary glTF (`.glb`): the person's pointmap as a coloured triangle mesh and the 3D skeleton, readable
by trimesh, Blender, three.js / `<model-viewer>` and Gradio's `Model3D`.

Written with the standard library and numpy (glTF 2.0 is a JSON header and one binary buffer). Results are in the
camera frame (X right, Y down, Z forward, metres); glTF is Y up looking down -Z, so points are written as
`(X, -Y, -Z)`: the scene opens upright, seen from the camera. Mesh faces: two triangles per 2x2 block of person
pixels, left out where a pixel has no point or the depths differ by more than `depth_jump` (an arm in front of the
chest stays apart from it).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

import numpy as np

from ..utils.atomic_io import atomic_write_bytes

_FLOAT, _UNSIGNED_BYTE, _UNSIGNED_INT = 5126, 5121, 5125
_ARRAY_BUFFER, _ELEMENT_ARRAY_BUFFER = 34962, 34963
_POINTS, _LINES, _TRIANGLES = 0, 1, 4
# camera frame (Y down, Z forward) -> glTF (Y up, Z towards the viewer)
_TO_GLTF = np.array([1.0, -1.0, -1.0], dtype=np.float32)


@dataclass
class PointmapMesh:
    """A triangle mesh of a pointmap: `vertices` `(N, 3)` float32 camera-frame metres, `colors` `(N, 3)` uint8,
    `faces` `(M, 3)` int64 indices, `pixels` `(N, 2)` the (row, column) of each vertex, `stride` the pixel step."""

    vertices: np.ndarray
    colors: np.ndarray
    faces: np.ndarray
    pixels: np.ndarray
    stride: int


def pointmap_mesh(pointmap, image=None, mask=None, *, depth_jump: float = 0.05, max_vertices: int = 250_000,
                  stride: int | None = None) -> PointmapMesh:
    """Triangulates the person pixels of `pointmap` (`(H, W, 3)`; pixels with non-finite XYZ or Z <= 0 and pixels
    outside `mask` are left out) on the pixel grid, taking every `stride`-th row and column (default: the least that
    keeps at most `max_vertices` vertices). `image` `(H, W, 3)` uint8 gives the vertex colours (grey without)."""
    pointmap = np.asarray(pointmap, dtype=np.float32)
    if pointmap.ndim != 3 or pointmap.shape[-1] != 3:
        raise ValueError(f"pointmap must be (height, width, 3), got {pointmap.shape}.")
    usable = np.isfinite(pointmap).all(axis=-1) & (pointmap[..., 2] > 0)
    if mask is not None:
        usable &= np.asarray(mask, dtype=bool)
    if stride is None:
        stride = max(1, int(np.ceil(np.sqrt(usable.sum() / max(1, max_vertices)))))
    grid = usable[::stride, ::stride]
    points = pointmap[::stride, ::stride]
    index = np.full(grid.shape, -1, dtype=np.int64)
    index[grid] = np.arange(int(grid.sum()))
    rows, columns = np.nonzero(grid)
    vertices = points[grid]
    if image is not None:
        colors = np.asarray(image)[::stride, ::stride][grid][:, :3].astype(np.uint8)
    else:
        colors = np.full((len(vertices), 3), 180, dtype=np.uint8)
    # the two triangles of each 2x2 block (a, b / c, d), wound so that their normals face the camera
    a, b, c, d = index[:-1, :-1], index[:-1, 1:], index[1:, :-1], index[1:, 1:]
    depth = points[..., 2]
    za, zb, zc, zd = depth[:-1, :-1], depth[:-1, 1:], depth[1:, :-1], depth[1:, 1:]
    faces = []
    for (i, j, k), (zi, zj, zk) in (((a, c, b), (za, zc, zb)), ((b, c, d), (zb, zc, zd))):
        ok = (i >= 0) & (j >= 0) & (k >= 0)
        with np.errstate(invalid="ignore"):
            spread = np.maximum(np.maximum(zi, zj), zk) - np.minimum(np.minimum(zi, zj), zk)
            ok &= spread <= depth_jump
        faces.append(np.stack([i[ok], j[ok], k[ok]], axis=1))
    faces = np.concatenate(faces) if faces else np.zeros((0, 3), dtype=np.int64)
    return PointmapMesh(vertices=vertices, colors=colors, faces=faces,
                        pixels=np.stack([rows * stride, columns * stride], axis=1), stride=stride)


class _GlbBuilder:
    """Collects accessors, meshes and nodes of one glTF scene and its binary buffer."""

    def __init__(self):
        self.binary = bytearray()
        self.gltf = {"asset": {"version": "2.0", "generator": "sapiens2_hf"}, "scene": 0, "scenes": [{"nodes": []}],
                     "nodes": [], "meshes": [], "materials": [], "accessors": [], "bufferViews": [], "buffers": []}

    def accessor(self, array: np.ndarray, component: int, kind: str, target: int | None, normalized: bool = False,
                 bounds: bool = False) -> int:
        data = np.ascontiguousarray(array).tobytes()
        while len(self.binary) % 4:
            self.binary.append(0)
        view = {"buffer": 0, "byteOffset": len(self.binary), "byteLength": len(data)}
        if target is not None:  # vertex and index data; animation samples and skin matrices name no target
            view["target"] = target
        self.gltf["bufferViews"].append(view)
        self.binary.extend(data)
        entry = {"bufferView": len(self.gltf["bufferViews"]) - 1, "componentType": component, "count": len(array),
                 "type": kind}
        if normalized:
            entry["normalized"] = True
        if bounds:
            flat = np.asarray(array).reshape(len(array), -1)
            entry["min"] = [float(v) for v in flat.min(axis=0)]
            entry["max"] = [float(v) for v in flat.max(axis=0)]
        self.gltf["accessors"].append(entry)
        return len(self.gltf["accessors"]) - 1

    def material(self, name: str, color=(1.0, 1.0, 1.0, 1.0), double_sided: bool = True) -> int:
        self.gltf["materials"].append({"name": name, "doubleSided": double_sided, "pbrMetallicRoughness": {
            "baseColorFactor": [float(c) for c in color], "metallicFactor": 0.0, "roughnessFactor": 1.0}})
        return len(self.gltf["materials"]) - 1

    def mesh(self, name: str, positions: np.ndarray, mode: int, material: int, indices=None, colors=None) -> None:
        positions = (np.asarray(positions, dtype=np.float32) * _TO_GLTF).astype(np.float32)
        attributes = {"POSITION": self.accessor(positions, _FLOAT, "VEC3", _ARRAY_BUFFER, bounds=True)}
        if colors is not None:
            rgba = np.concatenate([np.asarray(colors, np.uint8)[:, :3], np.full((len(colors), 1), 255, np.uint8)], 1)
            attributes["COLOR_0"] = self.accessor(rgba, _UNSIGNED_BYTE, "VEC4", _ARRAY_BUFFER, normalized=True)
        primitive = {"attributes": attributes, "mode": mode, "material": material}
        if indices is not None:
            flat = np.asarray(indices, dtype=np.uint32).reshape(-1)
            primitive["indices"] = self.accessor(flat, _UNSIGNED_INT, "SCALAR", _ELEMENT_ARRAY_BUFFER)
        self.gltf["meshes"].append({"name": name, "primitives": [primitive]})
        self.gltf["nodes"].append({"name": name, "mesh": len(self.gltf["meshes"]) - 1})
        self.gltf["scenes"][0]["nodes"].append(len(self.gltf["nodes"]) - 1)

    def glb(self) -> bytes:
        while len(self.binary) % 4:
            self.binary.append(0)
        self.gltf["buffers"] = [{"byteLength": len(self.binary)}]
        for key in ("materials", "accessors", "bufferViews"):
            if not self.gltf[key]:
                del self.gltf[key]
        header = json.dumps(self.gltf, separators=(",", ":")).encode()
        header += b" " * (-len(header) % 4)
        chunks = struct.pack("<II", len(header), 0x4E4F534A) + header
        if self.binary:
            chunks += struct.pack("<II", len(self.binary), 0x004E4942) + bytes(self.binary)
        return struct.pack("<III", 0x46546C67, 2, 12 + len(chunks)) + chunks


def skeleton_segments(keypoints_3d, valid, links) -> np.ndarray:
    """`(L, 2)` index pairs of the `links` whose two keypoints are both valid (and finite)."""
    keypoints_3d = np.asarray(keypoints_3d)
    ok = np.asarray(valid, bool) & np.isfinite(keypoints_3d).all(axis=-1)
    pairs = [(a, b) for a, b in links if a < len(ok) and b < len(ok) and ok[a] and ok[b]]
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def write_people_glb(path: str | os.PathLike, people: list[dict], pointmap=None, image=None, mask=None, *,
                     links=(), depth_jump: float = 0.05, max_vertices: int = 250_000) -> dict:
    """Writes `path` (`.glb`, atomically): node `person_surface` (the pointmap mesh, when `pointmap` is given), and
    per `sapiens2-pose-3d` person `i` nodes `skeleton_<i>_joints` (its valid 3D keypoints as points) and
    `skeleton_<i>_bones` (the `links` between them as lines). Returns the `vertices`, `faces` and per person `joints`
    and `bones` counts."""
    builder = _GlbBuilder()
    summary = {"vertices": 0, "faces": 0, "people": []}
    if pointmap is not None:
        mesh = pointmap_mesh(pointmap, image, mask, depth_jump=depth_jump, max_vertices=max_vertices)
        if len(mesh.faces):
            builder.mesh("person_surface", mesh.vertices, _TRIANGLES, builder.material("surface"), mesh.faces,
                         mesh.colors)
            summary.update(vertices=len(mesh.vertices), faces=len(mesh.faces))
    joint_material = builder.material("joints", (1.0, 0.25, 0.1, 1.0))
    bone_material = builder.material("bones", (0.1, 0.8, 1.0, 1.0))
    for number, person in enumerate(people):
        points = np.asarray(person["keypoints_3d"], dtype=np.float32)
        valid = np.asarray(person["keypoint_3d_valid"], bool) & np.isfinite(points).all(axis=-1)
        kept = np.nonzero(valid)[0]
        entry = {"joints": int(len(kept)), "bones": 0}
        if len(kept):
            builder.mesh(f"skeleton_{number}_joints", points[kept], _POINTS, joint_material)
            position = np.full(len(points), -1, dtype=np.int64)
            position[kept] = np.arange(len(kept))
            segments = skeleton_segments(points, valid, links)
            if len(segments):
                builder.mesh(f"skeleton_{number}_bones", points[kept], _LINES, bone_material,
                             indices=position[segments])
                entry["bones"] = int(len(segments))
        summary["people"].append(entry)
    atomic_write_bytes(path, builder.glb())
    return summary


def write_skeleton_animation(path: str | os.PathLike, times, positions, links=(), names=None) -> dict:
    """Writes an animated 3D skeleton as `.glb` (atomically): one node per joint, its translation animated over
    `times` (seconds, increasing), and the `links` as lines skinned to those nodes, so they follow the joints in any
    glTF viewer (Blender imports it as an armature with one animation).

    `positions` `(T, J, 3)` are camera-frame metres, NaN where a joint is unknown: a joint is held at its last
    known position (before its first: its first one); one never known is left out, with its links. `names`: joint
    node names. Returns `{"joints": kept, "bones": ..., "frames": ...}`.
    """
    times = np.asarray(times, dtype=np.float32).reshape(-1)
    positions = np.asarray(positions, dtype=np.float32)
    if positions.ndim != 3 or positions.shape[0] != len(times) or positions.shape[-1] != 3:
        raise ValueError(f"positions must be (T, J, 3) with T = len(times) = {len(times)}, got {positions.shape}.")
    if len(times) > 1 and not (np.diff(times) > 0).all():
        raise ValueError("times must increase.")
    kept, filled = _held_joints(positions)
    filled = filled * _TO_GLTF
    builder = _GlbBuilder()
    gltf = builder.gltf
    rest = filled[0] if len(filled) else np.zeros((0, 3), np.float32)
    joint_nodes = []
    for column, joint in enumerate(kept):
        name = str(names[joint]) if names is not None else f"joint_{joint}"
        gltf["nodes"].append({"name": name, "translation": [float(v) for v in rest[column]]})
        joint_nodes.append(len(gltf["nodes"]) - 1)
    root = {"name": "skeleton", "children": list(joint_nodes)}
    position = np.full(positions.shape[1], -1, dtype=np.int64)
    position[kept] = np.arange(len(kept))
    pairs = np.asarray([(position[a], position[b]) for a, b in links
                        if a < len(position) and b < len(position) and position[a] >= 0 and position[b] >= 0],
                       dtype=np.int64).reshape(-1, 2)
    if len(kept) and len(pairs):
        _add_bone_mesh(builder, rest, joint_nodes, pairs)
    gltf["nodes"].append(root)
    gltf["scenes"][0]["nodes"].append(len(gltf["nodes"]) - 1)
    if len(kept) and len(times) > 1:
        _add_joint_animation(builder, times, filled, joint_nodes)
    atomic_write_bytes(path, builder.glb())
    return {"joints": int(len(kept)), "bones": int(len(pairs)), "frames": int(len(times))}


def _held_joints(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The joints known at least once, and their `(T, kept, 3)` positions with each gap holding the last known
    position (before the first: the first)."""
    known = np.isfinite(positions).all(axis=-1)
    kept = np.nonzero(known.any(axis=0))[0]
    filled = positions[:, kept].copy()
    for column in range(len(kept)):
        track, ok = filled[:, column], known[:, kept[column]]
        first = int(np.argmax(ok))
        track[:first] = track[first]
        for t in range(first + 1, len(track)):
            if not ok[t]:
                track[t] = track[t - 1]
    return kept, filled


def _add_bone_mesh(builder: _GlbBuilder, rest: np.ndarray, joint_nodes: list[int], pairs: np.ndarray) -> None:
    """The bone mesh: one vertex per joint at its rest position, skinned with weight 1 to that joint's node, and a
    line per pair of joints."""
    gltf, count = builder.gltf, len(joint_nodes)
    attributes = {
        "POSITION": builder.accessor(rest.astype(np.float32), _FLOAT, "VEC3", _ARRAY_BUFFER, bounds=True),
        "JOINTS_0": builder.accessor(np.stack([np.arange(count)] + [np.zeros(count)] * 3, 1)
                                     .astype(np.uint16), 5123, "VEC4", _ARRAY_BUFFER),
        "WEIGHTS_0": builder.accessor(np.tile(np.array([[1, 0, 0, 0]], np.float32), (count, 1)), _FLOAT,
                                      "VEC4", _ARRAY_BUFFER),
    }
    inverse_bind = np.tile(np.eye(4, dtype=np.float32), (count, 1, 1))
    inverse_bind[:, 3, :3] = -rest  # column-major: the translation is the last column, stored last
    gltf["skins"] = [{"joints": joint_nodes, "inverseBindMatrices": builder.accessor(
        inverse_bind.reshape(count, 16), _FLOAT, "MAT4", None)}]
    indices = builder.accessor(pairs.reshape(-1).astype(np.uint32), _UNSIGNED_INT, "SCALAR", _ELEMENT_ARRAY_BUFFER)
    gltf["meshes"].append({"name": "bones", "primitives": [{
        "attributes": attributes, "indices": indices, "mode": _LINES,
        "material": builder.material("bones", (0.1, 0.8, 1.0, 1.0))}]})
    gltf["nodes"].append({"name": "bones", "mesh": 0, "skin": 0})
    gltf["scenes"][0]["nodes"].append(len(gltf["nodes"]) - 1)


def _add_joint_animation(builder: _GlbBuilder, times: np.ndarray, filled: np.ndarray, joint_nodes: list[int]) -> None:
    """One linear translation channel per joint node over `times`."""
    time_accessor = builder.accessor(times[:, None], _FLOAT, "SCALAR", None, bounds=True)
    samplers, channels = [], []
    for column, node in enumerate(joint_nodes):
        output = builder.accessor(np.ascontiguousarray(filled[:, column]), _FLOAT, "VEC3", None)
        samplers.append({"input": time_accessor, "output": output, "interpolation": "LINEAR"})
        channels.append({"sampler": len(samplers) - 1, "target": {"node": node, "path": "translation"}})
    builder.gltf["animations"] = [{"name": "keypoints_3d", "samplers": samplers, "channels": channels}]


__all__ = ["PointmapMesh", "pointmap_mesh", "skeleton_segments", "write_people_glb", "write_skeleton_animation"]
