"""The `sapiens2-hf` console script.

It lives outside the `sapiens2_hf` package on purpose. Importing that package registers it with transformers, which
imports torch and transformers (seconds); while this module runs the program, the package leaves that registration to
the first use of its model code (`sapiens2_hf/__init__.py` reads `DEFERS_REGISTRATION` below), so `--help` and
argument errors answer at once. The signal is this process's own: nothing is put in the environment, so a child
process (a worker, a test, a user's script) that imports the package registers as usual.
"""

import sys

DEFERS_REGISTRATION = True


def main():
    from sapiens2_hf.cli.main import main as run

    return run()


if __name__ == "__main__":
    sys.modules.setdefault("sapiens2_hf_cli", sys.modules["__main__"])  # `python -m sapiens2_hf_cli` defers too
    raise SystemExit(main())
