"""Integer helpers of tile factors: a size's divisors and prime factors."""

from __future__ import annotations

import functools
import math


@functools.lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """Every divisor of n >= 1, ascending."""
    return tuple(sorted({d for i in range(1, math.isqrt(n) + 1) if n % i == 0
                         for d in (i, n // i)}))


def primes(n: int) -> list[int]:
    """The prime factors of n with multiplicity, smallest first."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def smallest_prime(n: int) -> int:
    """The smallest prime factor of n >= 2 (n itself when prime)."""
    p = 2
    while p * p <= n:
        if n % p == 0:
            return p
        p += 1
    return n
