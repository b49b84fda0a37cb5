# Copyright 2026 the sapiens2_hf authors. Licensed under the Apache License, Version 2.0.
"""Streaming video reading and atomic mp4 writing with PyAV (FFmpeg's libraries).

`VideoReader` decodes one frame at a time (never the whole video in memory) as RGB uint8 arrays with their index and
presentation time. `VideoWriter` encodes RGB frames to an H.264 mp4 (MPEG-4 Part 2 when this FFmpeg build has no
H.264 encoder) in a temporary file beside the target and renames it into place on `close()`: a reader sees no file or
the complete video, never a part. yuv420p, the pixel format every player reads, needs an even width and height: odd
frames are padded by one row / column repeating their edge, so the video of a 41 x 31 input is 42 x 32.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from fractions import Fraction
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

from ..utils.extras import require

DEFAULT_FPS = Fraction(25)


def _av():
    """PyAV, an extra (`sapiens2_hf[video]`): a one-line `MissingExtraError` naming the pip command without it."""
    return require("av", feature="reading or writing video")


class Frame(NamedTuple):
    """One decoded frame: `index` counts every decoded frame from 0, `time` is its presentation time in seconds
    (from the stream's timestamps, or index / frame rate when the container has none), `image` RGB uint8 `(H, W, 3)`."""

    index: int
    time: float
    image: np.ndarray


class VideoReader:
    """Decodes the first video stream of `path` frame by frame (a context manager).

    `fps` is the average frame rate (`DEFAULT_FPS` when the container does not say), `frame_count` the container's
    frame count (0 when unknown; for progress bars only), `width` and `height` the frame size.
    """

    def __init__(self, path: str | os.PathLike):
        av = _av()
        self.path = Path(path)
        try:
            self._container = av.open(str(self.path))
        except av.error.FFmpegError as error:
            raise OSError(f"cannot open the video {self.path}: {error}") from error
        if not self._container.streams.video:
            self._container.close()
            raise OSError(f"{self.path} has no video stream.")
        self._stream = self._container.streams.video[0]
        self._stream.thread_type = "AUTO"  # frame- and slice-threaded decoding
        rate = self._stream.average_rate or self._stream.guessed_rate
        self.fps = Fraction(rate) if rate else DEFAULT_FPS
        self.frame_count = int(self._stream.frames or 0)
        self.width, self.height = int(self._stream.codec_context.width), int(self._stream.codec_context.height)

    def __iter__(self) -> Iterator[Frame]:
        av = _av()
        index = 0
        try:
            for frame in self._container.decode(self._stream):
                time = float(frame.time) if frame.time is not None else index / float(self.fps)
                yield Frame(index, time, frame.to_ndarray(format="rgb24"))
                index += 1
        except av.error.FFmpegError as error:
            raise OSError(f"{self.path}: decoding stopped at frame {index}: {error}") from error

    def close(self) -> None:
        self._container.close()

    def __enter__(self) -> "VideoReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def h264_available() -> bool:
    return "libx264" in _av().codecs_available


class VideoWriter:
    """Encodes RGB uint8 frames `(H, W, 3)` to an mp4 at `path` (its folder is created), atomically (see the module
    docstring). `crf` is the H.264 quality (lower is better; 18 is visually lossless for most content).

    Every frame must have the size of the first. Use as a context manager: leaving the block normally finishes the
    file; an exception removes the temporary file and leaves an existing `path` untouched.
    """

    def __init__(self, path: str | os.PathLike, fps, crf: int = 18):
        self.path = Path(path)
        self.fps = Fraction(fps).limit_denominator(1_000_000)
        if self.fps <= 0:
            raise ValueError(f"the frame rate must be > 0, got {fps}.")
        self.crf = int(crf)
        self.frames = 0
        self._container = self._stream = None
        self._size: tuple[int, int] | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._temporary = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")

    def _open(self, height: int, width: int) -> None:
        av = _av()
        self._container = av.open(str(self._temporary), mode="w", format="mp4")
        if h264_available():
            self._stream = self._container.add_stream("libx264", rate=self.fps)
            self._stream.options = {"crf": str(self.crf), "preset": "veryfast"}
        else:
            self._stream = self._container.add_stream("mpeg4", rate=self.fps)
            self._stream.bit_rate = 8_000_000
        self._stream.width, self._stream.height = width + width % 2, height + height % 2
        self._stream.pix_fmt = "yuv420p"
        self._size = (height, width)

    def write(self, image: np.ndarray) -> None:
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"video frames must be RGB uint8 (height, width, 3), got {image.dtype} {image.shape}.")
        if self._container is None:
            self._open(*image.shape[:2])
        if image.shape[:2] != self._size:
            raise ValueError(f"frame {self.frames} is {image.shape[1]}x{image.shape[0]}, the video "
                             f"{self._size[1]}x{self._size[0]}: every frame must have the first frame's size.")
        height, width = self._size
        if height % 2 or width % 2:
            image = np.pad(image, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
        frame = _av().VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
        frame.pts = self.frames
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> Path:
        """Flush the encoder and put the finished video at `path`."""
        if self._container is None:
            raise ValueError(f"no frame was written to {self.path}; an mp4 needs at least one.")
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()
        self._container = None
        os.replace(self._temporary, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the temporary file (the target is left as it was)."""
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.close()
            self._container = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._temporary)

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_video(path: str | os.PathLike, frames, fps=DEFAULT_FPS, crf: int = 18) -> Path:
    """Write an iterable of RGB uint8 frames as an mp4 (`VideoWriter`); returns the path."""
    with VideoWriter(path, fps, crf=crf) as writer:
        for frame in frames:
            writer.write(frame)
    return writer.path


__all__ = ["DEFAULT_FPS", "Frame", "VideoReader", "VideoWriter", "h264_available", "write_video"]
