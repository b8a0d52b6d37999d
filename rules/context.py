"""Parse the context prefix of a log line: who printed it (rank, local rank, node, pid) and when.

One text may interleave many ranks, so attribution is per line. Recognised prefixes, which may
be stacked (``node3: [rank3]:[E1210 02:06:33.321131 ...] ...``):

* pdsh / DeepSpeed multi-node: ``node3: ...`` (a host-like token: contains a digit, or an IP)
* torchrun / c10d: ``[rank3]:`` (global rank), ``[default3]:`` (role + local rank)
* glog / c10 C++ logging: ``[E1210 02:06:33.321131 1234 ProcessGroupNCCL.cpp:607]``,
  ``[E ProcessGroupNCCL.cpp:563]``, ``W1210 02:06:33.321000 1234 torch/distributed/run.py:793]``
* NCCL: ``host:pid:tid [cudaDev] NCCL INFO ...`` (NCCL >= 2.26 may prepend ``[YYYY-MM-DD HH:MM:SS] ``)
* DeepSpeed logger: ``[2024-05-01 10:00:00,123] [INFO] [engine.py:3656:_report_progress]``,
  with ``[Rank N]`` (log_dist) or ``[PG ... Rank N]`` (ProcessGroupNCCL) inside the message
* Python logging, ``[INFO 2020-05-26 20:08:20]``, ISO timestamps (``2024-05-01T10:00:00Z``)
* kernel: ``[12345.678901]``, ``[  +0.000844]``, ``[Wed May  1 10:00:00 2024]``,
  syslog ``May  1 10:00:00 host kernel: ``

Parsing works on bytes, on the first few hundred bytes of a line only, with anchored patterns
without nested repetition, so its cost per line is bounded whatever the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from dsdoctor.rules.shapes import BLIND as _BLIND

#: placeholder year for timestamps printed without one (glog, syslog); 2000 is a leap year
PLACEHOLDER_YEAR = 2000
PREFIX_LIMIT = 320
_MONTHS = {m: i for i, m in enumerate(
    (b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"), 1)}


@dataclass(slots=True)
class LineContext:
    """What the prefix of one line says about its origin."""

    rank: int | None = None
    local_rank: int | None = None
    node: str | None = None
    pid: int | None = None
    time: datetime | None = None
    year_known: bool = True  # False: the time came without a year (glog, syslog)
    level: str | None = None
    kernel: bool = False  # a kernel line (dmesg / syslog)
    message_start: int = 0  # byte offset where the message starts (after every prefix)


@dataclass(frozen=True, slots=True)
class SourceHint:
    """What the name of a source (``logs[].source`` or a file name) suggests."""

    name: str
    rank: int | None = None
    node: str | None = None
    kind: str = "logs"  # logs | dmesg | nvidia-smi | description (machine lines pasted into prose)


_LEVELS = rb"DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
_TS = rb"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?"
_ZONE = rb"(?:Z|[+-]\d\d:?\d\d)?"

# One alternation for every prefix element; the outer group name says which one matched.
_ELEMENT = re.compile(
    rb"(?P<tr>\[(?P<tr_role>[A-Za-z_]{1,32}?)(?P<tr_n>\d{1,6})\]: ?)"
    rb"|(?P<nc>(?:\[(?P<nc_ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)\] )?"
    rb"(?P<nc_host>[A-Za-z0-9][\w.\-]{0,80}):(?P<nc_pid>\d{1,10}):\d{1,10} \[(?P<nc_dev>\d{1,4})\] )"
    rb"|(?P<bt>\[(?P<bt_ts>" + _TS + rb")" + _ZONE + rb"\] ?(?:\[(?P<bt_lvl>" + _LEVELS + rb")\] ?)?"
    rb"(?:\[[\w.\-]{1,80}:\d{1,7}(?::[\w<>.]{1,80})?\] ?)?)"
    rb"|(?P<gb>\[(?P<gb_lvl>[IWEF])(?P<gb_md>\d{3,4}) (?P<gb_t>\d\d:\d\d:\d\d)\.(?P<gb_f>\d{1,9})(?: +\d{1,20})?"
    rb"(?: +[^\]\s]{1,120})?\] ?)"
    rb"|(?P<gn>\[(?P<gn_lvl>[IWEF]) [^\]\s]{1,120}\] ?)"
    rb"|(?P<lt>\[(?P<lt_lvl>" + _LEVELS + rb") (?P<lt_ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] ?)"
    rb"|(?P<dt>\[(?:[A-Z][a-z]{2} )?(?P<dt_mon>[A-Z][a-z]{2}) {1,2}(?P<dt_day>\d{1,2}) (?P<dt_t>\d\d:\d\d:\d\d)"
    rb" (?P<dt_y>\d{4})\] ?)"
    rb"|(?P<du>\[ {0,12}\+?\d{1,12}\.\d{1,9}\] ?)"
    rb"|(?P<iso>(?P<iso_ts>" + _TS + rb")" + _ZONE + rb"(?: (?P<iso_host>[A-Za-z0-9][\w.\-]{0,80}) kernel: | ?[|\-] ?| )?)"
    rb"|(?P<gl>(?P<gl_lvl>[IWEF])(?P<gl_md>\d{3,4}) (?P<gl_t>\d\d:\d\d:\d\d)\.(?P<gl_f>\d{1,9}) +\d{1,20} [^\]\s]{1,160}\] )"
    rb"|(?P<sl>(?P<sl_mon>[A-Z][a-z]{2}) {1,2}(?P<sl_day>\d{1,2}) (?P<sl_t>\d\d:\d\d:\d\d) "
    rb"(?P<sl_host>[A-Za-z0-9][\w.\-]{0,80}) (?P<sl_k>kernel: )?)"
    rb"|(?P<py>(?P<py_lvl>" + _LEVELS + rb"):[\w.]{0,120}:)"
    rb"|(?P<pd>(?P<pd_tok>[A-Za-z0-9][\w.\-]{0,62}): )"
)
_RANK_TOKEN = re.compile(rb"(?i:rank)[-_]?(\d{1,6})")
_IPV4 = re.compile(rb"\d{1,3}(?:\.\d{1,3}){3}")
_RANK_IN_MESSAGE = re.compile(rb"\[(?:PG [^\]]{0,120}?)?(?i:rank)[ =:]?(-?\d{1,6})\]")
_NOT_HOSTS = (b"error", b"exception", b"warning", b"warn", b"traceback", b"info", b"debug", b"note")

_SOURCE_RANK = re.compile(r"(?i)(?:^|[^a-z])rank[-_ ]?(\d{1,6})")
_SOURCE_NODE = re.compile(r"(?i)(?:^|[^a-z0-9])((?:node|host|worker|machine|server)[-_]?\d{1,5})(?![0-9])")
_SOURCE_DMESG = re.compile(r"(?i)dmesg|kern\.?log|kernel|syslog|journal")
_SOURCE_SMI = re.compile(r"(?i)nvidia[-_ ]?smi|(?:^|[^a-z])smi(?:[^a-z]|$)|dcgm")


def source_hint(name: str) -> SourceHint:
    """What a source name like ``rank37``, ``node2.log`` or ``dmesg`` says (a hint, not a promise)."""
    name = str(name or "")
    kind = "logs"
    if _SOURCE_SMI.search(name):
        kind = "nvidia-smi"
    elif _SOURCE_DMESG.search(name):
        kind = "dmesg"
    rank_m = _SOURCE_RANK.search(name)
    node_m = _SOURCE_NODE.search(name)
    return SourceHint(
        name=name,
        rank=int(rank_m.group(1)) if rank_m else None,
        node=node_m.group(1) if node_m else None,
        kind=kind,
    )


def _clock(ctx: LineContext, year: int | None, month: int, day: int, hms: bytes, frac: bytes | None) -> None:
    """Set the line time unless an earlier prefix already gave a full one."""
    if ctx.time is not None and (ctx.year_known or year is None):
        return
    micro = int(frac[:6].ljust(6, b"0")) if frac else 0
    try:
        ctx.time = datetime(year or PLACEHOLDER_YEAR, month, day, int(hms[0:2]), int(hms[3:5]), int(hms[6:8]), micro)
    except ValueError:
        return
    ctx.year_known = year is not None


def _stamp(ctx: LineContext, ts: bytes) -> None:
    """``YYYY-MM-DD[T ]hh:mm:ss[.,fraction]`` (the pattern guarantees the shape; C parses it)."""
    if ctx.time is not None and ctx.year_known:
        return
    try:
        ctx.time = datetime.fromisoformat(ts.decode("ascii"))  # fractions past microseconds are cut, like _clock
    except ValueError:  # e.g. month 13
        return
    ctx.year_known = True


_LEVEL_TEXT = {b"I": "I", b"W": "W", b"E": "E", b"F": "F"}
_MISSING = object()
#: (MMDD, hh:mm:ss) of a glog stamp -> that second in the placeholder year (``None``: no such date); bounded
_GLOG_SECONDS: dict[tuple[bytes, bytes], datetime | None] = {}


def _glog(ctx: LineContext, level: bytes, mmdd: bytes, hms: bytes, frac: bytes) -> None:
    """glog prints month and day as MMDD (some logs show M DD with 3 digits) and no year.

    :func:`_clock` with no year, the second's datetime remembered: thousands of ranks stamp their
    teardown within a few seconds, so most lines only add their microseconds.
    """
    ctx.level = _LEVEL_TEXT.get(level) or level.decode()
    if ctx.time is not None:  # an earlier prefix gave a time (``_clock`` keeps it when no year is given)
        return
    key = (mmdd, hms)
    second = _GLOG_SECONDS.get(key, _MISSING)
    if second is _MISSING:
        try:
            second = datetime(PLACEHOLDER_YEAR, int(mmdd[:-2]), int(mmdd[-2:]), int(hms[0:2]), int(hms[3:5]),
                              int(hms[6:8]))
        except ValueError:
            second = None
        if len(_GLOG_SECONDS) >= 4096:
            _GLOG_SECONDS.clear()
        _GLOG_SECONDS[key] = second
    if second is None:
        return
    micro = int(frac[:6].ljust(6, b"0")) if frac else 0
    ctx.time = second.replace(microsecond=micro) if micro else second  # type: ignore[union-attr]
    ctx.year_known = False


def _host_like(token: bytes) -> bool:
    """A pdsh node token: has a digit and a letter (or is an IPv4 address / localhost), not a word."""
    low = token.lower()
    if low == b"localhost" or _IPV4.fullmatch(token):
        return True
    if b".py" in low or low.endswith(_NOT_HOSTS) or low.startswith(b"http"):
        return False
    return any(48 <= c <= 57 for c in token) and any(65 <= c <= 90 or 97 <= c <= 122 for c in token)


def _element(m: re.Match[bytes], ctx: LineContext) -> bool:
    """Apply one matched prefix element to ``ctx``; False if it is not a prefix after all."""
    kind = m.lastgroup
    g = m.group
    if kind == "tr":
        number = int(g("tr_n"))
        if g("tr_role").lower() == b"rank":
            ctx.rank = number
        else:
            ctx.local_rank = number
    elif kind == "nc":
        if g("nc_ts"):
            _stamp(ctx, g("nc_ts"))
        ctx.node = ctx.node or g("nc_host").decode("utf-8", "replace")
        ctx.pid = int(g("nc_pid"))
        if ctx.local_rank is None:
            ctx.local_rank = int(g("nc_dev"))
    elif kind == "bt":
        _stamp(ctx, g("bt_ts"))
        if g("bt_lvl"):
            ctx.level = g("bt_lvl").decode()
    elif kind == "gb":
        _glog(ctx, g("gb_lvl"), g("gb_md"), g("gb_t"), g("gb_f"))
    elif kind == "gn":
        ctx.level = g("gn_lvl").decode()
    elif kind == "lt":
        ctx.level = g("lt_lvl").decode()
        _stamp(ctx, g("lt_ts"))
    elif kind == "dt":
        month = _MONTHS.get(g("dt_mon"))
        if month is None:
            return False
        ctx.kernel = True
        _clock(ctx, int(g("dt_y")), month, int(g("dt_day")), g("dt_t"), None)
    elif kind == "du":
        ctx.kernel = True
    elif kind == "iso":
        _stamp(ctx, g("iso_ts"))
        if g("iso_host"):
            ctx.kernel = True
            ctx.node = ctx.node or g("iso_host").decode("utf-8", "replace")
    elif kind == "gl":
        _glog(ctx, g("gl_lvl"), g("gl_md"), g("gl_t"), g("gl_f"))
    elif kind == "sl":
        month = _MONTHS.get(g("sl_mon"))
        if month is None:
            return False
        _clock(ctx, None, month, int(g("sl_day")), g("sl_t"), None)
        ctx.node = ctx.node or g("sl_host").decode("utf-8", "replace")
        ctx.kernel = ctx.kernel or bool(g("sl_k"))
    elif kind == "py":
        ctx.level = g("py_lvl").decode()
    else:  # pdsh "node3: "
        token = g("pd_tok")
        r = _RANK_TOKEN.fullmatch(token)
        if r:
            ctx.rank = int(r.group(1))
        elif _host_like(token):
            ctx.node = ctx.node or token.decode("utf-8", "replace")
        else:
            return False
    return True


#: torchrun's ``[rankN]:`` not followed by a digit or ``[digit`` (a dated timestamp may follow) nor by
#: another rank element
LEADING_RANK = re.compile(rb"\[(?i:rank)(\d{1,6})\]:(?! ?(?:\d|\[\d|\[?(?i:rank)))")


def leading_rank(line: bytes) -> int | None:
    """The rank of a line that starts with torchrun's ``[rankN]:`` when nothing after it can change the
    rank or carry a dated timestamp (then :func:`parse_prefix` would give this rank); else ``None``.

    A cheap check for lines that are only counted: a full prefix parse costs ~10x more.
    """
    m = LEADING_RANK.match(line)
    return int(m.group(1)) if m is not None else None


#: a line no prefix element can give a time: at most torchrun's ``[rankN]:`` (with the one blank it
#: takes), then a blank, or a word that starts with four letters and ends at a blank or ``(`` (every
#: time-bearing element starts with ``[``, a digit, a glog level letter and digits, a host/level token
#: followed by ``:``, or a three-letter month)
_UNTIMED = re.compile(rb"(?:\[[A-Za-z_]{1,32}?\d{1,6}\]: ?+)?(?:[ \t]|[A-Za-z_]{4}[\w.\-]*[ (])")


def untimed(line: bytes, pos: int = 0) -> bool:
    """True when :func:`parse_prefix` of the line starting at ``line[pos]`` certainly finds no time
    (traceback and frame lines); False means "parse it". Lets a timestamp lookback skip them cheaply."""
    return _UNTIMED.match(line, pos) is not None


#: (kind, spans of its groups) of each prefix element of a line shape, where its message starts, and the
#: span of the rank its message names (or ``None``)
_ShapePlan = tuple[tuple[tuple[str, dict[str, tuple[int, int]]], ...], int, tuple[int, int] | None]
#: line shape (the head's digits written as 0, rules/shapes.py) -> how its prefix parses; bounded
_SHAPES: dict[bytes, _ShapePlan] = {}
SHAPE_MEMO_SIZE = 4096
_GROUPS = tuple(_ELEMENT.groupindex.items())


class _Replayed:
    """What :func:`_element` reads of a match, for a line of a shape parsed before: the recorded group
    spans sliced out of this line."""

    __slots__ = ("head", "lastgroup", "spans")

    def __init__(self, head: bytes, lastgroup: str, spans: dict[str, tuple[int, int]]):
        self.head = head
        self.lastgroup = lastgroup
        self.spans = spans

    def group(self, name: str) -> bytes | None:
        span = self.spans.get(name)
        return None if span is None else self.head[span[0]:span[1]]


def parse_prefix(line: bytes) -> LineContext:
    """Parse the stacked context prefixes at the start of ``line`` (bytes, without newline).

    Every pattern of the parse treats all ten digits alike and every choice it makes looks at no digit's
    value (``digit_blind``, rules/shapes.py), so lines of one shape parse into the same elements at the
    same spans: the first line of a shape is parsed, the others replay its elements on their own bytes
    (rank digits and times differ, the structure does not). :func:`parse_prefix_uncached` is the parse
    itself (a test checks both agree).
    """
    head = line[:PREFIX_LIMIT]
    shape = head.translate(_BLIND)
    plan = _SHAPES.get(shape)
    if plan is None:
        ctx, plan = _parse(head)
        if len(_SHAPES) >= SHAPE_MEMO_SIZE:
            _SHAPES.clear()
        _SHAPES[shape] = plan
        return ctx
    ctx = LineContext()
    elements, ctx.message_start, rank_span = plan
    for kind, spans in elements:
        _element(_Replayed(head, kind, spans), ctx)  # type: ignore[arg-type]
    if rank_span is not None:
        rank = int(head[rank_span[0]:rank_span[1]])
        if rank >= 0:
            ctx.rank = rank
    return ctx


def parse_prefix_uncached(line: bytes) -> LineContext:
    """:func:`parse_prefix` without the shape memo."""
    return _parse(line[:PREFIX_LIMIT], record=False)[0]


def _parse(head: bytes, record: bool = True) -> tuple[LineContext, _ShapePlan]:
    """Parse a line's head and (``record``) the elements found, for the other lines of its shape."""
    ctx = LineContext()
    pos = 0
    match = _ELEMENT.match
    elements: list[tuple[str, dict[str, tuple[int, int]]]] = []
    for _ in range(8):
        m = match(head, pos)
        if m is None or m.end() == pos or not _element(m, ctx):
            break
        if record:
            elements.append((m.lastgroup or "", {name: m.span(index) for name, index in _GROUPS
                                                 if m.start(index) >= 0}))
        pos = m.end()
    ctx.message_start = pos
    rank_span = None
    if ctx.rank is None and (b"ank" in (window := head[pos:pos + 200]) or b"ANK" in window):
        m = _RANK_IN_MESSAGE.search(head, pos, pos + 200)
        if m:
            rank_span = m.span(1)
            rank = int(m.group(1))
            if rank >= 0:
                ctx.rank = rank
    return ctx, (tuple(elements), pos, rank_span)
