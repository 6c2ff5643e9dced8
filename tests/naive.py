"""Slow, obvious reference implementations that the kernels are tested against.

Plain Python (dicts and the math module), written straight from McMahan et al.
(KDD 2013) Algorithm 1 and from the feature-hashing specification in
:mod:`ftrl_ps.data.hashing`, so that a bug in a numba kernel cannot hide in a
shared helper.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


class ReferenceFTRL:
    """Per-coordinate FTRL-Proximal for logistic loss, one row at a time."""

    def __init__(self, alpha: float, beta: float, l1: float, l2: float, bias_key: int) -> None:
        self.alpha, self.beta, self.l1, self.l2 = alpha, beta, l1, l2
        self.bias_key = bias_key
        self.n: dict[int, float] = {}
        self.z: dict[int, float] = {}

    def weight(self, i: int) -> float:
        z = self.z.get(i, 0.0)
        n = self.n.get(i, 0.0)
        if abs(z) <= self.l1:
            return 0.0
        sign = 1.0 if z > 0 else -1.0
        return -(z - sign * self.l1) / ((self.beta + math.sqrt(n)) / self.alpha + self.l2)

    def predict(self, features: Sequence[tuple[int, float]]) -> float:
        margin = self.weight(self.bias_key)
        for i, x in features:
            margin += self.weight(i) * x
        margin = max(min(margin, 35.0), -35.0)
        return 1.0 / (1.0 + math.exp(-margin))

    def update(self, features: Sequence[tuple[int, float]], y: float) -> float:
        """Predict, update, and return the log loss of the prediction."""
        p = self.predict(features)
        g = p - y
        weights = {i: self.weight(i) for i, _ in [(self.bias_key, 1.0), *features]}
        for i, x in [(self.bias_key, 1.0), *features]:
            gi = g * x
            n = self.n.get(i, 0.0)
            sigma = (math.sqrt(n + gi * gi) - math.sqrt(n)) / self.alpha
            self.z[i] = self.z.get(i, 0.0) + gi - sigma * weights[i]
            self.n[i] = n + gi * gi
        pc = min(max(p, 1e-15), 1 - 1e-15)
        return -math.log(pc) if y == 1 else -math.log(1 - pc)


def logloss(labels: Sequence[float], probs: Sequence[float]) -> float:
    total = 0.0
    for y, p in zip(labels, probs, strict=True):
        p = min(max(p, 1e-15), 1 - 1e-15)
        total += -math.log(p) if y == 1 else -math.log(1 - p)
    return total / len(labels)


def auc(labels: Sequence[float], probs: Sequence[float]) -> float:
    """Probability that a random positive scores above a random negative (ties 1/2)."""
    pos = [p for y, p in zip(labels, probs, strict=True) if y == 1]
    neg = [p for y, p in zip(labels, probs, strict=True) if y != 1]
    wins = 0.0
    for a in pos:
        for b in neg:
            wins += 1.0 if a > b else 0.5 if a == b else 0.0
    return wins / (len(pos) * len(neg))


# --- feature hashing (the specification in ftrl_ps/data/hashing.py) -----------------------
MASK64 = (1 << 64) - 1


def mix64_reference(x: int) -> int:
    """splitmix64 finalizer on ``x mod 2**64``."""
    x &= MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK64
    x ^= x >> 31
    return x


def fnv1a64_reference(data: bytes) -> int:
    """64-bit FNV-1a of ``data``."""
    h = 0xCBF29CE484222325
    for c in data:
        h = ((h ^ c) * 0x100000001B3) & MASK64
    return h


def slot_of_reference(name: str, bits: int) -> int:
    """Slot in ``[0, 2**bits)`` of the non-empty feature name ``name``."""
    mask = (1 << bits) - 1
    if name.isascii() and name.isdigit():
        i = int(name)
        if i <= MASK64:
            return i if i <= mask else mix64_reference(i) & mask
    return mix64_reference(fnv1a64_reference(name.encode("utf-8"))) & mask
