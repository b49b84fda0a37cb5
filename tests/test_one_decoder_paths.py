"""Every path that reads a user's image file goes through the run layer's one decoder (`runs.decode`): the
training data readers (`data.images.load_image`) and the pretraining dataset, as predict, pose3d, curation and the
app do. So a tiny or thin image file works, and the decoder's limits hold, on each of them."""

import numpy as np
import pytest
from PIL import Image

from sapiens2_hf.data.images import load_image
from sapiens2_hf.data.validation import SampleLoadError
from sapiens2_hf.pretraining.multicrop import PretrainingImageDataset
from sapiens2_hf.runs.decode import MAX_ASPECT_RATIO


def _png(path, height, width, value=200):
    Image.fromarray(np.full((height, width, 3), value, np.uint8)).save(path)
    return path


@pytest.mark.parametrize("height, width", [(1, 1), (3, 100), (100, 3)])
def test_thin_and_tiny_files_read_as_files_never_ambiguous(tmp_path, height, width):
    """A (3, 100, 3) array is ambiguous to the array rule; a file's pixels never are."""
    path = _png(tmp_path / "thin.png", height, width)
    for read in (load_image, lambda p: PretrainingImageDataset([str(p)])[0]["image"].permute(1, 2, 0).numpy()):
        image = read(path)
        assert image.shape == (height, width, 3) and image.dtype == np.uint8 and (image == 200).all()


def test_the_decoders_limits_hold_on_the_training_and_pretraining_paths(tmp_path):
    path = _png(tmp_path / "sliver.png", 1, MAX_ASPECT_RATIO * 2)
    with pytest.raises(ValueError, match="sliver.png.*aspect"):
        load_image(str(path))
    with pytest.raises(SampleLoadError, match=r"pretraining image 0 \(.*sliver\.png\).*aspect"):
        PretrainingImageDataset([str(path)])[0]
    # control: an image inside the limit reads on both paths
    ok = _png(tmp_path / "ok.png", 2, MAX_ASPECT_RATIO)
    assert load_image(str(ok)).shape == (2, MAX_ASPECT_RATIO, 3)
    assert PretrainingImageDataset([str(ok)])[0]["image"].shape == (3, 2, MAX_ASPECT_RATIO)


def test_datasets_cells_and_bytes_use_the_same_decoder(tmp_path):
    path = _png(tmp_path / "a.png", 4, 5)
    data = path.read_bytes()
    for value in ({"bytes": data, "path": None}, {"bytes": None, "path": str(path)}, data):
        assert load_image(value).shape == (4, 5, 3)
        assert PretrainingImageDataset([value])[0]["image"].shape == (3, 4, 5)
