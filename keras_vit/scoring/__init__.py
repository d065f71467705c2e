"""Scoring shared by training and evaluation: the classification losses
(`losses`) and the distributed evaluation step (`evaluator.Evaluator`).
Layered between the data input and training, so that evaluation scores a
model without importing the training code.
"""
