"""Evaluation: plain accuracy (`accuracy`, with the evaluation step of
`keras_vit.scoring`), few-shot linear probes (`fewshot`), VTAB-1k runs
(`vtab_run`, which fine-tune per task through `keras_vit.training`) and
their reports (`reports`). The evaluate command lives in
keras_vit.commands.
"""
