"""What a collective call raised on every rank, for the bad-input cases of the MPI scripts."""


def outcome_everywhere(comm, exc_type, fn) -> list[tuple[str, str]]:
    """Call ``fn()`` on every rank of ``comm``; per rank, ``(exception class name, message)``
    when it raised ``exc_type`` (anything else propagates), ``("no exception", "")`` otherwise.
    Collective."""
    try:
        fn()
    except exc_type as exc:
        caught = (type(exc).__name__, str(exc))
    else:
        caught = ("no exception", "")
    return comm.allgather(caught)
