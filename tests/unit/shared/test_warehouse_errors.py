"""A warehouse outage (object store or catalog database) makes a service wait, the rest passes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shared.errors import RetryableError, waiting_for_warehouse, warehouse_unavailable

pytestmark = pytest.mark.unit


class Py4JJavaError(Exception):
    """Stands in for py4j's error of the same name, which needs a JVM to print itself."""


def _raising(exc: Exception) -> Callable[[], None]:
    def step() -> None:
        raise exc

    return step


def test_pyarrow_and_jvm_storage_failures_are_outages() -> None:
    curl = OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7")
    assert warehouse_unavailable(curl)
    sdk = Py4JJavaError(
        "An error occurred while calling o41.commit.\n: software.amazon.awssdk.core.exception"
        ".SdkClientException: Unable to execute HTTP request: Connection refused"
    )
    assert warehouse_unavailable(sdk)
    jdbc = Py4JJavaError(
        "org.apache.iceberg.jdbc.UncheckedSQLException: Failed to execute exists query\n"
        "Caused by: org.postgresql.util.PSQLException: FATAL: terminating connection"
    )
    assert warehouse_unavailable(jdbc)
    assert not warehouse_unavailable(Py4JJavaError("ValidationException: Cannot commit"))
    assert not warehouse_unavailable(ValueError("a column the table lacks"))


def test_the_wrapped_step_raises_an_outage_as_retryable_and_the_rest_as_it_is() -> None:
    with pytest.raises(RetryableError, match=r"warehouse unavailable: .*curlCode"):
        waiting_for_warehouse(_raising(OSError("curlCode: 7")))()
    with pytest.raises(KeyError):
        waiting_for_warehouse(_raising(KeyError("x")))()
    already = RetryableError("broker down")
    with pytest.raises(RetryableError) as caught:
        waiting_for_warehouse(_raising(already))()
    assert caught.value is already
    assert waiting_for_warehouse(lambda: 42)() == 42
