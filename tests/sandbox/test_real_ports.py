"""Starting a real component on fresh ports (bridge.sandbox.real.process.start_on_fresh_ports, and start_together for
several at once): a program that lost its port between the pick and its bind is started again on another; any other
failure is not retried."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.sandbox.real.process import (PORT_TRIES, Component, StartError, free_port, start_on_fresh_ports,
                                         start_together)

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


def test_programs_started_together_serve_and_the_one_that_lost_its_port_starts_again_alone(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # another process's port, picked for the first program's first try
    ports = [taken.getsockname()[1]]
    kept: list[Component] = []

    def server(name: str, first: list[int]) -> Callable[[], Component]:
        def make() -> Component:
            port = first.pop() if first else free_port()
            return Component(name, [sys.executable, "-c", SERVER, str(port)], tmp_path / f"{name}{len(kept)}.log",
                             lambda: listening(port))
        return make

    try:
        up = start_together((server("a", ports), server("b", [])), kept.append, lambda: 20.0)
        assert [c.name for c in up] == ["a", "b"] and all(c.alive() for c in up)
        assert [c.name for c in kept] == ["a", "b", "a"], "the owner was given every try to stop"
        assert not kept[0].alive() and "Address already in use" in kept[0].child.log_tail(5)
    finally:
        taken.close()
        for c in kept:
            c.stop(2)


def test_a_program_started_together_that_fails_otherwise_fails_the_start(tmp_path: Path) -> None:
    kept: list[Component] = []

    def broken() -> Component:
        return Component("broken", [sys.executable, "-c", "raise SystemExit('no config')"], tmp_path / "b.log",
                         lambda: "not ready")

    def fine() -> Component:
        port = free_port()
        return Component("fine", [sys.executable, "-c", SERVER, str(port)], tmp_path / "f.log",
                         lambda: listening(port))

    try:
        with pytest.raises(StartError, match="broken exited with status 1"):
            start_together((broken, fine), kept.append, lambda: 20.0)
        assert [c.name for c in kept] == ["broken", "fine"], "both were started, and both are the owner's to stop"
    finally:
        for c in kept:
            c.stop(2)
