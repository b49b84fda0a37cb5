"""Fixtures shared by the whole suite. Helper code lives in plain modules beside the tests (toy_records.py,
official_cases.py, worker_pool.py, export_jobs.py); no test module imports another (tests/test_suite_hygiene.py
checks it)."""

import os

# No test may reach the Hub (a failed lookup costs ~20 s and the machines are offline).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# torch's inductor caches (compiled kernels and precompiled headers, under the temporary folder) do not tell CPU
# code built under one ATEN_CPU_CAPABILITY from another: a kernel compiled by a plain run and reused by a run with
# ATEN_CPU_CAPABILITY=avx2 gave NaN in half of its outputs, the reverse crashed the process, and a header built by
# another run broke compiling under ATEN_CPU_CAPABILITY=default (torch 2.14.1, AVX-512 CPU). A run with the variable
# set therefore gets a temporary folder of its own, per capability, inherited by the worker processes.
_capability = os.environ.get("ATEN_CPU_CAPABILITY")
if _capability:
    import tempfile

    _own_temp = os.path.join(
        tempfile.gettempdir(), f"sapiens2_hf_tests_{getattr(os, 'getuid', lambda: 'user')()}_{_capability}"
    )
    os.makedirs(_own_temp, exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = _own_temp


# Compile caches written by tests stay in this run's temporary folder, never in the user's ~/.cache.
if "SAPIENS2_HF_COMPILE_CACHE" not in os.environ:
    import tempfile

    os.environ["SAPIENS2_HF_COMPILE_CACHE"] = tempfile.mkdtemp(prefix="sapiens2_hf_compile_cache_")
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


def _free_port() -> int:
    # The OS picks a port nobody holds; closing the socket before the launcher binds it leaves a short race, far less
    # likely to lose than a fixed port that two concurrent runs (or a stale process) share.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def free_port():
    """A free TCP port on 127.0.0.1 for a distributed launch (`--master_addr 127.0.0.1 --master_port <port>`)."""
    return _free_port()


@pytest.fixture(scope="session")
def free_port_factory():
    """`free_port_factory() -> port`: `free_port` for module-scoped fixtures (one launch shared by several tests);
    call it right before the launch, so that the race above stays short."""
    return _free_port


@pytest.fixture(scope="session", autouse=True)
def _early_children(request, tmp_path_factory):
    """Starts, when the session starts, the child processes that the selected tests will check, one at a time, on the
    core pytest leaves idle (tests/worker_pool.py `EarlyChildren`). A test module declares them as
    `EARLY_CHILDREN = {name: (test function name, command(folder) -> subprocess.Popen keyword arguments)}`, with
    `folder` an empty folder of the child's own; the test takes the result with the `early_child` fixture. Only
    self-contained children qualify: a command may read fixtures and write under its folder, nothing else."""
    from worker_pool import EarlyChildren

    children = EarlyChildren()
    for item in request.session.items:
        module = getattr(item, "module", None)
        for name, (test, command) in getattr(module, "EARLY_CHILDREN", {}).items():
            key = (module.__name__, name)
            if getattr(item, "originalname", None) == test and key not in children:
                folder = tmp_path_factory.mktemp(f"early-{name}")
                children.add(key, folder, command(folder))
    children.start()
    yield children
    children.stop()


@pytest.fixture
def early_child(request, _early_children):
    """`early_child(name) -> (subprocess.CompletedProcess, folder)` of this module's `EARLY_CHILDREN[name]`, waiting
    for it if it has not finished yet (see `_early_children`)."""

    def result(name):
        key = (request.module.__name__, name)
        return _early_children.result(key), _early_children.folders[key]

    return result
