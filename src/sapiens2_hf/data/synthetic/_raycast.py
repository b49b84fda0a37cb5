"""Analytic, vectorised ray casting of round cones and ellipsoids (numpy, no OpenGL).

Camera frame: X right, Y down, Z forward (metres); the camera sits at the origin. A pixel with centre (u, v)
(pixel centres at integer coordinates) has the ray direction ``d = ((u - cx) / fx, (v - cy) / fy, 1)``, so the ray
parameter ``t`` of a hit point ``t * d`` *is* its depth Z.

Two primitive kinds cover the whole human model:

* **round cone**: the convex hull of two spheres (centres ``a``, ``b``; radii ``ra``, ``rb``). A capsule is the case
  ``ra == rb``. Its surface is the envelope of the spheres ``S(x)`` centred at ``a + x * w`` (``w`` the unit axis,
  ``x`` in ``[0, L]``) with radius ``ra + k * x``, ``k = (rb - ra) / L``. For a point with axial coordinate ``y`` and
  radial distance ``rho`` the touching sphere is at ``x* = (y + k * ra) / (1 - k**2)``; the lateral surface is
  ``rho**2 * (1 - k**2) = (ra + k * y)**2`` with ``x*`` in ``[0, L]``, and the outward normal is the normal of the
  touching sphere, ``p - (a + clip(x*, 0, L) * w)``. The first hit is the smallest positive root among the two end
  spheres and the valid lateral roots (a hit on an end sphere that is inside the hull is never the smallest).
* **ellipsoid**: ``{c + A diag(r) u : |u| <= 1}`` with orthonormal ``A`` (columns = local axes, either handedness).
  With ``Q = A diag(r)**-2 A^T`` a ray hits at the smaller root of ``t**2 dQd - 2 t dQc + (cQc - 1) = 0``.

Every pixel gets the first hit over all primitives (z-buffer by ``np.minimum.at``), which gives exact depth, normal,
primitive id and occlusion in one pass.
"""

from __future__ import annotations

import numpy as np


NEAR_PLANE = 0.05
"""Hits closer than this many metres are ignored (no primitive is ever placed that close)."""


class Primitives:
    """All primitives of one scene, camera frame, float64.

    Global primitive ids: round cones first (``0 .. num_cones - 1``), then ellipsoids.

    Args (metres): cone sphere centres ``cone_a``, ``cone_b`` `(num_cones, 3)` and radii ``cone_ra``, ``cone_rb``
    `(num_cones,)` (``|rb - ra| < |b - a|``); ``ellipsoid_center`` and ``ellipsoid_radii`` (semi-axes along the local
    axes) `(num_ellipsoids, 3)`, ``ellipsoid_axes`` `(num_ellipsoids, 3, 3)` orthonormal, columns the local axes.
    """

    def __init__(self, cone_a, cone_b, cone_ra, cone_rb, ellipsoid_center, ellipsoid_axes, ellipsoid_radii):
        self.cone_a = np.asarray(cone_a, dtype=np.float64).reshape(-1, 3)
        self.cone_b = np.asarray(cone_b, dtype=np.float64).reshape(-1, 3)
        self.cone_ra = np.asarray(cone_ra, dtype=np.float64).reshape(-1)
        self.cone_rb = np.asarray(cone_rb, dtype=np.float64).reshape(-1)
        self.ellipsoid_center = np.asarray(ellipsoid_center, dtype=np.float64).reshape(-1, 3)
        self.ellipsoid_axes = np.asarray(ellipsoid_axes, dtype=np.float64).reshape(-1, 3, 3)
        self.ellipsoid_radii = np.asarray(ellipsoid_radii, dtype=np.float64).reshape(-1, 3)
        self.num_cones = len(self.cone_a)
        self.num_ellipsoids = len(self.ellipsoid_center)
        self._build_tables()

    def __len__(self):
        return self.num_cones + self.num_ellipsoids

    def _build_tables(self):
        a, b, ra, rb = self.cone_a, self.cone_b, self.cone_ra, self.cone_rb
        axis = b - a
        length = np.maximum(np.linalg.norm(axis, axis=1), 1e-9)
        w = axis / length[:, None]
        k = (rb - ra) / length
        if np.any(np.abs(k) >= 1.0):
            raise ValueError("A round cone has |rb - ra| >= |b - a| (one sphere contains the other); use a sphere.")
        omk2 = 1.0 - k * k
        aw = np.einsum("ij,ij->i", a, w)
        aa = np.einsum("ij,ij->i", a, a)
        bb = np.einsum("ij,ij->i", b, b)
        rka = ra - k * aw
        cone_c = omk2 * (aa - aw * aw) - rka * rka
        table = np.column_stack([a, b, w, ra, k, aw, omk2, rka, cone_c, aa - ra * ra, bb - rb * rb, length * omk2])
        self._cone_table_t = np.ascontiguousarray(table.T, dtype=np.float32)  # (18, num_cones)
        self._cone_w = w
        self._cone_length = length
        self._cone_k = k

        c, axes, r = self.ellipsoid_center, self.ellipsoid_axes, self.ellipsoid_radii
        q = np.einsum("nij,nj,nkj->nik", axes, 1.0 / (r * r), axes)  # (num_ellipsoids, 3, 3) quadric matrix
        g = np.einsum("nij,nj->ni", q, c)
        table = np.column_stack([q[:, 0, 0], q[:, 1, 1], q[:, 2, 2], 2.0 * q[:, 0, 1], 2.0 * q[:, 0, 2],
                                 2.0 * q[:, 1, 2], g, np.einsum("ni,ni->n", c, g) - 1.0])
        self._ellipsoid_table_t = np.ascontiguousarray(table.T, dtype=np.float32)  # (10, num_ellipsoids)

    def aabb(self):
        """Axis-aligned 3D boxes `(lo, hi)`, each `(num_primitives, 3)`, that contain every primitive."""
        lo_c = np.minimum(self.cone_a - self.cone_ra[:, None], self.cone_b - self.cone_rb[:, None])
        hi_c = np.maximum(self.cone_a + self.cone_ra[:, None], self.cone_b + self.cone_rb[:, None])
        half = np.sqrt(np.einsum("nij,nj->ni", self.ellipsoid_axes**2, self.ellipsoid_radii**2))
        lo = np.concatenate([lo_c, self.ellipsoid_center - half])
        hi = np.concatenate([hi_c, self.ellipsoid_center + half])
        return lo, hi


def screen_bounds(lo, hi, fx, fy, cx, cy):
    """Continuous pixel-coordinate bounds `(u_min, u_max, v_min, v_max)` of 3D boxes seen by a pinhole camera.

    Conservative: every ray that meets the box passes through ``[u_min, u_max] x [v_min, v_max]``. Boxes reaching
    the near plane get infinite bounds; boxes entirely behind it get an empty (NaN) range.
    """
    z_lo = np.maximum(lo[:, 2], NEAR_PLANE)
    z_hi = hi[:, 2]
    ratios_x = np.stack([lo[:, 0] / z_lo, lo[:, 0] / z_hi, hi[:, 0] / z_lo, hi[:, 0] / z_hi])
    ratios_y = np.stack([lo[:, 1] / z_lo, lo[:, 1] / z_hi, hi[:, 1] / z_lo, hi[:, 1] / z_hi])
    u_min = fx * ratios_x.min(0) + cx
    u_max = fx * ratios_x.max(0) + cx
    v_min = fy * ratios_y.min(0) + cy
    v_max = fy * ratios_y.max(0) + cy
    crosses = lo[:, 2] <= NEAR_PLANE
    u_min[crosses], v_min[crosses] = -np.inf, -np.inf
    u_max[crosses], v_max[crosses] = np.inf, np.inf
    behind = z_hi <= NEAR_PLANE
    for arr in (u_min, u_max, v_min, v_max):
        arr[behind] = np.nan
    return u_min, u_max, v_min, v_max


def _cone_hits(tab, dx, dy, dd):
    """First-hit depth of rays ``(dx, dy, 1)`` with round cones; NaN where the ray misses.

    ``tab`` is the per-pair constant table `(18, num_pairs)` (rows as in `Primitives._build_tables`). Misses
    propagate as NaN (square roots of negative discriminants, roots outside the valid axial range) and are
    dropped by ``np.fmin``; every primitive lies in front of the near plane, so no root is behind the camera.
    """
    da = tab[0] * dx + tab[1] * dy + tab[2]
    db = tab[3] * dx + tab[4] * dy + tab[5]
    dw = tab[6] * dx + tab[7] * dy + tab[8]
    ra, k, aw, omk2, rka, cone_c, sphere_a_c, sphere_b_c, x_max = tab[9:18]
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (da - np.sqrt(da * da - dd * sphere_a_c)) / dd
        np.fmin(t, (db - np.sqrt(db * db - dd * sphere_b_c)) / dd, out=t)
        dw2 = dw * dw
        quad_a = omk2 * (dd - dw2) - k * k * dw2
        half_b = omk2 * (dw * aw - da) - k * dw * rka
        root = np.sqrt(half_b * half_b - quad_a * cone_c)
        offset = k * ra - aw
        for r in ((-half_b - root) / quad_a, (root - half_b) / quad_a):
            x = r * dw + offset
            np.copyto(r, np.nan, where=~((x >= 0) & (x <= x_max)))
            np.fmin(t, r, out=t)
    return t


def _ellipsoid_hits(tab, dx, dy):
    """First-hit depth of rays ``(dx, dy, 1)`` with ellipsoids (per-pair table `(10, num_pairs)`); NaN on a miss."""
    dqd = tab[0] * dx * dx + tab[1] * dy * dy + tab[2] + tab[3] * dx * dy + tab[4] * dx + tab[5] * dy
    dqc = tab[6] * dx + tab[7] * dy + tab[8]
    with np.errstate(invalid="ignore"):
        return (dqc - np.sqrt(dqc * dqc - dqd * tab[9])) / dqd


def _expand_boxes(j0, j1, i0, i1):
    """Rows, columns and per-box counts of all pixels inside integer boxes ``[j0, j1] x [i0, i1]`` (inclusive).

    Pixels are listed box by box (row-major inside a box), so per-box constants expand with ``np.repeat``.
    """
    w = np.maximum(j1 - j0 + 1, 0)
    h = np.where(w > 0, np.maximum(i1 - i0 + 1, 0), 0)
    n_rows = int(h.sum())
    if n_rows == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(len(w), dtype=np.int64)
    row_box = np.repeat(np.arange(len(w)), h)
    row = np.arange(n_rows) - np.repeat(np.cumsum(h) - h - i0, h)
    row_len = w[row_box]
    offsets = np.cumsum(row_len) - row_len
    total = int(offsets[-1] + row_len[-1])
    cols = np.arange(total) - np.repeat(offsets - j0[row_box], row_len)
    rows = np.repeat(row, row_len)
    return rows, cols, w * h


def _pixel_boxes(prims, fx, fy, cx, cy, height, width):
    lo, hi = prims.aabb()
    u_min, u_max, v_min, v_max = screen_bounds(lo, hi, fx, fy, cx, cy)
    with np.errstate(invalid="ignore"):
        j0 = np.clip(np.ceil(np.nan_to_num(u_min, nan=width, posinf=width, neginf=0.0)), 0, width)
        j1 = np.clip(np.floor(np.nan_to_num(u_max, nan=-1.0, posinf=width - 1, neginf=-1.0)), -1, width - 1)
        i0 = np.clip(np.ceil(np.nan_to_num(v_min, nan=height, posinf=height, neginf=0.0)), 0, height)
        i1 = np.clip(np.floor(np.nan_to_num(v_max, nan=-1.0, posinf=height - 1, neginf=-1.0)), -1, height - 1)
    return j0.astype(np.int64), j1.astype(np.int64), i0.astype(np.int64), i1.astype(np.int64)


def _chunks(counts, num_cones, num_prims, max_pairs):
    """``(start, stop)`` primitive ranges of at most ``max_pairs`` (pixel, primitive) pairs each (a single larger
    primitive is its own range), so that memory stays bounded at large resolutions; cones and ellipsoids apart."""
    chunks = []
    for lo_id, hi_id in ((0, num_cones), (num_cones, num_prims)):
        start, running = lo_id, 0
        for index in range(lo_id, hi_id):
            if running and running + counts[index] > max_pairs:
                chunks.append((start, index))
                start, running = index, 0
            running += counts[index]
        if hi_id > start:
            chunks.append((start, hi_id))
    return chunks


def render_primitives(prims: Primitives, fx, fy, cx, cy, height, width, max_pairs=500_000):
    """Z-buffer every pixel centre against all primitives.

    Intersections run in float32 (every operation is sign-symmetric, so a mirrored scene gives the bit-exact
    mirrored result); the per-primitive constants are formed in float64 first.

    Returns `(depth, primitive)` of shape `(height * width,)`: the float32 first-hit depth Z in metres (``inf`` on
    background) and the int64 global id of the first-hit primitive (-1 on background).
    """
    n_pix = height * width
    depth = np.full(n_pix, np.inf, dtype=np.float32)
    primitive = np.full(n_pix, -1, dtype=np.int64)
    if len(prims) == 0:
        return depth, primitive
    j0, j1, i0, i1 = _pixel_boxes(prims, fx, fy, cx, cy, height, width)
    ray_x = ((np.arange(width) - cx) / fx).astype(np.float32)
    ray_y = ((np.arange(height) - cy) / fy).astype(np.float32)
    counts = np.maximum(j1 - j0 + 1, 0) * np.maximum(i1 - i0 + 1, 0)
    nc = prims.num_cones
    hit_pix, hit_t, hit_prim = [], [], []
    for start, stop in _chunks(counts, nc, len(prims), max_pairs):
        rows, cols, box_counts = _expand_boxes(j0[start:stop], j1[start:stop], i0[start:stop], i1[start:stop])
        if rows.size == 0:
            continue
        dx = ray_x[cols]
        dy = ray_y[rows]
        if start < nc:
            tab = np.repeat(prims._cone_table_t[:, start:stop], box_counts, axis=1)
            t = _cone_hits(tab, dx, dy, dx * dx + dy * dy + np.float32(1.0))
        else:
            tab = np.repeat(prims._ellipsoid_table_t[:, start - nc:stop - nc], box_counts, axis=1)
            t = _ellipsoid_hits(tab, dx, dy)
        hit = t > NEAR_PLANE  # NaN (miss) compares False
        hit_pix.append(rows[hit] * width + cols[hit])
        hit_t.append(t[hit])
        hit_prim.append(np.repeat(np.arange(start, stop), box_counts)[hit])
    if not hit_pix:
        return depth, primitive
    pix = np.concatenate(hit_pix)
    t = np.concatenate(hit_t)
    prim = np.concatenate(hit_prim)
    np.minimum.at(depth, pix, t)
    win = t == depth[pix]
    primitive[pix[win]] = prim[win]
    return depth, primitive


def cast_rays(prims: Primitives, ray_dx, ray_dy, u, v, fx, fy, cx, cy):
    """First hit of arbitrary rays ``(ray_dx, ray_dy, 1)`` through continuous pixel positions ``(u, v)``.

    Same float32 arithmetic as `render_primitives`. Returns `(depth, primitive)` per ray (``inf`` / -1 where
    nothing is hit).
    """
    n = len(ray_dx)
    depth = np.full(n, np.inf, dtype=np.float32)
    primitive = np.full(n, -1, dtype=np.int64)
    if n == 0 or len(prims) == 0:
        return depth, primitive
    lo, hi = prims.aabb()
    u_min, u_max, v_min, v_max = screen_bounds(lo, hi, fx, fy, cx, cy)
    with np.errstate(invalid="ignore"):
        cand = (u[:, None] >= u_min) & (u[:, None] <= u_max) & (v[:, None] >= v_min) & (v[:, None] <= v_max)
    dx_all = np.asarray(ray_dx, dtype=np.float32)
    dy_all = np.asarray(ray_dy, dtype=np.float32)
    nc = prims.num_cones
    for lo_id, hi_id in ((0, nc), (nc, len(prims))):
        ray, prim = np.nonzero(cand[:, lo_id:hi_id])
        if ray.size == 0:
            continue
        dx, dy = dx_all[ray], dy_all[ray]
        if lo_id == 0:
            t = _cone_hits(prims._cone_table_t[:, prim], dx, dy, dx * dx + dy * dy + np.float32(1.0))
        else:
            t = _ellipsoid_hits(prims._ellipsoid_table_t[:, prim], dx, dy)
        hit = t > NEAR_PLANE
        ray, prim, t = ray[hit], prim[hit] + lo_id, t[hit]
        np.minimum.at(depth, ray, t)
        win = t == depth[ray]
        primitive[ray[win]] = prim[win]
    return depth, primitive


def surface_frames(prims: Primitives, primitive, points):
    """Outward unit normals and split coordinates at surface `points` `(num_points, 3)` (camera frame, metres) of the
    global primitive ids `primitive` `(num_points,)` (>= 0).

    Returns:
        normals (`np.ndarray` of shape `(num_points, 3)`): outward unit normals, camera frame.
        axial (`np.ndarray` of shape `(num_points,)`): for round cones the position of the touching sphere along
            the axis, in ``[0, 1]`` from ``a`` to ``b``; 0 for ellipsoids.
        local (`np.ndarray` of shape `(num_points, 3)`): for ellipsoids the point in unit-sphere coordinates
            ``diag(r)**-1 A^T (p - c)``; 0 for round cones.
    """
    n = len(primitive)
    normals = np.empty((n, 3))
    axial = np.zeros(n)
    local = np.zeros((n, 3))
    nc = prims.num_cones
    cone = np.flatnonzero(primitive < nc)
    ell = np.flatnonzero(primitive >= nc)
    if cone.size:
        ci = primitive[cone]
        rel = points[cone] - prims.cone_a[ci]
        w = prims._cone_w[ci]
        length = prims._cone_length[ci]
        k = prims._cone_k[ci]
        y = rel[:, 0] * w[:, 0] + rel[:, 1] * w[:, 1] + rel[:, 2] * w[:, 2]
        x = np.clip((y + k * prims.cone_ra[ci]) / (1.0 - k * k), 0.0, length)
        nrm = rel - x[:, None] * w
        normals[cone] = nrm / np.sqrt(np.einsum("ij,ij->i", nrm, nrm))[:, None]
        axial[cone] = x / length
    if ell.size:
        ei = primitive[ell] - nc
        axes = prims.ellipsoid_axes[ei]
        radii = prims.ellipsoid_radii[ei]
        q = np.einsum("nij,ni->nj", axes, points[ell] - prims.ellipsoid_center[ei]) / radii  # (m, 3)
        nrm = np.einsum("nij,nj->ni", axes, q / radii)
        normals[ell] = nrm / np.sqrt(np.einsum("ij,ij->i", nrm, nrm))[:, None]
        local[ell] = q
    return normals, axial, local
