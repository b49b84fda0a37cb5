"""The `sapiens2-hf` command."""

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sapiens2-hf", description="Sapiens2 models in the Hugging Face ecosystem.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    from .convert import add_convert_subparser

    add_convert_subparser(subparsers)
    from .demo import add_demo_subparser
    from .predict import add_predict_subparsers

    add_demo_subparser(subparsers)
    add_predict_subparsers(subparsers)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, OSError, FileExistsError) as error:
        print(f"sapiens2-hf {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
