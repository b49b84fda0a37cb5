"""`sapiens2-hf app`: the local web app; `sapiens2-hf space OUT_DIR`: the same app as a Hugging Face Space folder.

Both take `--model TASK=SOURCE` (repeatable) for the model each task's tab starts with: `demo` (tiny random weights,
offline; the default), a converted folder, a Hub id, or an official .safetensors file (the app only; a Space takes Hub
ids and `demo`). Gradio is imported inside the handlers (the `app` extra), so `--help` stays light.
"""

from __future__ import annotations

import argparse


def _model_pair(text: str) -> tuple[str, str]:
    """argparse type of `--model TASK=SOURCE`."""
    task, sep, source = text.partition("=")
    if not sep or not task.strip() or not source.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not TASK=SOURCE (e.g. pose=facebook/sapiens2-pose-0.4b)")
    return task.strip(), source.strip()


def _models(pairs: list[tuple[str, str]] | None) -> dict[str, str]:
    from ..modeling.sapiens2_tasks import TASK_SPECS

    tasks = tuple(TASK_SPECS)
    models = {}
    for task, source in pairs or []:
        if task not in tasks:
            raise ValueError(f"--model {task}={source}: unknown task {task!r}; one of {', '.join(tasks)}.")
        models[task] = source
    return models


def add_app_subparser(subparsers) -> None:
    """Registers `app` and `space`."""
    from .threads import add_threads_argument

    model_help = ("TASK=SOURCE: the model a task's tab starts with (repeatable): 'demo' (tiny random weights, "
                  "offline; the default for every task), a converted folder, a Hub id or an official "
                  "sapiens2_<size>_<task>.safetensors file")
    app = subparsers.add_parser("app", help="start the local web app (Gradio) for all six tasks",
                                description=__doc__.split("\n\n")[0])
    app.add_argument("--model", type=_model_pair, action="append", metavar="TASK=SOURCE", help=model_help)
    app.add_argument("--host", default="127.0.0.1",
                     help="address to serve on (default 127.0.0.1: this machine only; 0.0.0.0: the network)")
    app.add_argument("--port", type=int, default=None, help="port (default: Gradio's, 7860 or the next free one)")
    app.add_argument("--share", action="store_true",
                     help="also serve a public *.gradio.live link (Gradio's tunnel: downloads its binary)")
    app.add_argument("--device", default="auto", help="'auto' (cuda when available), 'cpu', 'cuda:0', ...")
    app.add_argument("--work-dir", default=None,
                     help="folder for the demo models and the outputs of each run (default: a temporary folder)")
    add_threads_argument(app)
    app.set_defaults(handler=run_app_command)

    space = subparsers.add_parser("space", help="write the web app as a Hugging Face Space folder (nothing uploaded)",
                                  description="Writes app.py, requirements.txt and README.md (Space front matter: "
                                              "sdk gradio, app_file app.py) into OUT_DIR.")
    space.add_argument("out_dir", metavar="OUT_DIR", help="the Space folder to write (created)")
    space.add_argument("--model", type=_model_pair, action="append", metavar="TASK=SOURCE",
                       help="TASK=HUB_ID: the model a task's tab starts with (repeatable; default 'demo')")
    space.add_argument("--title", default="Sapiens2", help="the Space's title")
    space.add_argument("--requirement", default=None, metavar="PIP_SPEC",
                       help="how the Space installs this package (default: sapiens2_hf[app]==<this version>; e.g. "
                            "'sapiens2_hf[app] @ git+https://github.com/<you>/<repo>')")
    space.add_argument("--overwrite", action="store_true", help="replace the files of an existing Space folder")
    space.set_defaults(handler=run_space_command)


def run_app_command(args: argparse.Namespace) -> int:
    models = _models(args.model)
    from ..app import launch

    print(f"sapiens2-hf app: serving on http://{args.host}:{args.port or 7860} (Ctrl+C stops it)")
    launch(models, host=args.host, port=args.port, share=args.share, device=args.device, work_dir=args.work_dir)
    return 0


def run_space_command(args: argparse.Namespace) -> int:
    models = _models(args.model)
    from ..app.space import write_space

    folder = write_space(args.out_dir, models, title=args.title, requirement=args.requirement,
                         overwrite=args.overwrite)
    print(f"sapiens2-hf space: wrote {folder} (app.py, requirements.txt, README.md); upload it as a Gradio Space, "
          f"e.g. `hf upload <you>/<space> {folder} --repo-type space`")
    return 0
