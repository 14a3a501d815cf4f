"""The `tprbench` command line. Subcommands live in harness/commands/, loaded by name.

Bad input (a study file, a unit spec, a data path) raises an exception whose class has
`user_error = True`; it is printed as one line and the exit code is 2, with no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name → module in harness.commands; order is the order of `tprbench --help`.
COMMANDS = {
    "run": "run",
    "study": "study",
    "report": "report",
    "papers": "papers",
    "compare": "compare",
    "record": "record",
    "train": "train",
    "transfer": "transfer",
    "gradients": "gradients",
    "interpret": "interpret",
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
        # One line, as every other error of tprbench (no usage block above it); exit 2 as argparse does.
        # Named as the command's other errors are (`tprbench data: error: …`, harness.cli.main).
        name = " ".join(self.prog.split()[:2])
        self.exit(2, f"{name}: error: {message} (see `{self.prog} --help`)\n")


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
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not in the interpreter's exit
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except KeyboardInterrupt:
        from harness.driver.ray_start import terminated

        by_sigterm = terminated()
        how = "stopped by SIGTERM" if by_sigterm else "interrupted"
        print(f"tprbench: {how}; everything finished so far is recorded, rerun the same command to resume", file=sys.stderr)
        return 143 if by_sigterm else 130
    except Exception as exc:
        if is_user_error(exc):
            print(f"tprbench {args.command}: error: {exc}", file=sys.stderr)
            return 2
        from harness.diskfull import disk_full_error, is_disk_full

        if is_disk_full(exc):  # wherever the write was (data cache, store, journal): one line, not a traceback
            where = os.path.abspath(getattr(args, "root", None) or os.getcwd())
            print(f"tprbench {args.command}: error: {disk_full_error(exc, where)}", file=sys.stderr)
            return 2
        raise


def _closed_pipe() -> int:
    """The reader of stdout went away (`tprbench study show --json | head`): stop quietly.

    Python's own advice (docs: signal, "Note on SIGPIPE"): point stdout at /dev/null so the
    interpreter's final flush cannot raise again, and exit with the shell's code for SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout already closed or not a real file: nothing left to flush
        pass
    return 141


if __name__ == "__main__":
    sys.exit(main())
