"""What several subcommands share, none of them a subcommand itself.

- `bounds`: the argparse types with a range for every numeric option (`tprbench … --epochs 0`
  is one line and exit 2, never a traceback minutes later).
- `output_path`: `check_output_path`, the one-line refusal of a path a command cannot write.
- `logs` and `quiet`: `tprbench run` keeps the terminal for its own lines (library loggers and
  file descriptor 2 go to `<root>/logs/`).

They live here, under `harness/commands/`, because the commands are their only users.
"""
