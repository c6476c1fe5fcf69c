"""Benchmarking: problem sets (:mod:`.datasets`), answer grading (:mod:`.grading`), the resumable
runner (:mod:`.runner`) and the report (:mod:`.report`)."""

from .datasets import Problem, ProblemList, SkippedLine, load_dataset, load_hf, load_jsonl
from .grading import Grade, extract_answer, extract_boxed, grade

__all__ = ["Grade", "Problem", "ProblemList", "SkippedLine", "extract_answer", "extract_boxed", "grade",
           "load_dataset", "load_hf", "load_jsonl"]
