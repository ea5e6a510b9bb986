"""The extractor's rules, one module per language family, over shared helpers.

``base`` holds the rule table's shape (:class:`~engine.semantic.rules.base.Lang`);
``python``, ``ecmascript`` (JavaScript and TypeScript), ``go``, ``rust`` and
``java`` each define their languages' rules. engine/semantic/extract.py names
the rules of each language; docs/semantic.md, "Languages", says what each finds.
"""

__all__: list[str] = []
