"""Similar incidents beside a diagnosis (kb/incidents/similar.py `for_diagnosis`): a floor, and
ranking by shared symptoms and mechanisms before the score."""

from __future__ import annotations

import pytest

from dsdoctor.kb.catalog import load_catalog
from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.kb.incidents import IncidentStore
from dsdoctor.kb.incidents.similar import DIAGNOSIS_FLOOR, for_diagnosis

OOM = ("[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 3 has a total capacity "
       "of 79.15 GiB of which 2.44 GiB is free. Process 2891734 has 21.30 GiB memory in use. Of the allocated memory "
       "51.02 GiB is allocated by PyTorch, and 2.11 GiB is reserved by PyTorch but unallocated.")


def item(id: str, score: float, *symptoms: str) -> dict:
    return {"id": id, "title": id, "root_cause": "memory.foreign_process_on_gpu", "score": score,
            "symptoms": list(symptoms)}


def test_below_the_floor_nothing_is_shown() -> None:
    found = for_diagnosis([item("A", DIAGNOSIS_FLOOR - 0.01, "s.cuda_oom")], ["s.cuda_oom"], {})
    assert found == []


def test_sharing_only_scope_or_phase_is_not_similarity() -> None:
    found = for_diagnosis([item("A", 0.9, "s.scope_single_rank", "s.phase_steady")],
                          ["s.cuda_oom", "s.scope_single_rank", "s.phase_steady"], {})
    assert found == []


def test_shared_symptoms_and_mechanisms_rank_before_the_score() -> None:
    mechanisms = {"s.oom_other_process_on_gpu": {"m.gpu_memory_held_by_other"}}
    found = for_diagnosis([item("text-heavy", 0.8, "s.cuda_oom"),
                           item("same-mechanism", 0.4, "s.cuda_oom", "s.oom_other_process_on_gpu")],
                          ["s.cuda_oom", "s.oom_other_process_on_gpu"], mechanisms)
    assert [f["id"] for f in found] == ["same-mechanism", "text-heavy"]
    assert found[0]["shared_symptoms"] == ["s.cuda_oom", "s.oom_other_process_on_gpu"]
    assert found[0]["shared_mechanisms"] == ["m.gpu_memory_held_by_other"]


@pytest.fixture
def store(dsdoctor_home, store_backend):
    with IncidentStore(dsdoctor_home, valid_causes=frozenset(load_catalog()), seed=False) as s:
        s.add({"title": "Only rank 3 OOM while a stale process holds the GPU", "phenomenon": "CUDA out of memory",
               "root_cause": "memory.foreign_process_on_gpu",
               "symptoms": ["s.cuda_oom", "s.oom_other_process_on_gpu", "s.scope_single_rank"]})
        s.add({"title": "Two-node job hangs: NCCL bound docker0", "phenomenon": "broadcast timeout on rank 3",
               "root_cause": "comm.network_interface",
               "symptoms": ["s.suspicious_interface", "s.nccl_watchdog_timeout", "s.scope_single_rank"]})
        s.add({"title": "Rank 3 runs out of batches first", "phenomenon": "rank 3 timeout, per-rank shard files",
               "root_cause": "data.shard_imbalance", "symptoms": ["s.scope_single_rank", "s.secondary_timeouts"]})
        yield s


def test_a_cuda_oom_diagnosis_lists_no_network_or_data_shard_incident(store, real_kb) -> None:
    # issue 15: a docker0 and a data-shard incident (scores 0.08-0.27) were listed beside a CUDA OOM
    d = diagnose({"logs": [{"source": "rank3.log", "text": OOM}], "description": "rank 3 out of memory"},
                 kb=real_kb, similar=lambda s, t: store.similar(symptoms=s, text=t or None, limit=10))
    causes = [s["root_cause"] for s in d["similar_incidents"]]
    assert causes == ["memory.foreign_process_on_gpu"]
    assert all(s["score"] >= DIAGNOSIS_FLOOR for s in d["similar_incidents"])
