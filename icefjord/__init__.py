"""The icefjord command line and the local stack."""

import shared  # noqa: F401  (first: its warning filter must precede the registry client)
