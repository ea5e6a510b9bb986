"""Authority material: the token format, its CBOR profile and MACs, keys and sealing.

The token modules (``token``, ``verify``, ``caveats``, ``agents``, ``_mac``),
``cbor`` and the sealing format are pure (bytes, keys and ``now`` in; a value or
an error out); ``rootkeys``, ``signkeys`` and ``sealkeys`` read and write the
keyring under the chit home (``_keyfiles``); ``issuers`` verifies identity
providers' JWTs for the token exchange. Formats: docs/token-format.md,
docs/cbor-profile.md, docs/sealing.md; the keyring: keys/README.md; the
exchange: docs/exchange.md.
"""

__all__: list[str] = []
