"""The docs tier's fixtures; their tools live in docskit.py (a module of its own name, as
every folder of tests/ has a conftest.py and only one module can be called that)."""

from docskit import checkout, docs

__all__ = ["checkout", "docs"]
