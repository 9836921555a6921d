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


def server(name: str, log_dir: Path, ports: list[int], made: list[Component]) -> Callable[[], Component]:
    """A maker of a program that listens on the next of `ports` (taken from its end), then on free ones; each
    program made is added to `made`."""
    def make() -> Component:
        port = ports.pop() if ports else free_port()
        made.append(Component(name, [sys.executable, "-c", SERVER, str(port)], log_dir / f"{name}{len(made)}.log",
                              lambda: listening(port)))
        return made[-1]
    return make


def broken(log_dir: Path, made: list[Component]) -> Callable[[], Component]:
    """A maker of a program that exits at once for another reason than a port."""
    def make() -> Component:
        made.append(Component("broken", [sys.executable, "-c", "raise SystemExit('no config')"],
                              log_dir / "b.log", lambda: "not ready"))
        return made[-1]
    return make


def held_port() -> socket.socket:
    """Another process's port: bound, not listening."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    return taken


def test_a_program_that_lost_its_port_starts_again_on_a_fresh_one(tmp_path: Path) -> None:
    taken = held_port()  # picked for the first try
    made: list[Component] = []
    try:
        started = start_on_fresh_ports(server("server", tmp_path, [taken.getsockname()[1]], made),
                                       lambda c: c.start(20))
        assert len(made) == 2 and started is made[1] and started.alive()
        assert not made[0].alive() and "Address already in use" in made[0].child.log_tail(5)
    finally:
        taken.close()
        for c in made:
            c.stop(2)


def test_a_program_that_fails_otherwise_is_not_started_again(tmp_path: Path) -> None:
    made: list[Component] = []
    with pytest.raises(StartError, match="broken exited with status 1"):
        start_on_fresh_ports(broken(tmp_path, made), lambda c: c.start(20))
    assert len(made) == 1


def test_a_port_lost_every_time_fails_after_the_last_try(tmp_path: Path) -> None:
    taken = held_port()
    made: list[Component] = []
    try:
        with pytest.raises(StartError, match="Address already in use"):
            start_on_fresh_ports(server("server", tmp_path, [taken.getsockname()[1]] * (PORT_TRIES + 1), made),
                                 lambda c: c.start(20))
        assert len(made) == PORT_TRIES
    finally:
        taken.close()


def test_programs_started_together_serve_and_the_one_that_lost_its_port_starts_again_alone(tmp_path: Path) -> None:
    taken = held_port()  # picked for the first program's first try
    made: list[Component] = []
    kept: list[Component] = []
    try:
        up = start_together((server("a", tmp_path, [taken.getsockname()[1]], made), server("b", tmp_path, [], made)),
                            kept.append, lambda: 20.0)
        assert [c.name for c in up] == ["a", "b"] and all(c.alive() for c in up)
        assert [c.name for c in kept] == ["a", "b", "a"], "the owner was given every try to stop"
        assert not kept[0].alive() and "Address already in use" in kept[0].child.log_tail(5)
    finally:
        taken.close()
        for c in made:
            c.stop(2)


def test_a_program_started_together_that_loses_its_port_every_time_gets_as_many_tries_as_one_started_alone(
        tmp_path: Path) -> None:
    taken = held_port()
    made: list[Component] = []
    kept: list[Component] = []
    try:
        with pytest.raises(StartError, match="Address already in use"):
            start_together((server("a", tmp_path, [taken.getsockname()[1]] * (PORT_TRIES + 1), made),
                            server("b", tmp_path, [], made)), kept.append, lambda: 20.0)
        assert [c.name for c in kept].count("a") == PORT_TRIES
    finally:
        taken.close()
        for c in made:
            c.stop(2)


def test_a_program_started_together_that_fails_otherwise_fails_the_start(tmp_path: Path) -> None:
    made: list[Component] = []
    kept: list[Component] = []
    try:
        with pytest.raises(StartError, match="broken exited with status 1"):
            start_together((broken(tmp_path, made), server("fine", tmp_path, [], made)), kept.append, lambda: 20.0)
        assert [c.name for c in kept] == ["broken", "fine"], "both were started, and both are the owner's to stop"
    finally:
        for c in made:
            c.stop(2)
