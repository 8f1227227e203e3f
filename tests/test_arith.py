"""Divisors and prime factors of tile sizes, against their definitions."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tileflow.arith import divisors, primes, smallest_prime


@given(st.integers(1, 5000))
def test_divisors_are_every_exact_factor_ascending(n: int) -> None:
    assert list(divisors(n)) == [d for d in range(1, n + 1) if n % d == 0]


@given(st.integers(1, 100_000))
def test_prime_factors_multiply_back_and_are_prime(n: int) -> None:
    found = primes(n)
    assert math.prod(found) == n and found == sorted(found)
    assert all(len(divisors(p)) == 2 for p in found)


@given(st.integers(2, 100_000))
def test_the_smallest_prime_divides_and_nothing_smaller_does(n: int) -> None:
    p = smallest_prime(n)
    assert n % p == 0 and len(divisors(p)) == 2
    assert all(n % q for q in range(2, p))
