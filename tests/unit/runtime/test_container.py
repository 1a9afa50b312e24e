"""The container state machine: legal and illegal transitions."""

import pytest

from floodway.runtime.container import TRANSITIONS, Container, IllegalTransition, State


def make() -> Container:
    return Container("app.py", "embed", "/nonexistent", slots=2)


def test_happy_path_and_history():
    c = make()
    for s in (State.WARMING, State.READY, State.BUSY, State.READY, State.DRAINING, State.STOPPED):
        c._to(s)
    assert [s for _, s in c.history] == [State.STARTING, State.WARMING, State.READY, State.BUSY,
                                         State.READY, State.DRAINING, State.STOPPED]


@pytest.mark.parametrize("path", [
    (State.READY,),                              # starting cannot skip warming... to ready
    (State.WARMING, State.BUSY),
    (State.WARMING, State.READY, State.STOPPED),  # must drain first
    (State.FAILED, State.READY),                  # failed is terminal
])
def test_illegal_transitions_raise(path):
    c = make()
    with pytest.raises(IllegalTransition):
        for s in path:
            c._to(s)


def test_terminal_states_have_no_exit():
    assert TRANSITIONS[State.STOPPED] == frozenset()
    assert TRANSITIONS[State.FAILED] == frozenset()
    assert all(State.FAILED in nxt or s in (State.STOPPED, State.FAILED)
               for s, nxt in TRANSITIONS.items())


def test_free_slots_only_when_serving():
    c = make()
    assert c.free_slots == 0
    c._to(State.WARMING)
    assert c.free_slots == 0
    c._to(State.READY)
    assert c.free_slots == 2
