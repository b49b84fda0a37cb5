"""Peak memory and time of loading a bfloat16 checkpoint in Meta's Hub layout with `dtype=torch.bfloat16`: our class
against transformers' own class (the baseline), each in a fresh process.

The checkpoint is written once by transformers' own class (as Meta's repos were: config.json with the `sapiens2` model
type, model.safetensors with the original tensor names) with random bfloat16 weights of an official size.

    python benchmarks/bench_loading_memory.py --variant 0.4b --task pose
    python benchmarks/bench_loading_memory.py --variant 1b --task pose --folder /tmp/sapiens2_1b_pose_bf16

Prints, per loader: peak RSS (VmHWM) above the interpreter's RSS before loading (GB; every parameter touched once after
loading, so mapped weights count), that peak / the weights file size, the process's whole peak, and the wall time of
`from_pretrained`; then the ratio ours / transformers'.
"""

import argparse
import json
import os
import subprocess
import sys
import time

LOAD = """
import json, sys, time, torch
import {module}


def status(field):
    # /proc/self/status, in kB: VmHWM (peak RSS) belongs to this process's address space; ru_maxrss would carry the
    # parent's peak over fork and exec.
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024


cls = {cls}
before = status("VmRSS")
start = time.perf_counter()
model = cls.from_pretrained({folder!r}, dtype=torch.bfloat16)
elapsed = time.perf_counter() - start
# transformers maps the file and may leave parameters pointing into it: touch every one, so that the peak counts
# each weight's pages once, wherever they live.
assert {{p.dtype for p in model.parameters()}} == {{torch.bfloat16}}
checksum = sum(float(p.float().sum()) for p in model.parameters())
peak = status("VmHWM")
print(json.dumps({{"peak_gb": (peak - before) / 1e9, "total_gb": peak / 1e9, "seconds": elapsed,
                  "class": type(model).__module__}}))
"""


def write_checkpoint(folder: str, variant: str, task: str) -> None:
    import torch
    import transformers

    import sapiens2_hf

    ours = sapiens2_hf.Sapiens2Config.from_preset(variant, task=task)
    config = transformers.Sapiens2Config.from_dict(ours.to_dict())
    model_class = getattr(transformers, sapiens2_hf.model_class_for_task(task).__name__)
    torch.set_default_dtype(torch.bfloat16)
    with torch.no_grad():
        model = model_class(config)
    model.save_pretrained(folder)  # transformers' default: the original tensor names (Meta's layout)
    torch.set_default_dtype(torch.float32)


def measure(folder: str, module: str, cls: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    code = LOAD.format(module=module, cls=cls, folder=folder)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="0.4b")
    parser.add_argument("--task", default="pose")
    parser.add_argument("--folder", default=None, help="where the checkpoint is (or is written); default: /tmp/...")
    parser.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = args.folder or f"/tmp/sapiens2_{args.variant}_{args.task}_bf16"
    if args.write_only:
        return write_checkpoint(folder, args.variant, args.task)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        start = time.perf_counter()
        # In a child process: this one's memory stays small while it measures the loads.
        done = subprocess.run([sys.executable, __file__, "--write-only", "--variant", args.variant, "--task", args.task,
                               "--folder", folder], timeout=3600)
        if done.returncode:
            raise SystemExit(done.returncode)
        print(f"wrote {folder} in {time.perf_counter() - start:.1f} s")
    size = sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder) if name.endswith(".safetensors"))
    print(f"weights: {size / 1e9:.2f} GB (bfloat16, original tensor names)")
    class_name = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]
    results = {
        "transformers": measure(folder, "transformers", f"transformers.{class_name}"),
        "sapiens2_hf": measure(folder, "sapiens2_hf", f"sapiens2_hf.{class_name}"),
    }
    for name, result in results.items():
        print(f"{name:>13}: peak {result['peak_gb']:.2f} GB = {result['peak_gb'] * 1e9 / size:.2f} x file "
              f"(process {result['total_gb']:.2f} GB), {result['seconds']:.2f} s  ({result['class']})")
    ratio = results["sapiens2_hf"]["peak_gb"] / max(results["transformers"]["peak_gb"], 1e-9)
    print(f"ours / transformers: peak x{ratio:.2f}, time "
          f"x{results['sapiens2_hf']['seconds'] / results['transformers']['seconds']:.2f}")


if __name__ == "__main__":
    main()
