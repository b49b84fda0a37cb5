"""The Gradio web app (`sapiens2-hf app`; layer 3): one tab per task, each with an image and a video panel, and a
"3D" tab (pose lifted into metres with the pointmap, shown in Gradio's `Model3D` viewer).

Every panel runs `AppRunner` (app/inference.py), which writes what `sapiens2-hf <task>` writes; the page shows the
overlay and offers the raw outputs as downloads (pose JSON, .npy arrays, the pointmap's .ply; for a video, the
annotated video and a .zip of the per-frame outputs). Each panel's event has an API name (`/<task>_image`,
`/<task>_video`) for `gradio_client`.

Offline: the default model of every task is `demo` (tiny random weights, built locally), analytics are off, the theme
uses the browser's system fonts (Gradio's default theme fetches web fonts), and `share` (which downloads Gradio's
tunnel binary) is off unless asked for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..modeling.sapiens2_tasks import TASK_SPECS
from ..predict.outputs import tab_title
from ..runs.errors import error_message, is_expected_error
from ..utils.extras import require
from .inference import DEMO_MODEL, AppRunner, task_names

TITLE = "Sapiens2: human-centric vision"
_MODEL_HELP = ("demo (tiny random weights, offline), a converted folder, a Hub id, or an official "
               "sapiens2_<size>_<task>.safetensors file")
_BOX_HELP = ("Person boxes, one per line: x_min y_min x_max y_max in image pixels. Blank: the whole image is one "
             "person (the app has no person detector).")


def import_gradio():
    """Gradio, or the one-line `MissingExtraError` naming `pip install 'sapiens2_hf[app]'`.

    `Blocks(analytics_enabled=False)` only stops the version check: Gradio's other telemetry calls read
    `GRADIO_ANALYTICS_ENABLED` themselves (gradio/analytics.py), so it is set off here unless the user set it; the
    app needs no network."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    return require("gradio", feature="the web app")


def _error_message(error: BaseException) -> str:
    """What the page shows for a failed run: the message of an error about the input (as the command line prints it),
    else the error's type and message (a bug: the type helps the report)."""
    return error_message(error) if is_expected_error(error) else f"{type(error).__name__}: {error_message(error)}"


def _guarded(function):
    """`function` with its failures raised as `gr.Error`, which Gradio shows on the page with the message (any other
    exception shows a bare "Error", or nothing under the output)."""
    import functools

    gr = import_gradio()

    @functools.wraps(function)
    def run(*args):
        try:
            return function(*args)
        except gr.Error:
            raise
        except Exception as error:  # noqa: BLE001 - every failure reaches the page as its message
            raise gr.Error(_error_message(error)) from error

    return run


def offline_theme():
    """Gradio's base theme with the browser's system fonts: the default theme's web fonts are a download, which
    an offline page waits on. Gradio 6 takes the theme in `launch(theme=...)`."""
    gr = import_gradio()
    return gr.themes.Base(font=["ui-sans-serif", "system-ui", "sans-serif"],
                          font_mono=["ui-monospace", "Consolas", "monospace"])


def build_app(models: Mapping[str, str] | None = None, runner: AppRunner | None = None, device: str = "auto",
              work_dir: str | Path | None = None):
    """The app as a `gr.Blocks`, not launched (`launch` serves it; to launch it yourself, pass
    `theme=offline_theme()` to keep the page free of downloads).

    Args:
        models (`dict[str, str]`, *optional*): task -> the model shown first in that tab's Model box: `demo`, a
            converted folder, a Hub id or an official .safetensors file. Tasks not named use `demo`.
        runner (`AppRunner`, *optional*): what computes the results (default: a new `AppRunner(work_dir, device)`);
            tests pass one of their own.
        device (`str`), work_dir (`str` or `Path`, *optional*): for the default runner.
    """
    gr = import_gradio()
    tasks = task_names()
    models = dict(models or {})
    unknown = sorted(set(models) - set(tasks))
    if unknown:
        raise ValueError(f"models given for unknown task(s) {', '.join(unknown)}; tasks: {', '.join(tasks)}.")
    runner = runner or AppRunner(work_dir, device=device)
    with gr.Blocks(title=TITLE, analytics_enabled=False) as app:
        gr.Markdown(f"# {TITLE}\nUpload an image or a video, pick a model, run. `demo` models have random "
                    "weights: real output formats, random values.")
        for task in tasks:
            with gr.Tab(tab_title(task), id=task, elem_id=f"{task}-tab"):
                model = gr.Textbox(models.get(task, DEMO_MODEL), label="Model", info=_MODEL_HELP,
                                   elem_id=f"{task}-model")
                with gr.Tab("Image", elem_id=f"{task}-image-tab"):
                    _image_panel(gr, runner, task, model)
                with gr.Tab("Video", elem_id=f"{task}-video-tab"):
                    _video_panel(gr, runner, task, model)
        with gr.Tab("3D", id="pose3d", elem_id="pose3d-tab"):
            _pose3d_panel(gr, runner, models)
    return app


def _pose3d_panel(gr, runner: AppRunner, models: Mapping[str, str]) -> None:
    """Pose lifted into metres with the pointmap (`sapiens2-pose-3d`): the people's pointmap mesh and 3D skeletons
    in a 3D viewer, and the files `sapiens2-hf pose3d` writes."""
    with gr.Row():
        with gr.Column():
            pose_model = gr.Textbox(models.get("pose", DEMO_MODEL), label="Pose model", info=_MODEL_HELP,
                                    elem_id="pose3d-pose-model")
            pointmap_model = gr.Textbox(models.get("pointmap", DEMO_MODEL), label="Pointmap model", info=_MODEL_HELP,
                                        elem_id="pose3d-pointmap-model")
            image = gr.Image(type="filepath", label="Image", elem_id="pose3d-image-input")
            boxes = gr.Textbox(label="Boxes (xyxy)", lines=2, placeholder="25 10 380 508", info=_BOX_HELP,
                               elem_id="pose3d-boxes")
            run = gr.Button("Run", variant="primary", elem_id="pose3d-run")
        with gr.Column():
            scene = gr.Model3D(label="3D result (metres; drag to turn)", clear_color=(0.95, 0.95, 0.95, 1.0),
                               elem_id="pose3d-output")
            files = gr.File(label="Raw outputs", file_count="multiple", interactive=False, elem_id="pose3d-files")
            info = gr.Markdown(elem_id="pose3d-info")

    def predict(pose_name, pointmap_name, path, boxes_text=None):
        result = runner.run_pose3d(path, pose_model=pose_name, pointmap_model=pointmap_name, boxes=boxes_text)
        return str(result.overlay), [str(p) for p in result.files], result.summary

    run.click(_guarded(predict), inputs=[pose_model, pointmap_model, image, boxes], outputs=[scene, files, info],
              api_name="pose3d_image")


def _image_panel(gr, runner: AppRunner, task: str, model) -> None:
    with gr.Row():
        with gr.Column():
            image = gr.Image(type="filepath", label="Image", elem_id=f"{task}-image-input")
            inputs = [model, image]
            if TASK_SPECS[task].top_down:
                inputs.append(gr.Textbox(label="Boxes (xyxy)", lines=2, placeholder="25 10 380 508",
                                         info=_BOX_HELP, elem_id=f"{task}-image-boxes"))
            run = gr.Button("Run", variant="primary", elem_id=f"{task}-image-run")
        with gr.Column():
            overlay = gr.Image(type="filepath", label="Result", format="png", interactive=False,
                               elem_id=f"{task}-image-output")
            files = gr.File(label="Raw outputs", file_count="multiple", interactive=False,
                            elem_id=f"{task}-image-files")
            info = gr.Markdown(elem_id=f"{task}-image-info")

    def predict(model_name, path, boxes=None):
        result = runner.run_image(task, path, model=model_name, boxes=boxes)
        return str(result.overlay), [str(p) for p in result.files], result.summary

    run.click(_guarded(predict), inputs=inputs, outputs=[overlay, files, info], api_name=f"{task}_image")


def _video_panel(gr, runner: AppRunner, task: str, model) -> None:
    with gr.Row():
        with gr.Column():
            video = gr.Video(label="Video", sources=["upload"], elem_id=f"{task}-video-input")
            max_frames = gr.Number(32, label="At most this many frames", precision=0, minimum=1,
                                   elem_id=f"{task}-video-max-frames")
            inputs = [model, video, max_frames]
            if TASK_SPECS[task].top_down:
                inputs.append(gr.Textbox(label="Boxes on the first frame (xyxy)", lines=2,
                                         info=_BOX_HELP.replace("image", "frame") + " The tracker follows them.",
                                         elem_id=f"{task}-video-boxes"))
            run = gr.Button("Run", variant="primary", elem_id=f"{task}-video-run")
        with gr.Column():
            annotated = gr.Video(label="Result", interactive=False, elem_id=f"{task}-video-output")
            files = gr.File(label="Per-frame outputs (.zip)", interactive=False, elem_id=f"{task}-video-files")
            info = gr.Markdown(elem_id=f"{task}-video-info")

    def predict(model_name, path, frames, boxes=None):
        if not path:
            raise ValueError("no video: upload one first.")
        frames = int(frames) if frames else None
        result = runner.run_video(task, path, model=model_name, boxes=boxes, max_frames=frames)
        return str(result.overlay), str(result.files[0]), result.summary

    run.click(_guarded(predict), inputs=inputs, outputs=[annotated, files, info], api_name=f"{task}_video")


def launch(models: Mapping[str, str] | None = None, host: str = "127.0.0.1", port: int | None = None,
           share: bool = False, device: str = "auto", work_dir: str | Path | None = None, block: bool = True,
           runner: AppRunner | None = None) -> Any:
    """Builds and serves the app (see `build_app`) on `host:port` (127.0.0.1: this machine only).

    Args:
        port (`int`, *optional*): default: Gradio's (7860, or the next free one).
        share (`bool`): a public *.gradio.live link through Gradio's tunnel (downloads its binary; off by default).
        block (`bool`): serve until interrupted; False returns at once with the server running (tests).

    Returns:
        The launched `gr.Blocks` (`app.local_url` is its address; `app.close()` stops it).
    """
    import_gradio()  # the missing-extra error before anything is built
    runner = runner or AppRunner(work_dir, device=device)
    app = build_app(models, runner=runner)
    app.queue(default_concurrency_limit=1)  # one run at a time: the models share the CPU / GPU
    app.launch(server_name=host, server_port=port, share=share, inbrowser=False, prevent_thread_lock=not block,
               allowed_paths=[str(runner.work_dir)], show_error=True, quiet=not block, theme=offline_theme())
    return app
