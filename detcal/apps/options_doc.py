"""docs/options.md: every config option of every command with its default, written from the dataclasses.

The defaults and the one-line descriptions (the comment beside each field) are read from the specs
themselves, so the page cannot drift from them (a test compares the page with :func:`options_markdown`).
Regenerate it with ``python -m detcal.apps.options_doc > docs/options.md``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import textwrap
import tokenize
from typing import Any

import yaml

from detcal.apps import calibrate, compare, evaluate, levi_synthetic, main, study
from detcal.core.config import REQUIRED
from detcal.data.specs import DATA_SPECS, DataSpec
from detcal.pipeline.registry import config_dir

__all__ = ["field_comments", "options_markdown"]

APPS = (evaluate, calibrate, compare, study, main, levi_synthetic)

INTRO = """# Every option and its default

Each command's configuration is one typed schema (dataclasses of `detcal.pipeline.spec`,
`detcal.data.specs`, `detcal.training.spec`, `detcal.apps.schema`). Every option is declared
there once, with its default and the comment this page shows; the YAML files under `configs/`
hold only the values that differ from these defaults, the defaults lists (which option of each
config group a command starts from) and the comments of each option file (a test keeps them so).
A config group option (`data=kitti`, `matching=voc`, `model=rfcn_r101`) sets a few of these
values; `<command> --cfg job` prints the whole resolved configuration of a command line, and
every metrics.json records it under `config`.

This page is written from the dataclasses (`detcal.apps.options_doc`; a test compares them).
"""


def field_comments(cls: type) -> dict[str, str]:
    """The comment beside each field's declaration in the source of ``cls`` (and its dataclass bases), or
    the comment lines just above it when the line would be too long."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        src = textwrap.dedent(inspect.getsource(klass))
        comments = {
            t.start[0]: t.string.lstrip("#").strip()
            for t in tokenize.generate_tokens(io.StringIO(src).readline)
            if t.type == tokenize.COMMENT
        }
        body = ast.parse(src).body[0]
        assert isinstance(body, ast.ClassDef)
        for node in body.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                text = comments.get(node.end_lineno or node.lineno)
                above: list[str] = []
                line = node.lineno - 1
                while line in comments and src.splitlines()[line - 1].lstrip().startswith("#"):
                    above.insert(0, comments[line])
                    line -= 1
                if text or above:
                    out[node.target.id] = text or " ".join(above)
    return out


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED


def _spec_type(value: Any) -> type | None:
    return type(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else None


def _changed(value: Any) -> dict[str, Any]:
    """The fields of the dataclass instance ``value`` that differ from its class's defaults."""
    out = {}
    for f in dataclasses.fields(value):
        d = _default(f)
        if not dataclasses.is_dataclass(d) and getattr(value, f.name) != d:
            out[f.name] = getattr(value, f.name)
    return out


def _doc(cls: type) -> str:
    return " ".join((inspect.getdoc(cls) or "").split())


class _Page:
    """The page under construction: one section per app, one per spec class (written once)."""

    def __init__(self) -> None:
        self.apps: list[str] = []
        self.specs: list[str] = []
        self.anchor: dict[type, str] = {}

    def spec_link(self, key: str, cls: type) -> str:
        if cls not in self.anchor:
            name = key.rsplit(".", 1)[-1]
            self.anchor[cls] = name if name not in self.anchor.values() else f"{name}-{cls.__name__.lower()}"
            self.specs.append(self.spec_section(self.anchor[cls], cls))
        return f"[{cls.__name__}](#{self.anchor[cls]})"

    def rows(self, cls: type, prefix: str = "") -> list[str]:
        notes = field_comments(cls)
        out = []
        for f in dataclasses.fields(cls):
            d = _default(f)
            sub = _spec_type(d)
            if sub is not None:
                link = self.spec_link(f.name, sub)
                ch = _changed(d)
                note = f"{link}" + (f" with {', '.join(f'{k}={_value(v)}' for k, v in ch.items())}" if ch else "")
                out.append(f"| `{prefix}{f.name}.*` | | {note} |")
            elif f.name == "data" and d is REQUIRED:
                out.append(f"| `{prefix}data.*` | | the data group's spec class: [data](#data) |")
            else:
                out.append(f"| `{prefix}{f.name}` | `{_value(d)}` | {_cell(notes.get(f.name, ''))} |")
        return out

    def spec_section(self, key: str, cls: type) -> str:
        head = f"### {key}\n\n`{cls.__module__}.{cls.__name__}`: {_doc(cls)}\n\n"
        return head + "| key | default | meaning |\n|---|---|---|\n" + "\n".join(self.rows(cls)) + "\n"

    def app_section(self, app: Any) -> str:
        schema = app.SCHEMA
        head = f"## {app.PROG}\n\n`configs/{app.CONFIG_NAME}.yaml`, schema `{schema.__module__}.{schema.__name__}`.\n\n"
        groups, values = _primary_yaml(app.CONFIG_NAME)
        if groups:
            head += f"Config groups it starts from: {', '.join(f'`{g}`' for g in groups)}.\n\n"
        if values:
            head += f"Values its YAML file sets: {', '.join(f'`{k}={_value(v)}`' for k, v in values)}.\n\n"
        rows = self.rows(schema)
        return head + "| key | default | meaning |\n|---|---|---|\n" + "\n".join(rows) + "\n"


def _leaves(node: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in node.items():
        out += _leaves(v, f"{prefix}{k}.") if isinstance(v, dict) and v else [(f"{prefix}{k}", v)]
    return out


def _primary_yaml(name: str) -> tuple[list[str], list[tuple[str, Any]]]:
    """The defaults list (``group=option``, the schema and ``_self_`` left out) and the values of
    ``configs/<name>.yaml`` (Hydra's own node left out)."""
    data = yaml.safe_load((config_dir() / f"{name}.yaml").read_text()) or {}
    groups = []
    for entry in data.pop("defaults", []):
        if isinstance(entry, dict):
            ((k, v),) = entry.items()
            groups.append(f"{k}={_value(v)}")
    data.pop("hydra", None)
    return groups, _leaves(data)


def _data_section() -> str:
    base = {f.name for f in dataclasses.fields(DataSpec)}
    notes = field_comments(DataSpec)
    out = [
        "### data\n",
        "`data=<name>` picks the source and its spec class (`detcal.data.specs`); a field of another source "
        "is refused with its name. Fields every source has:\n",
        "| key | default | meaning |\n|---|---|---|",
    ]
    out += [
        f"| `{f.name}` | `{_value(_default(f))}` | {_cell(notes.get(f.name, ''))} |"
        for f in dataclasses.fields(DataSpec)
        if f.name != "source"
    ]
    for source, cls in DATA_SPECS.items():
        notes = field_comments(cls)
        out.append(f"\n#### data={source}\n\n`{cls.__module__}.{cls.__name__}`: {_doc(cls)}\n")
        out.append("| key | default | meaning |\n|---|---|---|")
        for f in dataclasses.fields(cls):
            if f.name not in base:
                out.append(f"| `{f.name}` | `{_value(_default(f))}` | {_cell(notes.get(f.name, ''))} |")
    return "\n".join(out) + "\n"


def options_markdown() -> str:
    """The text of docs/options.md."""
    page = _Page()
    apps = [page.app_section(app) for app in APPS]
    toc = "\n".join(f"- [{app.PROG}](#{re.sub(r'[^a-z0-9-]', '', app.PROG)})" for app in APPS)
    parts = [INTRO, toc + "\n- [the sections they share](#sections)\n", *apps, "## Sections\n", _data_section()]
    return "\n".join([*parts, *page.specs]).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(options_markdown(), end="")
