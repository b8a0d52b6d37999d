"""/v1/kb: read the knowledge base (causes, symptoms, experiments, the causal graph)."""

from __future__ import annotations

import difflib
from typing import Any

from flask_smorest import Blueprint

from dsdoctor.api.auth import requires
from dsdoctor.api.blueprints import json_response
from dsdoctor.api.errors import ApiError
from dsdoctor.api.schemas import (
    CausesQuerySchema,
    GraphQuerySchema,
    GraphSchema,
    KbCauseListSchema,
    KbCauseSchema,
    KbExperimentListSchema,
    KbSymptomListSchema,
    LangQuerySchema,
)
from dsdoctor.api.services import services
from dsdoctor.kb.model import Cause, Experiment, KnowledgeBase, Symptom

blp = Blueprint("kb", __name__, url_prefix="/v1/kb",
                description="The knowledge base: root causes, symptoms, experiments and the causal graph.")

GRAPH_MEDIA = {"json": "application/json", "dot": "text/vnd.graphviz", "mermaid": "text/plain"}


def _cause_summary(cause: Cause, lang: str) -> dict[str, Any]:
    return {"id": cause.id, "domain": cause.domain, "parent": cause.parent, "status": cause.status,
            "title": cause.title.get(lang), "prior": cause.prior}


def _cause_detail(kb: KnowledgeBase, cause: Cause, lang: str) -> dict[str, Any]:
    likelihoods = kb.likelihoods.get(cause.id)
    if likelihoods is None:
        from dsdoctor.kb.graph import cause_likelihoods

        likelihoods = cause_likelihoods(cause, kb.mechanisms, kb.symptoms)
    return {
        **_cause_summary(cause, lang),
        "description": cause.description.get(lang),
        "prior_basis": cause.prior_basis,
        "site_count": cause.site_count,
        "mechanisms": dict(cause.mechanisms),
        "symptoms": {sid: round(p, 4) for sid, p in sorted(likelihoods.items(), key=lambda kv: (-kv[1], kv[0]))},
        "experiments": sorted(x.id for x in kb.experiments.values() if cause.id in x.expects),
        "fixes": [{"title": f.title.get(lang), "kind": f.kind, "snippet": f.snippet} for f in cause.fixes],
        "regression": cause.regression.get(lang),
        "prevention": cause.prevention.get(lang),
        "references": list(cause.references),
        "context": {k: v for k, v in vars(cause.context).items() if v is not None},
    }


def _symptom(symptom: Symptom, lang: str) -> dict[str, Any]:
    return {"id": symptom.id, "title": symptom.title.get(lang), "description": symptom.description.get(lang),
            "kind": symptom.kind, "source": symptom.source, "severity": symptom.severity, "leak": symptom.leak,
            "status": symptom.status, "question": symptom.question.get(lang) if symptom.question else None}


def _experiment(experiment: Experiment, lang: str) -> dict[str, Any]:
    return {"id": experiment.id, "title": experiment.title.get(lang), "how": experiment.how.get(lang),
            "commands": list(experiment.commands), "cost_minutes": experiment.cost_minutes,
            "cost_gpus": experiment.cost_gpus, "status": experiment.status,
            "outcomes": [{"id": o.id, "title": o.title.get(lang), "observe": f"{experiment.id}={o.id}"}
                         for o in experiment.outcomes],
            "tests": sorted(experiment.expects)}


def _not_found(kind: str, node_id: str, known: list[str]) -> ApiError:
    close = difflib.get_close_matches(node_id, known, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ApiError(404, f"no {kind} with id {node_id!r} in the knowledge base{hint}", title="Not Found")


@blp.route("/causes", methods=["GET"])
@requires("diagnose")
@blp.arguments(CausesQuerySchema, location="query")
@blp.response(200, KbCauseListSchema)
def list_causes(query: dict[str, Any]):
    """Every root cause (optionally of one domain), sorted by id."""
    kb = services().kb()
    items = [_cause_summary(c, query["lang"]) for cid, c in sorted(kb.causes.items())
             if query.get("domain") in (None, c.domain)]
    return json_response({"items": items})


@blp.route("/causes/<cause_id>", methods=["GET"])
@requires("diagnose")
@blp.arguments(LangQuerySchema, location="query")
@blp.response(200, KbCauseSchema)
def get_cause(query: dict[str, Any], cause_id: str):
    """One root cause: mechanisms, the symptoms it explains (P(symptom | cause)), fixes, experiments."""
    kb = services().kb()
    cause = kb.causes.get(cause_id)
    if cause is None:
        raise _not_found("cause", cause_id, list(kb.causes))
    return json_response(_cause_detail(kb, cause, query["lang"]))


@blp.route("/symptoms", methods=["GET"])
@requires("diagnose")
@blp.arguments(LangQuerySchema, location="query")
@blp.response(200, KbSymptomListSchema)
def list_symptoms(query: dict[str, Any]):
    """Every symptom the rules can observe, sorted by id."""
    kb = services().kb()
    return json_response({"items": [_symptom(s, query["lang"]) for _, s in sorted(kb.symptoms.items())]})


@blp.route("/experiments", methods=["GET"])
@requires("diagnose")
@blp.arguments(LangQuerySchema, location="query")
@blp.response(200, KbExperimentListSchema)
def list_experiments(query: dict[str, Any]):
    """Every isolation experiment with its outcomes (the `observe` key to report each one)."""
    kb = services().kb()
    return json_response({"items": [_experiment(x, query["lang"]) for _, x in sorted(kb.experiments.items())]})


@blp.route("/graph", methods=["GET"])
@requires("diagnose")
@blp.arguments(GraphQuerySchema, location="query")
@blp.response(200, GraphSchema)
@blp.alt_response(200, success=True, content_type="text/vnd.graphviz", schema={"type": "string"},
                  description="Graphviz DOT (format=dot)")
@blp.alt_response(200, success=True, content_type="text/plain", schema={"type": "string"},
                  description="Mermaid flowchart (format=mermaid)")
def graph(query: dict[str, Any]):
    """The causal graph (cause -> mechanism -> symptom), whole or `around` one node within `depth` hops,
    as JSON, Graphviz DOT or Mermaid."""
    from dsdoctor.kb import graph as kbgraph

    kb = services().kb()
    full = kbgraph.export_graph(kb, experiments=query["experiments"], lang=query["lang"])
    around = query.get("around")
    if around:
        try:
            full = kbgraph.neighbourhood(full, around, query["depth"])
        except KeyError:
            raise _not_found("node", around, list(full.nodes)) from None
    fmt = query["format"]
    if fmt == "json":
        return json_response(kbgraph.to_json(full))
    from flask import current_app

    text = kbgraph.to_dot(full) if fmt == "dot" else kbgraph.to_mermaid(full)
    return current_app.response_class(text, mimetype=GRAPH_MEDIA[fmt])
