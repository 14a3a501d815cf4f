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
    "units": "units",
    "tasks": "tasks",
    "data": "data",
    "bench": "bench",
}


class Parser(argparse.ArgumentParser):
    """argparse with did-you-mean for a misspelled (sub)command, like every other name in tprbench.
    Subparsers inherit the class, so `tprbench rnu` and `tprbench study shwo` both get it."""

    def error(self, message: str):  # type: ignore[override]
        import difflib
        import re

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2)) or [c.strip() for c in m.group(2).split(",")]
            close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            message = f"unknown command {m.group(1)!r}{hint} (choose from {', '.join(choices)})"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tprbench", description="Benchmark harness for recurrent units (TPRU, LSTM, GRU).")
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
