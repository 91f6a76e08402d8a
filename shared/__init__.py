"""Code the four services and the CLI share."""

import contextlib
import warnings

# confluent-kafka's schema-registry client imports authlib's httpx integration, which warns on
# every start that authlib renamed it: nothing for users to act on. authlib turns its own
# warnings on when imported, so the filter goes in after that import.
with contextlib.suppress(ImportError):  # authlib comes with confluent-kafka[schemaregistry]
    import authlib.deprecate  # type: ignore[import-untyped]  # noqa: F401
warnings.filterwarnings("ignore", message="The httpx module is deprecated", category=Warning)
