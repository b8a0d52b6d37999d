"""Error-dense logs (every rank prints its watchdog block and traceback): per-hit work stays small and
the diagnosis is the one a full read gives."""

from __future__ import annotations

import gzip
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.error_dense_bench import generate, origin_block, victim_block
from dsdoctor.rules import derive as derive_module
from dsdoctor.rules import extract as extract_module
from dsdoctor.rules.collect import Collector
from dsdoctor.rules.compact import FULL_EVENTS, Light
from dsdoctor.rules.context import leading_rank, parse_prefix, untimed
from dsdoctor.rules.extract import extract, extract_text
from dsdoctor.rules.loader import default_rules
from dsdoctor.rules.matcher import LineMatcher, relax_bounds
from dsdoctor.rules.shapes import BLIND, digit_blind

RANKS, BLOCKS = 256, 3


@pytest.fixture(scope="module")
def dense_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("dense") / "job.log"
    origin = generate(path, RANKS, BLOCKS, seed=3)
    return path, origin


def _count_full_reads(monkeypatch) -> list[int]:
    calls = [0]
    on_line = Collector.on_line

    def counting(self, *args, **kwargs):
        calls[0] += 1
        return on_line(self, *args, **kwargs)

    monkeypatch.setattr(Collector, "on_line", counting)
    return calls


def test_later_blocks_of_a_rank_are_counted_not_read(dense_log, monkeypatch) -> None:
    path, origin = dense_log
    calls = _count_full_reads(monkeypatch)
    x = extract({}, log_files=[("job", path)])
    # 11 lines a block: the first block of each rank is read (traceback frames included), later ones counted
    assert x.lines_processed > RANKS * BLOCKS * 11
    assert calls[0] < RANKS * 9, calls[0]
    assert x.first_error is not None and x.first_error.rank == origin and x.first_error.symptom == "s.cuda_oom"
    watchdog = x.symptoms["s.nccl_watchdog_timeout"]
    assert len(watchdog.ranks) == RANKS - 1 and watchdog.count >= (RANKS - 1) * BLOCKS
    assert len(watchdog.lines) <= 64  # a sample, not one line per rank
    assert "s.secondary_timeouts" in x.symptoms and x.scope == "single-rank"


def test_a_rank_keeps_the_frames_of_its_first_traceback_and_never_those_of_a_skipped_one(monkeypatch) -> None:
    lines = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/workspace/train.py", line 97, in main',
        '[rank1]:   File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1855, in forward',
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.",
        "[rank1]: Traceback (most recent call last):",  # a second traceback of the same rank: not read
        '[rank1]:   File "/workspace/ckpt.py", line 5, in save_checkpoint',
        "[rank1]: RuntimeError: NCCL communicator was aborted on rank 1.",
    ]
    seen: list[Collector] = []
    finish = derive_module.finish
    monkeypatch.setattr(derive_module, "finish", lambda collector, *a: (seen.append(collector), finish(collector, *a)))
    x = extract_text("\n".join(lines) + "\n")
    assert x.first_error is not None and x.first_error.rank == 1 and x.first_error.symptom == "s.cuda_oom"
    events = seen[0].events
    assert [f for f, _ in events[("s.cuda_oom", ("r", 1))].frames] == ["main", "forward"]
    later = [e for (s, _), e in events.items() if e.rule.startswith("nccl_watchdog.")]
    assert later and all(e.frames == () for e in later)


def _example_lines() -> list[bytes]:
    out = []
    for rule in default_rules().rules:
        out.extend(str(e["line"]).encode() for e in rule.match_examples if "line" in e)
        out.extend(str(t).encode() for t in rule.no_match_examples)
    return out


@pytest.mark.parametrize("extra", [
    b"[rank5]: Traceback (most recent call last):", b"[rank5]:[E1003 18:37:01.832146 ProcessGroupNCCL.cpp:632] x",
    b"[RANK12]: x", b"[rank5]:[rank7]: x", b"[rank5]: rank7: x", b"[rank5]:[2024-05-01 10:00:00,123] [INFO] x",
    b"[rank5]: 2024-05-01T10:00:00 x", b"[default3]: x", b"node1: [rank5]: x",
])
def test_the_cheap_rank_agrees_with_the_prefix_parser(extra: bytes) -> None:
    for line in [*_example_lines(), extra]:
        rank = leading_rank(line)
        if rank is not None:
            ctx = parse_prefix(line)
            assert ctx.rank == rank, line
            assert ctx.time is None or not ctx.year_known, line  # a dated line is parsed (its year is counted)


def _view(x) -> dict:
    """What a diagnosis shows of an extraction: symptoms with counts, ranks and kept lines, the first error,
    scope and phase (not the internal order numbers, which count only the lines read in full)."""
    symptoms = {sid: (o.count, sorted(o.ranks), sorted(o.nodes), o.first_seen, sorted(o.rules), o.secondary, o.fields,
                      [(ln.source, ln.lineno, ln.text, ln.rank, ln.node, ln.time, ln.rule, ln.fields) for ln in o.lines])
                for sid, o in x.symptoms.items()}
    return {"symptoms": symptoms, "first_error": x.first_error, "scope": x.scope, "scope_detail": x.scope_detail,
            "phase": x.phase, "ranks": sorted(x.ranks_seen), "lines": x.lines_processed, "absent": sorted(x.absent),
            "supplied": sorted(x.supplied_sources)}


def _straightforward(monkeypatch, path):
    with monkeypatch.context() as m:
        m.setattr(extract_module._Reader, "shortcuts", False)
        return extract({}, log_files=[("job", path)])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranks=st.integers(2, 400), blocks=st.integers(1, 4), seed=st.integers(0, 10_000),
       drop=st.sampled_from([0.0, 0.05, 0.3]))
def test_the_shortcuts_show_what_reading_every_line_shows(tmp_path, monkeypatch, ranks, blocks, seed, drop) -> None:
    path = tmp_path / f"job-{ranks}-{blocks}-{seed}.log"
    origin = generate(path, ranks, blocks, seed)
    if drop:  # cut logs: lines lost at random (a traceback without its header, a block without its error)
        rng = random.Random(seed)
        kept = [ln for ln in path.read_bytes().splitlines(keepends=True) if rng.random() >= drop]
        path.write_bytes(b"".join(kept))
    fast = extract({}, log_files=[("job", path)])
    assert _view(fast) == _view(_straightforward(monkeypatch, path))
    if not drop:
        assert fast.first_error is not None and fast.first_error.rank == origin


def test_the_dense_log_reads_the_same_with_and_without_shortcuts(dense_log, monkeypatch) -> None:
    path, _ = dense_log
    assert _view(extract({}, log_files=[("job", path)])) == _view(_straightforward(monkeypatch, path))


def test_a_line_called_untimed_has_no_time() -> None:
    victims = [ln.encode() for r in (0, 7, 4095) for ln in victim_block(r, 4180, 1727980000.5)]
    lines = [*_example_lines(), *victims, b"  File x", b"Traceback (most recent call last):", b"May  1 10:00:00 h x",
             b"[rank1]: May  1 10:00:00 host kernel: x", b"[rank1]: node3: [2024-05-01 10:00:00,1] x",
             b"[rank1]:  2024-05-01T10:00:00 x", b"ERROR:root: x", b"Wed May  1 10:00:00 2024 x"]
    untimed_lines = [line for line in lines if untimed(line)]
    assert len(untimed_lines) > len(victims) // 2  # frames and tracebacks are recognised ...
    for line in untimed_lines:
        assert parse_prefix(line).time is None, line  # ... and never a line that has a time
    for i in range(1, 4):  # in place, as the lookback calls it
        assert untimed(b"x\n" * i + b"[rank3]:   File 'a.py'", 2 * i)


def _collector_of(monkeypatch, evidence, log_files=()):
    seen: list[Collector] = []
    finish = derive_module.finish
    with monkeypatch.context() as m:
        m.setattr(derive_module, "finish", lambda collector, *a: (seen.append(collector), finish(collector, *a)))
        x = extract(evidence, log_files=list(log_files))
    return x, seen[0]


@pytest.mark.parametrize("gzipped", [False, True])
def test_past_the_first_ranks_a_symptom_keeps_light_records_that_read_their_line_again(
        dense_log, tmp_path, monkeypatch, gzipped) -> None:
    path, _ = dense_log
    if gzipped:
        packed = tmp_path / "job.log.gz"
        packed.write_bytes(gzip.compress(path.read_bytes()))
        path = packed
    _, fast = _collector_of(monkeypatch, {}, [("job", path)])
    with monkeypatch.context() as m:
        m.setattr(extract_module._Reader, "shortcuts", False)
        _, full = _collector_of(monkeypatch, {}, [("job", path)])
    every = fast.all_events()
    lights = [(k, e) for k, e in every if isinstance(e, Light)]
    assert len(lights) > len(every) // 2  # most (symptom, rank) firsts of 255 victim ranks are light
    assert sum(not isinstance(e, Light) for _, e in every) < 3 * FULL_EVENTS + 64
    for key, light in lights[:: max(1, len(lights) // 40)]:
        event = full.events[key]  # the straightforward path read the same line in full
        assert (light.lineno, light.rank, light.time, light.near_time, light.rule) == \
            (event.lineno, event.rank, event.time, event.near_time, event.rule)
        assert fast.line_of(light) == (event.text, event.fields)


def test_a_light_record_of_a_text_source_reads_its_line_again(monkeypatch) -> None:
    lines = []
    for rank in range(200):
        lines += victim_block(rank, 4180, 1727980000.0 + rank * 0.01)[:4]
    _, collector = _collector_of(monkeypatch, {"logs": [{"source": "job", "text": "\n".join(lines) + "\n"}]})
    lights = [e for _, e in collector.all_events() if isinstance(e, Light)]
    assert lights
    for light in lights[:5]:
        text, _ = collector.line_of(light)
        assert text == lines[light.lineno - 1][:len(text)] and f"[rank{light.rank}]:" in text


def test_victim_lines_shown_after_the_origin_may_be_light_records(tmp_path, monkeypatch) -> None:
    """The victims shown are the earliest after the origin: with hundreds of victims printing *before* the
    origin's time, the ones shown are light records, read again with the same text a full read keeps."""
    lines = []
    t = 1727980000.0
    for rank in range(1, 400):
        lines += victim_block(rank, 4180, t + rank * 0.001)[:4]
    path = tmp_path / "job.log"
    path.write_text("\n".join([*lines, *origin_block(0, t + 0.2), *[ln for r in range(1, 400) for ln in
                                                                     victim_block(r, 4181, t + 1 + r * 0.001)]]) + "\n")
    fast = extract({}, log_files=[("job", path)])
    assert fast.first_error is not None and fast.first_error.rank == 0
    assert _view(fast) == _view(_straightforward(monkeypatch, path))


@pytest.mark.parametrize(("pattern", "blind"), [
    (r"aborted on rank (?P<rank>\d+)\.", True), (r"[0-9a-f]+ x\w{1,4} .*", True), (r"[^\]]+\] (?:a|b)", True),
    (r"return code = -9\b", False), (r"Xid (?P<xid>79),", False), (r"skipped=[1-9]\d*", False), (r"[^5]x", False),
    (r"(?P<a>\d)-(?P=a)", False), (r"\pN+", False), (r"(?:9\d|100)%", False), (r"[a-z_]+\d{2,3}", True),
])
def test_digit_blind_patterns_are_those_that_treat_every_digit_alike(pattern: str, blind: bool) -> None:
    assert digit_blind(pattern) is blind


def _spans(regex, line: bytes):
    m = regex.search(line)
    return None if m is None else [m.span(g) for g in range(regex.groups + 1)]


def test_a_digit_blind_rule_matches_every_line_of_a_shape_alike() -> None:
    """What the shape cache rests on, for every rule of the shipped set and its examples: a digit-blind
    rule's match and group spans are the same when the digits of the line change (a rule with literal
    digits is not, which is why it is left out)."""
    rng = random.Random(5)
    matcher = LineMatcher(default_rules().line_rules)
    changed_by_digits = 0
    for index, rule in enumerate(matcher.rules):
        lines = [str(e["line"]).encode() for e in rule.match_examples if "line" in e]
        lines += [str(t).encode() for t in rule.no_match_examples]
        blind = digit_blind(relax_bounds(rule.pattern))
        for line in lines:
            for _ in range(4):
                other = bytes(rng.choice(b"0123456789") if 48 <= c <= 57 else c for c in line)
                same = _spans(matcher.regexes[index], line) == _spans(matcher.regexes[index], other)
                if blind:
                    assert same, (rule.id, line, other)
                    assert line.translate(BLIND) == other.translate(BLIND)
                elif not same:
                    changed_by_digits += 1
    assert changed_by_digits > 0


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranks=st.integers(70, 300), seed=st.integers(0, 10_000))
def test_digit_bearing_rules_on_lines_of_one_shape_read_as_a_full_read_does(tmp_path, monkeypatch, ranks, seed) -> None:
    """``SeqNum=0`` and ``SeqNum=7`` have the same digit-blind shape, but only the first is hit by the
    first-collective rule (a literal digit): light records and repeats must follow the real lines."""
    rng = random.Random(seed)
    lines = [ln for b in range(3) for r in rng.sample(range(ranks), ranks)
             for ln in victim_block(r, rng.choice([0, 1, 7, 4180 + b]), 1727980000.0 + b * 5 + rng.random())]
    path = tmp_path / f"seq-{ranks}-{seed}.log"
    path.write_text("\n".join(lines) + "\n")
    fast = extract({}, log_files=[("job", path)])
    assert "s.timeout_first_collective" in fast.symptoms
    assert _view(fast) == _view(_straightforward(monkeypatch, path))


def test_rank_captures_read_by_re2_where_the_shape_is_not_trusted(dense_log, monkeypatch) -> None:
    path, _ = dense_log
    expected = _view(extract({}, log_files=[("job", path)]))
    with monkeypatch.context() as m:
        for plan in list(extract_module._PLANS.values()):
            m.setattr(plan, "_blind", [False] * len(plan.blind))
        assert _view(extract({}, log_files=[("job", path)])) == expected


def test_light_records_are_numbers_and_a_rank_seen_only_in_them_has_no_stream(dense_log, monkeypatch) -> None:
    path, _ = dense_log
    _, collector = _collector_of(monkeypatch, {}, [("job", path)])
    in_tables = sum(len(t) for t in collector.tables())
    assert in_tables > RANKS  # most (symptom, rank) firsts are rows of arrays ...
    derived_only = set(collector.derived_only)
    assert not [e for (s, _), e in collector.events.items() if isinstance(e, Light) and s not in derived_only]
    assert len(collector.streams) < RANKS // 2  # ... and most victim ranks never needed a stream
    assert collector.sources[0].light_times


def test_a_light_only_rank_orders_a_later_untimed_line_by_its_last_time(tmp_path, monkeypatch) -> None:
    """A rank seen only in light lines keeps its last time as a number; a later line of it without a time
    and nothing stamped within the lookback takes that time, as a full read (with a stream) gives it."""
    t = 1727980000.0
    ranks = range(1, 300)
    lines = [*origin_block(0, t)]
    for rank in ranks:
        lines += victim_block(rank, 4180, t + 5 + rank * 0.001)[:4]
    for rank in ranks:  # untimed frames (more than the lookback reads), then an untimed new symptom's line
        lines += [f"[rank{rank}]:     loss = engine(batch)"] * 20
        lines.append(f"[rank{rank}]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank "
                     f"{rank}.")
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    fast_x, fast = _collector_of(monkeypatch, {}, [("job", path)])
    with monkeypatch.context() as m:
        m.setattr(extract_module._Reader, "shortcuts", False)
        full_x, full = _collector_of(monkeypatch, {}, [("job", path)])
    assert _view(fast_x) == _view(full_x)
    full_events = dict(full.all_events())
    fast_events = fast.all_events()
    assert len(fast_events) == len(full_events)
    for key, event in fast_events:
        other = full_events[key]
        assert (event.near_time, event.near_year_known, event.time, event.rank) == \
            (other.near_time, other.near_year_known, other.time, other.rank), key
    assert any(isinstance(e, Light) and e.time is None and e.near_time is not None for _, e in fast_events)


def test_a_light_table_keeps_times_as_numbers_in_their_order_and_gives_year_less_ones_a_year() -> None:
    from datetime import datetime

    from dsdoctor.rules.compact import NO_TIME, LightKind, LightTable, from_micros, to_micros

    kind = LightKind("s.x", "r.x", "error", True, "job", 0, None)
    table = LightTable(kind, year_known=False)
    late, early = datetime(1900, 10, 3, 18, 37, 2, 5), datetime(1900, 10, 3, 18, 37, 1, 999_999)
    table.add(7, None, None, 10, 1, 0, 5)  # no time at all: after every timed record
    table.add(8, late, late, 11, 2, 6, 5)
    table.add(9, None, early, 12, 3, 12, 5)  # ordered by its near time, no own time
    table.add(3, early, early, 13, 4, 18, 5)  # same near time, later order
    assert to_micros(None) == NO_TIME and from_micros(to_micros(late)) == late
    assert table.earliest() == 2 and table.earliest_timed() == 3
    assert not table.years  # year-less times are not counted as years
    table.give_years(2024, 2024)
    light = table.record(1, ("r", 8))
    assert (light.time, light.year_known, light.year_from, light.near_year_known) == (late.replace(year=2024), True,
                                                                                     "job", True)
    assert table.record(0, ("r", 7)).time is None and table.record(0, ("r", 7)).near_time is None
    assert table.earliest() == 2 and table.earliest_timed() == 3


@settings(max_examples=60, deadline=None)
@given(year=st.sampled_from([1, 1999, 2000, 2023, 2024, 2100, 9999]),
       days=st.lists(st.integers(min_value=-400, max_value=800), max_size=40),
       seconds=st.integers(min_value=0, max_value=86_399))
def test_giving_year_less_times_a_year_by_offsets_agrees_with_one_datetime_at_a_time(year, days, seconds) -> None:
    from array import array
    from datetime import datetime, timedelta

    from dsdoctor.rules.compact import NO_TIME, _with_year, _with_year_slow, to_micros
    from dsdoctor.rules.context import PLACEHOLDER_YEAR

    base = datetime(PLACEHOLDER_YEAR, 1, 1) + timedelta(seconds=seconds, microseconds=seconds * 7)
    values = [to_micros(base + timedelta(days=d)) for d in days]  # some outside the placeholder year
    values += [NO_TIME, to_micros(datetime(PLACEHOLDER_YEAR, 2, 29, 12)), to_micros(datetime(PLACEHOLDER_YEAR, 2, 28, 23))]
    micros = array("q", values)
    assert _with_year(micros, year) == _with_year_slow(micros, year)
    inside = array("q", [v for v in values if v == NO_TIME or
                         to_micros(datetime(PLACEHOLDER_YEAR, 1, 1)) <= v < to_micros(datetime(PLACEHOLDER_YEAR + 1, 1, 1))])
    assert _with_year(inside, year) == _with_year_slow(inside, year)


_PREFIXES = [
    b"[rank5]:[E1003 18:37:01.832146 ProcessGroupNCCL.cpp:632] [Rank 5] x", b"[rank5]:[E1399 18:37:01.8 x.cpp:1] y",
    b"[rank5]:[E0230 25:61:61.000001 12 x.cpp:1] y", b"node3: [rank3]:[E1210 02:06:33.321131 1234 P.cpp:607] x",
    b"[2024-05-01 10:00:00,123] [INFO] [engine.py:3656:_report_progress] [Rank 7] step=4", b"[2024-13-01 10:00:00] x",
    b"host1:1234:5678 [3] NCCL INFO x", b"[2024-05-01 10:00:00] host1:1234:5678 [3] NCCL WARN x",
    b"[12345.678901] NVRM: Xid 79", b"[  +0.000844] x", b"[Wed May  1 10:00:00 2024] x", b"May  1 10:00:00 h kernel: x",
    b"Jun 31 10:00:00 h kernel: x", b"W1210 02:06:33.321000 1234 torch/distributed/run.py:793] x",
    b"[PG 0 Rank -0] x", b"[PG 0 Rank -3] x", b"x [Rank 12] y", b"[default3]: x", b"rank12: x", b"10.0.0.1: x",
    b"ERROR:root: x", b"[INFO 2020-05-26 20:08:20] x", b"2024-05-01T10:00:00Z x", b"[E ProcessGroupNCCL.cpp:563] x",
]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_prefix_replayed_from_its_shape_parses_as_the_line_itself(seed) -> None:
    from dsdoctor.rules import context
    from dsdoctor.rules.context import parse_prefix_uncached

    rng = random.Random(seed)
    victims = [ln.encode() for r in (0, 7, 4095) for ln in victim_block(r, 4180, 1727980000.5)]
    lines = [*_example_lines(), *victims, *_PREFIXES]
    context._SHAPES.clear()
    for line in lines:
        assert parse_prefix(line) == parse_prefix_uncached(line), line  # the first of its shape: parsed
        other = bytes(rng.choice(b"0123456789") if 48 <= c <= 57 else c for c in line)  # same shape
        assert parse_prefix(other) == parse_prefix_uncached(other), (line, other)  # replayed


@settings(max_examples=200, deadline=None)
@given(mmdd=st.from_regex(rb"\A\d{3,4}\Z"), hms=st.from_regex(rb"\A\d\d:\d\d:\d\d\Z"),
       frac=st.from_regex(rb"\A\d{1,9}\Z"), earlier=st.sampled_from([None, (2024, True), (2000, False)]))
def test_a_glog_stamp_read_by_its_remembered_second_is_the_clock_reading(mmdd, hms, frac, earlier) -> None:
    from datetime import datetime

    from dsdoctor.rules.context import LineContext, _clock, _glog

    def fresh() -> LineContext:
        ctx = LineContext()
        if earlier is not None:
            ctx.time, ctx.year_known = datetime(earlier[0], 1, 2, 3, 4, 5), earlier[1]
        return ctx

    for _ in range(2):  # the second time from the memo
        fast, slow = fresh(), fresh()
        _glog(fast, b"E", mmdd, hms, frac)
        slow.level = "E"
        _clock(slow, None, int(mmdd[:-2]), int(mmdd[-2:]), hms, frac)
        assert fast == slow
