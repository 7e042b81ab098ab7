"""Every page mlrunway writes (the sweep report, a model card, a monitoring report) or its UI plugin serves,
rendered from Jinja2 templates with autoescaping on: whatever a user, a job or a request set is escaped by the
template, not by each renderer. One layout (``templates/layout.html``: the page's policy, title, refresh and
stylesheet) and one stylesheet (``style.css``, inlined: a saved page stands alone).

A page's template extends the layout (a plugin page: ``plugin.html``, the layout with the way back) and fills its
block; :func:`render` gives it its values.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined

__all__ = ["CSP", "render"]

# What a page of mlrunway may load and run: no script at all (a value that slipped its escaping stays inert), its own
# inline style, pictures inline; nothing else. The plugin sends it as a header too (mlrunway.airflow.ui).
CSP = ("default-src 'none'; script-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; form-action 'none'")


@functools.cache
def _environment() -> Environment:
    environment = Environment(loader=PackageLoader("mlrunway.pages"), autoescape=True, undefined=StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False)
    environment.globals.update(csp=CSP, css=resources.files(__package__).joinpath("style.css").read_text().strip())
    environment.filters["segment"] = lambda value: quote(str(value), safe="")  # one URL path segment, "/" too
    return environment


def render(template: str, **values: Any) -> str:
    """The page ``template`` (a file of ``templates/``) with ``values``; ``title`` and ``refresh_s`` (None: no
    refresh) go to the layout."""
    return _environment().get_template(template).render(**{"refresh_s": None, **values})
