from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.allocation import check_preferred, fallback_choice


def test_valid_answer_is_kept() -> None:
    choice = check_preferred(["b", "a"], ["a", "b", "c"], ["a"], 2)
    assert choice.ids == ("b", "a") and choice.problem == ""


def test_each_kind_of_bad_answer_falls_back_with_a_reason() -> None:
    available, must = ["a", "b", "c"], ["c"]
    cases = {
        "duplicate": ["c", "c"],
        "not offered": ["c", "zz"],
        "misses must-include": ["a", "b"],
        "requested": ["c"],
    }
    for reason, answer in cases.items():
        choice = check_preferred(answer, available, must, 2)
        assert reason in choice.problem
        assert choice.ids == ("c", "a")


def test_request_larger_than_available_gives_everything_offered() -> None:
    assert fallback_choice(["a", "b"], [], 5) == ("a", "b")
    assert check_preferred(["a", "b"], ["a", "b"], [], 5).problem == ""


ids = st.lists(st.sampled_from([f"card{c}-{i}" for c in range(4) for i in range(3)]), unique=True)


@given(ids, st.data(), st.integers(-1, 15), st.lists(st.text(max_size=3), max_size=4))
def test_checked_answer_is_always_acceptable_to_the_kubelet(
    available: list[str], data: st.DataObject, size: int, answer: list[str]
) -> None:
    must = data.draw(st.lists(st.sampled_from(available), unique=True) if available else st.just([]))
    chosen = check_preferred(answer, available, must, size).ids
    assert len(set(chosen)) == len(chosen)
    assert set(chosen) <= set(available)
    wanted = min(max(size, 0), len(available))
    assert len(chosen) == wanted
    if len(must) <= wanted:
        assert set(must) <= set(chosen)
