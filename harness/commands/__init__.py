"""One module per CLI subcommand, each with HELP, add_arguments(parser) and run(args) -> int.

Modules import heavy libraries (torch, ray, mlflow, ...) inside `run`, so `tprbench --help`
starts in well under a second. `support/` holds what several subcommands share (bounds on
numeric options, output-path checks, where library output goes); it is no subcommand.
"""
