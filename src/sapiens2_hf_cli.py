"""The `sapiens2-hf` console script.

It lives outside the `sapiens2_hf` package on purpose: importing that package registers it with transformers, which
imports torch and transformers (seconds). The command line defers that registration (`SAPIENS2_HF_DEFER_REGISTRATION`,
see `sapiens2_hf/__init__.py`), so `--help` and argument errors answer at once; a command that computes registers when
it first uses the model code.
"""

import os


def main():
    os.environ.setdefault("SAPIENS2_HF_DEFER_REGISTRATION", "1")
    from sapiens2_hf.cli.main import main as run

    return run()


if __name__ == "__main__":
    raise SystemExit(main())
