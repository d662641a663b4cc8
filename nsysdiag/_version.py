"""The package version, in a module of its own so that any layer can read it without
importing the package's top level (which reaches up to the report and the diagnosis)."""

__version__ = "0.1.0"
