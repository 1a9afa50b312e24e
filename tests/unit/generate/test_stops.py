"""Stop strings over streamed deltas: the cut, and text held back until it is settled."""

from __future__ import annotations

from floodway.generate.stops import StopText


def stream(stops, deltas):
    st = StopText(stops)
    out = [st.push(d) for d in deltas]
    return out, st


def test_the_text_is_cut_before_a_stop_string_split_over_deltas():
    out, st = stream(["END"], ["hello E", "N", "D and more"])
    assert out == ["hello ", "", ""] and st.stopped
    assert "".join(out) + st.flush() == "hello "


def test_text_that_could_become_a_stop_is_held_then_released():
    out, st = stream(["END"], ["abc E", "Nx", "y"])
    assert out == ["abc ", "ENx", "y"] and not st.stopped


def test_the_first_of_several_stops_wins_and_held_text_is_flushed_at_the_end():
    out, st = stream(["\n\n", "user:"], ["one\n", "two user: three\n\n"])
    assert "".join(out) == "one\ntwo " and st.stopped
    out, st = stream(["###"], ["a #", "#"])
    assert out == ["a ", ""] and st.flush() == "##"


def test_no_stops_releases_everything_at_once():
    out, st = stream([], ["a", "b"])
    assert out == ["a", "b"] and st.flush() == ""


def test_a_stop_at_the_very_start_sends_nothing():
    out, st = stream(["x"], ["xyz"])
    assert out == [""] and st.stopped and st.flush() == ""
