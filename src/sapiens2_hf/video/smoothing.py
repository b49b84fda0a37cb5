# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Temporal filters for video outputs, one home for both: the One-Euro filter (Casiez, Roussel and Vogel, CHI 2012)
for keypoint trajectories, and the same rule per pixel along the optical flow for dense maps (`FlowGuidedFilter`,
`DenseResultFilter`; see docs/video.md for the choice).

A first-order low-pass filter whose cutoff frequency rises with the signal's speed: slow or still points are
smoothed hard (little jitter), fast ones lightly (little lag). Per sample, with `dt` the time since the previous one:

    alpha(f)   = 1 / (1 + 1 / (2 pi f dt))                 smoothing factor of a low-pass at cutoff f (Hz)
    speed_hat  = speed_hat + alpha(d_cutoff) (speed - speed_hat),   speed = (x - x_hat_prev) / dt
    cutoff     = min_cutoff + beta |speed_hat|
    x_hat      = x_hat_prev + alpha(cutoff) (x - x_hat_prev)

`min_cutoff` (Hz) sets the smoothing at rest (lower: less jitter, more lag when slow); `beta` (per unit of the
signal: per pixel here) how fast the cutoff opens with speed (higher: less lag when fast). Units: keypoints in image
pixels, time in seconds. The speed of a 2-D keypoint is its velocity's length, so x and y of one point share one
cutoff (the filter is the same in any rotated frame).

Defaults (`DEFAULT_MIN_CUTOFF` 1 Hz, `DEFAULT_BETA` 0.02 per pixel) were chosen on synthetic trajectories at 30
frames/s with 2 px Gaussian noise (tests/test_cli_video.py, measured with `trajectory_errors`): at rest the jitter
(RMS second difference) falls from 7.0 to 1.8 px/frame^2 and the RMS error from 2.8 to 1.3 px; a point moving at
300 px/s lags 0.49 frames (16 ms). beta 0.05 lags 0.25 frames but keeps 2.9 px/frame^2 of jitter at rest; beta 0
leaves 0.8 px/frame^2 at rest but lags 4.8 frames at 300 px/s.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from ..modeling.sapiens2_tasks import TASK_SPECS

DEFAULT_MIN_CUTOFF = 1.0
DEFAULT_BETA = 0.02
DEFAULT_D_CUTOFF = 1.0


def _alpha(cutoff: np.ndarray | float, dt: float) -> np.ndarray | float:
    return 1.0 / (1.0 + 1.0 / (2.0 * math.pi * cutoff * dt))


class OneEuroFilter:
    """One-Euro filter over arrays of points: `filter(values, t)` smooths one sample of shape `(..., D)`.

    Args:
        min_cutoff (`float`, defaults to `DEFAULT_MIN_CUTOFF`): cutoff frequency at rest, in Hz (> 0).
        beta (`float`, defaults to `DEFAULT_BETA`): cutoff increase per unit of speed (>= 0; 0 = a fixed low-pass).
        d_cutoff (`float`, defaults to 1.0): cutoff of the speed estimate's own low-pass, in Hz (> 0).

    The last axis holds a point's coordinates (its speed is the velocity's length); leading axes are independent
    points. The first sample is returned unchanged. Samples must come with increasing times.
    """

    def __init__(self, min_cutoff: float = DEFAULT_MIN_CUTOFF, beta: float = DEFAULT_BETA,
                 d_cutoff: float = DEFAULT_D_CUTOFF):
        if not (min_cutoff > 0 and d_cutoff > 0 and beta >= 0 and math.isfinite(min_cutoff + beta + d_cutoff)):
            raise ValueError(f"One-Euro filter needs min_cutoff > 0, d_cutoff > 0 and beta >= 0 (finite), got "
                             f"min_cutoff={min_cutoff}, beta={beta}, d_cutoff={d_cutoff}.")
        self.min_cutoff, self.beta, self.d_cutoff = float(min_cutoff), float(beta), float(d_cutoff)
        self.reset()

    def reset(self) -> None:
        """Forget the past: the next sample starts a new trajectory."""
        self._value: np.ndarray | None = None
        self._speed: np.ndarray | None = None
        self._time: float | None = None

    def filter(self, values, t: float) -> np.ndarray:
        """Smoothed copy (float64) of `values` `(..., D)` observed at time `t` (seconds)."""
        values = np.asarray(values, dtype=np.float64)
        if self._value is None or self._value.shape != values.shape:
            self._value, self._speed, self._time = values.copy(), np.zeros(values.shape[:-1]), float(t)
            return values.copy()
        dt = float(t) - self._time
        if not dt > 0:
            raise ValueError(f"One-Euro filter samples must have increasing times; got t={t} after {self._time}.")
        # a point that is not finite (NaN from a missing keypoint) restarts from its new value instead of poisoning
        # its filter state for ever
        finite = np.isfinite(values).all(axis=-1) & np.isfinite(self._value).all(axis=-1)
        speed = np.linalg.norm(values - self._value, axis=-1) / dt
        speed = np.where(finite, speed, 0.0)
        self._speed = self._speed + _alpha(self.d_cutoff, dt) * (speed - self._speed)
        alpha = _alpha(self.min_cutoff + self.beta * np.abs(self._speed), dt)[..., None]
        smoothed = self._value + alpha * (values - self._value)
        self._value = np.where(finite[..., None], smoothed, values)
        self._time = float(t)
        return self._value.copy()


def trajectory_errors(smoothed: np.ndarray, truth: np.ndarray, skip: int = 10) -> dict[str, float]:
    """Jitter and lag of a smoothed 1-D or `(T, D)` trajectory against the true one (the first `skip` samples, the
    filter's start-up, are left out).

    Returns:
        `{"rmse": ..., "jitter": ..., "lag_frames": ...}`: root-mean-square error to the truth (pixels); jitter, the RMS
        of the second difference of the error (pixels per frame^2: frame-to-frame shake, blind to a steady offset);
        lag, the mean error along the true motion divided by the true speed per frame (frames; 0 at rest).
    """
    smoothed, truth = np.asarray(smoothed, np.float64), np.asarray(truth, np.float64)
    if smoothed.ndim == 1:
        smoothed, truth = smoothed[:, None], truth[:, None]
    error = (smoothed - truth)[skip:]
    rmse = float(np.sqrt(np.mean(np.sum(error ** 2, axis=-1))))
    jitter = float(np.sqrt(np.mean(np.sum(np.diff(error, n=2, axis=0) ** 2, axis=-1))))
    velocity = np.diff(truth, axis=0)[skip - 1:]  # per frame, aligned with `error`
    speed = np.linalg.norm(velocity, axis=-1)
    moving = speed > 1e-9
    lag = 0.0
    if moving.any():
        along = -np.sum(error[moving] * velocity[moving], axis=-1) / speed[moving]  # behind the truth: positive
        lag = float(np.mean(along / speed[moving]))
    return {"rmse": rmse, "jitter": jitter, "lag_frames": lag}


# ----------------------------------------------------------------------------------------------------------------
# dense maps: the same One-Euro rule per pixel, along the optical flow
# ----------------------------------------------------------------------------------------------------------------

#: Photometric error (grey levels, 0-255) above which a pixel's flow is not trusted (occlusion, disocclusion, a
#: flow failure): there the filter returns the frame's own value, so that no past output is dragged along.
DEFAULT_OCCLUSION_THRESHOLD = 12.0
#: A pixel whose change after motion compensation exceeds this many times the frame's median change, on a part of
#: the map steep enough for a small flow error to explain it (`DEFAULT_MISREGISTRATION_PX`), is taken as it is: a
#: flow error at a depth edge or a silhouette, not flicker.
DEFAULT_CONSISTENCY = 3.0
#: The flow error (pixels) that the misregistration gate allows for by default (per task: `DENSE_TASK_DEFAULTS`).
DEFAULT_MISREGISTRATION_PX = 1.0

#: Per task: the key of each map the filter smooths, and its `(min_cutoff Hz, beta per map unit, misregistration_px,
#: coherent_scale)`. beta is per unit of the map's own values (normals: unit vectors; pointmap: metres; albedo and
#: alpha: [0, 1]; seg: one-hot class scores). Seg uses beta 0: a label that flips between two classes is flicker, never
#: motion (the flow already moves labels with the person), so it is low-passed (at 0.5 Hz: a fine-tuned model's label
#: flicker fell to 0.72x at 2 Hz, 0.47x at 0.5 Hz, its error by 4-5 % either way) and gated by the photometric and
#: misregistration checks only. Normals: 0.5 Hz, beta 0.25 and a 0.25 px gate: a fine-tuned model's normals flicker on
#: steep parts of the map and drift as the body turns; beta 0.5 opened the cutoff on that drift and the 0.5 px gate kept
#: more of the flicker (jitter 0.72x against 0.68x; beta 0 lagged the turn of the simulated clip, +17 % error). Alpha
#: and labels allow a 1 px flow error at their edges (the flow is least accurate at the silhouette, where alpha steps;
#: at 0.5 px the filter dragged the background into the person's rim, +23 % alpha error), pointmap and albedo 0.5 px
#: (the DIS flow's end-point error on the person is about 0.2 px). The pointmap's values move with the person (a step
#: sideways shifts X, a turn changes Z across the body): its coherent change (Gaussian of 1/6 of the map's shorter side)
#: passes at once, so the rest can be low-passed at 0.5 Hz, beta 0.25 (a fine-tuned model's pointmap jitter 0.51x ->
#: 0.38x; without the coherent term the same cutoff lagged the simulated walk, +108 % error, and at a 4 deg/frame turn
#: beta 0 lagged even with it). Normals and albedo keep none: their model jitter did not fall with it (0.70x, 0.86x),
#: and on the simulated clip it let noise through that beta then had to catch (normals +4 %, albedo +47 % error at beta
#: 0). Chosen with benchmarks/bench_temporal_filter.py: tiny models fine-tuned on synthetic humans, and simulated noise
#: on the truth, on a clip of a walking, turning person.


def dense_task_maps() -> dict[str, tuple[str, ...]]:
    """Task -> the per-pixel maps of its pipeline result (the registry's `result_maps`, read at each call), for every
    task that has some."""
    return {name: spec.result_maps for name, spec in TASK_SPECS.items() if spec.result_maps}


#: A dense task without measured defaults (one registered from outside the package) starts from albedo's and the
#: pointmap's first measured setting: 1 Hz, beta 0.5, 0.5 px, no coherent term.
UNTUNED_DENSE_DEFAULTS = (1.0, 0.5, 0.5, 0.0)
DENSE_TASK_DEFAULTS: dict[str, tuple[float, float, float, float]] = {
    "normal": (0.5, 0.25, 0.25, 0.0), "pointmap": (0.5, 0.25, 0.5, 1 / 6), "albedo": (1.0, 0.5, 0.5, 0.0),
    "matting": (1.0, 0.5, 1.0, 0.0), "seg": (0.5, 0.0, 1.0, 0.0),
}


def _steepness(planes: np.ndarray) -> np.ndarray:
    """`(H, W)`: per pixel, the larger one-sided difference to a neighbour along x and along y, combined over both
    axes and the channels of `planes` `(H, W, C)`: what a one-pixel shift changes there (a central difference would
    halve a step)."""
    step_x = np.abs(np.diff(planes, axis=1))
    step_y = np.abs(np.diff(planes, axis=0))
    along_x = np.maximum(np.pad(step_x, ((0, 0), (1, 0), (0, 0))), np.pad(step_x, ((0, 0), (0, 1), (0, 0))))
    along_y = np.maximum(np.pad(step_y, ((1, 0), (0, 0), (0, 0))), np.pad(step_y, ((0, 1), (0, 0), (0, 0))))
    return np.sqrt(np.sum(along_x ** 2 + along_y ** 2, axis=-1))


def _coherent_change(change: np.ndarray, trusted: np.ndarray, sigma: float) -> np.ndarray:
    """`(H, W, C)`: the Gaussian-weighted mean of `change` `(H, W, C)` over the `trusted` `(H, W)` pixels around
    each pixel (a normalised convolution of width `sigma` pixels): the part of a frame's change that a whole
    neighbourhood shares. 0 where no trusted pixel is near.

    The mean is a smooth field, so it is computed on a grid coarse enough for `sigma` to span about 4 cells and
    resized back: a direct blur costs a kernel of 6 `sigma` per pixel (1.2 s per frame at 1024 x 768 on 2 CPU
    cores, against 0.03 s so)."""
    height, width, channels = change.shape
    weight = trusted.astype(np.float32)
    weighted = np.where(trusted[..., None], change, 0.0).astype(np.float32)
    factor = max(1.0, sigma / 4.0)
    coarse = (max(1, round(width / factor)), max(1, round(height / factor)))
    if factor > 1:
        weight = cv2.resize(weight, coarse, interpolation=cv2.INTER_AREA)
        weighted = cv2.resize(weighted, coarse, interpolation=cv2.INTER_AREA)
    weighted = weighted.reshape(coarse[1], coarse[0], channels)
    sigma_coarse = sigma * coarse[0] / width
    total = cv2.GaussianBlur(weight, (0, 0), sigma_coarse)
    summed = cv2.GaussianBlur(weighted, (0, 0), sigma_coarse).reshape(weighted.shape)
    near = total > 1e-3
    mean = np.where(near[..., None], summed / np.where(near, total, 1.0)[..., None], 0.0).astype(np.float32)
    if factor > 1:
        mean = cv2.resize(mean, (width, height), interpolation=cv2.INTER_LINEAR)
    return mean.reshape(height, width, channels)


class FlowGuidedFilter:
    """Temporal filter for dense per-frame maps: the previous output is carried to the current frame along the
    optical flow of the video frames, then blended with the current map by the One-Euro rule per pixel.

    Per frame, with `flow` the DIS optical flow (OpenCV) from the current frame to the previous one:

        warped     = previous output at (x + flow(x))            (bilinear; the previous speed estimate likewise)
        predicted  = warped + coherent change                     (with `coherent_scale`; else predicted = warped)
        residual   = |map - predicted| / dt                       per pixel, over the map's channels
        speed_hat  = warped speed + alpha(d_cutoff) (residual - warped speed)
        out        = predicted + alpha(min_cutoff + beta speed_hat) (map - predicted)

    and `out = map` (the pixel starts afresh) where the past cannot be trusted: the previous frame warped by the flow
    differs from the current one by more than `occlusion_threshold` grey levels (occlusion, flow failure); the
    residual exceeds `consistency` times the median frame-to-frame change of the unfiltered maps where the warped
    past is steep enough (`|gradient| * misregistration_px >= |change|`) for a flow error to explain it (a depth edge
    or a silhouette, where bilinear warping mixes two surfaces; a large change on a smooth part is flicker); the warped
    sample mixes in masked-out pixels (NaN, or all-zero with `zero_is_masked`); or a value is not finite. Because the
    past moves with the content, a moving person is smoothed as much as a still one without trailing behind (a plain
    per-pixel filter must either smooth motion away or leave moving parts unfiltered), and the One-Euro speed term
    lets changes that the flow does not explain (a turning surface) through sooner. With `coherent_scale`, the
    change that a whole neighbourhood shares (the Gaussian-weighted mean of `map - warped` over the trusted pixels
    within `coherent_scale` times the map's shorter side) passes at once: values that move with the person (the
    pointmap's X as it walks, its Z as it turns) are not lagged, and only the rest, the pixel-to-pixel flicker, is
    low-passed.

    Args:
        min_cutoff (`float`, defaults to 1.0): cutoff at rest, Hz (> 0); lower smooths more.
        beta (`float`, defaults to 0.0): cutoff increase per unit of residual speed (map units per second, >= 0).
        d_cutoff (`float`, defaults to 1.0): cutoff of the speed estimate's low-pass, Hz (> 0).
        occlusion_threshold (`float`, defaults to `DEFAULT_OCCLUSION_THRESHOLD`): grey levels (0-255).
        consistency (`float`, defaults to `DEFAULT_CONSISTENCY`): see above (> 0).
        misregistration_px (`float`, defaults to `DEFAULT_MISREGISTRATION_PX`): the flow error, in pixels, that the
            misregistration gate allows for (>= 0; 0 turns the gate off).
        flow_preset (`str`, defaults to "medium"): OpenCV DIS preset, "ultrafast", "fast" or "medium" (on the
            synthetic benchmark "fast" dragged the background along with a small person).
        zero_is_masked (`bool`, defaults to False): all-zero pixels are masked out (normals, albedo), not values.
        coherent_scale (`float`, defaults to 0.0): width of the neighbourhood whose shared change passes unfiltered,
            as a fraction of the map's shorter side (>= 0; 0 turns it off).

    Attributes:
        fresh (`np.ndarray` of shape `(H, W)`, bool): after a `filter` call past the first, the pixels taken as
            they were.

    `filter(values, image, t)` takes a map `(H, W)` or `(H, W, C)` and the video frame `(H, W, 3)` uint8 it belongs
    to (any size: the flow is computed at the frame's size and resized to the map's), at time `t` seconds. The first
    frame (and any frame after a change of map size) is returned unchanged, as a float32 copy.
    """

    def __init__(self, min_cutoff: float = 1.0, beta: float = 0.0, d_cutoff: float = DEFAULT_D_CUTOFF,
                 occlusion_threshold: float = DEFAULT_OCCLUSION_THRESHOLD, consistency: float = DEFAULT_CONSISTENCY,
                 flow_preset: str = "medium", zero_is_masked: bool = False,
                 misregistration_px: float = DEFAULT_MISREGISTRATION_PX, coherent_scale: float = 0.0):
        if not (min_cutoff > 0 and d_cutoff > 0 and beta >= 0 and occlusion_threshold >= 0 and consistency > 0
                and misregistration_px >= 0 and coherent_scale >= 0
                and math.isfinite(min_cutoff + beta + d_cutoff + occlusion_threshold + consistency
                                  + misregistration_px + coherent_scale)):
            raise ValueError(f"the flow-guided filter needs min_cutoff > 0, d_cutoff > 0, beta >= 0, "
                             f"occlusion_threshold >= 0, consistency > 0, misregistration_px >= 0 and "
                             f"coherent_scale >= 0 (finite), got min_cutoff={min_cutoff}, beta={beta}, "
                             f"d_cutoff={d_cutoff}, occlusion_threshold={occlusion_threshold}, "
                             f"consistency={consistency}, misregistration_px={misregistration_px}, "
                             f"coherent_scale={coherent_scale}.")
        self.min_cutoff, self.beta, self.d_cutoff = float(min_cutoff), float(beta), float(d_cutoff)
        self.occlusion_threshold, self.consistency = float(occlusion_threshold), float(consistency)
        if flow_preset not in ("ultrafast", "fast", "medium"):
            raise ValueError(f"flow_preset must be 'ultrafast', 'fast' or 'medium' (OpenCV DIS), got {flow_preset!r}.")
        self.flow_preset, self.zero_is_masked = flow_preset, bool(zero_is_masked)
        self.misregistration_px, self.coherent_scale = float(misregistration_px), float(coherent_scale)
        self._flow = None
        self.reset()

    def reset(self) -> None:
        """Forget the past: the next frame starts anew."""
        self._value: np.ndarray | None = None
        self._speed: np.ndarray | None = None
        self._raw: np.ndarray | None = None
        self._gray: np.ndarray | None = None
        self._time: float | None = None

    def _backward_flow(self, gray: np.ndarray) -> np.ndarray:
        """`(H, W, 2)` float32 flow from the current frame to the previous one (DIS, OpenCV's fast preset)."""
        if self._flow is None:
            preset = {"ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST, "fast": cv2.DISOPTICAL_FLOW_PRESET_FAST,
                      "medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM}[self.flow_preset]
            self._flow = cv2.DISOpticalFlow_create(preset)
        return self._flow.calc(gray, self._gray, None)

    def _warp_to_now(self, gray: np.ndarray, height: int, width: int):
        """A function that resamples an `(H, W, ...)` array of the previous frame onto the current one, along the
        backward flow scaled to the map's `height x width`."""
        flow = self._backward_flow(gray)  # (frame H, frame W, 2), frame pixels
        if flow.shape[:2] != (height, width):
            scale = np.array([width / gray.shape[1], height / gray.shape[0]], np.float32)
            flow = cv2.resize(flow, (width, height), interpolation=cv2.INTER_LINEAR) * scale
        grid_y, grid_x = np.mgrid[0:height, 0:width].astype(np.float32)
        map_x, map_y = grid_x + flow[..., 0], grid_y + flow[..., 1]

        def warp(array: np.ndarray) -> np.ndarray:
            warped = cv2.remap(array, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            return warped.reshape(array.shape)

        return warp

    def _occluded(self, gray: np.ndarray, warp, height: int, width: int) -> np.ndarray:
        """`(H, W)` bool: pixels whose flow fails the photometric check (at the map's size; the frame is resized to
        it when they differ)."""
        frame_now, frame_before = gray, self._gray
        if gray.shape != (height, width):
            frame_now = cv2.resize(gray, (width, height), interpolation=cv2.INTER_AREA)
            frame_before = cv2.resize(frame_before, (width, height), interpolation=cv2.INTER_AREA)
        # on lightly blurred frames: hard edges (aliased renders, sharp texture) resampled at a sub-pixel shift
        # are no occlusion
        frame_now = cv2.GaussianBlur(frame_now.astype(np.float32), (0, 0), 1.0)
        frame_before = cv2.GaussianBlur(frame_before.astype(np.float32), (0, 0), 1.0)
        return np.abs(frame_now - warp(frame_before)) > self.occlusion_threshold

    def _misregistered(self, planes, previous, residual, finite, warp, dt: float) -> np.ndarray:
        """The misregistration gate, `(H, W)` bool: a change far beyond the typical frame-to-frame change of the
        unfiltered maps (their median over the pixels that changed at all; measured on the raw maps, so independent
        of the filter's own state) that a flow error of `misregistration_px` pixels could explain, the warped past
        being that steep there (a depth edge or a silhouette, where bilinear warping mixes two surfaces), is taken as
        it is. A large change on a smooth part of the map is not gated: that is the flicker to remove (a model's
        flicker is heavy-tailed; a gate on the change alone left most of a fine-tuned model's flicker unfiltered)."""
        raw_change = np.linalg.norm(np.nan_to_num(planes - warp(self._raw)), axis=-1) / dt
        changed = raw_change[finite & (raw_change > 0)]
        typical = float(np.median(changed)) if changed.size else 0.0
        slope = _steepness(np.nan_to_num(previous))  # map units per pixel
        return (residual > self.consistency * typical) & (slope * self.misregistration_px >= residual * dt)

    def filter(self, values, image: np.ndarray, t: float) -> np.ndarray:
        """Filtered float32 copy of `values` `(H, W)` or `(H, W, C)` seen with the frame `image` at time `t`."""
        values = np.asarray(values, dtype=np.float32)
        if values.ndim not in (2, 3):
            raise ValueError(f"dense maps must be (height, width) or (height, width, channels), got {values.shape}.")
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"the frame must be RGB uint8 (height, width, 3), got {image.dtype} {image.shape}.")
        gray = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
        planes = values if values.ndim == 3 else values[..., None]  # (H, W, C)
        if self._value is None or self._value.shape != planes.shape or self._gray.shape != gray.shape:
            self._value, self._speed = planes.copy(), np.zeros(planes.shape[:2], np.float32)
            self._raw = planes.copy()
            self._gray, self._time = gray, float(t)
            return values.copy()
        dt = float(t) - self._time
        if not dt > 0:
            raise ValueError(f"frames must come with increasing times; got t={t} after {self._time}.")
        height, width = planes.shape[:2]
        warp = self._warp_to_now(gray, height, width)
        previous = warp(self._value)  # (H, W, C)
        previous_speed = warp(self._speed)
        # where the bilinear sample mixes in masked-out pixels (NaN, or all-zero with `zero_is_masked`: outside the
        # person), the past is not a value of this surface: such pixels start afresh instead of fading towards 0 at
        # the person's edge
        valid = np.isfinite(self._value).all(axis=-1)
        if self.zero_is_masked:
            valid &= (self._value != 0).any(axis=-1)
        whole = warp(valid.astype(np.float32)) >= 0.999
        finite = np.isfinite(planes).all(axis=-1) & np.isfinite(previous).all(axis=-1)
        occluded = self._occluded(gray, warp, height, width)
        predicted = previous
        if self.coherent_scale > 0:
            # the change the neighbourhood shares, measured where the past is trusted (not occluded, not mixed
            # with masked-out pixels): motion of the values themselves, passed without lag
            sigma = self.coherent_scale * min(height, width)
            predicted = previous + _coherent_change(np.nan_to_num(planes - previous), finite & whole & ~occluded,
                                                    sigma)
        residual = np.where(finite, np.linalg.norm(np.nan_to_num(planes - predicted), axis=-1) / dt, 0.0)
        speed = previous_speed + _alpha(self.d_cutoff, dt) * (residual - previous_speed)
        alpha = _alpha(self.min_cutoff + self.beta * speed, dt).astype(np.float32)
        misregistered = self._misregistered(planes, previous, residual, finite, warp, dt)
        fresh = ~finite | ~whole | occluded | misregistered
        smoothed = predicted + alpha[..., None] * (planes - predicted)
        out = np.where(fresh[..., None], planes, smoothed).astype(np.float32)
        self._value, self._speed = out, np.where(fresh, 0.0, speed).astype(np.float32)
        self._raw = planes.copy()
        self._gray, self._time = gray, float(t)
        self.fresh = fresh
        return out.reshape(values.shape).copy()


class DenseResultFilter:
    """Flow-guided filtering of one dense task's per-frame pipeline results (`dense_task_maps()`), with the task's
    constraints restored afterwards: normals renormalised to unit length (zero stays zero), albedo and alpha clipped
    to [0, 1], the pointmap's `depth` recomputed from the filtered Z, segmentation labels as the argmax of the
    filtered one-hot class scores (the filter then votes over time along the flow).

    Args:
        task (`str`): "normal", "pointmap", "albedo", "matting" or "seg".
        min_cutoff, beta, coherent_scale (`float`, *optional*): override `DENSE_TASK_DEFAULTS[task]`.
        occlusion_threshold (`float`, defaults to `DEFAULT_OCCLUSION_THRESHOLD`).

    `filter(result, image, t)` returns a new dict; keys not among the task's `result_maps` are passed through.
    """

    def __init__(self, task: str, min_cutoff: float | None = None, beta: float | None = None,
                 occlusion_threshold: float = DEFAULT_OCCLUSION_THRESHOLD, coherent_scale: float | None = None):
        spec = TASK_SPECS.get(task)  # read now: a task registered after import filters too
        if spec is None or not spec.result_maps:
            dense = sorted(name for name, other in TASK_SPECS.items() if other.result_maps)
            raise ValueError(f"temporal filtering of dense maps is for {dense}, not {task!r} "
                             "(pose keypoints have the One-Euro filter).")
        default_cutoff, default_beta, misregistration_px, default_coherent = DENSE_TASK_DEFAULTS.get(
            task, UNTUNED_DENSE_DEFAULTS)
        self.task = task
        self.min_cutoff = default_cutoff if min_cutoff is None else float(min_cutoff)
        self.beta = default_beta if beta is None else float(beta)
        self.coherent_scale = default_coherent if coherent_scale is None else float(coherent_scale)
        self.occlusion_threshold = float(occlusion_threshold)
        # normals, pointmap and albedo outside the person are 0 (NaN for the pointmap) once masked (predict/run.py)
        masked = spec.foreground_fill is not None  # maps the foreground mask fills outside the person
        self._filters = {key: FlowGuidedFilter(self.min_cutoff, self.beta, occlusion_threshold=occlusion_threshold,
                                               misregistration_px=misregistration_px, zero_is_masked=masked,
                                               coherent_scale=self.coherent_scale)
                         for key in spec.result_maps}
        self._num_classes = 0
        self._points = spec.result_maps[0] if spec.metric_3d else None  # metric 3D points (pointmap): their depth

    def reset(self) -> None:
        for one in self._filters.values():
            one.reset()

    def filter(self, result: dict, image: np.ndarray, t: float) -> dict:
        out = dict(result)
        for key, one in self._filters.items():
            value = result.get(key)
            if value is None:
                continue
            value = np.asarray(value)
            if key == "segmentation":  # class ids: filtered as one-hot scores, then argmax
                labels = value.astype(np.int64)
                self._num_classes = max(self._num_classes, int(labels.max(initial=0)) + 1)
                one_hot = (labels[..., None] == np.arange(self._num_classes)).astype(np.float32)
                if one._value is not None and one._value.shape[-1] != self._num_classes:
                    one.reset()  # a new class appeared: restart rather than compare different encodings
                out[key] = one.filter(one_hot, image, t).argmax(axis=-1).astype(value.dtype)
                continue
            filtered = one.filter(value, image, t)
            if key == "normals":
                norm = np.linalg.norm(filtered, axis=-1, keepdims=True)
                filtered = np.where(norm > 0, filtered / np.where(norm > 0, norm, 1), 0.0).astype(np.float32)
            elif key in ("albedo", "alpha", "foreground"):
                filtered = np.clip(filtered, 0.0, 1.0)
            out[key] = filtered.astype(value.dtype, copy=False) if np.issubdtype(value.dtype, np.floating) \
                else filtered
            if self._points == key and result.get("depth") is not None:  # the depth is the points' Z
                out["depth"] = out[key][..., 2].astype(np.asarray(result["depth"]).dtype)
        return out


__all__ = [
    "DEFAULT_BETA", "DEFAULT_CONSISTENCY", "DEFAULT_D_CUTOFF", "DEFAULT_MIN_CUTOFF", "DEFAULT_MISREGISTRATION_PX",
    "DEFAULT_OCCLUSION_THRESHOLD",
    "DENSE_TASK_DEFAULTS", "DenseResultFilter", "FlowGuidedFilter", "OneEuroFilter",
    "trajectory_errors",
]
