"""Unit specs: the one short string that names a configured unit everywhere.

`tpru[roles=32,slices=8]`, `tpru-mod2[roles=32]`, `gru`, `mypkg.cells:MyCell[k=3]`.
The same string appears on the CLI, in study files and in table rows, so parsing lives in
one place and errors name the exact offending part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SPEC_RE = re.compile(r"^\s*(?P<name>[A-Za-z_][\w.\-]*(?::[A-Za-z_]\w*)?)\s*(?:\[(?P<opts>[^\[\]]*)\])?\s*$")
_KEY_RE = re.compile(r"^[A-Za-z_]\w*$")


class UnitSpecError(ValueError):
    """A unit spec that cannot be parsed or does not fit its unit. The message names the part."""

    user_error = True  # the CLI prints the message and exits 2, no traceback


@dataclass(frozen=True)
class UnitSpec:
    """A parsed spec: the unit name and its options as written (values still strings)."""

    name: str
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def option_dict(self) -> dict[str, str]:
        return dict(self.options)

    def __str__(self) -> str:
        if not self.options:
            return self.name
        return f"{self.name}[{','.join(f'{k}={v}' for k, v in self.options)}]"

    def with_options(self, **updates: object) -> UnitSpec:
        opts = self.option_dict
        opts.update({k: format_value(v) for k, v in updates.items()})
        return UnitSpec(self.name, tuple(sorted(opts.items())))


def format_value(value: object) -> str:
    """Render an option value the way a person would type it in a spec."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_spec(text: str) -> UnitSpec:
    """Parse `name[key=value,...]`. Options are kept sorted so equal units print equally."""
    if not isinstance(text, str) or not text.strip():
        raise UnitSpecError(f"empty unit spec {text!r}: expected e.g. 'gru' or 'tpru[roles=32]'")
    match = _SPEC_RE.match(text)
    if not match:
        raise UnitSpecError(
            f"cannot parse unit spec {text!r}: expected NAME or NAME[key=value,...] (NAME may be an import path package.module:Class)"
        )
    opts: dict[str, str] = {}
    raw = match.group("opts")
    if raw is not None and raw.strip():
        for part in raw.split(","):
            if "=" not in part:
                raise UnitSpecError(f"unit spec {text!r}: option {part.strip()!r} is not key=value")
            key, value = (s.strip() for s in part.split("=", 1))
            if not _KEY_RE.match(key):
                raise UnitSpecError(f"unit spec {text!r}: bad option name {key!r}")
            if not value:
                raise UnitSpecError(f"unit spec {text!r}: option {key!r} has no value")
            if key in opts:
                raise UnitSpecError(f"unit spec {text!r}: option {key!r} given twice")
            opts[key] = value
    return UnitSpec(match.group("name"), tuple(sorted(opts.items())))


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob in which only `*` and `?` are wildcards and everything else is literal, whole-string:
    unit specs contain brackets, so fnmatch's `[...]` classes would misread `tpru[roles=8]`."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern) + r"\Z")


def spec_pattern(pattern: str) -> re.Pattern[str]:
    """The one rule by which a pattern selects unit specs (`--only unit=`, a study task's `units`,
    a paper claim's `unit`): a `glob_regex`, and a pattern without wildcards that parses as a spec
    is first written as specs are everywhere else (options sorted), so that
    `lstm[layers=1,bidirectional=true]` selects `lstm[bidirectional=true,layers=1]`."""
    pattern = pattern.strip()
    if "*" not in pattern and "?" not in pattern:
        try:
            pattern = str(parse_spec(pattern))
        except UnitSpecError:
            pass  # not a spec: matched as written (it then selects nothing, which callers report)
    return glob_regex(pattern)
