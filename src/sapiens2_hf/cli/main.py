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
    from .merge import add_merge_subparser; add_merge_subparser(subparsers)  # noqa: E702 (one line: shared file)
    return parser


def _expected_errors() -> tuple[type[BaseException], ...]:
    """Failures that come from what the user passed (a corrupt or mismatched file, a bad size, a wrong task, a
    missing folder, an unreachable Hub): one line and exit code 2, never a traceback. Anything else is a bug and
    keeps its traceback."""
    from ..hub.convert_official import ConversionCheckError

    return ValueError, OSError, ConversionCheckError


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except _expected_errors() as error:
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"sapiens2-hf {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
