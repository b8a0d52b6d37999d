"""The corpus bench: slices, calibration arithmetic, the closed loop, and first contact written once."""

from __future__ import annotations

import json

import pytest

from bench import corpus
from kb.loader import get_kb


def _case(tmp_path, name, label, language="en", logs=None, batch=1, description="x"):
    evidence = {"description": description}
    if logs:
        evidence["logs"] = [{"source": "rank0", "text": logs}]
    raw = {"id": name, "batch": batch, "language": language, "source": "o/r#1", "label": label,
           "also_ok": [], "why": "w", "evidence": evidence}
    folder = tmp_path / f"batch{batch}"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(raw), encoding="utf-8")


def _outcome(label, ranked, p, language="en", logs=False):
    ev = {"description": "d", **({"logs": [{"source": "a", "text": "b"}]} if logs else {})}
    return corpus.Outcome(corpus.Case("c", 1, language, label, {label}, ev), ranked, p)


def test_load_cases_reads_batches_and_skips_the_first_contact_file(tmp_path):
    _case(tmp_path, "a", "memory.activation_memory", batch=1)
    _case(tmp_path, "b", "comm.shm_insufficient", batch=2, language="zh")
    (tmp_path / "first_contact.json").write_text("[]", encoding="utf-8")
    assert [c.id for c in corpus.load_cases(tmp_path)] == ["a", "b"]
    only2 = corpus.load_cases(tmp_path, batch=2)
    assert [(c.id, c.language) for c in only2] == [("b", "zh")]


def test_slices_and_summary_count_each_kind_of_report():
    rows = [_outcome("memory.fragmentation", ["memory.fragmentation"], 0.8, logs=True),
            _outcome("comm.shm_insufficient", ["x", "y", "comm.shm_insufficient"], 0.3, language="zh"),
            _outcome("data.loader_hang", ["x"], 0.5)]
    s = corpus.summary(rows)
    assert s["n"] == 3
    assert s["top1"] == pytest.approx(1 / 3) and s["top3"] == pytest.approx(2 / 3)
    assert s["description_only_top3"] == pytest.approx(1 / 2)
    assert s["chinese_top3"] == 1.0
    parts = corpus.slices(rows)
    assert {len(parts["with logs"]), len(parts["description only"])} == {1, 2}
    assert [len(parts[f"  {d}"]) for d in ("comm", "data", "memory")] == [1, 1, 1]


def test_calibration_bins_and_expected_error():
    rows = [_outcome("a.b", ["a.b"], 0.95), _outcome("a.b", ["x.y"], 0.95),
            _outcome("a.b", ["a.b"], 0.1)]
    table, ece = corpus.calibration(rows)
    assert [(b, n) for b, n, _, _ in table] == [("0.0-0.2", 1), ("0.9-1.0", 2)]
    # |0.1 - 1| * 1/3 + |0.95 - 0.5| * 2/3
    assert ece == pytest.approx(0.9 / 3 + 0.45 * 2 / 3)


def test_first_contact_is_recorded_once_and_never_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "FIRST_CONTACT", tmp_path / "first_contact.json")
    rows = [_outcome("a.b", ["a.b"], 0.9)]
    row = corpus.record_first_contact(1, rows)
    assert row["batch"] == 1 and row["top1"] == 1.0 and row["n"] == 1
    with pytest.raises(SystemExit, match="never rewritten"):
        corpus.record_first_contact(1, [_outcome("a.b", ["x"], 0.9)])
    assert json.loads((tmp_path / "first_contact.json").read_text())[0]["top1"] == 1.0
    corpus.record_first_contact(2, rows)
    assert [r["batch"] for r in corpus.read_first_contact()] == [1, 2]


def test_evaluate_runs_the_pipeline_and_the_closed_loop(tmp_path):
    log = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
           "capacity of 79.15 GiB of which 1.10 GiB is free. Process 4242 has 30.00 GiB memory in use.")
    _case(tmp_path, "oom", "memory.foreign_process_on_gpu", logs=log, description="only gpu 3 dies")
    kb = get_kb()
    [row] = corpus.evaluate(corpus.load_cases(tmp_path), kb)
    assert row.ranked and row.ranked == sorted(set(row.ranked), key=row.ranked.index)
    assert 0.0 < row.top_probability <= 1.0
    # confident: the first step is the leading cause's fix, which bears on the label when it is the label
    assert row.first_experiment == f"fix:{row.ranked[0]}" and row.first_bears == (row.ranked[0] == row.case.label)
    assert isinstance(row.loop_confident, bool)
    some = next(iter(kb.experiments))
    assert corpus._predicted_outcome(kb, some, row.case.label) in {o.id for o in kb.experiments[some].outcomes}


def test_a_batch_without_its_first_contact_row_is_left_out_of_the_figures(tmp_path, monkeypatch, capsys):
    _case(tmp_path, "seen", "memory.fragmentation", batch=1)
    _case(tmp_path, "new", "memory.fragmentation", batch=2)
    monkeypatch.setattr(corpus, "CORPUS_DIR", tmp_path)
    monkeypatch.setattr(corpus, "FIRST_CONTACT", tmp_path / "first_contact.json")
    corpus.record_first_contact(1, [_outcome("a.b", ["a.b"], 0.9)])
    monkeypatch.setattr("sys.argv", ["bench.corpus", "--no-loop", "--devset", str(tmp_path / "none")])
    corpus.main()
    out = capsys.readouterr().out
    assert "[2] have no first-contact row yet" in out
    assert "batch 1:" in out and "batch 2:" not in out
