"""`kneecap serve` in a process of its own, started from Python (the demo, tests): a spawned child runs the
serve command's own code (kneecap.cli.main) on a free loopback port and sends back the URL its ready line names;
stopping it is SIGTERM by its PID (the server's own clean stop), SIGKILL after a grace period.

No `python -m kneecap` and no `kneecap` executable: the child is a multiprocessing process of this interpreter, so
it runs whatever kneecap this process imported; its output is kept from the parent's terminal, and an error comes
back as the one line the command printed.
"""

from __future__ import annotations

import multiprocessing
import sys
import time

from kneecap.errors import KneecapError

SERVER_START_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 10.0


class _Tap:
    """A text stream that reports each complete line to `on_line` (the child's output is the parent's to show)."""

    def __init__(self, on_line):
        self.on_line, self.buffer = on_line, ""

    def write(self, text: str) -> int:
        self.buffer += text
        *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            self.on_line(line)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _child(args: list[str], conn) -> None:
    from kneecap.cli.serve import READY_PREFIX

    last_error = [""]

    def on_out(line: str) -> None:
        if line.startswith(READY_PREFIX):
            conn.send(("ready", line[len(READY_PREFIX) :].split()[0]))

    def on_err(line: str) -> None:
        if line.strip():
            last_error[0] = line.strip()

    sys.stdout, sys.stderr = _Tap(on_out), _Tap(on_err)
    from kneecap.cli import main

    code = main(["serve", *args])
    try:
        conn.send(("exit", code, last_error[0]))
    except OSError:  # the parent stopped listening once the server was up
        pass


def start_server(args: list[str], timeout_s: float = SERVER_START_TIMEOUT_S):
    """Start `kneecap serve ARGS` on 127.0.0.1 and a free port; return (process, base_url) once it listens."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=([*args, "--host", "127.0.0.1", "--port", "0"], child), daemon=True)
    proc.start()
    child.close()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if not parent.poll(min(0.5, max(0.0, deadline - time.monotonic()))):
                if not proc.is_alive():
                    break
                continue
            msg = parent.recv()
            if msg[0] == "ready":
                return proc, msg[1]
            raise KneecapError(
                f"kneecap serve exited before listening: {msg[2] or 'no message'}",
                "run the same flags with `kneecap serve` to see the problem",
            )
    except EOFError:
        pass
    finally:
        parent.close()
    stop_server(proc)
    raise KneecapError(f"kneecap serve did not listen within {timeout_s:.0f} s", "retry; the machine may be busy")


def stop_server(proc) -> int | None:
    """SIGTERM the server by its PID (it stops cleanly), then SIGKILL if it has not left in SERVER_STOP_TIMEOUT_S."""
    if proc.is_alive():
        proc.terminate()
        proc.join(SERVER_STOP_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
    return proc.exitcode
