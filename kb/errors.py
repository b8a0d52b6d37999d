"""Errors every layer raises; the CLI and the API turn them into one clear message."""

from __future__ import annotations

from dataclasses import dataclass


class DsdoctorError(Exception):
    """An error caused by input or setup, reported to the user as one clear line."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One problem found in a data file: where it is and what to write instead."""

    file: str
    line: int
    message: str
    severity: str = "error"  # error | warning (lint reports warnings; loading refuses only errors)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class KnowledgeError(DsdoctorError):
    """The knowledge base (or a rule file) is invalid; carries every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        head = f"{len(problems)} problem(s) in the knowledge files"
        super().__init__(head + ("; first: " + str(problems[0]) if problems else ""))
