"""Curation at the size of the work (issue 39): the global stages on an index find planted near-duplicates (exact
and jittered) with few false merges, balance evens out planted clusters, hash-only duplicates need no model, and the
global phase holds memory to its chunks and index under an address-space limit.

Each test has its control: a threshold that excludes the jitter misses it, a cap that binds nothing changes nothing,
a stage that reads embeddings still asks for a model, and the same limit refuses holding the embeddings whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from sapiens2_hf.curation import CurationConfig, curate
from sapiens2_hf.curation import global_stages as stages
from sapiens2_hf.curation.synthetic_mix import write_mixed_set

pytestmark = pytest.mark.usefixtures("one_thread")


def _planted_hashes(count: int, copies: int, seed: int = 0):
    """Uniform 64-bit hashes; the last `copies` rows copy earlier ones, half exactly, half with 1-8 bits flipped."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2 ** 63, count, dtype=np.int64).astype(np.uint64) * np.uint64(2) \
        + rng.integers(0, 2, count).astype(np.uint64)
    originals = rng.choice(count - copies, copies, replace=False)
    copy_rows = np.arange(count - copies, count)
    jittered = np.arange(copies) % 2 == 1
    flips = np.zeros(copies, np.uint64)
    for k in np.flatnonzero(jittered):
        for bit in rng.choice(64, rng.integers(1, 9), replace=False):
            flips[k] |= np.uint64(1) << np.uint64(int(bit))
    hashes[copy_rows] = hashes[originals] ^ flips
    return hashes, np.stack([originals, copy_rows], axis=1), jittered


def _pair_keys(pairs: np.ndarray, count: int) -> set:
    return set((np.minimum(pairs[:, 0], pairs[:, 1]) * count + np.maximum(pairs[:, 0], pairs[:, 1])).tolist())


@pytest.mark.parametrize("count", [3000, stages.EXACT_HASHES + 5000])  # the exact index, then the inverted lists
def test_planted_hash_duplicates_are_found_with_few_false_merges(count):
    hashes, planted, jittered = _planted_hashes(count, count // 20)
    found = stages.hash_pairs(hashes, 10)
    found_keys, planted_keys = _pair_keys(found, count), _pair_keys(planted, count)
    for subset in (~jittered, jittered):  # exact copies and jittered ones, each at >= 95 %
        wanted = _pair_keys(planted[subset], count)
        assert len(found_keys & wanted) >= 0.95 * len(wanted)
    assert len(found_keys - planted_keys) <= 0.01 * len(planted_keys)  # few false merges
    duplicates = stages.near_duplicates(count, found, np.random.default_rng(1).random(count))
    assert (duplicates.best != np.arange(count)).sum() >= 0.95 * len(planted)  # one of each pair dropped
    # control: a threshold of 0 bits finds the exact copies and none of the jittered ones
    exact = _pair_keys(stages.hash_pairs(hashes, 0), count)
    assert not exact & _pair_keys(planted[jittered], count)
    assert len(exact & _pair_keys(planted[~jittered], count)) >= 0.95 * (~jittered).sum()


def _clustered(tmp_path, sizes, dimension=64, copies=0, seed=0):
    """Unit embeddings around `len(sizes)` well separated centres (float16 on disk), the last `copies` rows near
    copies of earlier ones; returns the file, each row's true cluster and the planted pairs."""
    rng = np.random.default_rng(seed)
    truth = np.repeat(np.arange(len(sizes)), sizes)
    centres = rng.normal(0, 1, (len(sizes), dimension))
    vectors = centres[truth] / np.sqrt(dimension) + rng.normal(0, 1 / np.sqrt(dimension), (len(truth), dimension))
    originals = rng.choice(len(truth) - copies, copies, replace=False)
    copy_rows = rng.choice(np.setdiff1d(np.arange(len(truth)), originals), copies, replace=False)
    vectors[copy_rows] = vectors[originals] + rng.normal(0, 0.01 / np.sqrt(dimension), (copies, dimension))
    truth[copy_rows] = truth[originals]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(tmp_path / "embeddings.npy", vectors.astype(np.float16))
    return stages.Embeddings(tmp_path / "embeddings.npy"), truth, np.stack([originals, copy_rows], axis=1)


def test_semdedup_finds_planted_embedding_duplicates_within_clusters(tmp_path):
    embeddings, truth, planted = _clustered(tmp_path, [800, 600, 400, 200], copies=100)
    rows = np.arange(len(truth))
    hierarchy = stages.hierarchical_kmeans(embeddings, rows, 8)
    mean = stages.streaming_mean(embeddings, rows)
    found = stages.embedding_pairs(embeddings, rows, hierarchy.leaf, 0.95, mean, hierarchy.second)
    found = _pair_keys(found, len(rows))
    wanted = _pair_keys(planted, len(rows))
    assert len(found & wanted) >= 0.95 * len(wanted)
    assert len(found - wanted) <= 0.05 * len(wanted)
    # control: a threshold above the copies' cosine finds none of them
    strict = _pair_keys(stages.embedding_pairs(embeddings, rows, hierarchy.leaf, 0.99999, mean), len(rows))
    assert not strict & wanted


def test_balanced_sample_spreads_cluster_sizes_less_than_the_raw_set(tmp_path):
    sizes = [1200, 400, 150, 60, 30]
    embeddings, truth, _ = _clustered(tmp_path, sizes)
    rows = np.arange(len(truth))
    rank = np.random.default_rng(0).random(len(rows))
    hierarchy = stages.hierarchical_kmeans(embeddings, rows, 20)

    def spread(labels):
        counts = np.bincount(labels, minlength=len(sizes)).astype(float)
        return counts.std() / counts.mean()

    balanced = stages.balanced_sample(hierarchy, rank)
    assert spread(truth[balanced.keep]) < 0.8 * spread(truth)
    assert np.bincount(truth[balanced.keep], minlength=len(sizes))[-1] == sizes[-1]  # a small mode stays whole
    # within a leaf the best images are the ones kept
    for leaf in np.unique(balanced.leaf):
        members = balanced.leaf == leaf
        if balanced.keep[members].any() and not balanced.keep[members].all():
            assert rank[members & balanced.keep].min() >= rank[members & ~balanced.keep].max()
    # control: a cap that binds nothing keeps everything, with the raw spread
    loose = stages.balanced_sample(hierarchy, rank, cluster_cap=len(rows))
    assert loose.keep.all()
    assert stages.water_fill(np.array([10, 3, 1]), 9).tolist() == [5, 3, 1]
    assert stages.water_fill(np.array([10, 3, 1]), 100).tolist() == [10, 3, 1]


def test_hash_only_duplicates_need_no_model(tmp_path):
    labels = write_mixed_set(tmp_path / "pile", {"good": 3, "duplicate": 2}, height=96, width=72)
    config = CurationConfig(stages=("decode", "duplicates"), chunk_size=2)
    result = curate([str(tmp_path / "pile")], tmp_path / "out", config=config, write_dataset=False)
    assert result.summary["stages"]["duplicates"]["dropped"] == 2, [r["stages"] for r in result.records]
    assert len(labels) == 5 and result.summary["kept"] == 3
    # control: a stage that reads embeddings still asks for a model, naming it and the way out
    with pytest.raises(ValueError, match=r"balance stage\(s\) need image embeddings.*--skip balance"):
        curate([str(tmp_path / "pile")], tmp_path / "out2", config=CurationConfig(stages=("decode", "balance")))
    # control: with min_duplicate_cosine set, the duplicates stage reads embeddings too
    with pytest.raises(ValueError, match="duplicates stage"):
        curate([str(tmp_path / "pile")], tmp_path / "out3", write_dataset=False,
               config=CurationConfig(stages=("decode", "duplicates"), min_duplicate_cosine=0.9))


_BOUNDED = textwrap.dedent("""
    import io, json, resource, sys
    from pathlib import Path
    import numpy as np
    from PIL import Image
    from sapiens2_hf.curation import CurationConfig, ImageSource, curate
    from sapiens2_hf.curation.curate import _run_fingerprint, _describe_model
    from sapiens2_hf.curation.store import ChunkStore

    out, count, width, budget = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) << 20
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (120, 80, 40)).save(buffer, format="PNG")
    tiny = buffer.getvalue()

    def embed(images):  # never called: every chunk below is finished already
        raise AssertionError("a finished chunk was computed again")

    def run(folder, count, chunk_size=2000):
        source = ImageSource(count, lambda start: ((i, f"img{i}", lambda: tiny) for i in range(start, count)),
                             f"synthetic {count}")
        config = CurationConfig(stages=("decode", "duplicates", "balance"), chunk_size=chunk_size, clusters=16)
        store = ChunkStore(folder, _run_fingerprint(source.description, config, _describe_model(embed)))
        rng = np.random.default_rng(0)
        for chunk, start in enumerate(range(0, count, chunk_size)):  # a finished per-image phase, as a run writes it
            rows = list(range(start, min(count, start + chunk_size)))
            store.write(chunk, {"index": rows, "source": [f"img{i}" for i in rows], "computed_by": [0] * len(rows),
                                "decoded": [True] * len(rows), "image_kept": [True] * len(rows),
                                "phash": rng.integers(0, 2 ** 62, len(rows)).tolist(),
                                "rank": rng.random(len(rows)).tolist(),
                                "stages": [{"decode": {"verdict": "keep"}}] * len(rows)},
                        rng.normal(0, 1, (len(rows), width)).astype(np.float16))
        return curate(source, folder, config=config, embedding_model=embed, write_dataset=False)

    run(out / "warm", 3000)  # every library loaded and its pools made before the limit
    used = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (used + budget, used + budget))
    result = run(out / "big", count)
    report = {"images": result.summary["images"], "kept": result.summary["kept"],
              "balance": result.summary["stages"]["balance"]["measured"]}
    try:  # control: the same limit refuses the embeddings held whole, as float32
        whole = np.ones((count, width), np.float32)
        report["whole"] = "allocated"
    except MemoryError:
        report["whole"] = "refused"
    print(json.dumps(report))
""")


def test_global_phase_memory_is_bounded_by_chunks_and_index(tmp_path):
    """40,000 records with 1024-d embeddings (160 MB as float32) curated under an address-space limit of 120 MB
    above what the libraries take: the chunks and the index fit, the embeddings held whole do not."""
    count, width, budget_mb = 40_000, 1024, 120
    result = subprocess.run([sys.executable, "-c", _BOUNDED, str(tmp_path), str(count), str(width), str(budget_mb)],
                            capture_output=True, text=True, timeout=600,
                            env={**__import__("os").environ, "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2",
                                 "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["images"] == count and report["balance"] >= 0.99 * count and 0 < report["kept"] < count
    assert report["whole"] == "refused"
