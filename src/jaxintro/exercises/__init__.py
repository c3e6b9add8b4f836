"""`jaxintro exercises`: the lesson's steps and exercises as files the learner fills in, checked automatically.

- `catalog`: the exercises in the lesson's order; starter and reference texts from `solutions/`.
- `texts`, `text_en`, `text_es`: statements, hints and docstrings in each language.
- `checking`: what the checks share (failures with a key, calling the learner's code, random inputs).
- `checks_build`, `checks_puzzles`, `checks_lesson`, `checks_optax`: one check per exercise.
- `runner`: run a check here or in a child process with a time limit.
- `progress`: the learner's progress, a small JSON file in the exercises folder.
"""
