"""LASQueue's length under any sequence of push, remove, pop and drain (property-based)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podium.models.pool_sched import LASQueue, Waiter

# an operation: ("push", level), ("remove", index into every waiter ever pushed),
# ("pop", parity the popped payload must have, or -1 for any), ("drain", 0)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(0, 40)),
        st.tuples(st.just("pop"), st.integers(-1, 1)),
        st.tuples(st.just("drain"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_length_counts_exactly_the_live_waiters(ops: list[tuple[str, int]]) -> None:
    q: LASQueue[int] = LASQueue(affinity_lookahead=4)
    pushed: list[Waiter[int]] = []
    live: set[int] = set()
    for op, arg in ops:
        if op == "push":
            n = len(pushed)
            pushed.append(q.push(n, arg, affinity="b" if n % 3 == 0 else None))
            live.add(n)
        elif op == "remove" and pushed:
            w = pushed[arg % len(pushed)]
            q.remove(w)  # a caller giving up, possibly after a drain or pop took it
            live.discard(w.payload)
        elif op == "pop":
            got = q.pop("b", lambda p, a=arg: a < 0 or p % 2 == a)
            if got is not None:
                assert got in live
                live.discard(got)
        elif op == "drain":
            drained = q.drain()
            assert sorted(drained) == sorted(live)
            live.clear()
        assert len(q) == len(live) >= 0
        assert bool(q) == bool(live)
    assert sorted(q.drain()) == sorted(live)
    assert len(q) == 0


def test_removing_drained_waiters_keeps_the_length_at_zero() -> None:
    q: LASQueue[str] = LASQueue()
    waiters = [q.push(p, 0) for p in "abc"]
    assert q.drain() == ["a", "b", "c"]
    for w in waiters:  # each failed caller removes its own entry again
        q.remove(w)
    assert len(q) == 0
    q.push("d", 0)
    assert len(q) == 1 and q.pop("x", lambda p: True) == "d"
