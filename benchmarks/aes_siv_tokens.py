"""Entity tokens per second for short entities (Faker names and phone numbers), one core.

Baseline, measured in the same run: bare pycryptodome AES-SIV calls with no wrapper
(``AES.new(key, AES.MODE_SIV)`` per entity, as its API requires: a SIV object encrypts
once; ``update(type)``, ``encrypt_and_digest``), no Base64, no token. Against it: the
project's tokens (OpenSSL AES-SIV through ``cryptography`` with one key schedule per
key, the type as associated data, Base64, the ``Type_[...]`` format), uncached and with
the per-cipher cache of repeated entities; the project's ECB tokens (paper mode); and
decryption of text full of tokens. Median of 5 runs, wall clock and process CPU time.

    python benchmarks/aes_siv_tokens.py
"""

import statistics
import time
import warnings

from _common import machine, one_core, save_result

one_core()

from Crypto.Cipher import AES  # noqa: E402
from faker import Faker  # noqa: E402

from privatize.ciphers.entity import EntityCipher  # noqa: E402
from privatize.keys import new_key  # noqa: E402

REPEATS = 5


def timed(fn) -> tuple[float, float]:
    wall, cpu = [], []
    for _ in range(REPEATS):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    fake = Faker("en_US")
    fake.seed_instance(0)
    ents = [(fake.name(), "PERSON") for _ in range(10_000)] + \
           [(fake.phone_number(), "PHONE_NUMBER") for _ in range(10_000)]
    n = len(ents)
    km = new_key("aes-siv")
    key = km.secret
    siv = EntityCipher(km)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ecb = EntityCipher(new_key("aes-ecb"))

    def bare():
        for e, t in ents:
            c = AES.new(key, AES.MODE_SIV)
            c.update(t.encode())
            c.encrypt_and_digest(e.encode())

    def project_siv():
        for e, t in ents:
            siv._token_uncached(e, t)

    def project_cached():
        for e, t in ents:
            siv.token(e, t)

    def project_ecb():
        for e, t in ents:
            ecb._token_uncached(e, t)

    # correctness in the same run: the project's token body is pycryptodome's tag || ciphertext
    import base64
    c = AES.new(key, AES.MODE_SIV)
    c.update(b"PERSON")
    ct, tag = c.encrypt_and_digest(ents[0][0].encode())
    assert siv.token(*ents[0]) == "Person_[" + base64.b64encode(tag + ct).decode() + "]"

    text = " and ".join(siv.token(e, t) for e, t in ents[:2000])
    project_cached()  # fill the cache

    b_w, b_c = timed(bare)
    rows = [("bare pycryptodome AES-SIV (baseline)", b_w, b_c, n)]
    for name, fn, count in (("project AES-SIV tokens, uncached", project_siv, n),
                            ("project AES-SIV tokens, repeated entities (cache)", project_cached, n),
                            ("project AES-ECB tokens (paper mode), uncached", project_ecb, n),
                            ("project AES-SIV decrypt_text (2,000 tokens in text)", lambda: siv.decrypt_text(text), 2000)):
        w, c_ = timed(fn)
        rows.append((name, w, c_, count))
    print(f"{n:,} short entities (Faker names and phone numbers), one core ({machine()}), median of {REPEATS}")
    print(f"{'implementation':52s} {'tokens/s (wall)':>16s} {'x bare':>7s} {'tokens/s (CPU)':>15s} {'x bare':>7s}")
    for name, w, c_, count in rows:
        print(f"{name:52s} {count / w:16,.0f} {count / w / (n / b_w):7.1f} {count / c_:15,.0f} "
              f"{count / c_ / (n / b_c):7.1f}")
    save_result("aes_siv_tokens", {"machine": machine(), "entities": n, "repeats": REPEATS, "rows": [
        {"implementation": name, "tokens_per_s_wall": count / w, "x_bare_wall": count / w / (n / b_w),
         "tokens_per_s_cpu": count / c_, "x_bare_cpu": count / c_ / (n / b_c)} for name, w, c_, count in rows]})


if __name__ == "__main__":
    main()
