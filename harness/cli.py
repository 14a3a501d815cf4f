"""The `tprbench` command line. Subcommands live in harness/commands/, loaded by name.

Bad input (a study file, a unit spec, a data path) raises an exception whose class has
`user_error = True`; it is printed as one line and the exit code is 2, with no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name → module in harness.commands; order is the order of `tprbench --help`.
COMMANDS = {
    "run": "run",
    "study": "study",
    "report": "report",
    "compare": "compare",
    "train": "train",
    "transfer": "transfer",
    "gradients": "gradients",
    "interpret": "interpret",
    "units": "units",
    "tasks": "tasks",
    "data": "data",
    "bench": "bench",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tprbench", description="Benchmark harness for recurrent units (TPRU, LSTM, GRU).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"harness.commands.{module_name}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def is_user_error(exc: BaseException) -> bool:
    return bool(getattr(type(exc), "user_error", False))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("tprbench: interrupted; everything finished so far is recorded, rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as exc:
        if is_user_error(exc):
            print(f"tprbench {args.command}: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
