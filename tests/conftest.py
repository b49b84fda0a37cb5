"""Fixtures shared by the whole suite. Helper code lives in plain modules beside the tests (toy_records.py,
official_cases.py); no test module imports another (tests/test_suite_hygiene.py checks it)."""

import os

# No test may reach the Hub (a failed lookup costs ~20 s and the machines are offline).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


import socket

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


@pytest.fixture(scope="session")
def toy_records():
    """Task name -> toy-record builder `(count, seed=0, size=...) -> list of records` (see tests/toy_records.py)."""
    from toy_records import TOY_RECORDS

    return TOY_RECORDS


@pytest.fixture(scope="session")
def load_case():
    """`load_case(case) -> (meta, reference tensors, weights file)` of an official fixture case (official_cases.py)."""
    from official_cases import load_case

    return load_case


@pytest.fixture
def free_port():
    """A free TCP port on 127.0.0.1 for a distributed launch (`--master_addr 127.0.0.1 --master_port <port>`)."""
    # The OS picks a port nobody holds; closing the socket before the launcher binds it leaves a short race, far less
    # likely to lose than a fixed port that two concurrent runs (or a stale process) share.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
