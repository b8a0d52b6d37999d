"""Build small knowledge bases in code for engine tests (independent of the YAML loader)."""

from __future__ import annotations

from dsdoctor.kb.model import (
    Cause,
    Context,
    Experiment,
    Fix,
    KnowledgeBase,
    Mechanism,
    Outcome,
    Symptom,
    Text,
)


def text(s: str) -> Text:
    return Text(en=s, zh=s + "（中文）")


def cause(cid: str, prior: float, mechanisms: dict[str, float], **context) -> Cause:
    return Cause(
        id=cid, domain=cid.split(".")[0], title=text(cid), description=text(cid), prior=prior,
        prior_basis="test", context=Context(**context), mechanisms=mechanisms,
        fixes=[Fix(text("fix"), "ds_config", "{}")], regression=text("rerun"), prevention=text("monitor"),
        references=["https://example.org"],
    )


def symptom(sid: str, leak: float = 0.01, source: str = "logs", absent_reliability: float = 0.0) -> Symptom:
    return Symptom(id=sid, title=text(sid), description=text(sid), kind="log", source=source, severity="error",
                   leak=leak, absent_reliability=absent_reliability)


def experiment(xid: str, expects: dict[str, dict[str, float]], default: dict[str, float], minutes: float = 10,
               gpus: int = 1) -> Experiment:
    return Experiment(
        id=xid, title=text(xid), how=text("how"), commands=["run"], cost_minutes=minutes, cost_gpus=gpus,
        outcomes=[Outcome(o, text(o)) for o in default], default=default, expects=expects, references=[],
    )


def build(causes, mechanisms: dict[str, dict[str, float]], symptoms, experiments=()) -> KnowledgeBase:
    import networkx as nx

    mechs = {mid: Mechanism(mid, "numerics", text(mid), text(mid), edges, []) for mid, edges in mechanisms.items()}
    graph = nx.DiGraph()
    for c in causes:
        for mid, w in c.mechanisms.items():
            graph.add_edge(c.id, mid, strength=w)
    for m in mechs.values():
        for sid, w in m.symptoms.items():
            graph.add_edge(m.id, sid, strength=w)
    return KnowledgeBase(
        causes={c.id: c for c in causes}, mechanisms=mechs, symptoms={s.id: s for s in symptoms},
        experiments={e.id: e for e in experiments}, graph=graph,
    )


def nan_kb() -> KnowledgeBase:
    """The course's example: NaN on one rank of many — global vs local causes."""
    causes = [
        cause("compute.lr_divergence", 0.05, {"m.global_divergence": 0.9}),
        cause("compute.fp16_overflow", 0.05, {"m.fp16_grad_overflow": 0.95}, precision=["fp16"]),
        cause("data.corrupt_sample", 0.03, {"m.bad_input": 0.9}),
        cause("hardware.silent_data_corruption", 0.01, {"m.silent_wrong_compute": 0.9}),
    ]
    mechanisms = {
        "m.global_divergence": {"s.loss_nan": 0.8, "s.nan_all_ranks": 0.85, "s.scope_global": 0.8},
        "m.fp16_grad_overflow": {"s.fp16_overflow_repeated": 0.9, "s.loss_nan": 0.4, "s.scope_global": 0.7,
                                 "s.nan_all_ranks": 0.5},
        "m.bad_input": {"s.loss_nan": 0.8, "s.nan_subset_ranks": 0.6, "s.scope_single_rank": 0.6},
        "m.silent_wrong_compute": {"s.loss_nan": 0.6, "s.nan_subset_ranks": 0.7, "s.scope_single_rank": 0.6,
                                   "s.same_node_repeatedly": 0.3},
    }
    symptoms = [symptom(s) for s in ("s.loss_nan", "s.nan_all_ranks", "s.nan_subset_ranks", "s.scope_global",
                                     "s.scope_single_rank", "s.same_node_repeatedly")]
    symptoms.append(symptom("s.fp16_overflow_repeated", absent_reliability=0.7))
    experiments = [
        experiment(
            "x.fixed_seed_data_order",
            {"data.corrupt_sample": {"fails_same_step": 0.9, "fails_elsewhere_or_not": 0.1},
             "hardware.silent_data_corruption": {"fails_same_step": 0.15, "fails_elsewhere_or_not": 0.85}},
            {"fails_same_step": 0.5, "fails_elsewhere_or_not": 0.5}, minutes=60, gpus=8,
        ),
        experiment(
            "x.swap_suspect_gpu",
            {"hardware.silent_data_corruption": {"issue_follows_gpu": 0.9, "issue_stays": 0.1},
             "data.corrupt_sample": {"issue_follows_gpu": 0.05, "issue_stays": 0.95}},
            {"issue_follows_gpu": 0.05, "issue_stays": 0.95}, minutes=30, gpus=8,
        ),
        experiment("x.useless", {}, {"a": 0.5, "b": 0.5}, minutes=1, gpus=0),
    ]
    return build(causes, mechanisms, symptoms, experiments)
