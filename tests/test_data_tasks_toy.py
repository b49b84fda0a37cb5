"""Checks that each toy-record generator (tests/toy_records.py) is deterministic and its labels are what the task
transforms expect."""

import numpy as np
import pytest

from sapiens2_hf.data.dense import depth_to_canonical_pointmap
from toy_records import NUM_TOY_KEYPOINTS, TOY_RECORDS


@pytest.mark.parametrize("task", sorted(TOY_RECORDS))
def test_toy_records_are_deterministic_and_labelled(task):
    first, second = TOY_RECORDS[task](3, seed=5), TOY_RECORDS[task](3, seed=5)
    for a, b in zip(first, second):
        for key in a:
            np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))
    record = first[0]
    if task == "pose":
        assert (record["keypoints"][:, 2] > 0).sum() == NUM_TOY_KEYPOINTS
    elif task == "seg":
        assert len(np.unique(record["label"])) >= 2
    elif task == "normal":
        norms = np.linalg.norm(record["normal"][record["mask"] > 0], axis=-1)
        np.testing.assert_allclose(norms, 1.0, atol=1e-5)
    elif task == "pointmap":
        xyz = depth_to_canonical_pointmap(record["depth"], record["K"], canonical_focal_length=40.0)
        assert np.allclose(xyz[..., 2], record["depth"])  # canonical focal = f: identity scale
    else:
        assert record["albedo"].max() <= 1.0
