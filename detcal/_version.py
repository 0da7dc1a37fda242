"""The package version (one place; pyproject.toml reads it, metrics.json records it)."""

__version__ = "0.2.0"
