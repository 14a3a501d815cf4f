"""`tprbench tasks`: every registered task adapter with its architectures, options, data layouts and metric."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "list registered tasks: architectures, options (type, default), data layouts, metric and direction"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="TASK", help="only these tasks (default: every registered task)")
    p.add_argument("--json", action="store_true", help='print {"tasks": [...]} as JSON')


def _type_name(annotation: Any) -> str:
    """`int`, `int | None`, `'max' | 'last' | 'mean'`: an option's type as a person reads it."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if annotation is type(None):
        return "None"
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation))


def _options(cls: type) -> list[dict[str, Any]]:
    from pydantic_core import PydanticUndefined, to_jsonable_python

    model = getattr(cls, "Options", None)
    if model is None:
        return []
    rows = []
    for name, field in model.model_fields.items():
        required = field.is_required()
        default = None if required else field.get_default(call_default_factory=True)
        rows.append(
            {
                "name": field.alias or name,
                "type": _type_name(field.annotation),
                "default": None if default is PydanticUndefined else to_jsonable_python(default),
                "required": required,
                "description": field.description or "",
            }
        )
    return rows


def _layouts(cls: type) -> list[str]:
    value = getattr(cls, "layouts", "") or ""
    return [value] if isinstance(value, str) else [str(v) for v in value]


def describe_task(name: str, cls: type) -> dict[str, Any]:
    """What `tprbench tasks --json` prints for one task (also the table's content)."""
    from tasks.meta import run_metric

    study_metric, direction = run_metric(cls)
    return {
        "name": name,
        "archs": list(getattr(cls, "archs", ()) or ()),
        "metric": cls.metric,
        "study_metric": study_metric,
        "direction": direction,
        "metrics": {m: cls.metric_direction(m) for m in cls.metrics},
        "layouts": _layouts(cls),
        "options": _options(cls),
        "defaults": dict(getattr(cls, "defaults", {}) or {}),
        "about": ((cls.__doc__ or "").strip().splitlines() or [""])[0],
    }


def run(args: argparse.Namespace) -> int:
    import json

    from tasks.registry import available_tasks, get_task

    names = args.names or available_tasks()
    infos = [describe_task(name, get_task(name)) for name in names]  # an unknown name: TaskError, exit 2
    if args.json:
        print(json.dumps({"tasks": infos}, indent=1))
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=max(120, Console().width))
    table = Table(title="tprbench tasks")
    for col in ("task", "architectures", "metric (study key)", "direction", "data layouts"):
        table.add_column(col)
    for info in infos:
        table.add_row(
            escape(info["name"]),
            ", ".join(info["archs"]),
            f"{info['metric']} ({info['study_metric']})",
            info["direction"],
            escape("\n".join(info["layouts"]) or "-"),
        )
    console.print(table)
    for info in infos:
        options = Table(title=escape(f"{info['name']} options: [tasks.options] in study files, --set KEY=VALUE for tprbench train"))
        for col in ("option", "type", "default", "description"):
            options.add_column(col)
        for opt in info["options"]:
            default = "(required)" if opt["required"] else json.dumps(opt["default"])
            options.add_row(escape(opt["name"]), escape(opt["type"]), escape(default), escape(opt["description"]))
        if not info["options"]:
            options.add_row("-", "", "", "takes no options")
        console.print(options)
        if info["defaults"]:
            console.print(f"  training defaults: {escape(json.dumps(info['defaults']))}")
    return 0
