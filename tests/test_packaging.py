"""Packaging and deployment files a newcomer runs: the docker image pins every dependency
exactly and installs them before the code (a cached layer), and docker compose publishes
its ports on this host only."""

from __future__ import annotations

import pathlib
import re
import tomllib

from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(text).name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "docker" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"not an exact pin: {line}"
            pins[_name(line)] = spec.version
    return pins


def test_the_docker_image_pins_every_dependency_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {_name(dep) for dep in project["dependencies"]} | {"pyspark", "duckdb", "matplotlib"}
    pins = _pins()
    assert needed <= set(pins), f"not pinned in docker/requirements.txt: {needed - set(pins)}"
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    spark = re.search(r"^ARG SPARK_VERSION=(\S+)$", dockerfile, re.M).group(1)
    assert pins["pyspark"] == spark  # pyspark must be the cluster's Spark


def test_the_dockerfile_installs_dependencies_before_copying_the_code():
    lines = (ROOT / "docker" / "Dockerfile").read_text().splitlines()
    first = {
        what: next(i for i, line in enumerate(lines) if re.match(pattern, line))
        for what, pattern in {
            "deps": r"RUN .*pip install .*-r docker/requirements\.txt",
            "code": r"COPY (engine|sources|modules|router|pyproject\.toml)\b",
        }.items()
    }
    assert first["deps"] < first["code"]


def test_compose_publishes_ports_on_localhost_only():
    text = (ROOT / "docker-compose.yml").read_text()
    published = re.findall(r"^\s*ports:\n((?:\s+- .*\n)+)", text, re.M)
    ports = [
        re.match(r'\s+- "?([^"\s]+)', item).group(1)
        for block in published
        for item in block.splitlines()
    ]
    assert len(ports) == 4, ports  # 8080, 7077, 8081, 8765
    assert all(port.startswith("127.0.0.1:") for port in ports), ports


def test_the_image_pins_the_versions_the_tests_run():
    """Where pyproject's ``dev`` extra (the test venv) pins a package exactly, the image
    pins the same version (pyspark above all: the cluster's Spark is the tests' Spark)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dev = {}
    for text in extras["optional-dependencies"]["dev"]:
        req = Requirement(text)
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            dev[_name(text)] = exact[0]
    pins = _pins()
    shared = {name: version for name, version in dev.items() if name in pins}
    assert {"pyspark", "duckdb", "pyarrow", "sqlglot"} <= set(shared)
    assert {name: pins[name] for name in shared} == shared


def test_compose_runs_the_streaming_example_in_both_placements():
    """The compose file parses; each driver's command is a valid examples/streaming.py
    command line, one per placement, against the cluster's master."""
    import importlib.util
    import sys

    import yaml  # the dev extra's PyYAML: a compose file that does not parse fails here

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    spec = importlib.util.spec_from_file_location(
        "compose_example", ROOT / "examples" / "streaming.py"
    )
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example
    try:
        spec.loader.exec_module(example)
        placements = {}
        for name in ("driver", "driver-executors"):
            command = services[name]["command"]
            assert command[:2] == ["python", "examples/streaming.py"]
            args = example.parse_args(command[2:])
            assert args.master == "spark://spark-master:7077"
            placements[args.placement] = args.work
    finally:
        sys.modules.pop(spec.name, None)
    assert set(placements) == {"driver", "executors"}
    assert len(set(placements.values())) == 2  # each its own input/output/checkpoints
