"""In-memory model of the knowledge base: typed nodes and the causal graph.

The loader (kb/loader.py) builds a :class:`KnowledgeBase` from the YAML under kb/data/ and
any overlays; the inference engine (kb/inference.py) and experiment planner
(kb/experiments.py) read it. Node kinds share one ID namespace:

* root causes: catalog IDs ``<domain>.<name>`` (e.g. ``compute.fp16_overflow``)
* mechanisms:  ``m.<name>``
* symptoms:    ``s.<name>``
* experiments: ``x.<name>``; an outcome is written ``x.<name>=<outcome>``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

DOMAINS = ("config", "memory", "comm", "compute", "data", "hardware", "none")
PILLARS = ("shard", "comm", "numerics", "resources")
SYMPTOM_KINDS = ("log", "metric", "config", "environment", "derived", "question")
#: where a symptom is observed; absence only counts when that source was supplied
SYMPTOM_SOURCES = ("logs", "dmesg", "nvidia-smi", "metrics", "config", "environment", "description", "derived")
#: what a command of an experiment is: a shell line, Python, a ds_config fragment, flags for the launch
COMMAND_KINDS = ("shell", "python", "config", "args")
FRAMEWORKS = ("pytorch", "paddle", "mindspore", "tensorflow", "jax")  # what a job may run on
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Text:
    """A text in English and Chinese."""

    en: str
    zh: str

    def get(self, lang: str) -> str:
        return self.zh if lang == "zh" and self.zh else self.en


@dataclass
class Fix:
    title: Text
    kind: str  # ds_config | env | command | code | hardware | process
    snippet: str = ""


@dataclass
class Context:
    """Where a cause can apply. ``None`` means no restriction."""

    precision: list[str] | None = None  # allowed of: fp16, bf16, fp32
    zero_stage: list[int] | None = None  # allowed ZeRO stages
    offload: bool | None = None  # True: needs CPU/NVMe offload enabled
    min_nodes: int | None = None  # 2: multi-node only
    min_world_size: int | None = None  # 2: distributed only
    phases: list[str] | None = None  # soft: phases where it usually shows


@dataclass
class Cause:
    id: str
    domain: str
    title: Text
    description: Text
    prior: float
    prior_basis: str
    context: Context
    mechanisms: dict[str, float]  # mechanism id -> P(mechanism active | cause)
    fixes: list[Fix]
    regression: Text
    prevention: Text
    references: list[str]
    parent: str | None = None  # a finer cause names the catalog cause it refines
    site_count: int = 0  # confirmed incidents at this site (filled from the incident store)
    file: str = ""
    line: int = 0
    status: str = "active"  # active | deprecated (kept so its ID is never reused)


@dataclass
class Mechanism:
    id: str
    pillar: str
    title: Text
    description: Text
    symptoms: dict[str, float]  # symptom id -> P(symptom | mechanism active)
    references: list[str]
    file: str = ""
    line: int = 0
    status: str = "active"  # active | deprecated (kept so its ID is never reused)


@dataclass
class Symptom:
    id: str
    title: Text
    description: Text
    kind: str
    source: str
    severity: str
    leak: float  # P(symptom | no modelled cause active)
    absent_reliability: float  # weight of "not seen although its source was supplied"
    question: Text | None = None
    references: list[str] = field(default_factory=list)
    file: str = ""
    line: int = 0
    status: str = "active"  # active | deprecated (kept so its ID is never reused)
    printed_by: tuple[str, ...] = ()  # frameworks that print it (empty: any); see inference._evidence_symptoms


@dataclass
class Outcome:
    id: str
    title: Text
    settled_by: list[str] = field(default_factory=list)  # symptoms that already give this outcome


@dataclass
class Experiment:
    id: str
    title: Text
    how: Text
    commands: list[str]
    cost_minutes: float
    cost_gpus: int
    outcomes: list[Outcome]
    default: dict[str, float]  # outcome -> P(outcome) under causes not listed in `expects`
    expects: dict[str, dict[str, float]]  # cause id -> outcome -> P(outcome | cause)
    references: list[str]
    file: str = ""
    line: int = 0
    status: str = "active"  # active | deprecated (kept so its ID is never reused)
    command_kinds: list[str] = field(default_factory=list)  # per command: shell | python | config | args

    def outcome_probabilities(self, cause_id: str) -> dict[str, float]:
        """P(outcome | cause), falling back to ``default`` for causes it does not bear on."""
        return self.expects.get(cause_id, self.default)

    @cached_property
    def outcome_rows(self) -> tuple[tuple[str, ...], tuple[float | None, ...], dict[str, tuple[float | None, ...]]]:
        """The outcome ids, ``default`` and each listed cause's P(outcome | cause) as rows in outcome order
        (None where a distribution does not name an outcome); built once, for the planner's inner loop."""
        ids = tuple(o.id for o in self.outcomes)
        return (ids, tuple(self.default.get(o) for o in ids),
                {cause: tuple(dist.get(o) for o in ids) for cause, dist in self.expects.items()})

    @property
    def cost(self) -> float:
        """One number for ranking: GPU-minutes, with at least one GPU-minute per experiment."""
        return max(1.0, self.cost_minutes * max(1, self.cost_gpus))


@dataclass
class KnowledgeBase:
    causes: dict[str, Cause]
    mechanisms: dict[str, Mechanism]
    symptoms: dict[str, Symptom]
    experiments: dict[str, Experiment]
    graph: Any  # networkx.DiGraph: cause -> mechanism -> symptom, edge attr `strength`
    sources: list[str] = field(default_factory=list)  # data directories loaded, in order
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # derived tables
    #: cause id -> symptom id -> P(symptom | cause) by noisy-OR over its mechanisms, leak included;
    #: filled by the loader for reachable symptoms only (an absent key means P = the symptom's leak)
    likelihoods: dict[str, dict[str, float]] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (kb/snapshot.py) without the graph, rebuilt on first use, nor the derived tables:
        a diagnosis never reads the graph, and unpickling it would import networkx (~0.15 s)."""
        state = dict(self.__dict__)
        state.pop("graph", None)
        state["cache"] = {}
        return state

    def __getattr__(self, name: str) -> Any:
        if name != "graph" or "causes" not in self.__dict__:
            raise AttributeError(name)
        from dsdoctor.kb.graph import build_graph

        graph = self.__dict__["graph"] = build_graph(self.causes, self.mechanisms, self.symptoms)
        return graph

    def node(self, node_id: str) -> Cause | Mechanism | Symptom | Experiment | None:
        for table in (self.causes, self.mechanisms, self.symptoms, self.experiments):
            if node_id in table:
                return table[node_id]
        return None
