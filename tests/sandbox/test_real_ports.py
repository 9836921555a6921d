"""Starting a real component on fresh ports (bridge.sandbox.real.process.start_on_fresh_ports): a program that lost
its port between the pick and its bind is started again on another; any other failure is not retried."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from bridge.sandbox.real.process import PORT_TRIES, Component, StartError, free_port, start_on_fresh_ports

# Listens on the port it is given, as the real components do with the port they are told.
SERVER = ("import socket, sys, time\n"
          "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
          "print('listening', flush=True); time.sleep(60)\n")


def listening(port: int) -> str:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return ""
    except OSError as err:
        return str(err)


def test_a_program_that_lost_its_port_starts_again_on_a_fresh_one(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # another process's port, picked for the first try
    ports = [taken.getsockname()[1]]
    made: list[Component] = []

    def make() -> Component:
        port = ports.pop() if ports else free_port()
        made.append(Component("server", [sys.executable, "-c", SERVER, str(port)], tmp_path / f"s{len(made)}.log",
                              lambda: listening(port)))
        return made[-1]

    try:
        started = start_on_fresh_ports(make, lambda c: c.start(20))
        assert len(made) == 2 and started is made[1] and started.alive()
        assert not made[0].alive() and "Address already in use" in made[0].child.log_tail(5)
    finally:
        taken.close()
        for c in made:
            c.stop(2)


def test_a_program_that_fails_otherwise_is_not_started_again(tmp_path: Path) -> None:
    made: list[Component] = []

    def make() -> Component:
        made.append(Component("broken", [sys.executable, "-c", "raise SystemExit('no config')"],
                              tmp_path / "b.log", lambda: "not ready"))
        return made[-1]

    with pytest.raises(StartError, match="broken exited with status 1"):
        start_on_fresh_ports(make, lambda c: c.start(20))
    assert len(made) == 1


def test_a_port_lost_every_time_fails_after_the_last_try(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    made: list[Component] = []

    def make() -> Component:
        made.append(Component("server", [sys.executable, "-c", SERVER, str(port)], tmp_path / f"s{len(made)}.log",
                              lambda: listening(port)))
        return made[-1]

    try:
        with pytest.raises(StartError, match="Address already in use"):
            start_on_fresh_ports(make, lambda c: c.start(20))
        assert len(made) == PORT_TRIES
    finally:
        taken.close()
