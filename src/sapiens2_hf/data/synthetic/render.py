"""Render a `Scene` into an image and every Sapiens2 label from one analytic ray cast.

All labels come from the same first-hit buffer, so they agree exactly: depth and the pointmap are the hit points,
normals the analytic surface normals at those points, segmentation the part/region of the hit primitive, and
keypoint visibility a ray cast through each keypoint against the same primitives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...modeling.sapiens2_label_data import NUM_POSE_KEYPOINTS
from ._raycast import NEAR_PLANE, Primitives, cast_rays, render_primitives, surface_frames
from .body import ELLIPSOID_CODE, KEYPOINT_MODELED, KEYPOINT_OWNERS, KEYPOINT_TOLERANCE, build_person
from .human import BLOTCH, CHECKS, EYEBALL, IRIS_ANGLE, NUM_MATERIALS, PUPIL_ANGLE, STRIPES
from .matting import soft_matte


def _background(bg: dict, height: int, width: int, mirrored: bool):
    """Background albedo `(height, width, 3)` in [0, 1] (a fresh array) and grey shading `(height, width)`; float32.

    Every pattern is a function of the pixel coordinates, so a mirrored scene evaluates it at ``W - 1 - x``.
    """
    f32 = np.float32
    xs = np.arange(width, dtype=f32)
    if mirrored:
        xs = (width - 1) - xs
    ys = np.arange(height, dtype=f32)
    cx0, cy0 = f32(0.5 * (width - 1)), f32(0.5 * (height - 1))
    xc, yc = xs - cx0, ys - cy0
    c1 = np.asarray(bg["color1"], dtype=f32)
    c2 = np.asarray(bg["color2"], dtype=f32)
    ca, sa = f32(np.cos(bg["angle"])), f32(np.sin(bg["angle"]))
    kind = bg["kind"]
    if kind == "blobs":
        return _blobs(bg, height, width, mirrored), _bg_shading(bg, xc, yc, width, height)
    if kind == "plain":
        weight = None
    elif kind == "gradient":
        weight = np.clip((xc[None, :] * ca + yc[:, None] * sa) / f32(max(height, width)) + f32(0.5), 0.0, 1.0)
    elif kind == "stripes":
        p = f32(bg["period"])
        band = np.floor((xc * (ca / p))[None, :] + (yc * (sa / p))[:, None]).astype(np.int32)
        weight = band & 1
    elif kind == "checker":
        p = f32(bg["period"])
        weight = (np.floor(xc / p).astype(np.int32)[None, :] + np.floor(yc / p).astype(np.int32)[:, None]) & 1
    elif kind == "wall_floor":
        return _wall_floor(bg, xc, ys, c1, c2), _bg_shading(bg, xc, yc, width, height)
    else:
        raise ValueError(f"Unknown background kind {kind!r}; use plain, gradient, stripes, checker, blobs, wall_floor.")
    albedo = np.empty((height, width, 3), dtype=f32)
    albedo[:] = c1
    if weight is not None:
        albedo += weight.astype(f32)[..., None] * (c2 - c1)
    return albedo, _bg_shading(bg, xc, yc, width, height)


def _blobs(bg, height, width, mirrored):
    """Smooth colour blobs: the ``grid`` of colours bilinearly upsampled to the image."""
    grid = np.asarray(bg["grid"], dtype=np.float32)  # (grid_h, grid_w, 3)
    y0, fy = _linear_index(height, grid.shape[0])
    x0, fx = _linear_index(width, grid.shape[1])
    if mirrored:
        x0, fx = x0[::-1], fx[::-1]
    rows = grid[y0] + fy[:, None, None] * (grid[y0 + 1] - grid[y0])  # (height, grid_w, 3)
    left = rows[:, x0]  # (height, width, 3)
    return left + fx[None, :, None] * (rows[:, x0 + 1] - left)


def _wall_floor(bg, xc, ys, c1, c2):
    """A wall of colour ``c1`` darkening upwards above the horizon, a floor of planks of colour ``c2`` below it."""
    f32 = np.float32
    height, width = len(ys), len(xc)
    p = f32(bg["period"])
    floor_w = f32(0.75) + f32(0.25) * (np.floor(xc / p).astype(np.int32) & 1)  # (width,)
    wall_w = f32(0.85) + f32(0.15) * ys / f32(max(height - 1, 1))  # (height,)
    is_floor = ys >= f32(bg["horizon"] * (height - 1))
    albedo = np.empty((height, width, 3), dtype=f32)
    albedo[is_floor] = floor_w[:, None] * c2
    albedo[~is_floor] = wall_w[~is_floor][:, None, None] * c1
    return albedo


def _linear_index(size, grid_size):
    """Lower grid node `(size,)` and fraction `(size,)` placing grid nodes 0 and ``grid_size - 1`` at pixels 0 and
    ``size - 1`` (linear interpolation)."""
    pos = np.arange(size, dtype=np.float64) * ((grid_size - 1) / max(size - 1, 1))
    lo = np.minimum(np.floor(pos).astype(np.int64), grid_size - 2)
    return lo, (pos - lo).astype(np.float32)


def _bg_shading(bg, xc, yc, width, height):
    f32 = np.float32
    r2 = (xc / f32(width)) ** 2 * f32(2.0 * bg["vignette"])
    s2 = (yc / f32(height)) ** 2 * f32(2.0 * bg["vignette"])
    return f32(bg["gain"]) * (f32(1.0) - r2[None, :] - s2[:, None])


_IRWIN_HALL_STD = float(np.sqrt(4 * (256**2 - 1) / 12.0))


def sensor_noise(seed: int, std: float, height: int, width: int) -> np.ndarray:
    """Zero-mean, approximately Gaussian noise `(height, width, 3)` float32 with standard deviation ``std``.

    A sum of four uniform bytes (Irwin-Hall), about 4x cheaper than numpy's Gaussian sampler; bounded at 3.45 std.
    """
    n = height * width * 3
    raw = np.frombuffer(np.random.default_rng(seed).bytes(4 * n), dtype=np.uint8).reshape(4, n)
    total = raw.sum(axis=0, dtype=np.int16).astype(np.float32)
    total -= np.float32(510.0)
    total *= np.float32(std / _IRWIN_HALL_STD)
    return total.reshape(height, width, 3)


def _material_table(people):
    """Concatenated material rows of all people (`NUM_MATERIALS` rows per person)."""
    keys = ("base", "second", "kind", "freq", "phase", "dir1", "dir2")
    if not people:
        return {key: np.zeros((0, 3) if key in ("base", "second", "dir1", "dir2") else 0) for key in keys}
    return {key: np.concatenate([p.appearance["materials"][key] for p in people]) for key in keys}


_PUPIL_RGB = np.array([0.03, 0.025, 0.025])


def _albedo(table, material, body_points, local):
    """Per-pixel albedo `(num_pixels, 3)` in [0, 1] from material rows and body-frame texture coordinates.

    Every texture is a convex blend of the material's two colours, so albedo stays in [0, 1].
    """
    kind = table["kind"][material]
    albedo = table["base"][material]
    textured = np.flatnonzero((kind == STRIPES) | (kind == CHECKS) | (kind == BLOTCH))
    if textured.size:
        m = material[textured]
        p = body_points[textured]
        freq = table["freq"][m]
        u1 = np.einsum("ij,ij->i", p, table["dir1"][m]) * freq + table["phase"][m]
        u2 = np.einsum("ij,ij->i", p, table["dir2"][m]) * freq
        k = kind[textured]
        w = np.where(k == STRIPES, (u1 - np.floor(u1)) < 0.5,
                     np.where(k == CHECKS, (np.floor(u1) + np.floor(u2)) % 2,
                              0.5 + 0.5 * np.sin(2 * np.pi * u1 + 1.5 * np.sin(2 * np.pi * u2))))
        second = table["second"][m]
        albedo[textured] = second + w[:, None] * (albedo[textured] - second)
    eye = np.flatnonzero(kind == EYEBALL)
    if eye.size:
        qz = local[eye, 2]  # cosine of the angle to the gaze axis
        iris = eye[(qz >= np.cos(IRIS_ANGLE)) & (qz < np.cos(PUPIL_ANGLE))]
        albedo[iris] = table["second"][material[iris]]
        albedo[eye[qz >= np.cos(PUPIL_ANGLE)]] = _PUPIL_RGB
    return albedo


def assemble(scene):
    """Camera-frame primitives of all people plus per-primitive label attributes.

    Returns:
        prims (`Primitives`), attrs (`dict`) with ``classes`` `(n, 3)`, ``materials`` `(n, 3)` (global rows),
        ``splits`` `(n, 2)`, ``split_dir`` `(n, 3)`, ``person`` `(n,)`, and ``owners`` `(num_people, 308, 4)`
        global primitive ids of each keypoint's owners (-1 padded).
    """
    geoms = scene.geometry if scene.geometry is not None else [build_person(p) for p in scene.people]
    cone_a, cone_b, cone_ra, cone_rb, centers, axes, radii = [], [], [], [], [], [], []
    cone_attrs, ell_attrs, cone_person, ell_person = [], [], [], []
    for index, (person, geom) in enumerate(zip(scene.people, geoms)):
        rot, trans = person.rotation, person.translation
        cone_a.append(geom.cone_a @ rot.T + trans)
        cone_b.append(geom.cone_b @ rot.T + trans)
        cone_ra.append(geom.cone_ra)
        cone_rb.append(geom.cone_rb)
        centers.append(geom.ellipsoid_center @ rot.T + trans)
        axes.append(np.matmul(rot, geom.ellipsoid_axes))
        radii.append(geom.ellipsoid_radii)
        cone_attrs.append(geom.cone_attrs)
        ell_attrs.append(geom.ellipsoid_attrs)
        cone_person.append(np.full(len(geom.cone_a), index))
        ell_person.append(np.full(len(geom.ellipsoid_center), index))
    if not geoms:
        prims = Primitives(np.zeros((0, 3)), np.zeros((0, 3)), [], [], np.zeros((0, 3)), np.zeros((0, 3, 3)),
                           np.zeros((0, 3)))
        empty = np.zeros((0, 3))
        return prims, {"classes": np.zeros((0, 3), np.int64), "materials": np.zeros((0, 3), np.int64),
                       "splits": np.zeros((0, 2)), "split_dir": empty, "person": np.zeros(0, np.int64),
                       "owners": np.zeros((0, NUM_POSE_KEYPOINTS, 4), np.int64)}
    prims = Primitives(np.concatenate(cone_a), np.concatenate(cone_b), np.concatenate(cone_ra),
                       np.concatenate(cone_rb), np.concatenate(centers), np.concatenate(axes), np.concatenate(radii))
    ca, ea = np.concatenate(cone_attrs), np.concatenate(ell_attrs)
    person = np.concatenate(cone_person + ell_person)
    attrs = {
        "classes": np.concatenate([ca[:, 0:3], ea[:, 0:3]]).astype(np.int64),
        "materials": np.concatenate([ca[:, 3:6], ea[:, 3:6]]).astype(np.int64) + NUM_MATERIALS * person[:, None],
        "splits": np.concatenate([ca[:, 6:8], ea[:, 6:8]]),
        "split_dir": np.concatenate([np.zeros((len(ca), 3)), ea[:, 8:11]]),
        "person": person,
    }
    attrs["owners"] = _owner_ids(geoms, prims.num_cones)
    attrs["geometry"] = geoms
    return prims, attrs


def _owner_ids(geoms, num_cones):
    """Global primitive ids `(num_people, 308, 4)` of each keypoint's owners (-1 padded), from the owner codes."""
    cone_offsets = np.cumsum([0] + [len(g.cone_a) for g in geoms])
    ell_offsets = num_cones + np.cumsum([0] + [len(g.ellipsoid_center) for g in geoms])
    codes = KEYPOINT_OWNERS
    is_ell = codes >= ELLIPSOID_CODE
    return np.stack([
        np.where(codes < 0, -1, np.where(is_ell, ell_offsets[i] + codes - ELLIPSOID_CODE, cone_offsets[i] + codes))
        for i in range(len(geoms))
    ])


@dataclass
class _Hits:
    """The first hit of each foreground pixel: flat pixel ids ``fg``, their rows and columns, the hit primitive
    ``gid``, camera-frame ``points`` and ``normals``, unit-sphere ``local`` coordinates, and the label ``classes``,
    global ``material`` rows and ``person`` of the hit region."""

    fg: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    gid: np.ndarray
    points: np.ndarray
    normals: np.ndarray
    local: np.ndarray
    classes: np.ndarray
    material: np.ndarray
    person: np.ndarray


def _first_hits(prims, attrs, cam, depth_flat, prim_flat) -> _Hits:
    fx, fy, cx, cy = cam.fx, cam.fy, cam.cx, cam.cy
    fg = np.flatnonzero(prim_flat >= 0)
    gid = prim_flat[fg]
    rows, cols = np.divmod(fg, cam.width)
    t = depth_flat[fg]
    points = np.empty((len(fg), 3))
    points[:, 0] = (cols - cx) / fx * t
    points[:, 1] = (rows - cy) / fy * t
    points[:, 2] = t
    normals, axial, local = surface_frames(prims, gid, points)

    split = axial + np.einsum("ij,ij->i", local, attrs["split_dir"][gid])  # split_dir is 0 for cones
    splits = attrs["splits"][gid]
    region = (split >= splits[:, 0]).astype(np.int64) + (split >= splits[:, 1])
    return _Hits(fg, rows, cols, gid, points, normals, local, classes=attrs["classes"][gid, region],
                 material=attrs["materials"][gid, region], person=attrs["person"][gid])


def _shade_people(scene, hits: _Hits):
    """Albedo and Lambert + ambient shading `(num_fg, 3)` of the foreground pixels."""
    # Solid textures live in the body frame; a mirrored person flips x so that its texture is the mirror image.
    body_points = np.empty_like(hits.points)
    for index, p in enumerate(scene.people):
        sel = hits.person == index
        body_points[sel] = np.einsum("ij,jk->ik", hits.points[sel] - p.translation, p.rotation)
        body_points[sel, 0] *= p.texture_sign
    albedo_fg = _albedo(_material_table(scene.people), hits.material, body_points, hits.local)
    lambert = np.maximum(np.einsum("ij,lj->il", hits.normals, scene.light_directions), 0.0)  # (num_fg, num_lights)
    shading_fg = scene.ambient + np.einsum("il,lc->ic", lambert, scene.light_colors)
    return albedo_fg, shading_fg


def _quantise(image_clean, noise, n_pix, height, width):
    """The uint8 image: ``image_clean`` (flat, [0, 1]) plus the sensor noise, rounded and clipped."""
    buffer = image_clean * np.float32(255.0)
    if noise is not None:
        buffer += noise.reshape(n_pix, 3) * np.float32(255.0)
    np.rint(buffer, out=buffer)
    np.clip(buffer, 0.0, 255.0, out=buffer)
    return buffer.astype(np.uint8).reshape(height, width, 3)


def _person_boxes(hits: _Hits, num_people):
    """The people with a visible pixel, each person's new index (-1 for the dropped), and their pixel-edge boxes."""
    person, rows, cols = hits.person, hits.rows, hits.cols
    counts = np.bincount(person, minlength=num_people)
    visible_people = np.flatnonzero(counts > 0)
    new_index = np.full(num_people, -1, dtype=np.int64)
    new_index[visible_people] = np.arange(len(visible_people))
    boxes = np.zeros((len(visible_people), 4), dtype=np.float32)
    if len(visible_people):
        big = np.iinfo(np.int64).max
        x_min = np.full(num_people, big)
        y_min = np.full(num_people, big)
        x_max = np.full(num_people, -1)
        y_max = np.full(num_people, -1)
        np.minimum.at(x_min, person, cols)
        np.minimum.at(y_min, person, rows)
        np.maximum.at(x_max, person, cols)
        np.maximum.at(y_max, person, rows)
        v = visible_people
        boxes[:] = np.stack([x_min[v], y_min[v], x_max[v] + 1, y_max[v] + 1], axis=1)
    return visible_people, new_index, boxes


def _keypoints(scene, prims, attrs, visible_people):
    """Projected keypoints `(n, 308, 2)`, visibility codes `(n, 308)` and camera-frame keypoints `(n, 308, 3)`.

    A keypoint is visible when the ray through it first hits one of its owner primitives within its tolerance.
    """
    cam, geoms, modeled = scene.camera, attrs["geometry"], KEYPOINT_MODELED
    fx, fy, cx, cy = cam.fx, cam.fy, cam.cx, cam.cy
    kp_cam = np.zeros((len(visible_people), NUM_POSE_KEYPOINTS, 3))
    for out, index in enumerate(visible_people):
        p = scene.people[index]
        kp_cam[out] = geoms[index].keypoints @ p.rotation.T + p.translation
    kp_cam[:, ~modeled] = 0.0
    z = kp_cam[..., 2]
    valid = modeled[None, :] & (z > NEAR_PLANE)
    safe_z = np.where(valid, z, 1.0)
    ray_dx = kp_cam[..., 0] / safe_z
    ray_dy = kp_cam[..., 1] / safe_z
    ku = fx * ray_dx + cx
    kv = fy * ray_dy + cy
    in_image = valid & (ku >= -0.5) & (ku < cam.width - 0.5) & (kv >= -0.5) & (kv < cam.height - 0.5)
    hit_t, hit_prim = cast_rays(prims, ray_dx[valid], ray_dy[valid], ku[valid], kv[valid], fx, fy, cx, cy)
    owners = attrs["owners"][visible_people][valid]  # (num_valid, 4)
    own = np.any(owners == hit_prim[:, None], axis=1)
    close = hit_t >= z[valid] - KEYPOINT_TOLERANCE[np.nonzero(valid)[1]]
    seen = np.zeros(valid.shape, dtype=bool)
    seen[valid] = own & close
    visibility = np.where(in_image, np.where(seen, 2, 1), 0).astype(np.uint8)
    keypoints = np.where(valid[..., None], np.stack([ku, kv], axis=-1), 0.0).astype(np.float32)
    return keypoints, visibility, kp_cam


def _scatter(fg, values, shape, dtype):
    """A zero image of ``shape`` (flat pixels first) holding ``values`` at the foreground pixels ``fg``."""
    out = np.zeros(shape, dtype=dtype)
    out[fg] = values
    return out


def _dense_labels(hits: _Hits, new_index, albedo_fg, height, width):
    """The per-pixel labels: segmentation, mask, instance map, normals, pointmap, depth and albedo."""
    fg, n_pix = hits.fg, height * width
    pointmap = _scatter(fg, hits.points, (n_pix, 3), np.float32).reshape(height, width, 3)
    return {
        "segmentation": _scatter(fg, hits.classes, n_pix, np.int64).reshape(height, width),
        "mask": _scatter(fg, True, n_pix, bool).reshape(height, width),
        "instance_map": _scatter(fg, new_index[hits.person] + 1, n_pix, np.int32).reshape(height, width),
        "normals": _scatter(fg, hits.normals, (n_pix, 3), np.float32).reshape(height, width, 3),
        "pointmap": pointmap,
        "depth": np.ascontiguousarray(pointmap[..., 2]),
        "albedo": _scatter(fg, albedo_fg, (n_pix, 3), np.float32).reshape(height, width, 3),
    }


def render_scene(scene, return_intermediates: bool = False) -> dict:
    """Render a scene. See `sapiens2_hf.data.synthetic.render_sample` for the returned keys."""
    cam = scene.camera
    height, width, n_pix = cam.height, cam.width, cam.height * cam.width
    prims, attrs = assemble(scene)
    depth_flat, prim_flat = render_primitives(prims, cam.fx, cam.fy, cam.cx, cam.cy, height, width)
    hits = _first_hits(prims, attrs, cam, depth_flat, prim_flat)
    albedo_fg, shading_fg = (a.astype(np.float32) for a in _shade_people(scene, hits))

    bg_albedo, bg_shading = _background(scene.background, height, width, scene.mirrored)
    scene_albedo = bg_albedo.reshape(n_pix, 3)
    image_clean = scene_albedo * bg_shading.reshape(n_pix, 1)  # float32 (n_pix, 3)
    background_clean = image_clean.copy()  # the background alone, also under the people (matting composite)
    scene_albedo[hits.fg] = albedo_fg
    image_clean[hits.fg] = albedo_fg * shading_fg
    noise = _scene_noise(scene)
    image = _quantise(image_clean, noise, n_pix, height, width)
    alpha, foreground, matting_image = soft_matte(
        prims, cam, prim_flat.reshape(height, width), image_clean.reshape(height, width, 3),
        background_clean.reshape(height, width, 3), noise, image)

    # People with no visible pixel are dropped and the instance ids compacted.
    visible_people, new_index, boxes = _person_boxes(hits, len(scene.people))
    keypoints, visibility, kp_cam = _keypoints(scene, prims, attrs, visible_people)
    sample = {
        "image": image,
        **_dense_labels(hits, new_index, albedo_fg, height, width),
        "alpha": alpha,
        "foreground": foreground,
        "matting_image": matting_image,
        "keypoints": keypoints,
        "keypoint_visibility": visibility,
        "keypoints_3d": kp_cam.astype(np.float32),
        "boxes": boxes,
        "camera_intrinsics": cam.intrinsics.astype(np.float32),
        "num_people": len(visible_people),
    }
    if return_intermediates:
        shading = np.repeat(bg_shading.reshape(n_pix, 1), 3, axis=1)
        shading[hits.fg] = shading_fg
        sample.update({
            "image_clean": image_clean.reshape(height, width, 3),
            "scene_albedo": scene_albedo.reshape(height, width, 3),
            "shading": shading.reshape(height, width, 3),
            "noise": noise if noise is not None else np.zeros((height, width, 3), np.float32),
            "primitive_index": prim_flat.reshape(height, width),
            "keypoint_owner_classes": _owner_classes(attrs, visible_people),
            "person_index": visible_people,
        })
    return sample


def _scene_noise(scene):
    """The scene's sensor noise `(height, width, 3)` (mirrored with the scene), or None for a noise-free image."""
    if not scene.noise_std > 0:
        return None
    noise = sensor_noise(scene.noise_seed, scene.noise_std, scene.camera.height, scene.camera.width)
    return noise[:, ::-1] if scene.mirrored else noise


def _owner_classes(attrs, visible_people):
    """The seg classes `(num_visible, 308, 12)` each keypoint's owner primitives can carry (-1 padded)."""
    owner_ids = attrs["owners"][visible_people]  # (num_visible, 308, 4)
    owner_classes = np.where(owner_ids[..., None] >= 0, attrs["classes"][np.maximum(owner_ids, 0)], -1)
    return owner_classes.reshape(len(visible_people), NUM_POSE_KEYPOINTS, 12)
