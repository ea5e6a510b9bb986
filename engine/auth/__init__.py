"""Authority material: the token format, its CBOR profile and MACs, keys and sealing.

The token, CBOR, MAC and sealing-format modules are pure (bytes, keys and ``now``
in; a value or an error out); the key modules read and write the keyring under
the chit home. Formats: docs/token-format.md, docs/cbor-profile.md, docs/sealing.md.
"""

__all__: list[str] = []
