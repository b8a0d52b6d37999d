"""The three looks (first error with cascades, scope, phase) and the derived numeric facts."""

from __future__ import annotations

from tests.rulesfx import lines, run

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 3 has a total capacity of "
       "79.15 GiB of which 2.44 GiB is free. Process 2891734 has 21.30 GiB memory in use. Including non-PyTorch "
       "memory, this process has 55.38 GiB memory in use. Of the allocated memory 51.02 GiB is allocated by PyTorch, "
       "and 2.11 GiB is reserved by PyTorch but unallocated.")


def watchdog(rank: int, time: str = "1210 02:16:33.321131") -> str:
    return (f"[rank{rank}]:[E{time} ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=19, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600093 "
            "milliseconds before timing out.")


def progress(rank: int, step: int, loss: str = "2.31", ts: str = "2024-12-10 02:00:00,000") -> str:
    return f"[rank{rank}]:[{ts}] [INFO] [train.py:412:train_step] step {step} | loss={loss}, grad_norm=1.02"


# ---------------------------------------------------------------------- first error and cascades


def test_origin_beats_earlier_victim_lines_and_victims_become_secondary_timeouts() -> None:
    text = lines(
        *(progress(r, 5) for r in range(4)),
        watchdog(0, "1210 02:16:33.000001"),  # printed first in the file, but a victim
        f"[rank2]:[2024-12-10 02:06:33,000] [INFO] [x.py:1:f] {OOM}",
        watchdog(1, "1210 02:16:33.000002"),
        watchdog(3, "1210 02:16:34.000000"),
    )
    x = run(text, environment={"world_size": 4, "nodes": 1})
    assert x.first_error is not None
    assert (x.first_error.rank, x.first_error.symptom) == (2, "s.cuda_oom")
    assert x.first_error.time == "2024-12-10T02:06:33"
    victims = x.symptoms["s.secondary_timeouts"]
    assert victims.ranks == {0, 1, 3}
    assert x.symptoms["s.nccl_watchdog_timeout"].secondary
    assert x.scope == "single-rank"
    assert "s.scope_single_rank" in x.symptoms and "s.scope_global" in x.absent


def test_timestamps_order_sources_not_file_order() -> None:
    x = run({
        "rank0": lines("[2024-05-01 10:00:09,000] [INFO] [a.py:1:f] RuntimeError: CUDA error: an illegal memory access was encountered"),
        "rank5": lines("[2024-05-01 10:00:01,000] [INFO] [a.py:1:f] RuntimeError: DataLoader timed out after 1800 seconds"),
    })
    assert x.first_error is not None and x.first_error.rank == 5 and x.first_error.symptom == "s.dataloader_timeout"


def test_untimed_error_line_has_no_time_but_is_ordered_by_the_nearest_earlier_stamp() -> None:
    # issue 15: the first error was shown with the time of another line (rank 0's last step line)
    x = run({
        "rank4": lines("[2024-05-01 10:00:00,000] [INFO] [a.py:1:f] starting", "some output",
                       "RuntimeError: CUDA error: an illegal memory access was encountered"),
        "rank5": lines("[2024-05-01 10:00:05,000] [INFO] [a.py:1:f] RuntimeError: DataLoader timed out after 1800 seconds"),
    })
    assert x.first_error is not None and x.first_error.rank == 4
    assert x.first_error.time is None
    assert x.symptoms["s.illegal_memory_access"].lines[0].time is None


def test_error_line_never_shows_another_ranks_step_time() -> None:
    x = run(lines(progress(0, 5, ts="2024-12-10 02:05:00,000"),
                  "[rank3]:RuntimeError: CUDA error: an illegal memory access was encountered"),
            environment={"world_size": 4, "nodes": 1})
    assert x.first_error is not None and x.first_error.rank == 3 and x.first_error.time is None


def test_only_victims_means_no_secondary_timeouts_symptom() -> None:
    x = run(lines(*(watchdog(r) for r in range(4))), environment={"world_size": 4, "nodes": 1})
    assert x.first_error is not None and x.first_error.symptom == "s.nccl_watchdog_timeout"
    assert "s.secondary_timeouts" not in x.symptoms
    assert x.scope == "global"


def test_year_less_glog_times_take_the_year_of_the_log() -> None:
    x = run(lines(progress(0, 5, ts="2023-12-10 02:00:00,000"), watchdog(0)))
    assert x.first_error is not None and x.first_error.time == "2023-12-10T02:16:33.321131"
    assert x.first_error.year_from == "stdout"  # said so: the year came from other lines of that source


def test_year_less_times_take_no_year_from_another_source() -> None:
    x = run({"rank0": lines(progress(0, 5, ts="2023-12-10 02:00:00,000")), "rank1": lines(watchdog(1))})
    assert x.first_error is not None and x.first_error.time == "--12-10T02:16:33.321131"
    assert x.first_error.year_from is None


def test_year_less_times_without_any_year_stay_year_less() -> None:
    x = run(lines(watchdog(0)))
    assert x.first_error is not None and x.first_error.time == "--12-10T02:16:33.321131"


# ---------------------------------------------------------------------- scope


def test_single_rank_needs_evidence_that_others_are_fine() -> None:
    alone = run({"rank3": lines(OOM)}, environment={"world_size": 8})
    assert alone.scope == "unknown" and not any(s.startswith("s.scope_") for s in alone.symptoms)
    others = run(lines(*(progress(r, 7) for r in range(8)), f"[rank3]: {OOM}"), environment={"world_size": 8})
    assert others.scope == "single-rank"


def test_global_means_every_rank_of_the_world() -> None:
    some = run(lines(*(f"[rank{r}]: {OOM}" for r in range(6))), environment={"world_size": 8, "nodes": 1})
    assert some.scope == "single-node"
    every = run(lines(*(f"[rank{r}]: {OOM}" for r in range(8))), environment={"world_size": 8, "nodes": 1})
    assert every.scope == "global"


def test_multi_node_and_single_node_from_pdsh_prefixes() -> None:
    def err(node: int, rank: int) -> str:
        return f"node{node}: [rank{rank}]: RuntimeError: CUDA error: an illegal memory access was encountered"

    ok = [f"node{n}: {progress(r, 9)}" for n in range(4) for r in range(n * 2, n * 2 + 2)]
    one_node = run(lines(*ok, err(1, 2), err(1, 3)), environment={"world_size": 8, "nodes": 4})
    assert one_node.scope == "single-node"
    two_nodes = run(lines(*ok, err(1, 2), err(3, 6)), environment={"world_size": 8, "nodes": 4})
    assert two_nodes.scope == "multi-node"
    assert {"s.scope_single_rank", "s.scope_single_node", "s.scope_global"} <= two_nodes.absent


def test_local_ranks_are_ranks_on_one_node() -> None:
    text = lines(*(f"[default{r}]:[2024-03-02 14:11:17,100] [INFO] [t.py:1:m] step 2 loss=2.88" for r in range(8)),
                 f"[default3]:{OOM}")
    x = run({"torchrun": text}, environment={"world_size": 8, "nodes": 1})
    assert x.first_error is not None and x.first_error.rank == 3
    assert x.scope == "single-rank" and x.symptoms["s.cuda_oom"].ranks == {3}


# ---------------------------------------------------------------------- phase


def test_phase_first_step_and_steady() -> None:
    early = run(lines(progress(0, 1), progress(1, 1), f"[rank0]: {OOM}"))
    assert early.phase == "first-step" and "s.phase_first_step" in early.symptoms
    late = run(lines(progress(0, 1200), progress(1, 1200), f"[rank0]: {OOM}"))
    assert late.phase == "steady"
    assert {"s.phase_launch", "s.phase_first_step", "s.phase_checkpoint"} <= late.absent


def test_phase_from_traceback_frames_checkpoint_and_oom_stage() -> None:
    text = lines(
        progress(0, 500),
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/w/train.py", line 141, in <module>',
        '[rank0]:   File "/site-packages/deepspeed/runtime/engine.py", line 3100, in save_checkpoint',
        "[rank0]:     self._save_zero_checkpoint(save_dir, tag)",
        '[rank0]:   File "/site-packages/deepspeed/runtime/engine.py", line 3500, in _zero3_consolidated_16bit_state_dict',
        f"[rank0]: {OOM}",
    )
    x = run(text)
    assert x.phase == "checkpoint"
    assert "s.oom_at_checkpoint" in x.symptoms


def test_oom_in_forward_and_optimizer_init_stages() -> None:
    fwd = run(lines(progress(0, 3), '  File "/w/train.py", line 97, in main',
                    '  File "/ds/engine.py", line 1855, in forward', '  File "/m/llama.py", line 1196, in forward',
                    "    logits = logits.float()", OOM))
    assert "s.oom_in_forward" in fwd.symptoms and fwd.phase == "first-step"
    init = run(lines("Traceback (most recent call last):", '  File "/w/train.py", line 419, in setup_model_and_optimizer',
                     '  File "/ds/__init__.py", line 119, in initialize', '  File "/ds/engine.py", line 1082, in _configure_optimizer',
                     OOM))
    assert "s.oom_in_optimizer_init" in init.symptoms and init.phase == "launch"


def test_frames_far_before_the_error_are_not_its_traceback() -> None:
    text = lines('  File "/ds/engine.py", line 3100, in save_checkpoint', *(["filler line"] * 30), OOM)
    x = run(text)
    assert "s.oom_at_checkpoint" not in x.symptoms


def test_phase_from_markers_eval_and_exit() -> None:
    ev = run(lines(progress(0, 900), "***** Running Evaluation *****", f"[rank0]: {OOM}"))
    assert ev.phase == "eval"
    done = run(lines(progress(0, 900), "Training completed. Do not forget to share your model on huggingface.co/models =)",
                     "RuntimeError: CUDA error: an illegal memory access was encountered"))
    assert done.phase == "exit"


def test_phase_launch_from_init_markers_only() -> None:
    x = run(lines("[2024-06-11 03:01:02,118] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2",
                  "RuntimeError: CUDA error: an illegal memory access was encountered"))
    assert x.phase == "launch"


def test_phase_unknown_without_context() -> None:
    x = run(lines(OOM))
    assert x.phase == "unknown" and not any(s.startswith("s.phase_") for s in set(x.symptoms) | x.absent)


# ---------------------------------------------------------------------- NaN, overflow, OOM figures


def test_nan_on_a_subset_of_ranks() -> None:
    text = lines(*(progress(r, 1200) for r in range(8)), progress(5, 1201, "nan"), *(progress(r, 1201) for r in (0, 1)))
    x = run(text)
    assert "s.nan_subset_ranks" in x.symptoms and "s.nan_all_ranks" in x.absent
    assert x.symptoms["s.loss_nan"].ranks == {5}
    assert "s.nan_from_first_step" not in x.symptoms


def test_nan_on_all_ranks_from_the_first_step() -> None:
    text = lines(*(progress(r, 1, "nan") for r in range(4)))
    x = run(text)
    assert "s.nan_all_ranks" in x.symptoms and "s.nan_from_first_step" in x.symptoms


def test_hf_dict_nan_grad_norm_from_first_logged_epoch() -> None:
    x = run(lines("{'loss': 0.8728, 'grad_norm': nan, 'learning_rate': 0.0, 'epoch': 0.01}",
                  "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 2.6e-07, 'epoch': 0.02}"))
    assert "s.grad_norm_nan" in x.symptoms and "s.nan_from_first_step" in x.symptoms
    assert "s.nan_subset_ranks" not in x.symptoms and "s.nan_all_ranks" not in x.symptoms  # one reporter only


def overflow(scale: int) -> str:
    return f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {scale}, reducing to {scale // 2}"


def test_overflow_during_warm_up_only() -> None:
    x = run(lines(*(overflow(2 ** p) for p in range(32, 26, -1)), progress(0, 50)))
    assert "s.fp16_overflow_early_only" in x.symptoms and "s.fp16_overflow_repeated" in x.absent
    assert "s.loss_scale_falling" not in x.symptoms


def test_overflows_with_nothing_after_them_are_neither_warm_up_nor_repeated() -> None:
    # a pasted line (or a log cut at the overflows) cannot tell whether the overflows stopped
    x = run(lines(overflow(2 ** 30)))
    assert "s.fp16_overflow_early_only" not in x.symptoms and "s.fp16_overflow_repeated" not in x.symptoms
    assert "s.fp16_overflow_early_only" not in x.absent and "s.fp16_overflow_repeated" not in x.absent
    x = run(lines(progress(0, 3), overflow(2 ** 16), overflow(2 ** 15)))
    assert "s.fp16_overflow_early_only" not in x.symptoms
    x = run(lines(progress(0, 3), overflow(2 ** 16), progress(0, 4)))
    assert "s.fp16_overflow_early_only" in x.symptoms
    # the job printed on after them, in a format no progress rule knows: it went on
    x = run(lines(overflow(2 ** 16), "INFO Train: [0/90][120/5004]  lr 0.0005  loss 3.31 (3.40)"))
    assert "s.fp16_overflow_early_only" in x.symptoms


def test_overflow_repeated_after_recovery_and_down_to_the_minimum() -> None:
    chain = [overflow(2 ** p) for p in range(16, 12, -1)]
    later = [progress(0, 1000 + i) for i in range(3)] + [overflow(8192), overflow(4096), overflow(8192), overflow(2)]
    x = run(lines(*chain, *later))
    assert "s.fp16_overflow_repeated" in x.symptoms and "s.fp16_overflow_early_only" in x.absent
    assert "s.loss_scale_falling" in x.symptoms and "s.loss_scale_at_minimum" in x.symptoms


def test_the_scaler_at_its_floor_is_no_warm_up_even_when_the_chain_looks_short() -> None:
    from dsdoctor.rules.extract import extract_text

    chain = [f"[INFO] [loss_scaler.py:183:update_scale] {overflow(2 ** p)}" for p in range(6, 2, -1)]
    x = extract_text("\n".join([*chain, "Exception: Current loss scale already at minimum - cannot decrease scale "
                                         "anymore. Exiting run."]), source="rank0")
    assert "s.loss_scale_at_minimum" in x.symptoms
    assert "s.fp16_overflow_repeated" in x.symptoms and "s.fp16_overflow_early_only" in x.absent


def test_oom_figures_other_process() -> None:
    x = run(lines(OOM))
    assert "s.oom_other_process_on_gpu" in x.symptoms
    assert "s.oom_fragmented" not in x.symptoms and "s.oom_capacity_full" not in x.symptoms


def test_oom_figures_fragmentation_and_capacity() -> None:
    frag = ("CUDA out of memory. Tried to allocate 4.20 GiB. GPU 2 has a total capacity of 79.15 GiB of which 2.95 GiB is "
            "free. Of the allocated memory 61.33 GiB is allocated by PyTorch, and 14.05 GiB is reserved by PyTorch but "
            "unallocated.")
    assert "s.oom_fragmented" in run(lines(frag)).symptoms
    full = ("CUDA out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 9.31 GiB "
            "is free. Of the allocated memory 67.90 GiB is allocated by PyTorch, and 0.41 GiB is reserved by PyTorch but "
            "unallocated.")
    x = run(lines(full))
    assert "s.oom_capacity_full" in x.symptoms and "s.oom_fragmented" not in x.symptoms


def test_oom_after_many_steps() -> None:
    assert "s.oom_after_many_steps" in run(lines(progress(0, 5000), f"[rank0]: {OOM}")).symptoms
    assert "s.oom_after_many_steps" not in run(lines(progress(0, 2), f"[rank0]: {OOM}")).symptoms


def test_info_rules_of_derived_symptoms_are_inputs_not_assertions() -> None:
    line = "epoch=0/micro_step={0}/global_step={0}, RunningAvgSamplesPerSec=30.1, CurrSamplesPerSec=29.8, MemAllocated=12.5GB"
    x = run(lines(*(line.format(s) for s in range(1, 4))))
    assert "s.mem_allocated_rising" not in x.symptoms
    rising = "epoch=0/micro_step={0}/global_step={0}, RunningAvgSamplesPerSec=30.1, CurrSamplesPerSec=29.8, MemAllocated={1}GB"
    y = run(lines(*(rising.format(s, 10 + s) for s in range(1, 9))))
    assert "s.mem_allocated_rising" in y.symptoms


def test_loss_scale_collapse_is_global_by_nature() -> None:
    text = lines(*(overflow(2 ** p) for p in range(16, 0, -1)))
    x = run({"rank0": text}, environment={"world_size": 8})
    assert x.scope == "global"  # the loss scale is one value for every rank


def test_nan_locates_the_fault_before_the_global_loss_scale() -> None:
    text = lines(*(progress(r, 1200) for r in range(8)), progress(5, 1201, "nan"),
                 *(overflow(2 ** p) for p in range(13, 0, -1)))
    x = run(text, environment={"world_size": 8})
    assert x.scope == "single-rank"


def test_scope_from_metric_anomalies_without_error_lines() -> None:
    data = []
    for rank in range(4):
        data += [{"name": "step_time_s", "rank": rank, "step": s, "value": 1.0 if s < 10 else 2.0} for s in range(20)]
        data += [{"name": "gpu_util", "rank": rank, "step": s, "value": 95 if s < 10 else 40} for s in range(20)]
    assert run(metrics=data, environment={"world_size": 4}).scope == "global"
    nan_one = [{"name": "loss", "rank": r, "step": s, "value": 2.0} for r in range(24, 32) for s in range(5)]
    nan_one.append({"name": "loss", "rank": 29, "step": 5, "value": "nan"})
    assert run(metrics=nan_one, environment={"world_size": 32, "nodes": 4}).scope == "single-rank"


def test_untimed_kernel_line_does_not_hide_the_rank_that_died() -> None:
    x = run({"dmesg-node3": lines("[331298.118822] NVRM: Xid (PCI:0000:07:00): 79, pid=55121, name=python, x"),
             "rank0": lines(f"[rank0]: {ILLEGAL}")})
    assert x.first_error is not None and x.first_error.rank == 0


ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_overflows_that_only_undo_a_growth_step_are_the_scaler_probing() -> None:
    # warm-up to 2**13, then every clean window the scaler tries 2**14, overflows and returns to 2**13
    chain = [overflow(2 ** p) for p in range(16, 13, -1)]
    probes = [line for i in range(4) for line in (progress(0, 2000 * (i + 1)), overflow(2 ** 14))]
    x = run(lines(*chain, *probes, progress(0, 9000)))
    assert "s.fp16_overflow_periodic" in x.symptoms and "s.fp16_overflow_repeated" in x.absent
    assert "s.loss_scale_falling" not in x.symptoms
    # the same growth steps, but the scale then keeps falling below its level: repeated, not probing
    falling = [overflow(2 ** p) for p in range(13, 6, -1)]
    y = run(lines(*chain, *probes, progress(0, 9000), *falling, progress(0, 9100)))
    assert "s.fp16_overflow_repeated" in y.symptoms and "s.fp16_overflow_periodic" not in y.symptoms
