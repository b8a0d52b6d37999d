"""The bilingual analyzer: jieba for Chinese, stemming for English, identical at index and query time."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dsdoctor.kb.incidents import analyzer
from dsdoctor.kb.incidents.analyzer import BilingualAnalyzer, has_chinese, sections, segment, terms

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def jieba_cache(dsdoctor_home):
    analyzer.configure(dsdoctor_home / "cache")


def words(text: str) -> list[str]:
    return [t for t, _pos, _start, _end in terms(text)]


def test_chinese_query_terms_are_all_in_the_longer_document():
    doc = set(words("出现显存碎片化导致 OOM"))
    query = words("显存碎片")
    assert query and set(query) <= doc


def test_dictionary_words_inside_a_long_word_are_indexed_too():
    assert {"检查", "检查点"} <= set(words("保存检查点超时"))


def test_english_is_lower_cased_and_stemmed():
    assert words("Saving Checkpoints") == ["save", "checkpoint"]
    assert words("checkpoint") == ["checkpoint"]


def test_stop_words_are_dropped_and_take_no_position():
    found = list(terms("saving a checkpoint"))
    assert [(t, p) for t, p, _s, _e in found] == [("save", 0), ("checkpoint", 1)]


def test_identifiers_split_into_consecutive_words():
    found = [(t, p) for t, p, _s, _e in terms("NCCL_SOCKET_IFNAME=eth0 memory.fragmentation")]
    assert found == [("nccl", 0), ("socket", 1), ("ifnam", 2), ("eth0", 3), ("memori", 4), ("fragment", 5)]


def test_sections_weigh_their_terms_and_never_form_a_phrase_across():
    value = sections([(3, "Saving checkpoints"), (1, "checkpoint 显存")])
    tokens = [(t.text, t.boost, t.pos) for t in BilingualAnalyzer()(value, positions=True)]
    assert tokens[:2] == [("save", 3.0, 0), ("checkpoint", 3.0, 1)]
    assert [(t, b) for t, b, _p in tokens[2:]] == [("checkpoint", 1.0), ("显存", 1.0)]
    assert tokens[2][2] - tokens[1][2] > 50


def test_mixed_text_offsets_point_at_the_original_characters():
    text = "只有 rank 3 OOM：同卡上残留的推理进程"
    for term, _pos, start, end in terms(text, keep_stops=True):
        assert text[start:end].lower().startswith(term[:2].lower())


def test_analyzer_yields_whoosh_tokens_with_positions_and_chars():
    tokens = [(t.text, t.pos, t.startchar, t.endchar)
              for t in BilingualAnalyzer()("显存 checkpoints", positions=True, chars=True)]
    assert tokens == [("显存", 0, 0, 2), ("checkpoint", 1, 3, 14)]


def test_analyzer_survives_pickling_without_jieba_state():
    restored = pickle.loads(pickle.dumps(BilingualAnalyzer()))
    assert restored == BilingualAnalyzer()
    assert [t.text for t in restored("显存碎片")] == ["显存", "碎片"]


def test_segment_joins_terms_with_spaces():
    assert segment("显存碎片 Checkpoints") == "显存 碎片 checkpoint"


def test_has_chinese():
    assert has_chinese("rank 3 显存") and not has_chinese("rank 3 OOM")


def test_jieba_cache_goes_to_the_configured_directory(tmp_path):
    script = textwrap.dedent(f"""
        from pathlib import Path
        from dsdoctor.kb.incidents import analyzer
        analyzer.configure(Path({str(tmp_path / 'c')!r}))
        analyzer.warm_up()
        print(analyzer.jieba_loaded())
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
    assert (tmp_path / "c" / "jieba.cache").exists()


def test_english_text_never_loads_jieba():
    script = "import sys\nfrom kb.incidents.analyzer import terms\nlist(terms('Watchdog timeout on rank 0'))\n" \
             "print('jieba' in sys.modules)\nlist(terms('看门狗超时'))\nprint('jieba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stderr
