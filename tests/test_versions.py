"""One version for the whole project: pyproject.toml's. The Helm chart's version and appVersion
(the default tag of every image it runs), the packages' __version__ and the default image tags
the operator and the Spark jobs fall back to all say the same, so a release bumps them together."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

import ferrymq

ROOT = Path(__file__).resolve().parent.parent


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_every_chart_has_the_project_version_as_version_and_app_version():
    charts = sorted((ROOT / "charts").glob("*/Chart.yaml"))
    assert charts, "no chart under charts/"
    for chart in charts:
        meta = yaml.safe_load(chart.read_text())
        assert (str(meta["version"]), str(meta["appVersion"])) == (project_version(), project_version()), chart


def test_the_packages_and_default_images_carry_the_project_version():
    version = project_version()
    assert ferrymq.__version__ == version
    sources = {
        "operator/ferrymq_operator/__init__.py": f'__version__ = "{version}"',
        "operator/ferrymq_operator/constants.py": f'DEFAULT_BROKER_IMAGE = "ferrymq/broker:{version}"',
        "spark-jobs/ferrymq_spark/k8s_cronjob.py": f'DEFAULT_IMAGE = "ferrymq/spark:{version}"',
    }
    for path, line in sources.items():
        assert line in (ROOT / path).read_text().splitlines(), f"{path} does not say {line}"
