"""`--threads N` on every `sapiens2-hf` command that computes: it reaches torch before the work, is restored after
it, N < 1 is an argument error, and the defaults are the documented ones (cli/threads.py)."""

import os
import subprocess
import sys

import pytest
import torch

from sapiens2_hf.cli import convert as convert_cli
from sapiens2_hf.cli import demo as demo_cli
from sapiens2_hf.cli import merge as merge_cli
from sapiens2_hf.cli import predict as predict_cli
from sapiens2_hf.cli import threads as threads_cli
from sapiens2_hf.cli.main import main

COMMANDS = {
    "convert": (convert_cli, "run_convert", ["convert", "sapiens2_0.4b_pose.safetensors", "--out", "o"]),
    "merge": (merge_cli, "run_merge", ["merge", "adapter", "--out", "o"]),
    "demo": (demo_cli, "run_demo_command", ["demo", "--out", "o"]),
    **{task: (predict_cli, "run_predict", [task, "a.png", "--model", "m", "--out", "o"])
       for task in ("pose", "seg", "normal", "pointmap", "albedo")},
}


@pytest.fixture
def handler_spy(monkeypatch, tmp_path):
    """Replaces a command's handler by one that records torch's thread count while it runs (in a folder holding the
    file `convert` names: a missing local path is refused before any handler runs)."""
    seen = []
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sapiens2_0.4b_pose.safetensors").touch()

    def install(command):
        module, name, argv = COMMANDS[command]
        monkeypatch.setattr(module, name, lambda args: seen.append(torch.get_num_threads()) or 0)
        return argv

    return install, seen


@pytest.mark.parametrize("command", list(COMMANDS))
def test_threads_flag_reaches_torch_and_is_restored(command, handler_spy):
    install, seen = handler_spy
    argv = install(command)
    before = torch.get_num_threads()
    for requested in (3, 1):  # two counts: one of them differs from `before`, so the check cannot pass by chance
        assert main([*argv, "--threads", str(requested)]) == 0
        assert seen[-1] == requested, (command, seen)
        assert torch.get_num_threads() == before
    assert main(argv) == 0
    expected = threads_cli.DEMO_DEFAULT if command == "demo" else min(before, threads_cli.available_cpus())
    assert seen[-1] == expected
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_threads_below_one_is_an_argument_error(command, value, handler_spy, capsys):
    install, seen = handler_spy
    argv = install(command)
    with pytest.raises(SystemExit) as exit:
        main([*argv, "--threads", value])
    assert exit.value.code == 2 and seen == []
    error = capsys.readouterr().err
    assert "argument --threads" in error
    if value != "two":
        assert f"{value} is not a positive integer (>= 1)" in error


def test_default_is_capped_at_the_cpus_the_process_may_use(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        monkeypatch.setattr(threads_cli, "_cgroup_cpu_quota", lambda: 1)  # e.g. a container with --cpus=1
        assert threads_cli.available_cpus() == 1
        assert threads_cli.resolve_threads(None) == 1
        monkeypatch.setattr(threads_cli, "_cgroup_cpu_quota", lambda: None)
        assert threads_cli.resolve_threads(None) == min(4, threads_cli.available_cpus())
        assert threads_cli.resolve_threads(None, default=2) == 2 and threads_cli.resolve_threads(5) == 5
        with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
            threads_cli.resolve_threads(0)
    finally:
        torch.set_num_threads(before)


def test_passive_openmp_waiting_is_set_only_before_torch_and_never_overrides_the_environment():
    code = ("import os, sys, sapiens2_hf_cli, sapiens2_hf.cli.threads as t; t.prefer_passive_waiting(); "
            "print(os.environ.get('OMP_WAIT_POLICY'))")
    for given, expected in ((None, "PASSIVE"), ("ACTIVE", "ACTIVE")):
        # as the console script starts the CLI (src/sapiens2_hf_cli.py): registration, hence torch, deferred
        env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
        if given:
            env["OMP_WAIT_POLICY"] = given
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 0 and result.stdout.strip() == expected, result.stderr
    # in this process torch is imported already: OpenMP has read its settings, so nothing is changed
    saved = os.environ.pop("OMP_WAIT_POLICY", None)
    try:
        threads_cli.prefer_passive_waiting()
        assert "OMP_WAIT_POLICY" not in os.environ
    finally:
        if saved is not None:
            os.environ["OMP_WAIT_POLICY"] = saved


def test_run_demo_refuses_a_thread_count_below_one(tmp_path):
    from sapiens2_hf.demo import run_demo

    with pytest.raises(ValueError, match="threads must be >= 1"):
        run_demo(tmp_path / "demo", threads=0)
