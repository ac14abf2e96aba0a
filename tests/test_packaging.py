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
