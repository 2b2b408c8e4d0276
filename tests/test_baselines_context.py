"""Baselines of a mixture without separate duration modes, split by launch context (traceql.baselines._by_context):
its vectorized rule gives what a plain per-context reading of the documented rule gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceql.attribution import baselines


def _reference(idx, iso, f):
    """Per context (range text, occurrence) with two or more isolated instances that is_mixture calls one kind of work:
    a pool, numbered by median duration (ties by context); everything else conflated."""
    groups: dict = {}
    for i in iso.tolist():
        if f["text"][i] >= 0 and f["occ"][i] >= 0:
            groups.setdefault((int(f["text"][i]), int(f["occ"][i])), []).append(i)
    pure = {k: v for k, v in groups.items() if len(v) >= 2 and not baselines.is_mixture(f["dur"][v])}
    if len(pure) < 2:
        return [(None, sorted(idx.tolist()), True)]
    order = sorted(pure, key=lambda k: (float(np.median(np.sort(f["dur"][pure[k]]))), (k[0] << 32) | k[1]))
    rank = {k: m for m, k in enumerate(order)}
    assigned = [rank.get((int(f["text"][i]), int(f["occ"][i])), -1) for i in idx.tolist()]
    out = [(m, sorted(i for i, a in zip(idx.tolist(), assigned, strict=True) if a == m), False)
           for m in sorted(set(assigned) - {-1})]
    if -1 in assigned:
        out.append((None, sorted(i for i, a in zip(idx.tolist(), assigned, strict=True) if a == -1), True))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 2), st.integers(-1, 4), st.sampled_from([900, 1000, 1050, 1300, 2500,
                                                                                    2600, 5000, 9000]),
                          st.booleans()), min_size=1, max_size=40))
def test_context_split_equals_the_rule_read_per_context(rows):
    f = {"text": np.array([r[0] for r in rows]), "occ": np.array([r[1] for r in rows]),
         "dur": np.array([r[2] for r in rows], dtype=np.int64)}
    idx = np.arange(len(rows))
    iso = idx[np.array([r[3] for r in rows])]
    got = [(m, sorted(p.tolist()), c) for m, p, _, c in baselines._by_context(idx, iso, f)]
    assert got == _reference(idx, iso, f)
