"""The Helm chart in deploy/helm/podium, rendered offline by Helm's own Go SDK
(helm-python-sdk binds libhelm_c, Helm v4's engine: the same templates, Sprig functions
and values.schema.json check as `helm template`)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

__all__ = (
    "CHART",
    "KEDA_SCHEMA",
    "NAMESPACE",
    "REPO",
    "Rendered",
    "container",
    "helm",
    "merged",
    "pod_specs",
    "render",
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "podium"
KEDA_SCHEMA: dict[str, Any] = json.loads((Path(__file__).parent / "keda_schema.json").read_text())
RELEASE = "rel"
NAMESPACE = "apps"

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) renders charts")


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base`` as Helm merges -f files (maps deep, the rest replaced)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class Rendered:
    """Every object one ``helm template`` of the chart gives, by kind and name."""

    def __init__(self, manifests: Mapping[str, str]) -> None:
        self.notes = ""
        self.objects: list[dict[str, Any]] = []
        for path, text in sorted(manifests.items()):
            if path.endswith("NOTES.txt"):
                self.notes = text
                continue
            self.objects.extend(doc for doc in yaml.safe_load_all(text) if doc)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        [found] = [o for o in self.of(kind) if o["metadata"]["name"] == name]
        return found


def render(values: Mapping[str, Any]) -> Rendered:
    """The chart rendered with ``values`` over its defaults (HelmRenderError or
    HelmValuesError when a template's ``fail`` or the schema refuses them)."""
    with helm.Chart.load(str(CHART)) as chart:
        return Rendered(chart.render(dict(values), name=RELEASE, namespace=NAMESPACE))


def pod_specs(rendered: Rendered) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(Deployment, its pod spec) for every Deployment."""
    for deployment in rendered.of("Deployment"):
        yield deployment, deployment["spec"]["template"]["spec"]


def container(deployment: Mapping[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)
