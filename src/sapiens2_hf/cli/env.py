"""`sapiens2-hf env`: the versions, CPU, threads and accelerators to paste into a bug report."""

import argparse
import json


def add_env_subparser(subparsers) -> None:
    parser = subparsers.add_parser(
        "env",
        help="print the installation and machine details a bug report needs",
        description="Print the versions of Python, torch, transformers and every declared dependency (each checked "
        "against the range sapiens2_hf declares, optional ones imported), which extras are usable, the CPU's kernel "
        "capability, torch's thread settings, the accelerators and the relevant environment variables. Paste the "
        "output into a bug report.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of `- key: value` lines")
    parser.add_argument("--no-import-check", action="store_true",
                        help="do not import the optional packages (faster; their importability is then unknown)")
    parser.set_defaults(handler=run_env)


def run_env(args: argparse.Namespace) -> int:
    from ..utils.environment import collect_environment

    report = collect_environment(check_imports=not args.no_import_check)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.to_text())
    return 0
