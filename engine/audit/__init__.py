"""Provenance records, the offline audit of lanes, the provenance graph and the call log.

What an auditor runs needs no secret and never imports the running service
(docs/audit.md, docs/provenance-format.md).
"""

__all__: list[str] = []
