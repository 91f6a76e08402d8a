"""A storage outage makes a service wait (RetryableError), anything else passes through."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shared.errors import RetryableError, storage_unavailable, waiting_for_storage

pytestmark = pytest.mark.unit


class Py4JJavaError(Exception):
    """Stands in for py4j's error of the same name, which needs a JVM to print itself."""


def _raising(exc: Exception) -> Callable[[], None]:
    def step() -> None:
        raise exc

    return step


def test_pyarrow_and_jvm_storage_failures_are_outages() -> None:
    curl = OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7")
    assert storage_unavailable(curl)
    sdk = Py4JJavaError(
        "An error occurred while calling o41.commit.\n: software.amazon.awssdk.core.exception"
        ".SdkClientException: Unable to execute HTTP request: Connection refused"
    )
    assert storage_unavailable(sdk)
    assert not storage_unavailable(Py4JJavaError("ValidationException: Cannot commit"))
    assert not storage_unavailable(ValueError("a column the table lacks"))


def test_the_wrapped_step_raises_an_outage_as_retryable_and_the_rest_as_it_is() -> None:
    with pytest.raises(RetryableError, match=r"storage unavailable: .*curlCode"):
        waiting_for_storage(_raising(OSError("curlCode: 7")))()
    with pytest.raises(KeyError):
        waiting_for_storage(_raising(KeyError("x")))()
    already = RetryableError("broker down")
    with pytest.raises(RetryableError) as caught:
        waiting_for_storage(_raising(already))()
    assert caught.value is already
    assert waiting_for_storage(lambda: 42)() == 42
