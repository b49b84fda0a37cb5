"""Memory of the onnxruntime backend across calls, with onnxruntime's CPU memory arena on and off (issue 20, item 12).

onnxruntime's CPU arena keeps every block it ever allocated for reuse and never returns it to the system, so a
process that runs a large model several times (or at several batch sizes) keeps the peak of all of them. Our
`OnnxRuntimeSapiens2Model` turns the arena off by default (`memory_arena=False`); this script measures what that
costs and saves. Each configuration runs in a fresh child process (resident memory is per process), which loads the
exported folder, runs `--calls` forward passes alternating batch sizes `--batches`, and prints its resident set
(VmRSS) after each call and its high-water mark (VmHWM). The export itself is measured too (VmHWM of a child that
builds the model and exports it), as a multiple of the float32 weights.

    python benchmarks/bench_onnxruntime_memory.py                        # 0.4b seg, 4 layers, 512x384 (minutes)
    python benchmarks/bench_onnxruntime_memory.py --layers 24 --height 1024 --width 768   # the full 0.4b
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _status_gb(field: str) -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024**2
    return float("nan")


def _export(args) -> None:
    import torch

    from sapiens2_hf.export import export_model
    from sapiens2_hf.modeling import Sapiens2Config, model_class_for_task

    torch.manual_seed(0)
    full = Sapiens2Config.from_preset(args.variant, task=args.task)
    # per-layer lists (GQA heads, window layers) follow the depth
    per_layer = {name: value[: args.layers] for name, value in full.to_dict().items()
                 if isinstance(value, list) and len(value) == full.num_hidden_layers}
    config = Sapiens2Config.from_preset(args.variant, task=args.task, num_hidden_layers=args.layers,
                                        image_size=[args.height, args.width], **per_layer)
    model = model_class_for_task(args.task)(config).eval()
    weight_gb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1024**3
    started = time.perf_counter()
    export_model(model, args.folder, format="onnx", task=args.task, input_size=(args.height, args.width),
                 rope_dtype="float32", overwrite=True)
    print(json.dumps({"weights_gb": weight_gb, "export_s": time.perf_counter() - started,
                      "export_peak_gb": _status_gb("VmHWM")}))


def _run(args) -> None:
    import torch

    from sapiens2_hf.export import OnnxRuntimeSapiens2Model

    model = OnnxRuntimeSapiens2Model.from_pretrained(args.folder, memory_arena=args.arena == "on")
    after_load = _status_gb("VmRSS")
    resident, seconds = [], []
    batches = [int(b) for b in args.batches.split(",")]
    for call in range(args.calls):
        batch = batches[call % len(batches)]
        pixels = torch.randn(batch, 3, args.height, args.width, generator=torch.Generator().manual_seed(call))
        started = time.perf_counter()
        model(pixel_values=pixels)
        seconds.append(time.perf_counter() - started)
        resident.append(_status_gb("VmRSS"))
    print(json.dumps({"after_load_gb": after_load, "resident_gb": resident, "peak_gb": _status_gb("VmHWM"),
                      "seconds": seconds}))


def _child(mode: str, args, extra=()) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--folder", args.folder, "--variant", args.variant,
               "--task", args.task, "--layers", str(args.layers), "--height", str(args.height), "--width",
               str(args.width), "--calls", str(args.calls), "--batches", args.batches, *extra]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode:
        sys.exit(f"the {mode} child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", default="0.4b")
    parser.add_argument("--task", default="seg")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--height", type=int, default=512)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--batches", default="4,1", help="batch sizes, cycled over the calls")
    parser.add_argument("--child", choices=["export", "run"])
    parser.add_argument("--arena", choices=["on", "off"], default="off")
    parser.add_argument("--folder")
    args = parser.parse_args()
    if args.child == "export":
        return _export(args)
    if args.child == "run":
        return _run(args)
    with tempfile.TemporaryDirectory() as folder:
        args.folder = os.path.join(folder, "exported")
        export = _child("export", args)
        print(f"{args.variant} {args.task}, {args.layers} layers, {args.height}x{args.width}: float32 weights "
              f"{export['weights_gb']:.2f} GB; export peak {export['export_peak_gb']:.2f} GB "
              f"= {export['export_peak_gb'] / export['weights_gb']:.1f} x weights ({export['export_s']:.0f} s)")
        runs = {arena: _child("run", args, ["--arena", arena]) for arena in ("on", "off")}
    print(f"\n{args.calls} calls, batch sizes cycling {args.batches}: resident GB after each call")
    print(f"{'arena':<6} {'load':>6} " + " ".join(f"{'#' + str(i + 1):>6}" for i in range(args.calls))
          + f" {'peak':>6} {'s/call':>7}")
    for arena, run in runs.items():
        mean_s = sum(run["seconds"][1:]) / max(1, len(run["seconds"]) - 1)
        print(f"{arena:<6} {run['after_load_gb']:6.2f} " + " ".join(f"{r:6.2f}" for r in run["resident_gb"])
              + f" {run['peak_gb']:6.2f} {mean_s:7.2f}")
    on, off = runs["on"], runs["off"]
    print(f"\nlast-call resident, arena off / on: {off['resident_gb'][-1] / on['resident_gb'][-1]:.2f}; "
          f"peak off / on: {off['peak_gb'] / on['peak_gb']:.2f}; time per call off / on: "
          f"{(sum(off['seconds'][1:]) / sum(on['seconds'][1:])):.2f}")


if __name__ == "__main__":
    main()
