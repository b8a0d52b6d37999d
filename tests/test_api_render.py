"""Text and Markdown renderings: the first error whole with its own time, outcomes said plainly."""

from __future__ import annotations

from dsdoctor.api.render import outcome_effect, render_markdown, render_text
from dsdoctor.kb.diagnosis import diagnose, shown_time

LONG = ("[rank3]:[E1201 11:04:23.551000 1234 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 3] Process group watchdog thread "
        "terminated with exception: CUDA error: an illegal memory access was encountered. CUDA kernel errors might be "
        "asynchronously reported at some other API call, so the stacktrace below might be incorrect. For debugging "
        "consider passing CUDA_LAUNCH_BLOCKING=1. Compile with TORCH_USE_CUDA_DSA to enable device-side assertions.")


def test_year_less_stamps_are_shown_as_month_day_time_with_the_year_unknown() -> None:
    assert shown_time("--12-01T11:04:23.551000") == "12-01 11:04:23.551 (year unknown)"
    assert shown_time("2024-12-01T11:04:23.551000", "rank3.log") == \
        "2024-12-01 11:04:23.551 (year from other lines of rank3.log)"
    assert shown_time("2024-12-01T11:04:23") == "2024-12-01 11:04:23"
    assert shown_time(None) is None


def test_the_first_error_is_shown_whole_with_its_own_time(real_kb) -> None:
    d = diagnose({"logs": [{"source": "rank3.log", "text": LONG}]}, kb=real_kb)
    assert d["first_error"]["line"] == LONG
    assert d["first_error"]["time_shown"] == "12-01 11:04:23.551 (year unknown)" and d["first_error"]["year"] == "unknown"
    text = render_text(d)
    assert "--12-01" not in text and "12-01 11:04:23.551 (year unknown)" in text
    joined = " ".join(part.strip() for part in text.split("The three looks:")[1].split("  2. ")[0].splitlines()[2:])
    assert joined == LONG  # wrapped at words, nothing cut
    assert LONG.replace("`", "'") in render_markdown(d)


def test_outcome_effect_says_what_the_answer_would_change() -> None:
    now = {"id": "memory.activation_memory", "probability": 0.42}
    assert outcome_effect({"leading_cause": "memory.leak_across_steps", "leading_probability": 0.73}, now, "en") == \
        "memory.leak_across_steps would become the leading cause (73%)"
    assert outcome_effect({"leading_cause": "memory.activation_memory", "leading_probability": 0.7}, now, "en") == \
        "memory.activation_memory stays the leading cause, at 70% (now 42%)"
