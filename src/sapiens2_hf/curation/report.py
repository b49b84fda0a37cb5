"""The curation report: `report.png` (per-stage pass rates, score histograms with their thresholds, cluster sizes
before and after balancing, thumbnails kept and dropped per stage) and `report.html` (the same picture, the numbers as
tables, the dropped images' names and scores), drawn with OpenCV and numpy.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import cv2
import numpy as np

from ..utils.atomic_io import atomic_write_bytes, atomic_write_text
from ..runs.decode import decode_image
from .measures import STAGES

_WIDTH = 1200
_THUMB = 96
_INK, _KEEP, _DROP, _GRID = (40, 40, 40), (60, 160, 60), (200, 60, 50), (225, 225, 225)
_HISTOGRAMS = (("quality", "sharpness", "min_sharpness", "x 1000 Laplacian var."),
               ("quality", "blockiness", "max_blockiness", "JPEG blockiness"),
               ("person", "person_fraction", "min_person_fraction", "person pixels"),
               ("domain", "reference_similarity", "min_reference_similarity", "reference cosine"))


def _text(canvas, text, x, y, scale=0.45, colour=_INK, thickness=1):
    cv2.putText(canvas, text, (int(x), int(y)), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, thickness, cv2.LINE_AA)


def _bars(records, summary) -> np.ndarray:
    canvas = np.full((230, _WIDTH // 2, 3), 255, np.uint8)
    _text(canvas, "per stage: kept (green) / dropped (red) of the images it measured", 10, 20, 0.5)
    left, width = 110, _WIDTH // 2 - 260
    for row, (stage, counts) in enumerate(summary["stages"].items()):
        y = 40 + row * 26
        _text(canvas, stage, 10, y + 14)
        measured = counts["measured"]
        if not counts["on"] or not measured:
            _text(canvas, "off" if not counts["on"] else "not reached", left, y + 14, colour=(130, 130, 130))
            continue
        kept = int(width * counts["kept"] / measured)
        cv2.rectangle(canvas, (left, y), (left + kept, y + 18), _KEEP, -1)
        cv2.rectangle(canvas, (left + kept, y), (left + width, y + 18), _DROP, -1)
        _text(canvas, f"{counts['kept']}/{measured} ({100 * counts['kept'] / measured:.0f}%)", left + width + 8, y + 14)
    return canvas


def _histogram(records, config, stage, key, threshold_name, label) -> np.ndarray:
    canvas = np.full((150, _WIDTH // 4, 3), 255, np.uint8)
    values = np.array([r["stages"][stage][key] for r in records if key in r["stages"].get(stage, {})], float)
    _text(canvas, f"{stage}: {label}", 6, 16, 0.42)
    if not len(values):
        _text(canvas, "not measured", 6, 80, colour=(130, 130, 130))
        return canvas
    threshold = config.get(threshold_name)
    low, high = float(np.percentile(values, 1)), float(np.percentile(values, 99))
    if threshold is not None:
        low, high = min(low, threshold), max(high, threshold)
    high = high if high > low else low + 1
    counts, _ = np.histogram(np.clip(values, low, high), bins=30, range=(low, high))
    plot_w, plot_h, x0, y0 = canvas.shape[1] - 20, 100, 10, 130
    for k, count in enumerate(counts):
        height = int(plot_h * count / max(1, counts.max()))
        x = x0 + k * plot_w // 30
        cv2.rectangle(canvas, (x, y0 - height), (x + plot_w // 30 - 1, y0), (90, 120, 200), -1)
    if threshold is not None:
        x = int(x0 + plot_w * (threshold - low) / (high - low))
        cv2.line(canvas, (x, y0 - plot_h), (x, y0), _DROP, 2)
        _text(canvas, f"threshold {threshold:g}", min(x + 3, canvas.shape[1] - 95), y0 - plot_h + 10, 0.38, _DROP)
    _text(canvas, f"{low:.3g}", x0, 146, 0.38)
    _text(canvas, f"{high:.3g}", canvas.shape[1] - 50, 146, 0.38)
    return canvas


def _clusters(records) -> np.ndarray:
    canvas = np.full((150, _WIDTH // 2, 3), 255, np.uint8)
    sizes: dict[int, list[int]] = {}
    for record in records:
        balance = record["stages"].get("balance")
        if balance:
            before_after = sizes.setdefault(balance["cluster"], [0, 0])
            before_after[0] += 1
            before_after[1] += balance["verdict"] == "keep"
    _text(canvas, "balance: cluster sizes before (grey) and after (green) the cap", 6, 16, 0.45)
    if not sizes:
        _text(canvas, "not run", 6, 80, colour=(130, 130, 130))
        return canvas
    ordered = sorted(sizes.values(), key=lambda pair: -pair[0])[:60]
    biggest = max(pair[0] for pair in ordered)
    bar = max(2, (canvas.shape[1] - 20) // len(ordered))
    for k, (before, after) in enumerate(ordered):
        x = 10 + k * bar
        cv2.rectangle(canvas, (x, 145 - int(100 * before / biggest)), (x + bar - 2, 145), (190, 190, 190), -1)
        cv2.rectangle(canvas, (x, 145 - int(100 * after / biggest)), (x + bar - 2, 145), _KEEP, -1)
    _text(canvas, f"{len(sizes)} clusters, largest {biggest}", 6, 32, 0.4)
    return canvas


def _thumbnail(image: np.ndarray | None) -> np.ndarray:
    tile = np.full((_THUMB, _THUMB, 3), 235, np.uint8)
    if image is None:
        _text(tile, "undecodable", 4, _THUMB // 2, 0.35, _DROP)
        return tile
    height, width = image.shape[:2]
    scale = _THUMB / max(height, width)
    small = cv2.resize(image, (max(1, int(width * scale)), max(1, int(height * scale))), interpolation=cv2.INTER_AREA)
    top, left = (_THUMB - small.shape[0]) // 2, (_THUMB - small.shape[1]) // 2
    tile[top:top + small.shape[0], left:left + small.shape[1]] = small
    return tile


def _examples(records, source, per_stage: int = 4) -> tuple[dict, dict]:
    """Up to `per_stage` dropped images per stage and as many kept ones: their indices, then thumbnails."""
    wanted: dict[str, list[int]] = {stage: [] for stage in STAGES}
    for record in records:
        stage = record.get("dropped_by")
        if stage and len(wanted[stage]) < per_stage:
            wanted[stage].append(record["index"])
    kept = [r["index"] for r in records if r["verdict"] == "keep"][: 2 * per_stage]
    needed = set(kept) | {i for indices in wanted.values() for i in indices}
    thumbnails = {}
    if needed:
        for index, name, load in source.rows(min(needed)):
            if index in needed:
                try:
                    thumbnails[index] = _thumbnail(decode_image(load(), name=name))
                except Exception:  # noqa: BLE001 - an undecodable image is shown as such
                    thumbnails[index] = _thumbnail(None)
            if index >= max(needed):
                break
    return {"kept": kept, **wanted}, thumbnails


def _strip(title: str, indices, thumbnails) -> np.ndarray:
    canvas = np.full((_THUMB + 26, _WIDTH // 2, 3), 255, np.uint8)
    _text(canvas, title, 6, 16, 0.45, _KEEP if title.startswith("kept") else _DROP)
    for k, index in enumerate(indices[: (_WIDTH // 2 - 10) // (_THUMB + 4)]):
        x = 6 + k * (_THUMB + 4)
        canvas[24:24 + _THUMB, x:x + _THUMB] = thumbnails.get(index, _thumbnail(None))
    return canvas


def report_picture(records, summary, source) -> tuple[np.ndarray, dict]:
    """The one-page summary as an RGB array, and the example indices it shows."""
    config = summary["config"]
    header = np.full((40, _WIDTH, 3), 255, np.uint8)
    _text(header, f"sapiens2-hf curate: {summary['images']} images in, {summary['kept']} kept "
                  f"({100 * summary['kept'] / max(1, summary['images']):.1f}%)", 10, 27, 0.65, _INK, 2)
    top = np.concatenate([_bars(records, summary), np.concatenate(
        [_clusters(records), np.full((80, _WIDTH // 2, 3), 255, np.uint8)], axis=0)], axis=1)
    histograms = np.concatenate([_histogram(records, config, *spec) for spec in _HISTOGRAMS], axis=1)
    examples, thumbnails = _examples(records, source)
    strips = [_strip("kept", examples["kept"], thumbnails)]
    strips += [_strip(f"dropped by {stage}", indices, thumbnails) for stage, indices in examples.items()
               if stage != "kept" and indices]
    if len(strips) % 2:
        strips.append(np.full_like(strips[0], 255))
    rows = [np.concatenate(strips[k:k + 2], axis=1) for k in range(0, len(strips), 2)]
    picture = np.concatenate([header, top, histograms, *rows], axis=0)
    return picture, examples


def write_report(out: Path, records: list[dict], summary: dict, source) -> Path:
    """Writes `out/report.png` and `out/report.html` (atomically); returns the HTML's path."""
    picture, examples = report_picture(records, summary, source)
    ok, encoded = cv2.imencode(".png", cv2.cvtColor(picture, cv2.COLOR_RGB2BGR))
    if not ok:
        raise OSError("could not encode the report picture")
    atomic_write_bytes(out / "report.png", encoded.tobytes())
    by_index = {record["index"]: record for record in records}
    sections = []
    for stage, indices in examples.items():
        if stage == "kept" or not indices:
            continue
        items = "".join(f"<li><code>{html.escape(by_index[i]['source'])}</code>: "
                        f"<code>{html.escape(json.dumps(by_index[i]['stages'].get(stage, {})))}</code></li>"
                        for i in indices)
        sections.append(f"<h3>dropped by {stage}</h3><ul>{items}</ul>")
    rows = "".join(f"<tr><td>{stage}</td><td>{'on' if c['on'] else 'off'}</td><td>{c['measured']}</td>"
                   f"<td>{c['kept']}</td><td>{c['dropped']}</td></tr>" for stage, c in summary["stages"].items())
    speed = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in summary["images_per_second"].items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>sapiens2-hf curate report</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1250px}}td,th{{padding:2px 10px}}</style></head><body>
<h1>Curation report</h1><p>{html.escape(summary['input'])}: {summary['images']} images, {summary['kept']} kept.</p>
<img alt="report" src="data:image/png;base64,{base64.b64encode(encoded.tobytes()).decode()}" width="{_WIDTH}">
<h2>Stages</h2><table><tr><th>stage</th><th></th><th>measured</th><th>kept</th><th>dropped</th></tr>{rows}</table>
<h2>Speed (images/s on this machine)</h2><table>{speed}</table>
<h2>Thresholds</h2><pre>{html.escape(json.dumps(summary['config'], indent=1))}</pre>
<h2>Examples</h2>{''.join(sections)}
<p>Every image's scores and verdicts: <code>records.jsonl</code>.</p></body></html>
"""
    atomic_write_text(out / "report.html", page)
    return out / "report.html"


__all__ = ["report_picture", "write_report"]
