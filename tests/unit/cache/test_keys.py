"""Cache keys: endpoint, build and the item's canonical JSON."""

from floodway.cache.keys import canonical, item_key


def test_objects_with_keys_in_another_order_share_a_key():
    a = {"prompt": "hi", "temperature": 0.0, "stop": ["x"]}
    b = {"stop": ["x"], "temperature": 0.0, "prompt": "hi"}
    assert canonical(a) == canonical(b) == b'{"prompt":"hi","stop":["x"],"temperature":0.0}'
    assert item_key("e", "k1", a) == item_key("e", "k1", b)


def test_the_endpoint_the_build_and_the_item_each_change_the_key():
    base = item_key("e", "k1", "text")
    assert len(base) == 32
    assert len({base, item_key("f", "k1", "text"), item_key("e", "k2", "text"),
                item_key("e", "k1", "text "), item_key("e", "k1", ["text"])}) == 5


def test_a_tenant_has_keys_of_its_own():
    plain = item_key("e", "k1", "text")
    a, b = item_key("e", "k1", "text", "key-a"), item_key("e", "k1", "text", "key-b")
    assert len({plain, a, b}) == 3
    assert a == item_key("e", "k1", "text", "key-a")   # the same tenant finds its own


def test_parts_cannot_run_into_each_other():
    # Without lengths in front, ("ab", "c") and ("a", "bc") would hash the same bytes.
    assert item_key("ab", "c", "x") != item_key("a", "bc", "x")


def test_json_numbers_are_told_apart_and_big_integers_still_key():
    assert item_key("e", "k", 1) != item_key("e", "k", 1.0)
    big = 10 ** 30
    assert canonical([big]) == b"[1000000000000000000000000000000]"
    assert item_key("e", "k", big) != item_key("e", "k", big + 1)


def test_unicode_is_kept_as_utf8():
    assert canonical("é😀") == '"é😀"'.encode()
