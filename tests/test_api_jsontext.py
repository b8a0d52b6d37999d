"""JSON text of stored and sent documents: fast, and never failing on what a client may send."""

from __future__ import annotations

import json

from dsdoctor.api import jsontext


def test_documents_round_trip_with_unicode_kept_readable():
    doc = {"title": "显存碎片 OOM", "p": 0.25, "ranks": [3, 37], "nested": {"ok": True, "none": None}}
    text = jsontext.dumps(doc)
    assert json.loads(text) == doc
    assert "显存碎片" in text  # not \\u escapes


def test_integers_beyond_64_bits_take_the_standard_encoder():
    doc = {"config": {"train_batch_size": 10**30, "nan": float("nan")}}
    assert json.loads(jsontext.dumps(doc)) == {"config": {"train_batch_size": 10**30, "nan": None}}


def test_nan_and_infinity_become_null_not_invalid_tokens():
    text = jsontext.dumps({"loss": float("nan"), "scale": float("inf"), "rank_loss": {3: float("-inf")}})
    assert json.loads(text) == {"loss": None, "scale": None, "rank_loss": {"3": None}}
    assert "NaN" not in text and "Infinity" not in text
