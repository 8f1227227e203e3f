"""Transfer moves: a factor of one dimension moved from one loop to others in one step.

A *transfer* divides one slot's factor by `d` and multiplies, on each chain through that
slot, exactly one other slot by `d` (or the reverse), so every chain keeps its product: the
row covers what it covered, with the same clipping. The partners may sit at any level and
be spatial or temporal; where the slot is shared (a pipeline's outer split, on the chains
of every operator below it), one partner per operator's chain moves together with it.

Why: a point whose better neighbour differs in a shared outer split and in each operator's
inner loops (`m:64` outside with `m:8:SpY` in both stages, against `m:256` with
`m:2:SpY`) cannot be reached by changing one slot at a time, nor by a move that settles
each chain on its outermost temporal slot: every intermediate point over-covers or
under-covers a chain."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator

import numpy as np

from tileflow.arith import divisors, primes
from tileflow.explore.factors.space import Space, ints

Transfer = tuple[int, tuple[int, ...]]  # (slot, its partners: one per chain of the slot)


@functools.lru_cache(maxsize=64)
def _partner_sets(space: Space) -> dict[int, tuple[tuple[int, ...], ...]]:
    """Per movable slot: every set of partner slots that covers each of its chains exactly
    once and touches no other chain (so the transfer keeps every chain's product)."""
    out: dict[int, tuple[tuple[int, ...], ...]] = {}
    movable = [i for i in range(space.size) if space.chains_of[i] and i not in space.fixed]
    for slot in movable:
        mine = set(space.chains_of[slot])
        per_chain = [[j for j in space.chains[k].slots if j != slot and j in movable
                      and set(space.chains_of[j]) <= mine] for k in space.chains_of[slot]]
        found = set()
        for combo in itertools.product(*per_chain):
            partners = tuple(sorted(set(combo)))
            covered = [k for j in partners for k in space.chains_of[j]]
            if len(covered) == len(set(covered)) and set(covered) == mine:
                found.add(partners)
        if found:
            out[slot] = tuple(sorted(found))
    return out


def transfer_pairs(space: Space) -> list[Transfer]:
    """Every (slot, partners) a transfer may move a factor between."""
    return [(slot, partners) for slot, sets in _partner_sets(space).items()
            for partners in sets]


def _moved(values: list[int], slot: int, partners: tuple[int, ...], amount: int,
           give: bool) -> list[int] | None:
    """The row with `amount` moved from `slot` to each partner (`give`) or from every
    partner to `slot`, as a new list; None where the giving side's factors do not divide
    by it."""
    givers = (slot,) if give else partners
    if any(values[j] % amount for j in givers):
        return None
    out = list(values)
    takers = partners if give else (slot,)
    for j in givers:
        out[j] //= amount
    for j in takers:
        out[j] *= amount
    return out


def neighbours(space: Space, row: np.ndarray, prime_only: bool = False
               ) -> Iterator[np.ndarray]:
    """Every transfer of a row: each (slot, partners), each direction, each amount that
    divides the giving side (a prime, or several of them at once; `prime_only`: a prime)."""
    for moved in neighbour_lists(space, ints(row), prime_only):
        yield np.array(moved, dtype=np.int64)


def neighbour_lists(space: Space, values: list[int], prime_only: bool = False
                    ) -> Iterator[list[int]]:
    """`neighbours` of a row given as a list of ints, each a new list."""
    for slot, partners in transfer_pairs(space):
        changed = (slot, *partners)
        for give in (True, False):
            givers = (slot,) if give else partners
            common = math.gcd(*(values[j] for j in givers))
            amounts = sorted(set(primes(common))) if prime_only else divisors(common)[1:]
            for amount in amounts:
                moved = _moved(values, slot, partners, amount, give)
                if moved is not None and space.fits(moved, changed):
                    yield moved


def random_transfer(space: Space, row: np.ndarray, rng: np.random.Generator,
                    tries: int = 8) -> np.ndarray | None:
    """One transfer drawn at random (a pair, a direction, one prime of the giving side or,
    half the time, two); None where `tries` draws found no move that fits."""
    pairs = transfer_pairs(space)
    if not pairs:
        return None
    values = ints(row)
    for _ in range(tries):
        slot, partners = pairs[rng.integers(len(pairs))]
        give = bool(rng.random() < 0.5)
        givers = (slot,) if give else partners
        factors = primes(math.gcd(*(values[j] for j in givers)))
        if not factors:
            continue
        picked = rng.permutation(len(factors))[:1 + int(rng.random() < 0.5)]
        amount = math.prod(factors[k] for k in picked)
        moved = _moved(values, slot, partners, amount, give)
        if moved is not None and space.fits(moved, (slot, *partners)):
            return np.array(moved, dtype=np.int64)
    return None
