"""First-call latency in a fresh process: eager, torch.compile cold, torch.compile with a warm compile cache, and the
AOTInductor package (`sapiens2-hf export --format aoti`).

Each mode runs in its own subprocess (nothing shared but the files on disk) and reports the time from the start of
the process's model load to the end of its first forward call (`first_call_s`, what a user waits for before the
first result, after the imports every mode shares, which are reported apart), with the load and the call apart, and
the max-abs difference of its output from the eager model's on the same seeded input. Every compile mode gets an empty inductor cache folder of its own (TORCHINDUCTOR_CACHE_DIR,
set for the child only), so that "cold" is cold: without it, inductor's on-disk cache under /tmp from an earlier run
would make every compile warm. "compile (warm cache)" starts with an empty inductor folder too, and only the
`compile_cache_dir` file written by the cold run: what a new machine or a cleaned /tmp gets from the persistent
cache.

    python benchmarks/bench_startup_compile.py                       # CPU, tiny seg model (hidden 32, 2 layers)
    python benchmarks/bench_startup_compile.py --layers 4 --hidden-size 128 --device cuda
    python benchmarks/bench_startup_compile.py --json results/startup_compile.json

The model is random (a small config, no checkpoint needed); compile time grows with the number of distinct kernels
(layers share theirs), not with the weights' size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


MODES = ("eager", "compile-cold", "compile-warm", "aoti")


def _model(args):
    import torch

    import sapiens2_hf

    config = sapiens2_hf.tiny_config(args.task, hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                                     image_size=[args.height, args.width])
    torch.manual_seed(0)
    return sapiens2_hf.model_class_for_task(args.task)(config).eval()


def _input(args):
    import torch

    return torch.randn(args.batch_size, 3, args.height, args.width, generator=torch.Generator().manual_seed(1))


def child(args) -> dict:
    """One mode, in this (fresh) process."""
    started = time.perf_counter()
    import torch

    torch.set_num_threads(args.threads)
    import sapiens2_hf.export  # noqa: F401  (every mode pays the same imports; timed apart)
    from sapiens2_hf.inference_recipe import CompileCache, prepare_for_inference

    imported = time.perf_counter()
    pixel_values = _input(args).to(args.device)
    if args.mode == "aoti":
        from sapiens2_hf.export import load_exported

        model = load_exported(args.folder)
        model.to(args.device)
    else:
        model = _model(args)
        if args.mode != "eager":
            prepare_for_inference(model, device=args.device, dtype=torch.float32, compile=True, attention="sdpa",
                                  compile_cache_dir=args.cache)
        else:
            model.to(args.device)
    loaded = time.perf_counter()
    with torch.no_grad():
        output = model(pixel_values=pixel_values)
    first = output[args.output].float().cpu()
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    done = time.perf_counter()
    with torch.no_grad():
        again = time.perf_counter()
        model(pixel_values=pixel_values)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        second = time.perf_counter() - again
    torch.save(first, args.result)
    cache = getattr(model, "compile_cache", None)
    return {"mode": args.mode, "import_s": imported - started, "load_s": loaded - imported, "call_s": done - loaded,
            "first_call_s": done - imported,
            "second_call_s": second, "counters": CompileCache.counters(),
            "cache_loaded": dict(cache.loaded) if cache is not None else None}


def _run_child(args, mode: str, work: Path, inductor_dir: Path | None) -> dict:
    env = dict(os.environ)
    if inductor_dir is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_dir)
    command = [sys.executable, __file__, "--child", mode, "--folder", str(work / "aoti"), "--cache",
               str(work / "compile_cache"), "--result", str(work / f"{mode}.pt"), "--task", args.task,
               "--hidden-size", str(args.hidden_size), "--layers", str(args.layers), "--height", str(args.height),
               "--width", str(args.width), "--batch-size", str(args.batch_size), "--device", args.device,
               "--threads", str(args.threads)]
    started = time.perf_counter()
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{completed.stderr[-4000:]}")
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    report["process_wall_s"] = wall  # interpreter start and imports included
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="seg")
    parser.add_argument("--hidden-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--height", type=int, default=64)
    parser.add_argument("--width", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--child", choices=MODES, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.output = {"seg": "logits", "normal": "normals", "pointmap": "pointmaps", "albedo": "albedos",
                   "pose": "heatmaps"}.get(args.task, "logits")
    if args.child:
        args.mode = args.child
        print(json.dumps(child(args)))
        return 0

    import torch

    from sapiens2_hf.export import export_model

    with tempfile.TemporaryDirectory(prefix="bench_startup_compile_") as temp:
        work = Path(temp)
        env_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor-export")  # this (parent) process only
        started = time.perf_counter()
        export_model(_model(args), work / "aoti", format="aoti", device=args.device)
        export_s = time.perf_counter() - started
        if env_dir is None:
            del os.environ["TORCHINDUCTOR_CACHE_DIR"]
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = env_dir
        reports = {
            "eager": _run_child(args, "eager", work, None),
            "compile-cold": _run_child(args, "compile-cold", work, work / "inductor-cold"),
            "compile-warm": _run_child(args, "compile-warm", work, work / "inductor-warm"),
            "aoti": _run_child(args, "aoti", work, work / "inductor-aoti"),
        }
        reference = torch.load(work / "eager.pt")
        for mode, report in reports.items():
            report["max_abs_vs_eager"] = (torch.load(work / f"{mode}.pt") - reference).abs().max().item()
        cache_bytes = sum(p.stat().st_size for p in (work / "compile_cache").glob("*.bin"))
        package_bytes = (work / "aoti" / "model_aoti.pt2").stat().st_size
    eager = reports["eager"]["first_call_s"]
    print(f"first call in a fresh process: {args.task}, hidden {args.hidden_size}, {args.layers} layers, input "
          f"{args.batch_size}x3x{args.height}x{args.width}, {args.device}, {args.threads} threads, torch "
          f"{torch.__version__}")
    print(f"AOTI export (compile + verify, once): {export_s:.1f} s, package {package_bytes / 1e6:.1f} MB; "
          f"compile cache file {cache_bytes / 1e6:.2f} MB")
    print("| mode | imports (s) | load (s) | first call (s) | load + first call (s) | vs eager | 2nd call (ms) | "
          "max-abs vs eager |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, report in reports.items():
        print(f"| {mode} | {report['import_s']:.1f} | {report['load_s']:.2f} | {report['call_s']:.2f} | "
              f"{report['first_call_s']:.2f} | "
              f"{report['first_call_s'] / eager:.1f}x | {report['second_call_s'] * 1e3:.1f} | "
              f"{report['max_abs_vs_eager']:.2e} |")
    warm = reports["compile-warm"]["counters"]
    print(f"warm-cache run: artefacts loaded {reports['compile-warm']['cache_loaded']}, inductor FX-graph cache "
          f"hits {warm['fxgraph_cache_hit']}, misses {warm['fxgraph_cache_miss']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k not in
                                                         ("child", "folder", "cache", "result", "mode")},
                                               "export_s": export_s, "modes": reports}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
