"""``python -m nsysdiag``."""

from .cli.main import run

run()
