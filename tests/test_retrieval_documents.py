"""A cause's retrieval document holds its own words, not the words of the causes it is set against."""

from __future__ import annotations

from dsdoctor.kb.loader import load_kb
from dsdoctor.kb.retrieval import _own_documents, _own_words, _terms

CAUSES = ("data.corrupt_sample", "compute.lr_divergence", "comm.ib_rdma_config")


def test_a_clause_naming_another_cause_is_left_out() -> None:
    text = ("The kernel returns inf for finite inputs. Unlike data.corrupt_sample the inputs are finite; "
            "unlike compute.lr_divergence there is no slow blow-up. It follows the code path.")
    kept = _own_words(text, CAUSES)
    assert "kernel returns inf" in kept and "follows the code path" in kept
    assert "corrupt_sample" not in kept and "blow-up" not in kept


def test_a_chinese_contrast_clause_is_left_out() -> None:
    kept = _own_words("只在一张卡上出现。与 comm.ib_rdma_config 不同，问题在 TCP 层；这一点区别于软件卡死。换卡后问题跟着走。", CAUSES)
    assert "只在一张卡上出现" in kept and "换卡后问题跟着走" in kept
    assert "TCP" not in kept and "软件卡死" not in kept


def test_a_plain_dotted_name_is_not_taken_for_a_cause() -> None:
    kept = _own_words("Set torch.backends.cudnn.benchmark to False. The loss stays finite.", CAUSES)
    assert "cudnn" in kept and "stays finite" in kept


def test_no_cause_document_holds_the_words_only_its_contrasts_use() -> None:
    kb = load_kb()
    docs = _own_documents(kb)
    # compute.unstable_op contrasts itself with a "gradual blow-up": that phrase is not its own word
    blow = set(_terms("blow-up"))
    assert blow and not blow <= set(docs["compute.unstable_op"])
