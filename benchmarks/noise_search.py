"""What finding a DP run's noise costs (issue 49): ``train.dp.accountant.noise_for`` (a
bracketed false-position search on log epsilon against log noise) against Opacus'
``get_noise_multiplier`` (bisection from [0, 20]), the baseline, in the same run, on the same
cases, each with the tolerance planning uses (epsilon at most the target, at most 0.005 below).
Every DP training's planning and every service admission runs this search once per accountant
(RDP, then PRV from RDP's answer).

Prints per case and accountant: both seconds, the ratio, both noises and their epsilons. And
what planning no longer pays since session 41: a second accounting of the chosen noise
(``train.dp.accounting.bounded_epsilon``, the planner's check before; the search now returns
the epsilon it computed there, ``noise_and_epsilon``, the same figure): its seconds, and a plan's
search-plus-check before against the search alone after.

    .venv/bin/python benchmarks/noise_search.py
"""

from __future__ import annotations

import sys
import time
import warnings

from _common import machine, save_result  # noqa: E402  (puts the project on sys.path)

CASES = [  # (target epsilon, delta, sample rate, steps): tests', the demo's and the paper runs' shapes
    (2.0, 2.5e-4, 0.04, 25), (3.0, 1e-5, 0.06, 78), (1.0, 1e-5, 0.01, 1000), (8.0, 1e-6, 0.004, 2500),
    (0.5, 1e-5, 0.1, 100), (50.0, 1e-5, 0.5, 10)]


def main() -> int:
    warnings.filterwarnings("ignore")
    from opacus.accountants.utils import get_noise_multiplier

    from train.dp.accountant import EPSILON_TOLERANCE, epsilon, noise_and_epsilon, noise_for
    from train.dp.accounting import bounded_epsilon

    rows, ok = [], True
    for acc in ("rdp", "prv"):
        for target, delta, q, steps in CASES:
            t0 = time.perf_counter()
            theirs = get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=q, steps=steps,
                                          accountant=acc, epsilon_tolerance=EPSILON_TOLERANCE)
            t1 = time.perf_counter()
            start = noise_for(target, delta, q, steps, "rdp") if acc == "prv" else 1.0
            t2 = time.perf_counter()
            ours, e_search = noise_and_epsilon(target, delta, q, steps, acc, start=start,
                                               floor=start / 2 if acc == "prv" else 0.0)
            t3 = time.perf_counter()
            check = bounded_epsilon(ours, q, steps, delta, acc)  # what the planner computed again before
            t4 = time.perf_counter()
            assert check.accountant != acc or check.value == e_search, (check, e_search)
            e_ours, e_theirs = epsilon(ours, q, steps, delta, acc), epsilon(theirs, q, steps, delta, acc)
            within = target - EPSILON_TOLERANCE <= e_ours <= target
            ok &= within
            row = {"accountant": acc, "target": target, "delta": delta, "q": q, "steps": steps,
                   "opacus_s": round(t1 - t0, 3), "ours_s": round(t3 - t2, 3), "speedup": round((t1 - t0) / (t3 - t2), 2),
                   "opacus_noise": theirs, "ours_noise": ours, "opacus_eps": e_theirs, "ours_eps": e_ours,
                   "within_tolerance": within, "second_accounting_s": round(t4 - t3, 3),
                   "plan_before_s": round(t4 - t1, 3), "plan_after_s": round(t3 - t1, 3)}
            rows.append(row)
            print(f"{acc} eps {target:g} q {q:g} steps {steps}: Opacus {row['opacus_s']:.2f} s (noise {theirs:.5f}, "
                  f"eps {e_theirs:.4f}); ours {row['ours_s']:.2f} s (noise {ours:.5f}, eps {e_ours:.4f}): "
                  f"{row['speedup']:.1f}x; the second accounting no longer paid {row['second_accounting_s']:.2f} s")
    total_o, total_s = sum(r["opacus_s"] for r in rows), sum(r["ours_s"] for r in rows)
    before = sum(r["plan_before_s"] for r in rows if r["accountant"] == "prv")
    after = sum(r["plan_after_s"] for r in rows if r["accountant"] == "prv")
    print(f"all {len(rows)} searches: Opacus {total_o:.2f} s, ours {total_s:.2f} s: {total_o / total_s:.1f}x; "
          f"every answer within the tolerance: {ok}")
    print(f"a PRV plan (RDP search, PRV search, and before session 41 a second accounting), {len(CASES)} cases: "
          f"{before:.2f} s before, {after:.2f} s after: {before / after:.2f}x")
    save_result("noise_search", {"machine_note": machine(), "rows": rows, "opacus_s": total_o, "ours_s": total_s,
                                 "speedup": total_o / total_s, "within_tolerance": ok, "prv_plan_before_s": before,
                                 "prv_plan_after_s": after, "prv_plan_speedup": before / after})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
