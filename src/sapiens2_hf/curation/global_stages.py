"""Curation's global stages on an index (faiss): near-duplicates, the domain kNN and balance, over columns on disk.

Each function takes the columns it needs as arrays of one value per image (hashes, quality ranks, which rows take
part) and the embeddings as a float16 `.npy` file read in blocks of `BLOCK_ROWS` rows, so memory is bounded by a
block, the index and a few bytes per image, never by `n x d`:

| stage | index | cost | threshold (`CurationConfig`) |
|---|---|---|---|
| hash near-duplicates | `faiss.IndexBinaryFlat` (exact) up to `EXACT_HASHES` hashes; above, multi-index hashing (`faiss.IndexBinaryMultiHash`, 3 x 21 bits, one flip), on the hashes and on a permutation of their bits: every pair within 5 bits, and (measured) >= 0.95 of planted copies 1-8 bits apart | exact: n^2 XOR-popcounts in C; multi-index: about 130 candidates per image, so n | Hamming <= `max_hash_distance` (10 of 64 bits) |
| embedding near-duplicates | SemDeDup (Abbas et al. 2023): k-means clusters, then `faiss.IndexFlatIP` range search inside each cluster, each image also searched in its second-nearest cluster (pairs split by a border) | about 2 n^2 / clusters | cosine (after centring on the set's mean) >= `min_duplicate_cosine` (off by default) |
| domain | `faiss.IndexFlatIP` of the reference embeddings | n x references | mean cosine of the `reference_k` nearest >= `min_reference_similarity` |
| balance | hierarchical k-means (Vo et al. 2024): `faiss.Kmeans` on the embeddings (`clusters` leaves), then on the leaf centroids (`sqrt(clusters)` parents); balanced sampling top-down | k-means trained on at most `TRAIN_POINTS_PER_CENTROID` points per centroid, then one assignment pass | `cluster_cap`: the most a parent keeps (default the mean parent size); its leaves share that evenly |

Balanced sampling: each parent keeps at most `cluster_cap` images, shared among its leaves by water-filling (a leaf
under its share keeps all, the rest is shared again), each leaf keeping its best (`quality_rank`). k-means puts many
leaves on a dense mode; their parents are the modes, so capping parents evens out the modes (Vo et al.): large modes
shrink, small ones stay whole.

faiss runs on its GPU indexes when `faiss.get_num_gpus()` finds one (the k-means and flat indexes), on the CPU
otherwise; the results are the same up to floating-point ties.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..utils.extras import MissingExtraError

BLOCK_ROWS = 4096
EXACT_HASHES = 65536
TRAIN_POINTS_PER_CENTROID = 64


def _faiss():
    try:
        import faiss
    except ModuleNotFoundError as error:
        if error.name != "faiss":
            raise
        raise MissingExtraError("curation's global stages need faiss: pip install 'sapiens2_hf[train,curation]'",
                                name="faiss") from None
    return faiss


def _gpu(faiss) -> bool:
    return hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0


# -------------------------------------------------------------------------------------------------- embeddings


class Embeddings:
    """An `(n, d)` float16 `.npy` file (memory-mappable: `np.load(path, mmap_mode="r")`) read in float32 blocks of
    the rows asked for; rows of NaN are images without an embedding."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open(self.path, "rb") as file:
            version = np.lib.format.read_magic(file)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            self.shape, _, dtype = read_header(file)
            self.offset = file.tell()
        if dtype != np.float16 or len(self.shape) != 2:
            raise ValueError(f"{self.path}: expected a 2-d float16 array, got {dtype} {self.shape}")

    def rows(self, indices: np.ndarray) -> np.ndarray:
        """The rows `indices` (sorted or not) as float32, NaN as 0: runs of nearby rows are read as one span,
        scattered rows one by one (by offset: nothing beyond the rows asked for is held)."""
        indices = np.asarray(indices, np.int64)
        width = self.shape[1]
        out = np.empty((len(indices), width), np.float32)
        if not len(indices) or not width:
            return out
        order = np.argsort(indices, kind="stable")
        wanted = indices[order]
        breaks = np.concatenate([[0], np.flatnonzero(np.diff(wanted) > 64) + 1, [len(wanted)]]).tolist()
        row_bytes = width * 2
        with open(self.path, "rb", buffering=0) as file:
            descriptor = file.fileno()
            for begin, end in zip(breaks[:-1], breaks[1:]):
                while begin < end:  # spans of at most BLOCK_ROWS rows
                    first = int(wanted[begin])
                    stop = begin + int(np.searchsorted(wanted[begin:end], first + BLOCK_ROWS))
                    span = int(wanted[stop - 1]) - first + 1
                    data = os.pread(descriptor, span * row_bytes, self.offset + first * row_bytes)
                    window = np.frombuffer(data, np.float16).reshape(span, width)
                    out[order[begin:stop]] = window[wanted[begin:stop] - first]
                    begin = stop
        return np.nan_to_num(out, copy=False)

    def blocks(self, indices: np.ndarray):
        """`(positions, float32 rows)` of `indices`, in blocks of `BLOCK_ROWS`."""
        for start in range(0, len(indices), BLOCK_ROWS):
            chosen = indices[start:start + BLOCK_ROWS]
            yield np.arange(start, start + len(chosen)), self.rows(chosen)


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors


# ------------------------------------------------------------------------------------------------- duplicates


def _permute_bits(codes: np.ndarray, permutation: np.ndarray) -> np.ndarray:
    out = np.empty_like(codes)
    for start in range(0, len(codes), BLOCK_ROWS * 16):
        bits = np.unpackbits(codes[start:start + BLOCK_ROWS * 16], axis=1)
        out[start:start + BLOCK_ROWS * 16] = np.packbits(bits[:, permutation], axis=1)
    return out


def hash_pairs(hashes: np.ndarray, max_distance: int, seed: int = 0) -> np.ndarray:
    """`(m, 2)` pairs `a < b` of positions in `hashes` (uint64) within `max_distance` bits, by a binary index: exact
    (`IndexBinaryFlat`) up to `EXACT_HASHES` hashes; above, multi-index hashing (`IndexBinaryMultiHash`: 3 substrings
    of 21 bits, each probed with up to one bit flipped, so every pair within 5 bits is found), twice: on the hashes
    and on a fixed permutation of their bits, which finds most pairs further apart (measured in the benchmark)."""
    faiss = _faiss()
    count = len(hashes)
    if count < 2:
        return np.zeros((0, 2), np.int64)
    codes = np.ascontiguousarray(hashes.astype("<u8")).view(np.uint8).reshape(count, 8)
    if count <= EXACT_HASHES:
        views = [codes]
    else:
        views = [codes, _permute_bits(codes, np.random.default_rng(seed).permutation(64))]
    found = []
    for view in views:
        if count <= EXACT_HASHES:
            index = faiss.IndexBinaryFlat(64)
        else:
            index = faiss.IndexBinaryMultiHash(64, 3, 21)
            index.nflip = 1
        index.add(view)
        for start in range(0, count, BLOCK_ROWS):
            limits, _, neighbours = index.range_search(view[start:start + BLOCK_ROWS], max_distance + 1)  # strict <
            queries = np.repeat(np.arange(start, start + len(limits) - 1), np.diff(limits).astype(np.int64))
            keep = queries < neighbours
            found.append(np.stack([queries[keep], neighbours[keep]], axis=1))
        del index
    pairs = np.concatenate(found).astype(np.int64)
    return np.unique(pairs, axis=0) if len(views) > 1 else pairs


def embedding_pairs(embeddings: Embeddings, rows: np.ndarray, clusters: np.ndarray, min_cosine: float,
                    mean: np.ndarray, second: np.ndarray | None = None) -> np.ndarray:
    """SemDeDup: pairs `a < b` of positions in `rows` in one k-means cluster whose centred cosine >= `min_cosine`.
    With `second` (each row's second-nearest cluster), a row is also searched against that cluster's members, so a
    pair split by a cluster border is found too (twice the work)."""
    faiss = _faiss()
    found = []
    order = np.argsort(clusters, kind="stable")
    bounds = np.flatnonzero(np.diff(clusters[order])) + 1
    visitors = {}
    if second is not None:
        by_second = np.argsort(second, kind="stable")
        second_bounds = np.flatnonzero(np.diff(second[by_second])) + 1
        visitors = {int(second[group[0]]): group for group in np.split(by_second, second_bounds) if len(group)}
    for members in np.split(order, bounds):
        if not len(members):
            continue
        queries = np.concatenate([members, visitors.get(int(clusters[members[0]]), members[:0])])
        if len(queries) < 2:
            continue
        vectors = _normalise(embeddings.rows(rows[queries]) - mean)
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors[:len(members)])
        limits, _, neighbours = index.range_search(vectors, float(min_cosine) - 1e-6)
        asking = np.repeat(np.arange(len(queries)), np.diff(limits).astype(np.int64))
        a, b = queries[asking], members[neighbours]
        keep = a != b
        found.append(np.stack([np.minimum(a, b)[keep], np.maximum(a, b)[keep]], axis=1))
    return np.unique(np.concatenate(found), axis=0) if found else np.zeros((0, 2), np.int64)


def components(count: int, pairs: np.ndarray) -> np.ndarray:
    """The connected component (its smallest position) of each of `count` positions, given edges `pairs`."""
    parent = np.arange(count)
    for a, b in pairs.tolist():
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b:
            parent[max(a, b)] = min(a, b)
    involved = np.unique(pairs) if len(pairs) else np.zeros(0, np.int64)
    for node in involved.tolist():
        root = node
        while parent[root] != root:
            root = parent[root]
        parent[node] = root
    return parent


@dataclass
class DuplicateResult:
    """Per position: its component (the smallest position in it), the component's size, the kept member."""

    component: np.ndarray
    size: np.ndarray
    best: np.ndarray


def near_duplicates(count: int, pairs: np.ndarray, rank: np.ndarray) -> DuplicateResult:
    """Components of `pairs`; each keeps its member of highest `rank` (ties: the lowest position)."""
    component = components(count, pairs)
    size = np.bincount(component, minlength=count)[component]
    # best member per component: sort by (component, -rank, position), take the first of each component
    order = np.lexsort((np.arange(count), -rank, component))
    first = np.ones(count, bool)
    first[1:] = component[order][1:] != component[order][:-1]
    best_of = np.empty(count, np.int64)
    best_of[component[order][first]] = order[first]
    return DuplicateResult(component, size, best_of[component])


# ----------------------------------------------------------------------------------------------------- domain


def reference_similarity(embeddings: Embeddings, rows: np.ndarray, reference: np.ndarray, k: int) -> np.ndarray:
    """Mean cosine of each row's `k` nearest reference embeddings (an inner-product index of the reference)."""
    faiss = _faiss()
    index = faiss.IndexFlatIP(reference.shape[1])
    index.add(np.ascontiguousarray(reference, np.float32))
    if _gpu(faiss):  # a kNN search runs on faiss' GPU index as it is (its range search does not: SemDeDup stays)
        index = faiss.index_cpu_to_all_gpus(index)
    k = max(1, min(k, reference.shape[0]))
    out = np.zeros(len(rows), np.float32)
    for positions, vectors in embeddings.blocks(rows):
        similarity, _ = index.search(vectors, k)
        out[positions] = similarity.mean(axis=1)
    return out


# ---------------------------------------------------------------------------------------------------- balance


def _train_kmeans(vectors: np.ndarray, clusters: int, seed: int, restarts: int = 1):
    faiss = _faiss()
    clusters = max(1, min(clusters, len(vectors)))
    kmeans = faiss.Kmeans(vectors.shape[1], clusters, niter=20, nredo=restarts, seed=seed, gpu=_gpu(faiss),
                          max_points_per_centroid=TRAIN_POINTS_PER_CENTROID, min_points_per_centroid=1)
    kmeans.train(np.ascontiguousarray(vectors, np.float32))
    return kmeans


def kmeans(vectors: np.ndarray, clusters: int, seed: int = 0, restarts: int = 1) -> np.ndarray:
    """Each row's cluster by faiss k-means (seeded; the best of `restarts` starts)."""
    trained = _train_kmeans(np.asarray(vectors, np.float32), clusters, seed, restarts)
    return trained.index.search(np.ascontiguousarray(vectors, np.float32), 1)[1][:, 0].astype(np.int64)


@dataclass
class Hierarchy:
    """Leaf cluster per position, its second-nearest leaf, and the parent of each leaf (k-means of the leaf
    centroids)."""

    leaf: np.ndarray
    parent_of_leaf: np.ndarray
    second: np.ndarray | None = None


def hierarchical_kmeans(embeddings: Embeddings, rows: np.ndarray, clusters: int, seed: int = 0) -> Hierarchy:
    """Leaves: k-means of the rows' embeddings, trained on a sample of at most `TRAIN_POINTS_PER_CENTROID` per
    centroid, then every row assigned in blocks; parents: k-means of the leaf centroids (`ceil(sqrt(clusters))`)."""
    clusters = max(1, min(clusters, len(rows)))
    rng = np.random.default_rng(seed)
    sample = rows if len(rows) <= clusters * TRAIN_POINTS_PER_CENTROID else \
        np.sort(rng.choice(rows, clusters * TRAIN_POINTS_PER_CENTROID, replace=False))
    trained = _train_kmeans(embeddings.rows(sample), clusters, seed)
    leaf = np.zeros(len(rows), np.int64)
    second = np.zeros(len(rows), np.int64)
    neighbours = min(2, trained.centroids.shape[0])
    for positions, vectors in embeddings.blocks(rows):
        _, nearest = trained.index.search(vectors, neighbours)
        leaf[positions], second[positions] = nearest[:, 0], nearest[:, -1]
    used = np.unique(leaf)
    leaf = np.searchsorted(used, leaf)  # leaves numbered 0.. in use
    second = np.where(np.isin(second, used), np.searchsorted(used, second), leaf)  # an empty leaf: none
    parents = math.ceil(math.sqrt(len(used)))
    if parents >= len(used):
        parent_of_leaf = np.arange(len(used))
    else:
        # few points (the leaf centroids): many starts are cheap, and one bad start merges two modes
        parent_of_leaf = kmeans(trained.centroids[used], parents, seed, restarts=20)
    return Hierarchy(leaf, parent_of_leaf, second)


def water_fill(sizes: np.ndarray, budget: int) -> np.ndarray:
    """Shares of `budget` for groups of `sizes`: equal shares, a group never above its size (Vo et al.'s balanced
    sampling at one level); the shares sum to `min(budget, sum(sizes))`."""
    sizes = np.asarray(sizes, np.int64)
    share = np.zeros_like(sizes)
    left = min(int(budget), int(sizes.sum()))
    open_groups = np.flatnonzero(sizes > 0)
    while left > 0 and len(open_groups):
        each = left // len(open_groups)
        if each == 0:  # fewer left than groups: one more to the largest remainders, in order
            order = open_groups[np.argsort(-(sizes[open_groups] - share[open_groups]), kind="stable")][:left]
            share[order] += 1
            break
        give = np.minimum(each, sizes[open_groups] - share[open_groups])
        share[open_groups] += give
        left -= int(give.sum())
        open_groups = open_groups[share[open_groups] < sizes[open_groups]]
    return share


@dataclass
class BalanceResult:
    """Per position: its leaf cluster, the leaf's size, the leaf's share, whether it is kept."""

    leaf: np.ndarray
    leaf_size: np.ndarray
    share: np.ndarray
    keep: np.ndarray
    cap: int


def balanced_sample(hierarchy: Hierarchy, rank: np.ndarray, cluster_cap: int | None = None) -> BalanceResult:
    """Balanced sampling across the hierarchy (see the module docstring); each leaf keeps its best by `rank`."""
    leaf = hierarchy.leaf
    leaves = len(hierarchy.parent_of_leaf)
    leaf_sizes = np.bincount(leaf, minlength=leaves)
    parent = hierarchy.parent_of_leaf
    parent_sizes = np.bincount(parent, weights=leaf_sizes, minlength=parent.max() + 1).astype(np.int64)
    cap = cluster_cap or max(1, math.ceil(len(leaf) / max(1, int((parent_sizes > 0).sum()))))
    parent_share = water_fill(parent_sizes, int(np.minimum(parent_sizes, cap).sum()))
    leaf_share = np.zeros(leaves, np.int64)
    for group in np.flatnonzero(parent_share):
        members = np.flatnonzero(parent == group)
        leaf_share[members] = water_fill(leaf_sizes[members], parent_share[group])
    order = np.lexsort((np.arange(len(leaf)), -rank, leaf))  # by leaf, best first
    starts = np.searchsorted(leaf[order], np.arange(leaves))
    place = np.empty(len(leaf), np.int64)
    place[order] = np.arange(len(leaf)) - starts[leaf[order]]
    return BalanceResult(leaf, leaf_sizes[leaf], leaf_share[leaf], place < leaf_share[leaf], cap)


def streaming_mean(embeddings: Embeddings, rows: np.ndarray) -> np.ndarray:
    total = np.zeros(embeddings.shape[1], np.float64)
    for _, vectors in embeddings.blocks(rows):
        total += vectors.sum(axis=0)
    return (total / max(1, len(rows))).astype(np.float32)


__all__ = ["BLOCK_ROWS", "EXACT_HASHES", "BalanceResult", "DuplicateResult", "Embeddings", "Hierarchy",
           "balanced_sample", "components", "embedding_pairs", "hash_pairs", "hierarchical_kmeans", "kmeans",
           "near_duplicates", "reference_similarity", "streaming_mean", "water_fill"]
