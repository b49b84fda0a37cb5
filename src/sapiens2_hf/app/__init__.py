"""The web app (layer 3): `sapiens2-hf app` serves it, `sapiens2-hf space` writes it as a Hugging Face Space.

`inference.AppRunner` computes (the command line's pipelines and file writers; no Gradio); `gradio_app` builds the
page (Gradio, the `app` extra: `pip install 'sapiens2_hf[app]'`, is imported when a page is built); `space` writes
the Space folder. `import sapiens2_hf` does not import this package, and importing it imports neither Gradio nor
torch.
"""

from .gradio_app import build_app, launch
from .inference import AppRunner
from .space import write_space

__all__ = ["AppRunner", "build_app", "launch", "write_space"]
