"""Tasks: the built-in ones (no files, each with a held-out split), the benchmarks eval.py knows
(benchmarks.py) and the converters of public code datasets into the code schema (convert.py)."""

from nanogrpo.tasks.arithmetic import arithmetic_rows
from nanogrpo.tasks.multiply import multiply_rows
from nanogrpo.tasks.word_problems import large_word_problem_rows, word_problem_rows

# name -> rows(split, n, seed)
BUILTIN_TASKS = {"arithmetic": arithmetic_rows, "word_problems": word_problem_rows,
                 "word_problems_large": large_word_problem_rows, "multiply": multiply_rows}
