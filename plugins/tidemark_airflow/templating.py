"""The tidemark page's templates (``templates/``): Jinja2, which Airflow ships, with autoescape on, so a
value from the database or a user is escaped wherever it lands. :func:`render` renders one."""

from __future__ import annotations

from functools import cache
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


@cache
def environment():  # -> jinja2.Environment
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a name the template needs and the caller forgot is an error
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = lambda n, digits=0: f"{n or 0:,.{digits}f}"
    env.filters["minutes"] = lambda seconds: f"{(seconds or 0) / 60:,.1f}"
    env.filters["at"] = lambda when, form="%Y-%m-%d %H:%M": f"{when:{form}}"
    return env


def render(name: str, **context) -> str:
    """The template ``name`` rendered with ``context``: HTML, safe to put in a page as it is."""
    from markupsafe import Markup

    return Markup(environment().get_template(name).render(**context))
