"""Whole-text cipher throughput at key length 100 on all the Gutenberg stories
(train + dev + test of ../shared/data/squality_gutenberg), one core.

Figures are MB/s of UTF-8 input, the median of 9 runs, by wall clock and by process CPU
time (on a shared machine the CPU figure is the steadier one). The baseline, measured in
the same run, is the per-character Python loop below (the paper's definition written
plainly; its own code is of this kind): it runs on a subset of the stories and is
normalised to MB/s. Target: >= 200 MB/s.

    python benchmarks/cipher_throughput.py
"""

import statistics
import time

from _common import gutenberg_texts, machine, one_core

one_core()

import pyarrow as pa  # noqa: E402

from privatize.ciphers.vigenere import Vigenere, reserved_spans  # noqa: E402
from privatize.keys import alphabet_chars, new_key  # noqa: E402

REPEATS = 9


def naive_encrypt(text: str, key: str) -> str:
    """The baseline: one character at a time (no reserved tokens: the corpus has none)."""
    alpha = alphabet_chars("letters52")
    index = {c: i for i, c in enumerate(alpha)}
    shifts = [(index[c] + 1) % 52 for c in key]
    out = []
    for i, ch in enumerate(text):
        p = index.get(ch)
        out.append(ch if p is None else alpha[(p + shifts[i % len(shifts)]) % 52])
    return "".join(out)


def timed(fn, repeats: int = REPEATS) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds)."""
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    docs = gutenberg_texts()
    assert not any(reserved_spans(d) for d in docs)  # the naive baseline needs no reserved tokens
    mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    key = new_key("vigenere", length=100).letters
    v = Vigenere(key)
    arr = pa.array(docs)
    lines = [ln for d in docs for ln in d.split("\n") if ln]
    line_arr = pa.array(lines)
    mb_lines = sum(len(s.encode("utf-8")) for s in lines) / 1e6

    sample = docs[:12]
    mb_sample = sum(len(d.encode()) for d in sample) / 1e6
    assert [naive_encrypt(d, key) for d in sample] == v.encrypt_batch(sample)
    assert v.decrypt_array(v.encrypt_array(arr)).to_pylist() == docs

    rows = [
        ("Arrow batch, whole stories (the encrypt_text stage's path)", mb, lambda: v.encrypt_array(arr)),
        ("Arrow batch, decrypt", mb, lambda: v.decrypt_array(arr)),
        (f"Arrow batch, {len(lines):,} lines as records", mb_lines, lambda: v.encrypt_array(line_arr)),
        ("encrypt_batch(list[str]) (str in, str out)", mb, lambda: v.encrypt_batch(docs)),
        ("encrypt(str) per story", mb, lambda: [v.encrypt(d) for d in docs]),
    ]
    naive_wall, naive_cpu = timed(lambda: [naive_encrypt(d, key) for d in sample], 3)
    naive_w, naive_c = mb_sample / naive_wall, mb_sample / naive_cpu

    print(f"corpus: {len(docs)} Gutenberg stories, {mb:.2f} MB UTF-8 (all with non-ASCII), key length 100, "
          f"one core ({machine()}), median of {REPEATS}")
    print(f"{'path':62s} {'wall MB/s':>10s} {'x naive':>8s} {'CPU MB/s':>10s} {'x naive':>8s}")
    best_w = best_c = 0.0
    for name, size, fn in rows:
        w, c = timed(fn)
        print(f"{name:62s} {size / w:10.1f} {size / w / naive_w:8.1f} {size / c:10.1f} {size / c / naive_c:8.1f}")
        if name.startswith("Arrow batch, whole"):
            best_w, best_c = size / w, size / c
    print(f"{'naive per-character loop (baseline, 12 stories)':62s} {naive_w:10.1f} {1:8.1f} {naive_c:10.1f} {1:8.1f}")
    print(f"target >= 200 MB/s on the stage's path: wall {'met' if best_w >= 200 else 'NOT met'} "
          f"({best_w:.0f}), CPU {'met' if best_c >= 200 else 'NOT met'} ({best_c:.0f})")


if __name__ == "__main__":
    main()
