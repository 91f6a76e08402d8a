"""The shell scripts the images and the compose stack run, exercised with stand-in programs:
the Spark image entry point (service, executor and command modes) and the connector job."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
ENTRYPOINT = ROOT / "deploy" / "docker" / "spark-entrypoint.sh"
REGISTER = ROOT / "deploy" / "compose" / "register-connector.sh"


def stand_in(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)
    return path


def echo_args(path: Path) -> Path:
    """A program that prints each argument on its own line."""
    return stand_in(path, 'printf "%s\\n" "$0" "$@"\n')


EXECUTOR_ENV = {
    "SPARK_EXECUTOR_MEMORY": "3g",
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.0.0.5:7078",
    "SPARK_EXECUTOR_ID": "4",
    "SPARK_EXECUTOR_CORES": "2",
    "SPARK_APPLICATION_ID": "spark-application-1",
    "SPARK_EXECUTOR_POD_IP": "10.0.0.9",
    "SPARK_EXECUTOR_POD_NAME": "icefjord-writer-exec-4",
    "SPARK_RESOURCE_PROFILE_ID": "0",
}


def run_entrypoint(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    echo_args(bin_dir / "python")
    echo_args(tmp_path / "java" / "bin" / "java")
    base = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "JAVA_HOME": str(tmp_path / "java"),
        "SPARK_HOME": "/opt/spark",
    }
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_no_arguments_runs_the_service_module(tmp_path: Path) -> None:
    result = run_entrypoint(tmp_path, [], {"ICEFJORD_SERVICE_MODULE": "services.iceberg_writer"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == ["-m", "services.iceberg_writer"]


def test_executor_runs_sparks_backend_with_the_java_options_in_order(tmp_path: Path) -> None:
    # Twelve options, set out of order: 10 and 11 must follow 9 (numeric, not text, order).
    options = {
        f"SPARK_JAVA_OPT_{i}": f"-Dspark.option{i}=value {i}"
        for i in (11, 3, 0, 10, 1, 2, 4, 5, 6, 7, 8, 9)
    }
    result = run_entrypoint(
        tmp_path, ["executor"], {**EXECUTOR_ENV, **options, "SPARK_CLASSPATH": "/extra/*"}
    )
    assert result.returncode == 0, result.stderr
    args = result.stdout.splitlines()
    assert args[0].endswith("/java/bin/java")
    assert args[1:13] == [f"-Dspark.option{i}=value {i}" for i in range(12)]
    assert args[13:17] == ["-Xms3g", "-Xmx3g", "-cp", "/extra/*:/opt/spark/jars/*"]
    assert args[17] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    flags = dict(zip(args[18::2], args[19::2], strict=True))
    assert flags == {
        "--driver-url": EXECUTOR_ENV["SPARK_DRIVER_URL"],
        "--executor-id": "4",
        "--cores": "2",
        "--app-id": "spark-application-1",
        "--hostname": "10.0.0.9",
        "--resourceProfileId": "0",
        "--podName": "icefjord-writer-exec-4",
    }


def test_executor_without_its_environment_fails_naming_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in EXECUTOR_ENV.items() if k != "SPARK_DRIVER_URL"}
    result = run_entrypoint(tmp_path, ["executor"], env)
    assert result.returncode != 0
    assert "SPARK_DRIVER_URL" in result.stderr


def test_any_other_command_runs_as_given(tmp_path: Path) -> None:
    result = run_entrypoint(tmp_path, ["python", "-c", "pass"], {})
    assert result.returncode == 0
    assert result.stdout.splitlines()[1:] == ["-c", "pass"]


def fake_curl(tmp_path: Path, statuses: list[dict[str, object]], put_failures: int = 0) -> Path:
    """A curl that fails the first PUTs, then answers GET status with ``statuses`` in turn
    (the last one repeats), and logs every call."""
    state = tmp_path / "state"
    state.mkdir()
    for i, status in enumerate(statuses):
        (state / f"status{i}.json").write_text(json.dumps(status, separators=(",", ":")))
    (state / "puts").write_text("0")
    (state / "gets").write_text("0")
    script = f"""
state={state}
echo "$*" >> "$state/calls"
if [[ " $* " == *" -X PUT "* ]]; then
  n=$(( $(cat "$state/puts") + 1 )); echo "$n" > "$state/puts"
  (( n > {put_failures} )) || exit 7
  exit 0
fi
n=$(cat "$state/gets"); echo $(( n + 1 )) > "$state/gets"
last=$(( {len(statuses)} - 1 )); (( n <= last )) || n=$last
cat "$state/status$n.json"
"""
    return stand_in(tmp_path / "bin" / "curl", script)


def run_register(tmp_path: Path, wait: int = 10) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "connector.json"
    config.write_text('{"connector.class": "x"}')
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "CONNECT_URL": "http://connect:8083",
        "CONNECTOR_NAME": "icefjord-postgres",
        "CONNECTOR_CONFIG": str(config),
        "WAIT_SECONDS": str(wait),
        "POLL_SECONDS": "0.05",
    }
    return subprocess.run(
        ["bash", str(REGISTER)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


RUNNING_NO_TASKS = {"name": "icefjord-postgres", "connector": {"state": "RUNNING"}, "tasks": []}
RUNNING = {
    "name": "icefjord-postgres",
    "connector": {"state": "RUNNING"},
    "tasks": [{"id": 0, "state": "RUNNING"}],
}
TASK_FAILED = {
    "name": "icefjord-postgres",
    "connector": {"state": "RUNNING"},
    "tasks": [{"id": 0, "state": "FAILED", "trace": "boom"}],
}


def test_register_retries_the_put_and_waits_for_a_running_task(tmp_path: Path) -> None:
    fake_curl(tmp_path, [RUNNING_NO_TASKS, RUNNING_NO_TASKS, RUNNING], put_failures=2)
    result = run_register(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "connector icefjord-postgres: config applied",
        "connector icefjord-postgres: RUNNING",
    ]
    calls = (tmp_path / "state" / "calls").read_text().splitlines()
    assert sum(" -X PUT " in f" {c} " for c in calls) == 3
    assert calls[-1].endswith("http://connect:8083/connectors/icefjord-postgres/status")
    assert "--data @" + str(tmp_path / "connector.json") in calls[0]


def test_register_fails_when_a_task_fails(tmp_path: Path) -> None:
    fake_curl(tmp_path, [TASK_FAILED])
    result = run_register(tmp_path)
    assert result.returncode == 1
    assert "connector icefjord-postgres: FAILED" in result.stderr


def test_register_gives_up_after_the_wait(tmp_path: Path) -> None:
    fake_curl(tmp_path, [RUNNING_NO_TASKS])
    result = run_register(tmp_path, wait=3)
    assert result.returncode == 1
    assert "not RUNNING after 3 s" in result.stderr
    assert int((tmp_path / "state" / "gets").read_text()) >= 2  # it kept polling
