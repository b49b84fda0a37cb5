"""Convert the official Sapiens2 checkpoint files into complete, verified Hugging Face repository folders.

    python training_scripts/publish_official.py --checkpoint-root ~/sapiens2_host --out hub_repos

Each `sapiens2_<size>_<task>.safetensors` under the root becomes `<out>/sapiens2-<task>-<size>/` with config.json,
model.safetensors, preprocessor_config.json and a model card; every folder is reloaded and checked to give exactly the
official file's outputs. Upload a folder with `huggingface-cli upload facebook/sapiens2-<task>-<size> <folder>`.
"""

import argparse
import logging

from sapiens2_hf.hub.publish import publish_official_zoo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint-root", required=True, help="folder with the official .safetensors files")
    parser.add_argument("--out", required=True, help="folder that receives one repository folder per checkpoint")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--image-size", action="append", default=[], metavar="FILE=HxW",
                        help="input size of a file that is not at the native size, e.g. sapiens2_x_pointmap.safetensors=160x144")
    args = parser.parse_args()
    image_sizes = {}
    for item in args.image_size:
        name, _, size = item.partition("=")
        height, _, width = size.partition("x")
        image_sizes[name] = (int(height), int(width))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for repo in publish_official_zoo(args.checkpoint_root, args.out, overwrite=args.overwrite, image_sizes=image_sizes):
        print(f"{repo.source.name} -> {repo.folder} ({repo.repo_id}, verified)")


if __name__ == "__main__":
    main()
