"""The configuration reference, read from the typed config itself (`binac_core.foundation.config`): every field of every
section with its value, its default and its docstring. `binac config` prints it for a preset (with overrides),
`binac train --help-config` too, and `docs/config.md` is this module's Markdown for the defaults (a test keeps the
file equal to it). It states nothing a field's docstring does not."""

from __future__ import annotations

import textwrap

from binac_core.foundation.config import RENAMED, Config
from binac_core.foundation.config import _sections as sections


def rows(cfg: Config | None = None) -> list[tuple[str, str, str, str, str]]:
    """(section, field, value, default, docstring) for every field, in the config's order; `value` is the field's
    value in `cfg` (the default without one)."""
    out = []
    for section, kind in sections().items():
        current = getattr(cfg, section) if cfg is not None else None
        for name, field in kind.model_fields.items():
            default = _text(field.default)
            value = _text(getattr(current, name)) if current is not None else default
            out.append((section, name, value, default, " ".join((field.description or "").split())))
    return out


def _text(value) -> str:
    if isinstance(value, tuple | list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def terminal(cfg: Config) -> str:
    """The reference as plain text: per section, one block per field (`section.field = value`, the default when
    it differs, then the docstring, indented)."""
    lines, last = [f"config of preset {cfg.name!r} (value, default where it differs, what it does)"], None
    for section, name, value, default, doc in rows(cfg):
        if section != last:
            lines += ["", f"[{section}]  {_section_doc(section)}"]
            last = section
        changed = f"   (default {default})" if value != default else ""
        lines += [
            f"  {section}.{name} = {value}{changed}",
            *textwrap.wrap(doc, 112, initial_indent="      ", subsequent_indent="      "),
        ]
    return "\n".join(lines) + "\n"


def markdown() -> str:
    """The reference of the defaults as a Markdown page: one table per section (field, default, what it does)."""
    lines = [
        "# Configuration reference",
        "",
        "Every field of the typed config (`binac_core/foundation/config.py`), its default and its docstring, generated "
        "by `binac config --markdown` (`binac_core/foundation/config_reference.py`); a test keeps this page equal to "
        "the source. A preset (`binac_core/presets/*.yaml`) sets some of them; `--set section.field=value` "
        "overrides any; `binac config --preset P` prints a preset's values.",
    ]
    last = None
    for section, name, _, default, doc in rows():
        if section != last:
            lines += [
                "",
                f"## `{section}`",
                "",
                _section_doc(section),
                "",
                "| field | default | what it does |",
                "| --- | --- | --- |",
            ]
            last = section
        escaped = doc.replace("|", "\\|")
        lines.append(f"| `{section}.{name}` | `{default}` | {escaped} |")
    if RENAMED:
        lines += [
            "",
            "## Deprecated names",
            "",
            "Read as the field they name, with a deprecation line on stderr "
            "(`RENAMED` in `binac_core/foundation/config.py`).",
            "",
            "| name | read as |",
            "| --- | --- |",
        ]
        lines += [f"| `{old}` | `{new}` |" for old, (new, _) in RENAMED.items()]
    return "\n".join(lines) + "\n"


def _section_doc(section: str) -> str:
    return " ".join((Config.model_fields[section].description or "").split())
