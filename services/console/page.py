"""The console's one page, ``static/index.html``: a static document whose script reads
``/api/tables`` every two seconds and renders every table with its freshness, health badge
and history. No asset from elsewhere; values are set as text, never as markup."""

from __future__ import annotations

from importlib.resources import files

__all__ = ["page"]


def page() -> str:
    """The page's HTML (read from the package, so an installed wheel serves it too)."""
    return files("services.console").joinpath("static/index.html").read_text(encoding="utf-8")
