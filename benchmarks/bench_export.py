"""Exported models on this CPU: speed of onnxruntime float32 and int8 against eager torch, and what int8 costs.

Three parts, each printed as it finishes (all figures also go to `--output` as JSON):

1. Speed. A 0.4b-shaped backbone (width 1024, 16 heads, SwiGLU 4096, seeded random weights) with `--layers` layers at
   `--height` x `--width` (default 4 layers, 512x384), exported to ONNX (bf16 RoPE, verified against eager) and
   quantized with each `--quantize` mode. Eager torch float32, onnxruntime float32 and each int8 graph run
   interleaved for `--rounds` rounds on `--threads` threads; printed: median wall time and process CPU time per run
   (the CPU figure is the fairer one when other processes share the machine), and the median of per-round ratios.
   Also the deviation of each graph from eager (float32 ONNX: the bf16-RoPE emulation; int8: the quantization).
   Then where the time goes: onnxruntime's profiler per op type for the float32 graph and each int8 graph (one run
   each), the int8 GEMM kernel's own speed-up on the backbone's linear shapes (single-MatMul graphs, interleaved,
   process CPU time), and the whole-model speed-up that follows if the linear layers ran at that kernel speed-up.
2. Official e2e fixtures (tests/fixtures/official/*_e2e: the official demo on a photo with tiny 2-layer models):
   the pipelines with the torch model, the float32 ONNX model and the int8 ONNX model, each against the official
   demo's final outputs (keypoints in px, class-map disagreement, normal angle, pointmap and albedo error).
3. Synthetic evaluation: `--synthetic-images` rendered synthetic humans (sapiens2_hf.data.synthetic) through the
   pose (with the rendered boxes), segmentation and normal pipelines, int8 scored against the float32 outputs of the
   same model: PCK@0.05/0.1 (box size), mIoU, mean angular error. Models: the tiny e2e ones and 0.4b-wide ones
   (`--synthetic-layers` layers, official heads, random weights) at a small input.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_export.py [--layers 4] [--height 512 --width 384]
        [--rounds 5] [--threads 2] [--quantize int8-dynamic,int8-static] [--skip-speed] [--skip-e2e]
        [--skip-synthetic] [--synthetic-images 8] [--output result.json]

Random weights make int8 errors representative of the arithmetic only, not of a trained model's sensitivity. On a
machine shared with other processes, compare the process CPU times (and `--threads 1`): wall times then measure the
other processes too.
"""

import os

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "2")

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import sapiens2_hf  # noqa: E402
from sapiens2_hf.export import OnnxRuntimeSapiens2Model, export_model, read_export_info  # noqa: E402
from sapiens2_hf.export.quantization import quantize_onnx  # noqa: E402


FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "official"
PIPELINE_TASK = {"pose": "sapiens2-pose", "seg": "sapiens2-segmentation", "normal": "sapiens2-normal",
                 "pointmap": "sapiens2-pointmap", "albedo": "sapiens2-albedo"}


def _session_model(folder, precision, threads):
    """An onnxruntime model whose threads do not spin while idle, so that process CPU time measures work."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return OnnxRuntimeSapiens2Model.from_pretrained(folder, precision=precision, session_options=options)


def _rel_l2(a, b):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    return ((a - b).norm() / b.norm()).item()


def _add_int8(folder: Path, mode: str) -> Path:
    """A copy of the export folder's metadata pointing at an int8 file of `mode` (one folder per mode)."""
    target = folder.parent / f"{folder.name}-{mode}"
    target.mkdir(exist_ok=True)
    for name in ("config.json", "preprocessor_config.json"):
        (target / name).write_bytes((folder / name).read_bytes())
    (target / "model.onnx").unlink(missing_ok=True)
    (target / "model.onnx").symlink_to(folder / "model.onnx")
    info = read_export_info(folder)
    details = quantize_onnx(folder / "model.onnx", target / "model_int8.onnx", mode=mode,
                            input_size=tuple(info["input_size"]))
    info["files"]["int8"] = "model_int8.onnx"
    info["quantization"] = details
    (target / "export_info.json").write_text(json.dumps(info))
    return target


# ------------------------------------------------------------------------------------------------ 1. speed

_INT8_GEMM_OPS = {"MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulInteger", "QLinearMatMul",
                  "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear"}


def _profile_by_node(path: Path, threads: int, feed: dict, work: Path) -> list:
    """`[(node name, op type, seconds per run)]` of the graph at `path`: onnxruntime's profiler over 3 runs (the first
    one warms up, and is counted: its one-time costs are a third of it), the same session options as the timed runs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_profiling = True
    options.profile_file_prefix = str(work / f"profile-{path.parent.name}")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    runs = 3
    for _ in range(runs):
        session.run(None, feed)
    events = json.loads(Path(session.end_profiling()).read_text())
    per_run = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            key = (event["name"][: -len("_kernel_time")], event["args"]["op_name"])
            per_run[key] = per_run.get(key, 0.0) + event["dur"] / 1e6 / runs
    return [(name, op, seconds) for (name, op), seconds in per_run.items()]


def _linear_matmuls(path: Path) -> tuple[set, list]:
    """Names of the float32 graph's MatMuls with a constant weight, and their `(K, N)` weight shapes."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {init.name: tuple(init.dims) for init in graph.initializer}
    nodes = [node for node in graph.node if node.op_type == "MatMul" and node.input[1] in weights]
    return {node.name for node in nodes}, [weights[node.input[1]] for node in nodes]


def _gemm_kernel_speedup(shapes: list, tokens: int, mode: str, threads: int, rounds: int, work: Path) -> float:
    """Time-weighted speed-up of the int8 graph over the float32 one on single-MatMul graphs of the linear layers'
    shapes (`tokens` rows): what onnxruntime's int8 GEMM itself gains on this CPU. Process CPU time, interleaved."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    generator = np.random.default_rng(0)
    sessions, feeds, counts = [], [], []
    for k, n in sorted(set(shapes)):
        weight = (generator.standard_normal((k, n)) * k ** -0.5).astype(np.float32)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="linear")], "gemm",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, n])],
            [numpy_helper.from_array(weight, "w")])
        fp32, int8 = work / f"gemm-{k}x{n}.onnx", work / f"gemm-{k}x{n}-int8.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(fp32))
        calibration = [generator.standard_normal((1, tokens, k)).astype(np.float32)]  # int8-static only
        quantize_onnx(fp32, int8, mode=mode, calibration_inputs=calibration, input_name="x")
        sessions.append([ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
                         for p in (fp32, int8)])
        feeds.append({"x": generator.standard_normal((1, tokens, k)).astype(np.float32)})
        counts.append(shapes.count((k, n)))
    cpu = [[[], []] for _ in sessions]
    for _ in range(rounds + 1):  # the first round warms up
        for pair, feed, times in zip(sessions, feeds, cpu):
            for session, series in zip(pair, times):
                started = time.process_time()
                session.run(None, feed)
                series.append(time.process_time() - started)
    fp32_total = sum(c * statistics.median(t[0][1:]) for c, t in zip(counts, cpu))
    int8_total = sum(c * statistics.median(t[1][1:]) for c, t in zip(counts, cpu))
    return fp32_total / int8_total


def _where_time_goes(args, folders: dict, pixel_values, tokens: int, work: Path) -> dict:
    fp32_path = folders["onnx fp32"][0] / "model.onnx"
    linear_names, shapes = _linear_matmuls(fp32_path)
    feed = {"pixel_values": pixel_values.numpy()}
    print(f"   where the time goes (onnxruntime profiler per op type, {args.threads} threads, s per run; 3 profiled "
          "runs per graph, not interleaved: indicative, the timed rounds above are the measurement):")
    profiles, results = {}, {}
    for name, (folder, precision) in folders.items():
        path = folder / ("model.onnx" if precision == "fp32" else "model_int8.onnx")
        nodes = _profile_by_node(path, args.threads, feed, work)
        if precision == "fp32":
            linear = sum(s for node, op, s in nodes if op == "MatMul" and node in linear_names)
        else:
            linear = sum(s for _, op, s in nodes if op in _INT8_GEMM_OPS)
        by_op = {}
        for node, op, seconds in nodes:
            if not (op in _INT8_GEMM_OPS or (op == "MatMul" and node in linear_names)):
                by_op[op] = by_op.get(op, 0.0) + seconds
        total = sum(s for _, _, s in nodes)
        profiles[name] = {"total_s": total, "linear_layers_s": linear, "other_s": total - linear,
                          "other_by_op_s": dict(sorted(by_op.items(), key=lambda kv: -kv[1]))}
        top = ", ".join(f"{op} {s:.3f}" for op, s in list(profiles[name]["other_by_op_s"].items())[:7])
        print(f"   {name:30s} total {total:.3f}: linear layers {linear:.3f} ({100 * linear / total:.0f} %), "
              f"other {total - linear:.3f} ({top}, ...)")
    results["profile"] = profiles
    fp32 = profiles["onnx fp32"]
    fraction = fp32["linear_layers_s"] / fp32["total_s"]
    for name, profile in profiles.items():
        if name == "onnx fp32":
            continue
        mode = name[len("onnx "):]
        kernel = _gemm_kernel_speedup(shapes, tokens, mode, args.threads, args.rounds, work)
        in_model = fp32["linear_layers_s"] / profile["linear_layers_s"]
        # Amdahl: the linear layers at the isolated kernel's speed-up, everything else as this int8 graph runs it
        ceiling = fp32["total_s"] / (fp32["linear_layers_s"] / kernel + profile["other_s"])
        results[mode] = {"gemm_kernel_speedup": kernel, "linear_layers_speedup_in_model": in_model,
                         "fp32_linear_fraction": fraction, "profiled_speedup": fp32["total_s"] / profile["total_s"],
                         "ceiling_at_kernel_speed": ceiling}
        print(f"   {name}: int8 GEMM kernel x{kernel:.2f} alone on the linear shapes ({len(shapes)} MatMuls, "
              f"{tokens} tokens), x{in_model:.2f} inside the model; the linear layers are {100 * fraction:.0f} % of "
              f"the float32 time, so even at the kernel's x{kernel:.2f} the whole model reaches x{ceiling:.2f} "
              f"(profiled: x{results[mode]['profiled_speedup']:.2f})")
    return results



def bench_speed(args, work: Path) -> dict:
    torch.manual_seed(0)
    config = sapiens2_hf.Sapiens2Config.from_preset("0.4b", num_hidden_layers=args.layers,
                                                    image_size=[args.height, args.width])
    model = sapiens2_hf.Sapiens2Model(config).eval()
    started = time.perf_counter()
    result = export_model(model, work / "speed", format="onnx")
    export_seconds = time.perf_counter() - started
    folders = {"onnx fp32": (result.folder, "fp32")}
    quantize_seconds = {}
    for mode in args.quantize:
        started = time.perf_counter()
        folders[f"onnx {mode}"] = (_add_int8(result.folder, mode), "int8")
        quantize_seconds[mode] = round(time.perf_counter() - started, 1)
    runtimes = {name: _session_model(folder, precision, args.threads) for name, (folder, precision) in folders.items()}
    torch.set_num_threads(args.threads)
    pixel_values = torch.randn(1, 3, args.height, args.width, generator=torch.Generator().manual_seed(1))

    def eager():
        with torch.no_grad():
            return model(pixel_values).last_hidden_state

    runners = {"torch eager fp32": eager}
    runners.update({name: (lambda r=r: r(pixel_values=pixel_values).last_hidden_state) for name, r in runtimes.items()})
    for run in runners.values():  # warm-up (one-time allocations, onnxruntime's first-run planning)
        run()
    wall = {name: [] for name in runners}
    cpu = {name: [] for name in runners}
    outputs = {}
    for _ in range(args.rounds):
        for name, run in runners.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            outputs[name] = run()
            wall[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - started_cpu)
    reference = outputs["torch eager fp32"]
    fp32 = outputs["onnx fp32"]
    table = {}
    print(f"\n1. speed: 0.4b-shaped backbone, {args.layers} layers, {args.height}x{args.width}, batch 1, "
          f"{args.threads} threads, {args.rounds} interleaved rounds (export {export_seconds:.0f} s)")
    print(f"   {'runner':30s} {'wall s':>8s} {'cpu s':>8s} {'x vs onnx fp32':>15s} {'x vs eager':>11s}  deviation")
    for name in runners:
        vs_onnx = statistics.median(a / b for a, b in zip(wall["onnx fp32"], wall[name]))
        vs_eager = statistics.median(a / b for a, b in zip(wall["torch eager fp32"], wall[name]))
        cpu_vs_onnx = statistics.median(cpu["onnx fp32"]) / statistics.median(cpu[name])
        deviation = {"rel_l2_vs_eager": _rel_l2(outputs[name], reference)}
        if name.startswith("onnx int8"):
            deviation["rel_l2_vs_onnx_fp32"] = _rel_l2(outputs[name], fp32)
            cosine = torch.nn.functional.cosine_similarity(outputs[name].double(), fp32.double(), dim=-1)
            deviation["token_cosine_mean"] = cosine.mean().item()
            deviation["token_cosine_min"] = cosine.min().item()
        table[name] = {"wall_median_s": statistics.median(wall[name]), "cpu_median_s": statistics.median(cpu[name]),
                       "speedup_vs_onnx_fp32_wall": vs_onnx, "speedup_vs_onnx_fp32_cpu": cpu_vs_onnx,
                       "speedup_vs_eager_wall": vs_eager, **deviation}
        text = ", ".join(f"{k} {v:.3g}" for k, v in deviation.items())
        print(f"   {name:30s} {table[name]['wall_median_s']:8.2f} {table[name]['cpu_median_s']:8.2f} "
              f"{vs_onnx:7.2f} (cpu {cpu_vs_onnx:4.2f}) {vs_eager:10.2f}  {text}")
    # what the bf16 RoPE emulation is worth: the same weights with float32 RoPE, eager
    twin_config = copy.deepcopy(config)
    twin_config.rope_dtype = "float32"
    twin = sapiens2_hf.Sapiens2Model(twin_config)
    twin.load_state_dict(model.state_dict())
    with torch.no_grad():
        fp32_rope = twin.eval()(pixel_values).last_hidden_state
    rope = {"onnx_fp32_vs_eager_bf16_rope": _rel_l2(fp32, reference),
            "eager_fp32_rope_vs_eager_bf16_rope": _rel_l2(fp32_rope, reference),
            "rounding_casts": read_export_info(result.folder)["rope"]["rounding_casts"]}
    print(f"   bf16 RoPE: ONNX vs eager rel-L2 {rope['onnx_fp32_vs_eager_bf16_rope']:.3g} (max-abs "
          f"{(fp32 - reference).abs().max().item():.3g}); for scale, float32 RoPE vs bf16 RoPE in eager: rel-L2 "
          f"{rope['eager_fp32_rope_vs_eager_bf16_rope']:.3g}; {rope['rounding_casts']} Cast pairs in the graph")
    where = None
    if not args.skip_profile:
        where = _where_time_goes(args, folders, pixel_values, reference.shape[1], work)
    return {"layers": args.layers, "size": [args.height, args.width], "threads": args.threads,
            "rounds": args.rounds, "export_seconds": export_seconds, "quantize_seconds": quantize_seconds,
            "runners": table, "rope": rope, "where_time_goes": where}


# ------------------------------------------------------------------------------------------------ 2. e2e fixtures


def _e2e_figures(task, out, meta, ref):
    if task == "pose":
        people = out
        # per keypoint, max over x/y. Robust statistics: DARK refinement can throw a keypoint far away where the
        # blurred log-heatmap's Hessian is near-singular (seen with int8 heatmaps of the tiny random model)
        error = np.abs(people[0]["keypoints"] - ref["keypoints_image_flip_test"][0].numpy()).max(-1)
        return {"keypoints_px_median": float(np.median(error)), "keypoints_px_p90": float(np.quantile(error, 0.9)),
                "within_1px": float((error <= 1).mean())}
    if task == "seg":
        return {"class_map_frac_differing": float((out["segmentation"] != ref["class_map"].numpy()).mean())}
    if task == "normal":
        from sapiens2_hf.metrics.normal import angular_error_deg

        angles = angular_error_deg(torch.from_numpy(out["normals"]), ref["normal_image"])
        return {"angle_deg_mean": angles.mean().item(), "angle_deg_max": angles.max().item()}
    if task == "pointmap":
        return {"pointmap_rel_l2": _rel_l2(out["pointmap"], ref["pointmap_metric_image"]),
                "scale_abs": abs(out["scale"] - ref["scale"].item())}
    return {"albedo_max_abs": float(np.abs(out["albedo"] - ref["albedo_image"].numpy()).max()),
            "albedo_mean_abs": float(np.abs(out["albedo"] - ref["albedo_image"].numpy()).mean())}


def bench_e2e(args, work: Path) -> dict:
    from safetensors.torch import load_file
    from transformers import pipeline

    from sapiens2_hf.processing import Sapiens2HFImageProcessor

    print(f"\n2. official e2e fixtures (tiny 2-layer models): pipelines vs the official demo's final outputs "
          f"(int8 mode {args.quantize[0]})")
    results = {}
    for task in PIPELINE_TASK:
        folder = FIXTURES / f"{task}_e2e"
        meta = json.loads((folder / "meta.json").read_text())
        ref = load_file(folder / "case.safetensors")
        size = [meta["input"]["height"], meta["input"]["width"]]
        model = sapiens2_hf.model_class_for_task(task).from_pretrained(folder / meta["weights_file"],
                                                                       image_size=size).eval()
        exported = export_model(model, work / f"e2e-{task}", quantize=args.quantize[0])
        processor = Sapiens2HFImageProcessor.from_pretrained(exported.folder)
        kwargs = {"boxes": meta["boxes"]["given_xyxy"], "flip_test": True} if task == "pose" else {}
        image = str(folder / meta["image"]["file"])
        row = {}
        for name, runner in (("torch", model), ("onnx fp32", _session_model(exported.folder, "fp32", args.threads)),
                             ("onnx int8", _session_model(exported.folder, "int8", args.threads))):
            out = pipeline(PIPELINE_TASK[task], model=runner, image_processor=processor, device="cpu")(image, **kwargs)
            row[name] = _e2e_figures(task, out, meta, ref)
        results[task] = row
        print(f"   {task:8s} " + " | ".join(f"{name}: " + ", ".join(f"{k} {v:.3g}" for k, v in figures.items())
                                          for name, figures in row.items()))
    return results


# ------------------------------------------------------------------------------------------------ 3. synthetic


def _synthetic_models(args, work: Path):
    """(label, task, eager model) for the synthetic evaluation: the e2e tiny models and 0.4b-wide ones."""
    for task in ("pose", "seg", "normal"):
        folder = FIXTURES / f"{task}_e2e"
        meta = json.loads((folder / "meta.json").read_text())
        size = [meta["input"]["height"], meta["input"]["width"]]
        yield "tiny e2e", task, sapiens2_hf.model_class_for_task(task).from_pretrained(
            folder / meta["weights_file"], image_size=size).eval()
    for task in ("pose", "seg", "normal"):
        torch.manual_seed(0)
        size = [256, 192] if task == "pose" else [128, 96]
        config = sapiens2_hf.Sapiens2Config.from_preset("0.4b", task=task, num_hidden_layers=args.synthetic_layers,
                                                        image_size=size)
        yield f"0.4b-wide {args.synthetic_layers}L", task, sapiens2_hf.model_class_for_task(task)(config).eval()


def bench_synthetic(args, work: Path) -> dict:
    from transformers import pipeline

    from sapiens2_hf.data.synthetic import render_sample
    from sapiens2_hf.metrics import KeypointPCK, SegmentationMetric
    from sapiens2_hf.metrics.normal import angular_error_deg
    from sapiens2_hf.processing import Sapiens2HFImageProcessor

    samples = [render_sample((7, i), height=256, width=192) for i in range(args.synthetic_images)]
    samples = [s for s in samples if s["num_people"] > 0]
    print(f"\n3. synthetic evaluation: {len(samples)} rendered images 256x192, int8 ({args.quantize[0]}) scored against "
          "the float32 ONNX outputs of the same model")
    results = {}
    for index, (label, task, model) in enumerate(_synthetic_models(args, work)):
        exported = export_model(model, work / f"synthetic-{index}", quantize=args.quantize[0])
        processor = Sapiens2HFImageProcessor.from_pretrained(exported.folder)
        pipes = {p: pipeline(PIPELINE_TASK[task], model=_session_model(exported.folder, p, args.threads),
                             image_processor=processor, device="cpu") for p in ("fp32", "int8")}
        if task == "pose":
            metric = KeypointPCK(thresholds=(0.05, 0.1))
            for sample in samples:
                boxes = sample["boxes"].tolist()
                fp32, int8 = (pipes[p](sample["image"], boxes=boxes, flip_test=True) for p in ("fp32", "int8"))
                pred = np.stack([person["keypoints"] for person in int8])
                truth = np.stack([person["keypoints"] for person in fp32])
                sizes = np.array([[b[2] - b[0], b[3] - b[1]] for b in boxes]).max(1, keepdims=True).repeat(2, 1)
                metric.update(pred, truth, np.ones(pred.shape[:2], bool), sizes)
            figures = metric.compute()
        elif task == "seg":
            metric = SegmentationMetric()
            agreement = []
            for sample in samples:
                fp32, int8 = (pipes[p](sample["image"])["segmentation"] for p in ("fp32", "int8"))
                metric.update(torch.from_numpy(int8)[None], torch.from_numpy(fp32)[None])
                agreement.append((fp32 == int8).mean())
            # IoU averaged over the classes that occur (the official mIoU also averages absent classes as 0, which
            # would measure the random model's class coverage, not int8)
            confusion = metric.confusion.numpy()
            intersection = np.diag(confusion)
            union = confusion.sum(0) + confusion.sum(1) - intersection
            figures = {"mIoU_present_classes": float((intersection[union > 0] / union[union > 0]).mean() * 100),
                       "classes": int((union > 0).sum()), "pixel_agreement": float(np.mean(agreement))}
        else:
            angles = []
            for sample in samples:
                fp32, int8 = (pipes[p](sample["image"])["normals"] for p in ("fp32", "int8"))
                angles.append(angular_error_deg(torch.from_numpy(int8), torch.from_numpy(fp32)).flatten())
            angles = torch.cat(angles)
            figures = {"angle_deg_mean": angles.mean().item(), "angle_deg_median": angles.median().item(),
                       "within_11_25_deg": (angles < 11.25).double().mean().item()}
        results[f"{label} {task}"] = figures
        print(f"   {label:14s} {task:6s} " + ", ".join(f"{k} {v:.4g}" for k, v in figures.items()))
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--height", type=int, default=512)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quantize", default="int8-dynamic,int8-static",
                        help="comma-separated modes; the first one is used in parts 2 and 3")
    parser.add_argument("--skip-profile", action="store_true", help="part 1 without the per-op profile")
    parser.add_argument("--synthetic-images", type=int, default=8)
    parser.add_argument("--synthetic-layers", type=int, default=2)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--output", default=None, help="write all figures to this JSON file")
    args = parser.parse_args(argv)
    args.quantize = [mode for mode in args.quantize.split(",") if mode]
    import onnxruntime

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; torch {torch.__version__}, onnxruntime "
          f"{onnxruntime.__version__}")
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if not args.skip_speed:
            figures["speed"] = bench_speed(args, work)
        if not args.skip_e2e:
            figures["e2e"] = bench_e2e(args, work)
        if not args.skip_synthetic:
            figures["synthetic"] = bench_synthetic(args, work)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
