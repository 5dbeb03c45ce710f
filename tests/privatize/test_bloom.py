import hashlib
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privatize.bloom import BloomFilter


def _d(i: int, salt: bytes = b"") -> bytes:
    return hashlib.sha1(salt + i.to_bytes(8, "little")).digest()


def _digests(n: int, salt: bytes) -> np.ndarray:
    return np.frombuffer(b"".join(_d(i, salt) for i in range(n)), np.uint8).reshape(n, 20)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=200))
def test_never_a_false_negative(items):
    bf = BloomFilter(100, 0.01)
    digests = [hashlib.sha1(x).digest() for x in items]
    for d in digests:
        bf.add(d)
    assert all(d in bf for d in digests)
    assert bf.contains_many(digests).all()
    # a duplicate is always reported present on its second add
    assert all(bf.add(d) for d in digests)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=300), st.integers(1, 40), st.sampled_from([0.5, 0.1, 0.01]))
def test_add_many_answers_exactly_as_a_loop_of_add(ids, capacity, rate):
    # small filters and repeated items: many collisions inside one call
    digests = [_d(i) for i in ids]
    loop, vec = BloomFilter(capacity, rate), BloomFilter(capacity, rate)
    expected = [loop.add(d) for d in digests]
    assert vec.add_many(digests).tolist() == expected
    assert np.array_equal(vec.bits, loop.bits) and vec.count == loop.count


def test_add_many_in_several_chunks(monkeypatch):
    import privatize.bloom as bloom

    monkeypatch.setattr(bloom, "_CHUNK", 7)
    digests = [_d(i % 23) for i in range(200)]
    loop, vec = BloomFilter(30, 0.1), BloomFilter(30, 0.1)
    assert vec.add_many(digests).tolist() == [loop.add(d) for d in digests]


def test_false_positive_rate_within_three_standard_deviations():
    capacity, rate, probes = 100_000, 0.01, 100_000
    bf = BloomFilter(capacity, rate)
    bf.add_many(_digests(capacity, b"member"))
    fp = int(bf.contains_many(_digests(probes, b"probe")).sum())
    sd = math.sqrt(probes * rate * (1 - rate))
    assert abs(fp - probes * rate) <= 3 * sd, fp
    assert 0.45 < bf.fill_ratio < 0.55  # the optimal k leaves about half the bits set


def test_sizing_follows_the_formulas():
    bf = BloomFilter(1000, 1e-6)
    assert bf.m == math.ceil(-1000 * math.log(1e-6) / math.log(2) ** 2) == 28756
    assert bf.k == 20
    bf = BloomFilter(1000, 0.01)
    assert (bf.m, bf.k) == (9586, 7)


def test_positions_are_the_double_hashing_of_the_digest():
    # computed independently with Python integers: g_i = (h1 mod m + i * (h2 mod (m-1) + 1)) mod m
    bf = BloomFilter(1000, 0.01)
    digest = hashlib.sha1(b"abc").digest()
    assert digest.hex() == "a9993e364706816aba3e25717850c26c9cd0d89d"  # FIPS 180 test vector
    h1, h2 = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:16], "little")
    a, b = h1 % 9586, h2 % 9585 + 1
    assert bf.positions(digest)[0].tolist() == [(a + i * b) % 9586 for i in range(7)]
    # and the answers are the same in every process: no hash seed, no random state
    bf.add(digest)
    assert sorted(np.flatnonzero(np.unpackbits(bf.bits, bitorder="little")).tolist()) == \
        sorted({(a + i * b) % 9586 for i in range(7)})


def test_positions_do_not_overflow_for_large_filters():
    bf = BloomFilter(10**8, 1e-6)  # m > 2**31 bits (the bit array is allocated lazily by the OS)
    big = bytes([0xFF] * 20)
    h = int.from_bytes(big[:8], "little")
    a, b = h % bf.m, h % (bf.m - 1) + 1
    assert bf.positions(big)[0].tolist() == [(a + i * b) % bf.m for i in range(bf.k)]


def test_bad_arguments():
    with pytest.raises(ValueError):
        BloomFilter(0, 0.1)
    with pytest.raises(ValueError):
        BloomFilter(10, 1.0)
    with pytest.raises(ValueError, match="16 bytes"):
        BloomFilter(10, 0.1).add(b"short")
