"""Evaluation: plain accuracy and the evaluate command (`main`), few-shot
linear probes (`fewshot`), VTAB-1k runs (`vtab_run`) and their reports
(`reports`).
"""
