"""Dockerfiles (read, not built here: tests/integration/test_images.py builds and runs them),
the images' locks and the Spark jar pins."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from deploycheck import images
from deploycheck.contract import Contract
from deploycheck.findings import Context

pytestmark = pytest.mark.unit

Edit = Callable[[str, str, str], None]
WRITER = "deploy/docker/iceberg-writer.Dockerfile"
NORMALIZER = "deploy/docker/cdc-normalizer.Dockerfile"


def messages(ctx: Context, contract: Contract) -> list[str]:
    return [str(p) for p in images.check(ctx, contract)]


def test_the_committed_images_pass(ctx: Context, contract: Contract, shellcheck: str) -> None:
    assert messages(ctx, contract) == []


def test_spark_images_carry_java_spark_and_the_iceberg_jars(root: Path) -> None:
    for name in ("iceberg-writer", "maintainer"):
        text = (root / f"deploy/docker/{name}.Dockerfile").read_text()
        assert "eclipse-temurin:17" in text
        assert (
            "COPY --from=jars /jars/ /opt/venv/lib/python3.11/site-packages/pyspark/jars/" in text
        )
        assert f"COPY deploy/docker/requirements/{name}.txt /tmp/requirements.txt" in text
    pom = (root / images.IMAGE_POM).read_text()
    for artifact in (
        "iceberg-spark-runtime-${spark.binary}_${spark.scala.binary}",
        "iceberg-aws-bundle",
        "<artifactId>postgresql</artifactId>",
        "<artifactId>sqlite-jdbc</artifactId>",
    ):
        assert artifact in pom
        lock = (root / images.LOCKS / f"{name}.txt").read_text()
        assert "pyspark==" in lock and "psycopg2-binary==" in lock


def test_images_without_a_jvm_carry_no_spark_and_no_arrow(root: Path) -> None:
    for name in ("cdc-normalizer", "schema-watcher"):
        lock = (root / images.LOCKS / f"{name}.txt").read_text()
        assert "pyspark==" not in lock and "pyarrow==" not in lock and "faust" not in lock


def test_only_the_console_image_carries_faust_and_it_carries_no_spark_nor_iceberg(
    root: Path,
) -> None:
    for name in ("cdc-normalizer", "schema-watcher", "iceberg-writer", "maintainer"):
        assert "faust" not in (root / images.LOCKS / f"{name}.txt").read_text(), name
    lock = (root / images.LOCKS / "console.txt").read_text()
    assert "faust-streaming==" in lock and "aiokafka==" in lock
    assert "pyspark==" not in lock and "pyarrow==" not in lock and "pyiceberg==" not in lock


@pytest.mark.parametrize(
    ("dockerfile", "old", "new", "expected"),
    [
        (
            NORMALIZER,
            "ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm",
            "ARG PYTHON_IMAGE=python:latest",
            "FROM ${PYTHON_IMAGE} (stage ",
        ),
        (
            NORMALIZER,
            "USER 10001:10001",
            "USER root",
            "the final stage must switch to a non-root USER",
        ),
        (NORMALIZER, "EXPOSE 9401", "EXPOSE 8080", "the final stage must EXPOSE 9401"),
        (
            NORMALIZER,
            '"-m", "services.cdc_normalizer"]',
            '"-m", "services.normalizer"]',
            "the final stage must run python -m services.cdc_normalizer",
        ),
        (
            WRITER,
            '    ICEFJORD_WRITER_SPARK__JARS=""\n',
            "\n",
            "the Spark image must set ICEFJORD_WRITER_SPARK__JARS",
        ),
        (
            WRITER,
            "FROM ${MAVEN_IMAGE} AS jars",
            "FROM maven AS jars",
            "FROM maven (stage jars) is not pinned",
        ),
    ],
)
def test_each_dockerfile_rule_catches_its_fault(
    ctx: Context, contract: Contract, edit: Edit, dockerfile: str, old: str, new: str, expected: str
) -> None:
    edit(dockerfile, old, new)
    found = messages(ctx, contract)
    assert found and all(m.startswith(f"{dockerfile}: {expected}") for m in found), found


def test_a_single_stage_dockerfile_is_reported(contract: Contract) -> None:
    text = (
        "FROM python:3.11.13-slim\nUSER 1000\nEXPOSE 9402\n"
        'ENTRYPOINT ["python", "-m", "services.schema_watcher"]\n'
    )
    assert list(images.dockerfile_messages(text, contract.services["schema-watcher"])) == [
        "not multi-stage (build in one stage, run from a slim one)"
    ]


def test_a_pyproject_pin_that_differs_in_a_lock_is_reported(
    ctx: Context, contract: Contract, edit: Edit
) -> None:
    edit("pyproject.toml", '"fastavro==1.13.1"', '"fastavro==1.13.2"')
    assert [str(p) for p in images._lock_problems(ctx, contract)] == [
        f"deploy/docker/requirements/{name}.txt: fastavro is 1.13.1, pyproject.toml pins "
        "1.13.2: run .venv/bin/python deploy/docker/lock.py"
        for name in contract.services
    ]


def test_jar_versions_follow_the_local_stack(ctx: Context, edit: Edit) -> None:
    edit(
        images.IMAGE_POM,
        "<iceberg.version>1.12.0</iceberg.version>",
        "<iceberg.version>1.10.0</iceberg.version>",
    )
    assert [str(p) for p in images._jar_pins(ctx)] == [
        "deploy/docker/spark-jars/pom.xml: iceberg.version is 1.10.0, "
        "deploy/local/pom.xml has 1.12.0"
    ]


def test_shellcheck_findings_name_the_script(ctx: Context, repo: Path, shellcheck: str) -> None:
    script = repo / "deploy/compose/register-connector.sh"
    script.write_text(script.read_text() + "\necho $UNQUOTED_VARIABLE\n")
    found = [str(p) for p in images._shellcheck(ctx)]
    assert len(found) == 1 and found[0].startswith(
        "deploy/compose/register-connector.sh: shellcheck:"
    )
    assert "SC2086" in found[0]


def test_copy_sources_must_exist_and_stay_in_the_build_context(
    ctx: Context, repo: Path, edit: Edit
) -> None:
    ignore = repo / ".dockerignore"
    ignore.write_text(ignore.read_text() + "shared\n")
    edit(NORMALIZER, "COPY icefjord /src/icefjord", "COPY icefjord_cli /src/icefjord")
    found = [str(p) for p in images._context_problems(ctx, repo / NORMALIZER)]
    assert found == [
        f"{NORMALIZER}: COPY shared: .dockerignore drops it",
        f"{NORMALIZER}: COPY icefjord_cli: no such path",
    ]


def test_copy_sources_skip_other_stages() -> None:
    text = (
        "FROM a:1 AS jars\nFROM b:2\nCOPY --from=jars /jars/ /opt/jars/\n"
        "COPY --chmod=0755 deploy/docker/x.sh /usr/local/bin/x\n"
        "COPY pyproject.toml README.md /src/\n"
    )
    assert images.copy_sources(text) == ["deploy/docker/x.sh", "pyproject.toml", "README.md"]
