"""The JSON Schema of ``diagnose --json``, generated from the result classes.

Every object the document holds is a dataclass: the tail (:class:`TailSummary`), the
verdict, the findings, the launch gaps in brief, and each analysis' summary in
``evidence`` (its result class's figures, with their documentation and units). The
schema lists exactly their fields, so a field renamed or removed in a class changes the
schema, and ``tests/test_schema_fields.py`` fails until the shipped file
(``nsysdiag/schema/diagnosis-v1.schema.json``) is regenerated::

    python -m nsysdiag.diagnosis.schema > nsysdiag/schema/diagnosis-v1.schema.json
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from ..analyses import ANALYSES, module
from ..analyses.base import flat_key, record_type
from ..analyses.capture import GpuLink
from ..analyses.ranges import Component, ComponentGrowth
from ..findings import SEVERITIES, Finding
from ..layers import FINDING_LAYERS, VERDICT_LAYERS, Layer
from ..stats.classifier import SHAPES
from .model import (
    SCHEMA,
    GapSummary,
    Mechanism,
    Platform,
    TailSummary,
    Verdict,
)

#: constraints of the diagnosis' own fields (the analyses' come from their classes)
_TAIL = {
    "unit": {"description": "NVTX range name, or the fallback unit"},
    "unit_source": {"enum": ["nvtx_auto", "nvtx_named", "nvtx_group", "launch_cycle",
                            "sync_fallback", None]},
    "n": {"minimum": 0},
    "n_warmup": {"minimum": 0},
    "shape": {"enum": list(SHAPES[:-1]) + ["insufficient_data"]},
    "shape_confidence": {"minimum": 0, "maximum": 1},
    "shape_probabilities": {
        "propertyNames": {"enum": list(SHAPES[:-1])},
        "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "level": {"enum": ["normal", "elevated", "abnormal", "unknown"]},
}
_VERDICT = {
    "layer": {"enum": [layer.value for layer in VERDICT_LAYERS]},
    "mechanism": {"description": "what was measured inside the layer (null: no cause "
                                 "named)"},
    "confidence": {"minimum": 0, "maximum": 1},
    "scores": {"additionalProperties": {"type": "number"}},
}
_FINDING = {
    "layer": {"enum": [layer.value for layer in FINDING_LAYERS]},
    "severity": {"enum": sorted(SEVERITIES, key=("info", "warning", "critical").index)},
    "evidence": {"items": {"type": "string"}},
    "check": {"description": "the method's step: A/B, C1, C2, D1, D2, E1, graphs, overlap"},
}
_GAPS = {"count": {"minimum": 0}}

_SCALARS = {"float": "number", "int": "integer", "bool": "boolean", "str": "string",
            "Layer": "string"}


def _json_type(annotation: str) -> dict[str, Any]:
    """The JSON Schema of a field from its annotation (a string: postponed evaluation)."""
    parts = [p.strip() for p in re.split(r"\|(?![^\[]*\])", annotation)]
    nullable = "None" in parts
    parts = [p for p in parts if p != "None"]
    (base,) = parts
    if base == "Component":
        return {"enum": [c.value for c in Component] + ([None] if nullable else [])}
    if base == "Mechanism":
        return {"enum": [m.value for m in Mechanism] + ([None] if nullable else [])}
    if base.startswith("tuple[ComponentGrowth"):
        figures = [f.name for f in dataclasses.fields(ComponentGrowth) if f.name != "component"]
        return {
            "type": "object",
            "propertyNames": {"enum": [c.value for c in Component]},
            "additionalProperties": {
                "type": "object",
                "required": figures,
                "properties": {n: {"type": ["number", "null"]} for n in figures},
                "additionalProperties": False,
            },
        }
    if base.startswith(("tuple[", "list[")):
        kind = "array"
    elif base.startswith("dict["):
        kind = "object"
    else:
        kind = _SCALARS[base]
    return {"type": [kind, "null"] if nullable else kind}


def _object(cls: type, extra: dict[str, dict], names: list[str] | None = None,
            required: list[str] | None = None, description: str | None = None
            ) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    props: dict[str, Any] = {}
    for name in names or list(fields):
        f = fields[name]
        spec = _json_type(f.type)
        if "enum" in extra.get(name, {}) and None not in extra[name]["enum"]:
            del spec["type"]  # the enum says it all
        doc = f.metadata.get("doc")
        if doc:
            spec["description"] = doc
        props[name] = {**spec, **extra.get(name, {})}
    out: dict[str, Any] = {"type": "object"}
    if description:
        out["description"] = description
    if required:
        out["required"] = required
    out["properties"] = props
    return out


def _summary(name: str) -> dict[str, Any]:
    cls = module(name).RESULT
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    props: dict[str, Any] = {}
    for f in cls.summary_fields():
        record = record_type(f)
        if record is None:
            props.update(_object(cls, {}, [f.name])["properties"])
            continue
        # a record's figures are flat keys in its place (analyses.base.nested)
        inner = _object(record, {})["properties"]
        props.update({flat_key(f.name, g): {**inner[g.name], "description":
                                            f"{f.metadata['doc']}: {inner[g.name]['description']}"}
                      for g in dataclasses.fields(record)})
    return {"type": "object", "properties": props, "description": " ".join(doc.split()),
            "additionalProperties": False}


def diagnosis_schema() -> dict[str, Any]:
    """The JSON Schema of :meth:`Diagnosis.to_dict` (version 1)."""
    finding_fields = list(Finding(layer=Layer.INFO, severity="", title="", evidence=()).to_dict())
    verdict_fields = list(Verdict(Layer.HEALTHY, 0.0, "").to_dict())
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA,
        "title": "nsysdiag diagnosis, version 1",
        "description": "Output of `nsysdiag diagnose --json` and Diagnosis.to_dict(). Within "
        "version 1 fields are only added, never removed or renamed. Generated from the "
        "result classes (nsysdiag/diagnosis/schema.py).",
        "type": "object",
        "required": ["schema", "path", "tail", "verdict", "findings", "launch_gaps",
                     "cuda_graphs"],
        "properties": {
            "schema": {"const": SCHEMA},
            "path": {"type": "string", "description": "the input as given"},
            "pid": {"type": ["integer", "null"],
                    "description": "the one process of the export diagnosed (--pid, or the "
                                   "straggler of nsysdiag ranks); null: every process"},
            "tail": _object(TailSummary, _TAIL, required=[
                "unit", "n", "p50_ns", "p90_ns", "p99_ns", "p99_over_p50", "shape",
                "shape_confidence"],
                description="latency distribution of the repeated unit of work"),
            "verdict": _object(Verdict, _VERDICT, verdict_fields,
                               required=["layer", "confidence", "summary"]),
            "findings": {
                "type": "array",
                "description": "ordered by importance: severity, then weight",
                "items": _object(Finding, _FINDING, finding_fields,
                                 required=["layer", "severity", "title", "evidence", "fix"]),
            },
            "launch_gaps": _object(GapSummary, _GAPS, required=["count", "p50_ns", "p99_ns"]),
            "cuda_graphs": {
                "type": "object",
                "description": "in_use, with the graphs analysis' figures when it ran",
                "required": ["in_use"],
                "properties": {"in_use": {"type": "boolean"}},
            },
            "platform": {
                **_object(Platform, {}, ["driver_version", "cuda_version"],
                          description="the machine: each GPU with the host link assumed for "
                          "it and where that figure comes from; driver and CUDA versions"),
                "properties": {
                    "gpus": {"type": "array", "items": _object(GpuLink, {
                        "link_source": {"enum": ["trace", "baseline", "default", "integrated",
                                                 "not_cuda", "unknown"]}})},
                    **_object(Platform, {}, ["driver_version", "cuda_version"])["properties"],
                },
            },
            "classifier": {
                "type": ["object", "null"],
                "description": "the tail-shape classifier's full result",
            },
            "evidence": {
                "type": "object",
                "description": "each analysis' status, message and summary",
                "properties": {
                    name: {
                        "type": "object",
                        "required": ["status", "message", "summary"],
                        "properties": {
                            "status": {"enum": ["ok", "empty", "not_captured"]},
                            "message": {"type": "string"},
                            "summary": {"$ref": f"#/$defs/{name}"},
                        },
                    }
                    for name in ANALYSES
                },
            },
            "captured": {
                "type": "object",
                "additionalProperties": {"enum": ["present", "empty", "not_captured"]},
            },
            "settings": {"type": "object"},
        },
        "$defs": {name: _summary(name) for name in ANALYSES},
    }


def main() -> None:
    print(json.dumps(diagnosis_schema(), indent=2))


if __name__ == "__main__":
    main()
