"""One long-lived SparkSession per service, with Iceberg and the shared catalog configured."""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from py4j.java_gateway import JavaPackage
from pydantic import BaseModel, Field
from pyspark.sql import SparkSession

from shared.catalog import catalog_properties, is_secret, open_catalog, spark_catalog_conf
from shared.settings import CatalogSettings

log = logging.getLogger(__name__)

_LOCAL_JARS = str(Path.home() / ".cache" / "icefjord" / "dist" / "spark-jars-1.12.0" / "*.jar")


class SparkSettings(BaseModel):
    """Spark master, memory and the extra jars (Iceberg runtime, JDBC driver)."""

    master: str = "local[*]"
    driver_memory: str = "2g"
    shuffle_partitions: int = 4
    java_options: str = Field(
        default="-XX:+UseParallelGC",
        description="The driver's and executors' JVM options before any extraJavaOptions "
        "(spark.*.defaultJavaOptions). The throughput collector: a service's JVM does batch "
        "work, where G1's concurrent marking and write barriers cost CPU and its short "
        "pauses buy nothing.",
    )
    jars: str = Field(
        default=_LOCAL_JARS,
        description="Glob of jars to add; empty when the image has them in SPARK_HOME/jars.",
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings.")


def build_spark_session(
    app_name: str, spark: SparkSettings, catalog: CatalogSettings
) -> SparkSession:
    """Create (or return the running) SparkSession with the Iceberg catalog ``catalog.name``."""
    jars = spark_jars(spark)
    if spark.master.startswith("local"):
        # One machine: bind the driver to loopback rather than warn on every start that the
        # hostname resolves there. Executors elsewhere (Kubernetes) need the real address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(spark.master)
        .config("spark.driver.memory", spark.driver_memory)
        .config("spark.sql.shuffle.partitions", str(spark.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
    )
    properties = catalog_properties(catalog)
    if properties.get("type") == "sql":
        open_catalog(catalog)  # creates the JDBC catalog's tables if they are missing
    conf = dict(spark.conf)
    if jars and spark.master.startswith("local"):
        # One JVM: the jars go on its class path. As `spark.jars`, the in-process executor
        # would copy every one (127 MB) into a temporary directory at each start, and leave
        # the copies behind whenever the JVM is killed.
        extra = conf.get("spark.driver.extraClassPath")
        conf["spark.driver.extraClassPath"] = os.pathsep.join([*([extra] if extra else []), *jars])
    elif jars:
        builder = builder.config("spark.jars", ",".join(jars))
    catalog_conf = spark_catalog_conf(catalog.name, properties)
    # pyspark starts its JVM with every builder setting as a `--conf` argument, readable by
    # anyone in /proc/<pid>/cmdline: secrets are set on the session once it runs instead
    # (a catalog reads its settings when first used).
    secrets = {k: v for k, v in catalog_conf.items() if is_secret(k)}
    for key, value in catalog_conf.items():
        if key not in secrets:
            builder = builder.config(key, value)
    if spark.java_options:
        builder = builder.config("spark.driver.defaultJavaOptions", spark.java_options)
        builder = builder.config("spark.executor.defaultJavaOptions", spark.java_options)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    for key, value in secrets.items():
        session.conf.set(key, value)
    session.sparkContext.setLogLevel("WARN")
    log.info("spark session ready", extra={"master": spark.master, "catalog": catalog.name})
    return session


def spark_jars(spark: SparkSettings) -> list[str]:
    """The jars ``spark.jars`` names; FileNotFoundError when its pattern matches none (a
    check a service can make at start without starting the JVM)."""
    jars = sorted(glob.glob(spark.jars)) if spark.jars else []
    if spark.jars and not jars:
        raise FileNotFoundError(
            f"no Spark jars match {spark.jars}; run `icefjord local up` to fetch them"
        )
    return jars


class LazySparkSession:
    """A SparkSession started on first use, standing in for it: attributes are the
    session's. For a service that may go a long time without a Spark job (the maintainer
    until its first action): an unused JVM costs seconds of CPU to start and its heap.
    """

    def __init__(self, build: Callable[[], SparkSession]) -> None:
        self._build = build
        self._session: SparkSession | None = None
        self._starting = threading.Lock()

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self) -> SparkSession:
        """The session, started now if it was not yet (by one thread: another one asking
        meanwhile waits for it); raises what starting it raises."""
        if self._session is None:
            with self._starting:
                if self._session is None:
                    self._session = self._build()
        return self._session

    def stop(self) -> None:
        """Stop the session if it was started."""
        if self._session is not None:
            self._session.stop()
            self._session = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session(), name)


@contextmanager
def scratch_catalog(spark: SparkSession, name: str, parent: str | None = None) -> Iterator[str]:
    """An Iceberg catalog ``name`` for this session only (Hadoop, in a fresh temporary
    directory under ``parent``), for throwaway tables such as a JVM warm-up's: the real
    catalog never sees them. Yields ``name``; the directory is deleted after."""
    warehouse = tempfile.mkdtemp(prefix="scratch-", dir=parent)
    spark.conf.set(f"spark.sql.catalog.{name}", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set(f"spark.sql.catalog.{name}.type", "hadoop")
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", f"file://{warehouse}")
    try:
        yield name
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


class _Names:
    """A py4j package (or the JVM view) whose members, once looked up, are kept: each hop of
    ``jvm.org.apache.iceberg.FileMetadata`` is a round trip to the JVM (about 1 ms of wall
    time and 0.15 ms of Python CPU each on this machine), and a commit takes dozens of them."""

    def __init__(self, names: Any) -> None:
        self._names = names

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._names, name)
        if isinstance(member, JavaPackage):
            member = _Names(member)
        self.__dict__[name] = member  # found without __getattr__ from now on
        return member


_VIEWS: weakref.WeakKeyDictionary[Any, _Names] = weakref.WeakKeyDictionary()


def java(jvm: Any) -> Any:
    """``jvm`` (a py4j JVM view: ``spark.sparkContext._jvm``) with its packages and classes
    kept once looked up: ``java(jvm).org.apache.iceberg.DataFiles`` costs the round trips
    once per JVM. Methods and fields are looked up on each use, as py4j does."""
    view = _VIEWS.get(jvm)
    if view is None:
        view = _VIEWS[jvm] = _Names(jvm)
    return view
