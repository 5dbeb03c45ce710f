"""Whole-text cipher throughput at key length 100 on all the Gutenberg stories
(train + dev + test of ../shared/data/squality_gutenberg), one core.

Figures are MB/s of UTF-8 input, the median of 9 runs, by wall clock and by process CPU
time (on a shared machine the CPU figure is the steadier one). The baseline, measured in
the same run, is the per-character Python loop below (the paper's definition written
plainly; its own code is of this kind): it runs on a subset of the stories and is
normalised to MB/s. Target: >= 200 MB/s.

Then the command line: ``privatize encrypt --key K < 200 MB > /dev/null`` (the stories
repeated to ``--stdin-mb``), the whole process timed (start-up included), beside the
stage's path in-process and the record path the command took before it shared the stage's
(decode, ``encrypt_batch``, encode) on the same bytes. Target: >= 150 MB/s.

    python benchmarks/cipher_throughput.py [--stdin-mb 200]
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, compare, gutenberg_texts, machine, one_core, save_result
from _common import timed as harness_timed

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
    """(median wall seconds, median CPU seconds), from the harness."""
    r = harness_timed(fn, repeats)
    return r["wall_s"], r["cpu_s"]


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
    return {"corpus_mb": mb, "stage_path_mb_s_wall": best_w, "stage_path_mb_s_cpu": best_c,
            "naive_mb_s_wall": naive_w}


def cli_from_stdin(docs: list[str], target_mb: float, repeats: int = 3) -> dict:
    """``privatize encrypt`` on ``target_mb`` of stdin, beside the in-process paths."""
    from privatize.keys import new_key, write_key_file

    story = "\n\n".join(docs).encode()
    data = story * max(1, round(target_mb * 1e6 / len(story)))
    mb = len(data) / 1e6
    v_key = new_key("vigenere", length=100)
    v = Vigenere(v_key.letters)
    with tempfile.TemporaryDirectory() as tmp:
        key_file = write_key_file(v_key, Path(tmp) / "k.key")
        src = Path(tmp) / "in.txt"
        src.write_bytes(data)
        cmd = [sys.executable, "-c", "import sys; from privatize.cli import main; sys.exit(main())", "encrypt",
               "--key", str(key_file)]
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}

        def run_cli():
            with open(src, "rb") as fin, open(os.devnull, "wb") as fout:
                subprocess.run(cmd, stdin=fin, stdout=fout, stderr=subprocess.DEVNULL, check=True, cwd=ROOT, env=env)

        with open(src, "rb") as fin:  # the command's output is the stage path's, byte for byte
            out = subprocess.run(cmd, stdin=fin, capture_output=True, check=True, cwd=ROOT, env=env).stdout
        assert out == v.encrypt(data.decode()).encode()
        del out
        arr = pa.array([data.decode()])
        cli = harness_timed(run_cli, repeats)
        stage = harness_timed(lambda: v.encrypt_array(arr), repeats)
        record = harness_timed(lambda: v.encrypt_batch([data.decode()])[0].encode(), repeats)
    res = {"stdin_mb": mb, "cli": cli, "stage_in_process": stage, "record_path_in_process": record,
           "cli_mb_s": mb / cli["wall_s"], "stage_mb_s": mb / stage["wall_s"], "record_path_mb_s": mb / record["wall_s"],
           "cli_vs_stage": compare(cli, stage), "cli_vs_record_path": compare(cli, record)}
    print(f"\nprivatize encrypt < {mb:.0f} MB (key length 100, process start-up included), median of {repeats}:")
    print(f"  command line      {res['cli_mb_s']:8.1f} MB/s")
    print(f"  stage path        {res['stage_mb_s']:8.1f} MB/s in-process, the document as one record (command: "
          f"{res['cli_vs_stage']['speedup_wall']:.2f}x its speed)")
    print(f"  record path       {res['record_path_mb_s']:8.1f} MB/s in-process (the command's path before; "
          f"command is {res['cli_vs_record_path']['speedup_wall']:.2f}x it)")
    print(f"  target >= 150 MB/s: {'met' if res['cli_mb_s'] >= 150 else 'NOT met'}")
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stdin-mb", type=float, default=200.0, help="size of the command-line run (0: skip it)")
    args = ap.parse_args()
    result = {"in_process": main()}
    if args.stdin_mb > 0:
        result["command_line"] = cli_from_stdin(gutenberg_texts(), args.stdin_mb)
    print(f"results: {save_result('cipher_throughput', result)}")
