"""What every command shares: an error is one line, its text as written."""


def test_an_error_keeps_its_brackets_it_is_not_read_as_markup(capsys):
    from floodway.cli.common import fail
    from floodway.errors import FloodwayError

    fail(FloodwayError("takes list[np.ndarray]; use fw.Array[np.float32, (3, 224, 224)]"))
    err = capsys.readouterr().err
    assert "list[np.ndarray]" in err and "fw.Array[np.float32, (3, 224, 224)]" in err
