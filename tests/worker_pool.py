"""Work beside the test process, for tests whose independent pieces of work are long single-threaded Python (ONNX
exports, tiny training runs, child interpreters): the test machine has 2 cores and pytest uses one.

`WorkerPool`: two spawned workers that run module-level functions while the test process waits for them or runs its
own checks. `EarlyChildren`: child processes started at the start of the session and checked by later tests.

A `WorkerPool` job is a module-level function and its arguments (both pickled; a function of a test module is found
by the worker importing that module, tests/ being on its path as on this process's). Each worker runs torch on one
thread, as the `one_thread` fixture does here. Figures a worker computes are checked against thresholds or stored
outputs in the test, never bit for bit against figures computed in the test process.
"""

import multiprocessing
import subprocess
import threading
from concurrent.futures import ProcessPoolExecutor


def _one_thread():
    import torch

    torch.set_num_threads(1)


class WorkerPool:
    """`submit(key, function, *args)` starts a job (workers take jobs in submission order, so submit the longest
    first); `result(key)` waits for it and returns its value or raises its exception."""

    def __init__(self, workers: int = 2):
        # spawn, not fork: forking a process whose torch thread pools already exist can deadlock the child
        self.executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_one_thread)
        self.futures = {}

    def submit(self, key, function, *args):
        if key not in self.futures:
            self.futures[key] = self.executor.submit(function, *args)

    def result(self, key):
        return self.futures[key].result()

    def close(self):
        self.executor.shutdown(wait=True, cancel_futures=True)


class EarlyChildren:
    """Self-contained child processes that test modules declare in `EARLY_CHILDREN` (see tests/conftest.py), run one
    after the other by a thread of the test process from the start of the session, on the core that pytest leaves
    idle; `result(key)` waits for one (usually long done by the time its test runs) and gives its
    `CompletedProcess`, with the output captured."""

    def __init__(self, timeout: float = 900):
        self.timeout = timeout
        self._queue, self._results, self._done, self.folders = [], {}, {}, {}
        self._thread, self._current, self._stopping = None, None, False

    def __contains__(self, key) -> bool:
        return key in self._done

    def add(self, key, folder, popen_kwargs: dict) -> None:
        """Queues a child; `folder` is its own working folder (`folders[key]`)."""
        self._queue.append((key, popen_kwargs))
        self._done[key], self.folders[key] = threading.Event(), folder

    def start(self) -> None:
        if self._queue:
            self._thread = threading.Thread(target=self._run, name="early-children", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        for key, popen_kwargs in self._queue:
            if self._stopping:
                break
            try:
                self._current = subprocess.Popen(**popen_kwargs, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                 text=True)
                try:
                    out, err = self._current.communicate(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    self._current.kill()
                    out, err = self._current.communicate()
                    err += f"\n[killed after {self.timeout} s]"
                self._results[key] = subprocess.CompletedProcess(self._current.args, self._current.returncode,
                                                                 out, err)
            except Exception as error:  # handed to the test that asks for this child
                self._results[key] = error
            self._done[key].set()

    def result(self, key) -> subprocess.CompletedProcess:
        if key not in self._done:
            raise KeyError(f"no early child {key}; declare it in the module's EARLY_CHILDREN")
        if not self._done[key].wait(2 * self.timeout * len(self._queue)):
            raise TimeoutError(f"early child {key} did not finish")
        result = self._results[key]
        if isinstance(result, Exception):
            raise result
        return result

    def stop(self) -> None:
        """At the end of the session: the children not yet started are skipped, a running one is ended."""
        self._stopping = True
        current = self._current
        if current is not None and current.poll() is None:
            current.kill()
        if self._thread is not None:
            self._thread.join()
