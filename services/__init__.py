"""The four Icefjord services."""

import shared  # noqa: F401  (first: its warning filter must precede the registry client)
