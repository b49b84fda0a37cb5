"""Curation's global stages at 10k, 100k and 1M synthetic records, and the whole command at small sizes.

Global stages (`sapiens2_hf.curation.global_stages`, what `curate` runs once every chunk is in): synthetic records,
written to disk the way a run writes them (a float16 `.npy` of the embeddings), with a known truth:

- 64-bit perceptual hashes, uniform, with planted near-copies (`--copies`, 5 %): half exact, half with 1-8 bits
  flipped; recall and precision of the duplicate pairs against the planted ones;
- 1024-d float16 unit embeddings from `--true-clusters` Gaussian clusters of very unequal sizes (Zipf), with planted
  near-duplicates (copies plus noise, cosine about 0.97); SemDeDup's recall and precision against them, and the
  balance stage's spread of kept images per true cluster (coefficient of variation) against the raw set's.

Each size runs in a child process (its peak resident memory, `ru_maxrss`, is its own); the table gives seconds per
stage and in all, the peak memory, the growth per x10 and the quality figures. `--cli` also runs `sapiens2-hf
curate` end to end on mixed sets of N and 4N images (no model: hash duplicates only) and prints time and memory.

    python benchmarks/bench_curation_scale.py --sizes 10000 100000 1000000 --out benchmarks/results/curation_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIMENSION = 1024


def synthetic(folder: Path, count: int, copies: float, true_clusters: int, seed: int = 0) -> dict:
    """Writes `embeddings.npy` (float16) and returns hashes, ranks and the planted truth (all O(n) small arrays)."""
    rng = np.random.default_rng(seed)
    planted = int(count * copies)
    originals = rng.choice(count - planted, planted, replace=False)
    copy_rows = np.arange(count - planted, count)
    hashes = rng.integers(0, 2 ** 63, count, dtype=np.int64).astype(np.uint64) * np.uint64(2) \
        + rng.integers(0, 2, count).astype(np.uint64)
    flips = np.zeros(planted, np.uint64)
    jittered = rng.random(planted) < 0.5
    for k in np.flatnonzero(jittered):
        for bit in rng.choice(64, rng.integers(1, 9), replace=False):
            flips[k] |= np.uint64(1) << np.uint64(int(bit))
    hashes[copy_rows] = hashes[originals] ^ flips
    weights = 1.0 / np.arange(1, true_clusters + 1)
    truth = rng.choice(true_clusters, count, p=weights / weights.sum())
    truth[copy_rows] = truth[originals]
    centres = rng.normal(0, 1, (true_clusters, DIMENSION)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    block = 8192
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float16)), "fortran_order": False,
              "shape": (count, DIMENSION)}
    path = folder / "embeddings.npy"
    with open(path, "wb") as file:  # written, not mapped: the writer's memory stays small
        np.lib.format.write_array_header_1_0(file, header)
        offset = file.tell()
        for start in range(0, count, block):
            stop = min(count, start + block)
            base = centres[truth[start:stop]] + rng.normal(0, 0.045, (stop - start, DIMENSION)).astype(np.float32)
            file.write((base / np.linalg.norm(base, axis=1, keepdims=True)).astype(np.float16).tobytes())
    row_bytes = 2 * DIMENSION
    with open(path, "r+b") as file:  # the copies (the last rows): their original plus a little noise
        for start in range(0, planted, block):
            chosen = originals[start:start + block]
            mapped = np.load(path, mmap_mode="r")
            base = mapped[np.sort(chosen)][np.argsort(np.argsort(chosen))].astype(np.float32)
            del mapped
            base += rng.normal(0, 0.008, base.shape).astype(np.float32)
            file.seek(offset + int(copy_rows[start]) * row_bytes)
            file.write((base / np.linalg.norm(base, axis=1, keepdims=True)).astype(np.float16).tobytes())
    return {"hashes": hashes, "rank": rng.random(count), "truth": truth,
            "pairs": np.stack([originals, copy_rows], axis=1)}


def _quality(found: np.ndarray, planted: np.ndarray, count: int) -> tuple[float, float]:
    """Recall of planted pairs; precision: found pairs that are planted (a pair counts once, either order)."""
    def key(pairs):
        return set((np.minimum(pairs[:, 0], pairs[:, 1]) * count + np.maximum(pairs[:, 0], pairs[:, 1])).tolist())

    found_keys, planted_keys = key(found), key(planted)
    hits = len(found_keys & planted_keys)
    return hits / max(1, len(planted_keys)), hits / max(1, len(found_keys))


def _spread(labels: np.ndarray, groups: int) -> float:
    sizes = np.bincount(labels, minlength=groups).astype(float)
    return float(sizes.std() / sizes.mean())


def one_size(count: int, copies: float, true_clusters: int, cosine: float) -> dict:
    """The global stages on `count` synthetic records (run in its own process)."""
    from sapiens2_hf.curation import global_stages as stages

    peaks = {"imports": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}

    with tempfile.TemporaryDirectory(prefix="curation-scale-") as folder:
        begin = time.perf_counter()
        data = synthetic(Path(folder), count, copies, true_clusters)
        seconds = {"write synthetic": time.perf_counter() - begin}
        embeddings = stages.Embeddings(Path(folder) / "embeddings.npy")
        rows = np.arange(count)
        begin = time.perf_counter()
        hash_found = stages.hash_pairs(data["hashes"], 10)
        duplicates = stages.near_duplicates(count, hash_found, data["rank"])
        seconds["hash duplicates"] = time.perf_counter() - begin
        peaks["hash duplicates"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        begin = time.perf_counter()
        clusters = max(1, round((count / 2) ** 0.5))
        hierarchy = stages.hierarchical_kmeans(embeddings, rows, clusters)
        seconds["hierarchical k-means"] = time.perf_counter() - begin
        peaks["hierarchical k-means"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        begin = time.perf_counter()
        mean = stages.streaming_mean(embeddings, rows)
        embedding_found = stages.embedding_pairs(embeddings, rows, hierarchy.leaf, cosine, mean, hierarchy.second)
        seconds["SemDeDup"] = time.perf_counter() - begin
        peaks["SemDeDup"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        begin = time.perf_counter()
        reference = embeddings.rows(np.arange(0, count, max(1, count // 100))[:100])
        similarity = stages.reference_similarity(embeddings, rows, reference, 5)
        seconds["domain kNN"] = time.perf_counter() - begin
        peaks["domain kNN"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        begin = time.perf_counter()
        balance = stages.balanced_sample(hierarchy, data["rank"])
        seconds["balance sample"] = time.perf_counter() - begin
        peaks["balance sample"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    seconds["global stages"] = sum(v for k, v in seconds.items() if k != "write synthetic")
    top = hierarchy.parent_of_leaf[hierarchy.leaf]
    hash_recall, hash_precision = _quality(hash_found, data["pairs"], count)
    embedding_recall, embedding_precision = _quality(embedding_found, data["pairs"], count)
    return {"images": count, "seconds": {k: round(v, 2) for k, v in seconds.items()},
            "peak_memory_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3),
            "peak_after_gb": {k: round(v, 3) for k, v in peaks.items()},
            "spread_top_raw": round(_spread(top, top.max() + 1), 3),
            "spread_top_balanced": round(_spread(top[balance.keep], top.max() + 1), 3),
            "hash_recall": round(hash_recall, 4), "hash_precision": round(hash_precision, 4),
            "semdedup_recall": round(embedding_recall, 4), "semdedup_precision": round(embedding_precision, 4),
            "hash_duplicates_dropped": int((duplicates.best != np.arange(count)).sum()),
            "clusters": int(len(hierarchy.parent_of_leaf)), "kept_by_balance": int(balance.keep.sum()),
            "spread_raw": round(_spread(data["truth"], true_clusters), 3),
            "spread_balanced": round(_spread(data["truth"][balance.keep], true_clusters), 3),
            "domain_similarity_mean": round(float(similarity.mean()), 3)}


def cli_point(count: int, folder: Path) -> dict:
    """`sapiens2-hf curate` on `count` mixed images (no model: hash duplicates, the image stages), in a child."""
    from sapiens2_hf.curation.synthetic_mix import write_mixed_set

    pile = folder / f"pile_{count}"
    kinds = {"good": count // 2, "blurred": count // 8, "tiny": count // 8, "duplicate": count // 8}
    kinds["corrupt"] = count - sum(kinds.values())
    write_mixed_set(pile, kinds, height=96, width=72)
    command = [sys.executable, "-c", "import resource, sys, time; from sapiens2_hf.cli.main import main; "
               "t = time.perf_counter(); code = main(sys.argv[1:]); "
               "print('RESULT', time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); "
               "sys.exit(code)",
               "curate", str(pile), "--out", str(folder / f"out_{count}"), "--skip", "person", "domain", "balance",
               "--threshold", "min_short_side=64", "--threads", "1"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    _, seconds, peak = next(line for line in result.stdout.splitlines() if line.startswith("RESULT")).split()
    return {"images": count, "seconds": round(float(seconds), 2), "peak_memory_gb": round(int(peak) / 1e6, 3)}


def pretraining_comparison(seeds: list[int], steps: int, pool_size: int = 512) -> dict:
    """Pretraining on a raw pool against the same pool curated by the global stages, for the same steps, compared
    with the kNN probe of tests/test_pretraining_evidence.py (tests/pretraining_probe.py) (toy shapes, 4 classes, balanced probe sets).

    The raw pool is what curation is for: classes 70/15/10/5 %, and a quarter of it exact copies of 16 images. The
    curated pool is it after hash duplicates and balance (hierarchical k-means of the random-init backbone's CLS
    embeddings: the only model a run here has); the balanced sampling keeps as many images as it keeps."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pretraining_probe import IMAGE_SIZE, cls_features, evidence_config, knn_accuracy, pretrain

    from sapiens2_hf.curation import global_stages as stages
    from sapiens2_hf.curation.measures import perceptual_hash
    from sapiens2_hf.pretraining import Sapiens2ForPreTraining
    from sapiens2_hf.pretraining.toy_data import make_toy_images

    results = {"raw": [], "curated": []}
    for seed in seeds:
        generator = np.random.default_rng(seed)
        candidates, labels = make_toy_images(4 * pool_size, IMAGE_SIZE, IMAGE_SIZE, seed=1000 + seed)
        wanted = np.round(np.array([0.70, 0.15, 0.10, 0.05]) * pool_size * 0.75).astype(int)
        chosen = np.concatenate([generator.choice(np.flatnonzero(labels.numpy() == c), k, replace=False)
                                 for c, k in enumerate(wanted)])
        copies = generator.choice(chosen, 16, replace=False)
        missing = pool_size - len(chosen)
        chosen = np.concatenate([chosen, np.repeat(copies, missing // 16 + 1)[:missing]])
        raw = candidates[chosen]
        config = evidence_config(teacher_temp_warmup_steps=steps // 3)
        torch.manual_seed(seed)
        random_backbone = Sapiens2ForPreTraining(config).model
        hashes = np.array([perceptual_hash(image.permute(1, 2, 0).numpy()) for image in raw], np.uint64)
        # 2 bits, not the default 10: the 32x32 toy shapes on one dark background hash within 10 bits of each other
        # (10 merges four in five of them); the planted copies are exact
        duplicates = stages.near_duplicates(len(raw), stages.hash_pairs(hashes, 2), np.zeros(len(raw)))
        unique = np.flatnonzero(duplicates.best == np.arange(len(raw)))
        with tempfile.TemporaryDirectory() as folder:
            np.save(Path(folder) / "e.npy", cls_features(random_backbone, raw[unique]).numpy().astype(np.float16))
            embeddings = stages.Embeddings(Path(folder) / "e.npy")
            hierarchy = stages.hierarchical_kmeans(embeddings, np.arange(len(unique)), 16, seed)
        balanced = stages.balanced_sample(hierarchy, generator.random(len(unique)))
        curated = raw[unique[balanced.keep]]
        train_images, train_labels = make_toy_images(200, IMAGE_SIZE, IMAGE_SIZE, seed=2000 + seed)
        test_images, test_labels = make_toy_images(200, IMAGE_SIZE, IMAGE_SIZE, seed=3000 + seed)
        for name, pool in (("raw", raw), ("curated", curated)):
            model, _ = pretrain(config, pool, steps, seed)
            backbone = model.teacher.model
            accuracy = knn_accuracy(cls_features(backbone, train_images), train_labels,
                                    cls_features(backbone, test_images), test_labels)
            share = np.bincount(labels.numpy()[chosen] if name == "raw" else
                                labels.numpy()[chosen][unique[balanced.keep]], minlength=4)
            results[name].append({"seed": seed, "images": len(pool), "class_counts": share.tolist(),
                                  "knn_accuracy": round(accuracy, 4)})
            print(json.dumps({"pool": name, **results[name][-1]}), flush=True)
    for name in ("raw", "curated"):
        values = [r["knn_accuracy"] for r in results[name]]
        results[name + "_mean"] = round(float(np.mean(values)), 4)
        results[name + "_std"] = round(float(np.std(values)), 4)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--copies", type=float, default=0.05, help="fraction of planted near-copies")
    parser.add_argument("--true-clusters", type=int, default=20)
    parser.add_argument("--cosine", type=float, default=0.95, help="SemDeDup's threshold here")
    parser.add_argument("--cli", type=int, nargs="*", default=None, help="end-to-end sizes, e.g. 200 800")
    parser.add_argument("--pretraining", type=int, nargs="*", default=None, metavar="SEED",
                        help="also pretrain on a raw toy pool and on it curated, seeds given (kNN probe)")
    parser.add_argument("--pretraining-steps", type=int, default=160)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help="write the figures as JSON")
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one_size(args.one, args.copies, args.true_clusters, args.cosine)))
        return 0
    if args.pretraining:
        import torch

        torch.set_num_threads(1)
        comparison = pretraining_comparison(args.pretraining, args.pretraining_steps)
        print(f"\nkNN probe after {args.pretraining_steps} steps: raw {comparison['raw_mean']:.3f} +- "
              f"{comparison['raw_std']:.3f}, curated {comparison['curated_mean']:.3f} +- "
              f"{comparison['curated_std']:.3f}")
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(comparison, indent=2) + "\n")
        return 0
    rows = []
    for count in args.sizes:
        result = subprocess.run([sys.executable, __file__, "--one", str(count), "--copies", str(args.copies),
                                 "--true-clusters", str(args.true_clusters), "--cosine", str(args.cosine)],
                                capture_output=True, text=True)
        if result.returncode:
            print(result.stderr[-3000:], file=sys.stderr)
            return 1
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| images | global s | hash dup s | k-means s | SemDeDup s | domain s | balance s | peak GB | x10 time "
          "| x10 memory | hash R/P | SemDeDup R/P | spread raw -> balanced |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    previous = None
    for row in rows:
        s = row["seconds"]
        growth = ("", "") if previous is None else (
            f"{s['global stages'] / previous['seconds']['global stages']:.1f}",
            f"{row['peak_memory_gb'] / previous['peak_memory_gb']:.1f}")
        print(f"| {row['images']:,} | {s['global stages']:.1f} | {s['hash duplicates']:.1f} | "
              f"{s['hierarchical k-means']:.1f} | {s['SemDeDup']:.1f} | {s['domain kNN']:.1f} | "
              f"{s['balance sample']:.2f} | {row['peak_memory_gb']:.2f} | {growth[0]} | {growth[1]} | "
              f"{row['hash_recall']:.3f}/{row['hash_precision']:.3f} | "
              f"{row['semdedup_recall']:.3f}/{row['semdedup_precision']:.3f} | "
              f"{row['spread_raw']:.2f} -> {row['spread_balanced']:.2f} |")
        previous = row
    cli = []
    if args.cli:
        with tempfile.TemporaryDirectory(prefix="curation-cli-") as folder:
            cli = [cli_point(count, Path(folder)) for count in args.cli]
        print("\n| images (CLI, end to end) | seconds | peak GB |\n|---|---|---|")
        for row in cli:
            print(f"| {row['images']} | {row['seconds']:.1f} | {row['peak_memory_gb']:.2f} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"global_stages": rows, "cli": cli, "cpu_count": os.cpu_count()},
                                             indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
