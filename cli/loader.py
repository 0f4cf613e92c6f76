"""Load `module:attribute` into an App, with one-line errors that say what to do."""

from __future__ import annotations

import importlib
import os
import sys

from engine import App


class LoadError(Exception):
    """The app could not be loaded; the message is meant for the user as it is."""


def load_app(spec: str) -> App:
    module_name, _sep, attribute = spec.partition(":")
    if not module_name:
        raise LoadError(f"-A {spec!r}: give the app as module:attribute, e.g. -A examples.wordcount:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise LoadError(
                f"no module named {module_name!r}; run from the directory that contains it "
                "or check the -A spelling"
            ) from None
        raise
    attribute = attribute or "app"
    app = getattr(module, attribute, None)
    if app is None:
        raise LoadError(f"module {module_name!r} has no attribute {attribute!r}; expected an engine.App")
    if not isinstance(app, App):
        raise LoadError(f"{spec!r} is a {type(app).__name__}, not an engine.App")
    return app
