"""Entity tokens per second for short entities (names, phone numbers): the project's
tokens (OpenSSL AES-SIV through ``cryptography``, Base64, type as associated data)
against bare pycryptodome AES-SIV calls in the same run (the baseline: a new SIV object
per entity, as its API requires); ECB for comparison."""

import warnings

from _common import machine, median_time, one_core

one_core()

from Crypto.Cipher import AES  # noqa: E402
from faker import Faker  # noqa: E402

from privatize.ciphers.entity import EntityCipher  # noqa: E402
from privatize.keys import new_key  # noqa: E402


def main() -> None:
    fake = Faker("en_US")
    fake.seed_instance(0)
    ents = [(fake.name(), "PERSON") for _ in range(10_000)] + [(fake.phone_number(), "PHONE_NUMBER") for _ in range(10_000)]
    km = new_key("aes-siv")
    siv = EntityCipher(km)
    key = km.secret

    def bare():
        for e, t in ents:
            c = AES.new(key, AES.MODE_SIV)
            c.update(t.encode())
            c.encrypt_and_digest(e.encode())

    def wrapped():
        for e, t in ents:
            siv._token_uncached(e, t)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ecb = EntityCipher(new_key("aes-ecb"))

    def ecb_run():
        for e, t in ents:
            ecb._token_uncached(e, t)

    def cached():
        for e, t in ents:
            siv.token(e, t)

    n = len(ents)
    t_bare, t_wrap, t_ecb = median_time(bare), median_time(wrapped), median_time(ecb_run)
    cached()
    t_cached = median_time(cached)
    print(f"{n} short entities (names, phone numbers), one core ({machine()})")
    print(f"bare pycryptodome AES-SIV:           {n / t_bare:10.0f} tokens/s")
    print(f"project AES-SIV tokens (uncached):   {n / t_wrap:10.0f} tokens/s  ratio to bare pycryptodome {t_bare / t_wrap:.1f}x")
    print(f"project AES-SIV tokens (repeats):    {n / t_cached:10.0f} tokens/s  (per-run cache of repeated entities)")
    print(f"project AES-ECB tokens (paper mode): {n / t_ecb:10.0f} tokens/s")


if __name__ == "__main__":
    main()
