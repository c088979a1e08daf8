"""Counterfactual task relabelling of ALFWorld expert steps (gigpo.agent.relabel)."""

from gigpo.agent.relabel import holds_task_object, relabel_step, task_words

ADM = [
    "go to countertop 1",
    "go to countertop 2",
    "go to fridge 1",
    "go to drawer 2",
    "go to drawer 1",
    "take apple 1 from countertop 1",
    "take mug 2 from countertop 1",
    "take apple 2 from countertop 1",
    "take knife 1 from countertop 1",
    "inventory",
    "look",
]


def test_task_words_cover_put_phrasings():
    for task, obj, rec in [
        ("put a apple in fridge.", "apple", "fridge"),
        ("put some knife on countertop.", "knife", "countertop"),
        ("put a clean apple in fridge.", "apple", "fridge"),
        ("heat some egg and put it in diningtable.", "egg", "diningtable"),
    ]:
        m = task_words(task)
        assert (m.group("obj"), m.group("rec")) == (obj, rec), task
    assert task_words("examine the book with the desklamp.") is None


def test_take_is_relabelled_to_each_other_object_in_view():
    out = relabel_step("put a apple in fridge.", "take apple 1 from countertop 1", ADM, False, 5)
    assert out == [
        ("put a mug in fridge.", "take mug 2 from countertop 1"),
        ("put a knife in fridge.", "take knife 1 from countertop 1"),
    ]  # apple 2: same word
    assert relabel_step("put a apple in fridge.", "take apple 1 from countertop 1", ADM, False, 1) == out[:1]
    # taking something that is not the task's object reads nothing: no variants
    assert relabel_step("put a apple in fridge.", "take mug 2 from countertop 1", ADM, False, 5) == []


def test_goto_target_is_relabelled_only_while_holding_the_object():
    task = "put some apple on countertop."
    out = relabel_step(task, "go to countertop 2", ADM, True, 5)
    # one variant per other receptacle type, its lowest-numbered instance
    assert out == [("put some apple on fridge.", "go to fridge 1"), ("put some apple on drawer.", "go to drawer 1")]
    assert relabel_step(task, "go to countertop 2", ADM, False, 5) == []  # exploring, not carrying
    assert relabel_step(task, "go to fridge 1", ADM, True, 5) == []  # not the task's receptacle
    assert relabel_step("look around.", "go to countertop 2", ADM, True, 5) == []  # not a put task
    assert relabel_step(task, "go to countertop 2", ADM, True, 0) == []


def test_holds_task_object_tracks_take_and_put():
    task = "put a apple in fridge."
    assert not holds_task_object(task, ["go to countertop 1"])
    assert holds_task_object(task, ["go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1"])
    assert not holds_task_object(task, ["take apple 1 from countertop 1", "move apple 1 to fridge 1"])
    assert not holds_task_object(task, ["take mug 2 from countertop 1"])
