import os

# No test may reach the Hub (a failed lookup costs ~20 s and the machines are offline).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


import pytest


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a test module (`pytestmark = pytest.mark.usefixtures("one_thread")`): on a shared 2-core
    machine two threads are up to 10x slower than one for the tiny training models."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
