import hashlib
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from privatize.bloom import BloomFilter


def _d(i: int, salt: bytes = b"") -> bytes:
    return hashlib.sha1(salt + i.to_bytes(8, "little")).digest()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=200))
def test_never_a_false_negative(items):
    bf = BloomFilter(100, 0.01)
    digests = [hashlib.sha1(x).digest() for x in items]
    for d in digests:
        bf.add(d)
    assert all(d in bf for d in digests)
    # a duplicate is always reported present on its second add
    assert all(bf.add(d) for d in digests)


def test_false_positive_rate_within_three_standard_deviations():
    capacity, rate, probes = 100_000, 0.01, 100_000
    bf = BloomFilter(capacity, rate)
    for i in range(capacity):
        bf.add(_d(i, b"member"))
    fp = sum(_d(i, b"probe") in bf for i in range(probes))
    sd = math.sqrt(probes * rate * (1 - rate))
    assert abs(fp - probes * rate) <= 3 * sd, fp


def test_sizing_follows_the_formulas():
    bf = BloomFilter(1000, 1e-6)
    assert bf.m == math.ceil(-1000 * math.log(1e-6) / math.log(2) ** 2)
    assert bf.k == 20
