"""The least mean sum over a response's canonical SQL groups that any confidence calibrated for
being right can have (issue 55; the Python half of research/scripts/confidence-answers.ts).

A confidence that gives every candidate of a canonical group one probability is scored by the
per-candidate ECE (10 equal-width bins) and by the sum of its distinct groups' probabilities per
response. Both depend on a group only through its size, whether it is right and its probability,
so the least sum at a given ECE over *every* such confidence, even one that knows the truth, is a
linear programme over how many groups of each (size, right) type sit at each probability. Each
probability cell [lo, hi) counts at lo in the sum and lets the group's calibration error take any
value of its cell, so the programme relaxes the real problem: its optimum is a lower bound.

usage: python research/scripts/confidence-bound.py TYPES.json [ECE ...]
  (TYPES.json from confidence-answers.js types=FILE; needs numpy and scipy, which training/.venv
  lacks: python3 -m venv /tmp/lp && /tmp/lp/bin/pip install numpy scipy)
"""
import json
import sys

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import lil_matrix

CELLS = 200
BINS = 10


def least_sum(types, responses, candidates, max_ece):
    kinds = [(tuple(int(v) for v in k.split(',')), n) for k, n in types.items()]
    lo = np.arange(CELLS) / CELLS
    hi = (np.arange(CELLS) + 1) / CELLS
    t_n = len(kinds)
    nx = t_n * CELLS
    # x: groups of a type in a cell; e: their calibration error (candidates x (p - right)); u: |bin error|.
    nv = 2 * nx + BINS
    cost = np.zeros(nv)
    cost[:nx] = np.tile(lo, t_n) / responses
    eq = lil_matrix((t_n, nv))
    counts = np.zeros(t_n)
    for t, (_, n) in enumerate(kinds):
        eq[t, t * CELLS:(t + 1) * CELLS] = 1
        counts[t] = n
    ub = lil_matrix((2 * nx + 2 * BINS + 1, nv))
    rhs = []
    r = 0
    for t, ((size, right), _) in enumerate(kinds):
        for j in range(CELLS):
            x, e = t * CELLS + j, nx + t * CELLS + j
            ub[r, x] = size * (lo[j] - right)
            ub[r, e] = -1
            ub[r + 1, e] = 1
            ub[r + 1, x] = -size * (hi[j] - right)
            r += 2
            rhs += [0, 0]
    for b in range(BINS):
        cells = [j for j in range(CELLS) if int(lo[j] * BINS + 1e-9) == b]
        for sign in (1, -1):
            for t in range(t_n):
                for j in cells:
                    ub[r, nx + t * CELLS + j] = sign
            ub[r, 2 * nx + b] = -1
            r += 1
            rhs.append(0)
    ub[r, 2 * nx:] = 1
    rhs.append(max_ece * candidates)
    bounds = [(0, None)] * nx + [(None, None)] * nx + [(0, None)] * BINS
    res = linprog(cost, A_ub=ub.tocsr(), b_ub=np.array(rhs), A_eq=eq.tocsr(), b_eq=counts, bounds=bounds, method='highs')
    if res.status != 0:
        raise SystemExit(f'linprog: {res.message}')
    return res.fun


def main():
    d = json.load(open(sys.argv[1]))
    eces = [float(x) for x in sys.argv[2:]] or [0.0, 0.026, 0.05, 0.1]
    right = sum(n for k, n in d['types'].items() if k.endswith(',1'))
    print(f"{d['pool']}: {d['responses']} responses, {right / d['responses']:.2f} right canonical groups per response")
    for e in eces:
        print(f"ECE <= {e}: every calibrated confidence sums to at least {least_sum(d['types'], d['responses'], d['candidates'], e):.3f} over a response's canonical groups on average")


if __name__ == '__main__':
    main()
