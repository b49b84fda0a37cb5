# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""One-Euro filter (Casiez, Roussel and Vogel, CHI 2012) for keypoint trajectories.

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

import numpy as np

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


__all__ = ["DEFAULT_BETA", "DEFAULT_D_CUTOFF", "DEFAULT_MIN_CUTOFF", "OneEuroFilter", "trajectory_errors"]
