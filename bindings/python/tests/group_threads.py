"""Running a local group's ranks on threads (Group.local), shared by the
group tests."""

import threading


def run_ranks(groups, fn, timeout=120):
    """fn(rank, group) on one thread per group; the first failure re-raised
    naming its rank (the others are released by mark_failed)."""
    errors = [None] * len(groups)

    def body(r):
        try:
            fn(r, groups[r])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors[r] = e
            groups[r].mark_failed()

    ts = [threading.Thread(target=body, args=(r,)) for r in range(len(groups))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
        assert not t.is_alive(), "a rank hung in a collective"
    for r, e in enumerate(errors):
        if e is not None:
            raise AssertionError(f"rank {r} failed: {e!r}") from e
