"""The corpus bench: slices, calibration arithmetic, the closed loop, and first contact written once."""

from __future__ import annotations

import json

import pytest

from bench import corpus
from dsdoctor.kb.loader import get_kb


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


def _capture_exclusions(monkeypatch, label="memory.fragmentation"):
    """Replace the pipeline by a stub that records what retrieval may not see while each case runs."""
    from dsdoctor.kb import retrieval

    seen: list[frozenset[str]] = []

    def fake_diagnose(evidence, kb=None, top=10, lang="en", **_):
        seen.append(retrieval._EXCLUDED.get())
        return {"causes": [{"id": label, "probability": 0.95}], "next_experiments": [], "next_step": None}

    monkeypatch.setattr("dsdoctor.kb.diagnosis.diagnose", fake_diagnose)
    return seen


def _threaded_case(tmp_path, name, batch, thread):
    _case(tmp_path, name, "memory.fragmentation", batch=batch)
    path = tmp_path / f"batch{batch}" / f"{name}.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw.update(source=f"o/r#{thread}", url=f"https://github.com/o/r/issues/{thread}")
    path.write_text(json.dumps(raw), encoding="utf-8")


def test_each_case_is_scored_without_its_own_incident_and_thread(tmp_path, monkeypatch):
    _threaded_case(tmp_path, "a", 1, 11)
    _threaded_case(tmp_path, "b", 1, 12)
    seen = _capture_exclusions(monkeypatch)
    corpus.evaluate(corpus.load_cases(tmp_path), get_kb(), loop=False)
    assert {"a", "o/r#11"} <= seen[0] and not {"b", "o/r#12"} & seen[0]
    assert {"b", "o/r#12"} <= seen[1] and not {"a", "o/r#11"} & seen[1]


def test_first_contact_hides_every_document_of_the_batch_it_scores(tmp_path, monkeypatch):
    _threaded_case(tmp_path, "old", 1, 21)
    _threaded_case(tmp_path, "new1", 2, 22)
    _threaded_case(tmp_path, "new2", 2, 23)
    monkeypatch.setattr(corpus, "CORPUS_DIR", tmp_path)
    monkeypatch.setattr(corpus, "FIRST_CONTACT", tmp_path / "first_contact.json")
    seen = _capture_exclusions(monkeypatch)
    monkeypatch.setattr("sys.argv", ["bench.corpus", "--record-first-contact", "2"])
    corpus.main()
    assert len(seen) >= 2
    for hidden in seen:  # every call of every case of batch 2, the closed loop's included
        assert {"new1", "new2", "o/r#22", "o/r#23"} <= hidden and not {"old", "o/r#21"} & hidden


def test_a_batch_without_its_first_contact_row_is_no_document_for_the_others(tmp_path, monkeypatch):
    _threaded_case(tmp_path, "seen", 1, 31)
    _threaded_case(tmp_path, "unscored", 2, 32)
    monkeypatch.setattr(corpus, "CORPUS_DIR", tmp_path)
    monkeypatch.setattr(corpus, "FIRST_CONTACT", tmp_path / "first_contact.json")
    corpus.record_first_contact(1, [_outcome("a.b", ["a.b"], 0.9)])
    seen = _capture_exclusions(monkeypatch)
    monkeypatch.setattr("sys.argv", ["bench.corpus", "--no-loop", "--devset", str(tmp_path / "none")])
    corpus.main()
    assert seen and all({"unscored", "o/r#32"} <= hidden for hidden in seen)


def test_cross_validation_chooses_on_the_other_batches_and_hides_the_held_out_one(tmp_path, monkeypatch):
    from dsdoctor.kb import retrieval
    from dsdoctor.kb.inference import engine_settings

    for batch in (1, 2, 3):
        _threaded_case(tmp_path, f"c{batch}", batch, 40 + batch)
    calls = []

    def fake_diagnose(evidence, kb=None, top=10, lang="en", **_):
        weight = engine_settings()["incident_weight"]
        calls.append((weight, retrieval._EXCLUDED.get()))
        right = weight == 0.5  # only this value ever gets a case right
        return {"causes": [{"id": "memory.fragmentation" if right else "comm.shm_insufficient", "probability": 0.6}],
                "next_experiments": [], "next_step": None}

    monkeypatch.setattr("dsdoctor.kb.diagnosis.diagnose", fake_diagnose)
    before = engine_settings()["incident_weight"]
    folds = corpus.cross_validate(corpus.load_cases(tmp_path), get_kb(), grid=(0.0, 0.5, 1.0))
    assert engine_settings()["incident_weight"] == before  # the override ends with the run
    assert [(f["test"], f["chosen"], f["top1"]) for f in folds] == [(1, 0.5, 1.0), (2, 0.5, 1.0), (3, 0.5, 1.0)]
    assert folds[0]["without"]["top1"] == 0.0
    # every call hides the case's own batch; the held-out batch is hidden from the others too
    for _, hidden in calls:
        assert sum(f"o/r#{40 + b}" in hidden for b in (1, 2, 3)) >= 1
    assert any({"o/r#41", "o/r#42"} <= hidden for _, hidden in calls)


def test_an_experiment_that_lists_the_label_with_the_default_odds_bears_but_does_not_discriminate():
    kb = get_kb()
    listed_at_default = next((e.id, c) for e in kb.experiments.values() for c, d in e.expects.items()
                             if sum(abs(d.get(o, 0) - e.default.get(o, 0)) for o in e.default) / 2 < 0.02)
    telling = next((e.id, c) for e in kb.experiments.values() for c, d in e.expects.items()
                   if sum(abs(d.get(o, 0) - e.default.get(o, 0)) for o in e.default) / 2 > 0.5)
    assert corpus._bears_on(kb, *listed_at_default) and not corpus.discriminates(kb, *listed_at_default)
    assert corpus._bears_on(kb, *telling) and corpus.discriminates(kb, *telling)
    assert corpus.discriminates(kb, "fix:memory.fragmentation", "memory.fragmentation")
    assert not corpus.discriminates(kb, "fix:memory.fragmentation", "memory.leak_across_steps")
    assert not corpus.discriminates(kb, None, "memory.fragmentation")


def test_a_calibration_setting_is_fitted_by_calibration_error_not_accuracy():
    # the same accuracy, one honest and one overconfident: only the calibration fit tells them apart
    honest = [_outcome("a.b", ["a.b"], 0.5), _outcome("a.b", ["x"], 0.5)]
    boastful = [_outcome("a.b", ["a.b"], 0.99), _outcome("a.b", ["x"], 0.99)]
    assert corpus._fit(honest) == corpus._fit(boastful)
    assert corpus._fit(honest, "posterior_temperature") > corpus._fit(boastful, "posterior_temperature")
