"""4K hierarchical backbone vs the 1K backbone: time and peak memory per input size (batch 1, no grad).

For each input size H x W (up to 4096 x 3072) it runs, each in a fresh process so that peak memory is its own:
  - the 4K backbone (windowed tokenizer + encoder) on the full-size input;
  - the 1K backbone on the same image resized to 1024 x 768 (what a 1K model sees);
  - the 1K backbone on the full-size input where that fits (to show how plain global attention scales).
It prints median time and peak memory (peak RSS growth on CPU via /proc, Linux; max allocated on CUDA) and the 4K/1K ratios.

Defaults are CPU-sized (a narrow model); `--variant 1b-4k --device cuda --dtype bfloat16` measures the real one.

    python benchmarks/bench_4k.py [--sizes 1024x768 2048x1536 4096x3072] [--json out.json]
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

PROBE = r"""
import json, sys, time, torch
import sapiens2_hf
spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
dtype = getattr(torch, spec["dtype"])
if spec["variant"]:
    config = sapiens2_hf.Sapiens2Config.from_preset(spec["variant"])
else:
    config = sapiens2_hf.tiny_config(hidden_size=192, intermediate_size=768, num_attention_heads=3, num_hidden_layers=4,
                                     num_tokenizer_layers=2, num_key_value_attention_heads=3)
if not spec["tokenizer"]:
    config.num_tokenizer_layers = 0
config.tokenizer_chunk_size = spec["chunk"]
device = torch.device(spec["device"])
model = sapiens2_hf.Sapiens2Model(config).to(device=device, dtype=dtype).eval()
height, width = spec["size"]
pixel_values = torch.randn(1, 3, height, width, device=device, dtype=dtype)
def run():
    with torch.no_grad():
        model(pixel_values)
    if device.type == "cuda":
        torch.cuda.synchronize()
with torch.no_grad():  # warm-up on a small input: one-off allocations, without reaching this size's peak
    model(torch.randn(1, 3, 256, 192, device=device, dtype=dtype))
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
if device.type == "cuda":
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
else:
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak-RSS mark (Linux)
    base = status("VmRSS")
run()  # the first full-size run gives the peak activation memory (peak RSS growth on CPU)
peak = (torch.cuda.max_memory_allocated() - base) if device.type == "cuda" else status("VmHWM") - base
times = []
for _ in range(spec["repeats"]):
    start = time.perf_counter(); run(); times.append(time.perf_counter() - start)
print(json.dumps({"times": times, "peak_bytes": peak}))
"""


def measure(spec):
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(spec)], capture_output=True, text=True)
    if result.returncode != 0:
        return {"error": result.stderr.strip().splitlines()[-1]}
    out = json.loads(result.stdout.strip().splitlines()[-1])
    times = sorted(out["times"])
    quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return {"median_s": statistics.median(times), "iqr_s": quartiles[2] - quartiles[0], "peak_mib": out["peak_bytes"] / 2**20}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["1024x768", "2048x1536", "4096x3072"])
    parser.add_argument("--variant", default=None, help="official preset, e.g. 1b-4k (default: a narrow CPU model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--full-1k-max-pixels", type=int, default=2048 * 1536, help="skip the 1K model on bigger inputs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import torch
    import transformers

    rows = []
    base = {"variant": args.variant, "device": args.device, "dtype": args.dtype, "threads": args.threads,
            "repeats": args.repeats, "chunk": args.chunk}
    resized_1k = measure({**base, "tokenizer": False, "size": [1024, 768]})
    print(f"1K backbone on the image resized to 1024x768: {resized_1k}")
    for size in args.sizes:
        height, width = map(int, size.split("x"))
        row = {"size": size, "4k": measure({**base, "tokenizer": True, "size": [height, width]}), "1k_resized": resized_1k}
        if height * width <= args.full_1k_max_pixels:
            row["1k_full_size"] = measure({**base, "tokenizer": False, "size": [height, width]})
        if "median_s" in row["4k"]:
            row["time_ratio_4k_vs_1k_resized"] = row["4k"]["median_s"] / resized_1k["median_s"]
            row["memory_ratio_4k_vs_1k_resized"] = row["4k"]["peak_mib"] / max(resized_1k["peak_mib"], 1e-9)
        rows.append(row)
        print(json.dumps(row))
    if args.json:
        env = {"torch": torch.__version__, "transformers": transformers.__version__, **base, "time": time.time()}
        with open(args.json, "w") as handle:
            json.dump({"env": env, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
