"""What evidence extraction produces: observed symptoms with where and when they were seen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LineRef:
    """One evidence line with the context parsed from its prefix."""

    source: str  # logs[].source, or "description" / "config" / "metrics" / "environment"
    lineno: int  # 1-based line number within that source
    text: str  # the line (redacted, truncated to a sane length)
    rank: int | None = None  # global rank when known
    local_rank: int | None = None
    node: str | None = None  # host / node name when known
    pid: int | None = None
    time: str | None = None  # ISO 8601 when a timestamp was parsed
    rule: str | None = None  # rule or check that produced it
    fields: dict[str, Any] = field(default_factory=dict)  # captured fields


@dataclass
class ObservedSymptom:
    """A knowledge-base symptom seen in the evidence (one fact, however many lines show it)."""

    id: str  # symptom id, e.g. "s.cuda_oom"
    count: int = 0  # number of lines / findings
    ranks: set[int] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    first_seen: str | None = None  # earliest timestamp (ISO) when known
    first_order: int = 0  # global order of the first line (for "first" without timestamps)
    lines: list[LineRef] = field(default_factory=list)  # a bounded sample, first lines first
    rules: set[str] = field(default_factory=set)
    reliability: float = 1.0  # < 1 for soft evidence (free-text matches)
    secondary: bool = False  # a victim of an earlier error (cascade), not an origin
    fields: dict[str, Any] = field(default_factory=dict)  # merged captured fields of the first line


@dataclass
class ConfigFinding:
    id: str
    severity: str  # error | warning | info
    message: dict[str, str]  # {"en": ..., "zh": ...}
    key_path: str  # e.g. "zero_optimization.stage"
    symptom: str | None = None  # the symptom it asserts


@dataclass
class FirstError:
    rank: int | None
    node: str | None
    time: str | None
    line: str
    source: str
    lineno: int
    symptom: str | None = None
    rule: str | None = None
    year_from: str | None = None  # the source whose other stamps gave a year-less stamp its year


@dataclass
class ReportedOutcome:
    """An experiment the reporter says they already ran, read from their words (``x.EXPERIMENT=OUTCOME``)."""

    experiment: str  # x.* id
    outcome: str  # one of the experiment's outcome ids
    happened: bool  # False when the words deny it ("turning off P2P did not help" for issue_gone)
    reliability: float  # how far the words are trusted, in (0, 1]
    rule: str  # the phrase rule that read it
    text: str  # the line it was read from
    source: str = "description"
    lineno: int = 0

    @property
    def key(self) -> str:
        return f"{self.experiment}={self.outcome}"


@dataclass
class JobContext:
    """Facts that gate causes in or out (None = unknown)."""

    precision: str | None = None  # fp16 | bf16 | fp32
    zero_stage: int | None = None
    offload: bool | None = None
    nodes: int | None = None
    world_size: int | None = None
    gpu: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    script: str | None = None  # the job's training script, from its launch command or tracebacks
    launcher: str | None = None  # deepspeed | torchrun | accelerate launch | ...
    config_file: str | None = None  # the DeepSpeed config file the launch command names
    launch_env: dict[str, str] = field(default_factory=dict)  # NCCL_* / GLOO_* set for the failing run
    frameworks: tuple[str, ...] = ()  # pytorch | paddle | ...: what the logs and versions show it ran on (sorted)


@dataclass
class Extraction:
    """Everything the rules layer learned from one evidence document."""

    symptoms: dict[str, ObservedSymptom] = field(default_factory=dict)
    absent: set[str] = field(default_factory=set)  # symptoms known absent (a person said no)
    absent_strength: dict[str, float] = field(default_factory=dict)  # below 1 for a "no" read from words
    supplied_sources: set[str] = field(default_factory=set)  # logs, dmesg, nvidia-smi, metrics, config, environment, description
    first_error: FirstError | None = None
    scope: str = "unknown"  # single-rank | single-node | multi-node | global | unknown
    scope_detail: dict[str, Any] = field(default_factory=dict)  # origin / victim ranks and nodes (rules/scope.py)
    phase: str = "unknown"  # launch | first-step | steady | checkpoint | eval | exit | unknown
    ranks_seen: set[int] = field(default_factory=set)  # every rank that printed anything
    nodes_seen: set[str] = field(default_factory=set)
    context: JobContext = field(default_factory=JobContext)
    config_findings: list[ConfigFinding] = field(default_factory=list)
    outcomes: list[ReportedOutcome] = field(default_factory=list)  # experiments the reporter already ran
    warnings: list[str] = field(default_factory=list)  # e.g. unknown observation keys
    bytes_processed: int = 0
    lines_processed: int = 0
