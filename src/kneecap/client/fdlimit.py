"""The open-file limit a level of N concurrent connections needs (one socket each, plus a reserve)."""

from __future__ import annotations

from kneecap.errors import KneecapError


def ensure_fd_limit(num_connections: int, reserve: int = 64) -> int:
    """Raise the soft RLIMIT_NOFILE toward the hard limit so num_connections sockets fit; returns it.

    Raises KneecapError when even the hard limit is too low (raise it with `ulimit -n`).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return num_connections + reserve
    need = int(num_connections) + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft >= need:
        return soft
    if soft == resource.RLIM_INFINITY:
        return need
    if hard != resource.RLIM_INFINITY and hard < need:
        raise KneecapError(
            f"{num_connections} connections need about {need} open files, but this shell allows at most {hard}",
            f"raise the limit first (`ulimit -n {need}`, or `ulimit -Hn` as root / limits.conf), or spread load with --workers",
        )
    new_soft = hard if hard != resource.RLIM_INFINITY else max(need, 65536)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
    except (ValueError, OSError):
        raise KneecapError(
            f"cannot raise the open-file limit to {new_soft} for {num_connections} connections",
            f"run `ulimit -n {need}` before kneecap",
        ) from None
    return new_soft
