"""tprbench harness: studies, search, dispatch, tracking, reports, benchmarks and the CLI.

The only package that imports ray, optuna or mlflow. Imports flow harness → tasks → units.
"""
