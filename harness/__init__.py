"""tprbench harness: studies, search, dispatch, tracking, reports, benchmarks and the CLI.

The only package that imports ray, optuna or mlflow. Imports flow harness → tasks → units.
Inside, lowest first (tests/test_import_graph.py HARNESS_LAYERS): diskfull, faults → study →
record → report, transfer → analysis, driver → bench → commands → cli; a module imports only
its own package and lower layers.
"""
