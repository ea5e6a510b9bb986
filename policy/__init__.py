"""Declarative organisation policy: frozen data from TOML, pure evaluation."""

__all__: list[str] = []
