"""The reports' prose lives in Markdown templates (study/templates/); the code computes the numbers and
tables that fill them."""

from __future__ import annotations

from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).parent / "templates"


def render_template(name: str, **values) -> str:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                                     keep_trailing_newline=True, autoescape=False)
    return environment.get_template(name).render(**values).rstrip("\n") + "\n"  # one newline at the end
