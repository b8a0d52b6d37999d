"""Knowledge gaps of issue 13 (C.8): each reaches the cause it belongs to. Examples are our own."""

from __future__ import annotations

from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.kb.inference import EvidenceState, _evidence_symptoms, engine_settings_replaced
from dsdoctor.kb.loader import load_kb
from dsdoctor.rules.extract import extract


def _top(evidence: dict, n: int = 3) -> list[str]:
    return [c["id"] for c in diagnose(evidence)["causes"][:n]]


def test_oom_while_saving_or_resuming_reaches_checkpoint_peak() -> None:
    en = {"description": "Two epochs train fine, then the job goes out of GPU memory inside save_pretrained at the end."}
    zh = {"description": "训练一直正常，断点续训之后第一步就爆显存了。"}
    for evidence in (en, zh):
        assert "s.oom_at_checkpoint" in extract(evidence).symptoms
        assert "memory.checkpoint_peak" in _top(evidence)


def test_torch_load_frames_make_an_oom_a_checkpoint_oom() -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "/work/train.py", line 88, in <module>\n    state = torch.load(path, map_location="cuda")\n'
            '  File "/usr/lib/python3/site-packages/torch/serialization.py", line 1025, in load\n    return _load(\n'
            '  File "/usr/lib/python3/site-packages/torch/serialization.py", line 1446, in _load\n'
            "    result = unpickler.load()\n"
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total "
            "capacity of 39.39 GiB of which 312.00 MiB is free.")
    x = extract({"logs": [{"source": "stdout", "text": text}]})
    assert "s.oom_at_checkpoint" in x.symptoms


def test_dataloader_frames_in_a_plain_traceback_are_data_evidence() -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "/srv/run.py", line 40, in <module>\n    for batch in loader:\n'
            '  File "/env/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 633, in __next__\n'
            "    data = self._next_data()\n"
            '  File "/env/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1345, in _next_data\n'
            "    return self._process_data(data)\n"
            "ValueError: Caught ValueError in DataLoader worker process 1.")
    x = extract({"logs": [{"source": "stdout", "text": text}]})
    assert "s.error_in_data_loading" in x.symptoms
    assert _top({"logs": [{"source": "stdout", "text": text}]}, 1)[0].startswith("data.")


def test_script_stop_on_nan_and_zero3_rank_disagreement() -> None:
    assert "s.loss_nan" in extract({"logs": [{"source": "stdout", "text": "Loss is nan, stopping training"}]}).symptoms
    line = "RuntimeError: disagreement between rank0 and rank3: rank0: [40, 41], rank3: [40, 57]"
    assert "s.collective_mismatch_detected" in extract({"logs": [{"source": "stdout", "text": line}]}).symptoms


def test_remote_error_at_start_up_reaches_the_socket_interface() -> None:
    evidence = {"description": "Two servers, 8 GPUs each; it never gets past init_process_group.",
                "logs": [{"source": "stdout", "text": "torch.distributed.DistBackendError: NCCL error in: "
                          "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, remote process exited or "
                          "there was a network error, NCCL version 2.18.6"}],
                "environment": {"num_nodes": 2, "gpus_per_node": 8}}
    assert "comm.network_interface" in _top(evidence)


def test_environment_symptoms_are_not_unseen_when_their_key_is_missing() -> None:
    x = extract({"environment": {"versions": {"torch": "2.3.1"}}})
    ev = EvidenceState.from_extraction(x)
    states = _evidence_symptoms(load_kb(), ev)
    assert "s.pre_ampere_gpu" not in states and "s.multi_node_job" not in states


def test_zero_division_in_the_training_loop_reaches_the_batch_settings() -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "/srv/finetune.py", line 120, in fit\n'
            "    avg = {name: sum(vals) / len(vals) for name, vals in logged.items()}\n"
            "ZeroDivisionError: division by zero")
    logs = {"logs": [{"source": "stdout", "text": text}]}
    assert "s.zero_division_in_training" in extract(logs).symptoms
    assert _top(logs, 1) == ["config.batch_size_mismatch"]
    words = {"description": "with 8 GPUs the run stops right away on a ZeroDivisionError, on 2 GPUs it trains"}
    assert "s.zero_division_in_training" in extract(words).symptoms
    guarded = {"description": "we guard the metric mean so it never divides by zero; training is fine"}
    assert "s.zero_division_in_training" not in extract(guarded).symptoms


def _odds(evidence: dict, cause: str, rival: str) -> float:
    """Odds of ``cause`` over ``rival`` from what the rules read (retrieval's word resemblance off)."""
    with engine_settings_replaced({"text_weight": 0.0}):
        p = {c["id"]: c["probability"] for c in diagnose(evidence, top=50)["causes"]}
    return p.get(cause, 0.0) / max(p.get(rival, 0.0), 1e-9)


def test_a_nan_that_follows_the_data_reaches_the_bad_sample() -> None:
    # the same NaN report with and without the cue that the NaN follows the data
    pairs = (("the loss turns NaN at exactly the same iteration each time I restart from scratch",
              "the loss turns NaN during training"),
             ("每次重跑都在同一步出现 nan", "训练中 loss 出现 nan"))
    for tied, plain in pairs:
        assert "s.nan_data_locked" in extract({"description": tied}).symptoms
        assert "s.nan_data_locked" not in extract({"description": plain}).symptoms
        gain = _odds({"description": tied}, "data.corrupt_sample", "compute.lr_divergence")
        assert gain > 3 * _odds({"description": plain}, "data.corrupt_sample", "compute.lr_divergence")
    late = "after ten thousand steps the loss slowly climbs and then goes NaN for good"
    assert "s.nan_data_locked" not in extract({"description": late}).symptoms


def test_a_hang_in_the_last_epoch_is_a_steady_phase_hang_not_a_rendezvous() -> None:
    evidence = {"description": "Two servers train fine for three epochs; in the final epoch every rank freezes and "
                               "nothing is printed any more.", "environment": {"nodes": 2}}
    x = extract(evidence)
    assert {"s.phase_steady", "s.uneven_batches"} <= set(x.symptoms)
    top = _top(evidence)
    assert "data.shard_imbalance" in top and top[0] != "config.launch_rendezvous"
