"""Action parsing: never raises, strict mode is BALROG's rules, lenient mode accepts the documented formats."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from verlog.envs.parsing import MAX_SCANNED_CHARS, ParsedAction, normalize, parse_action

BABYAI = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
CRAFTER = (
    "Noop",
    "Move West",
    "Move East",
    "Move North",
    "Move South",
    "Do",
    "Sleep",
    "Place Stone",
    "Place Table",
    "Make Wood Pickaxe",
)
BABA = ("idle", "up", "right", "down", "left")
GAMES = {"babyai": (BABYAI, "go forward"), "crafter": (CRAFTER, "Noop"), "baba": (BABA, "idle")}

# --------------------------------------------------------------------------- BALROG, written from its source
_BALROG_FILTER = re.compile(r"[^a-zA-Z\s:]")
_BALROG_TAGS = re.compile(r"<\|ACTION\|>(.*?)<\|END\|>", re.DOTALL)


def balrog_answer(completion: str) -> str:
    """What BALROG's agents hand to the env, for a completion of its naive/cot/robust agents.

    The client strips the completion. ``<|ACTION|>…<|END|>`` (robust agents, ``re.search``) wins and is
    stripped; else the letter filter runs, and the text after the last ``ACTION:`` is stripped (cot agent); a
    bare answer (naive agent) is filtered only.
    """
    text = completion.strip()
    tagged = _BALROG_TAGS.search(text)
    if tagged:
        return tagged.group(1).strip()
    filtered = _BALROG_FILTER.sub("", text)
    return filtered.split("ACTION:")[-1].strip() if "ACTION:" in filtered else filtered


def balrog_parse(completion: str, actions: tuple[str, ...], default: str) -> tuple[str, bool]:
    answer = balrog_answer(completion)
    return (answer, True) if answer in actions else (default, False)


# --------------------------------------------------------------------------- strategies
def _pieces(actions: tuple[str, ...]) -> st.SearchStrategy[str]:
    tokens = [
        *actions,
        *(a.upper() for a in actions),
        *(a.replace(" ", "_") for a in actions),
        "ACTION:",
        "Action:",
        "ACTION :",
        "<|ACTION|>",
        "<|END|>",
        " ",
        "  ",
        "\n",
        "\t",
        ".",
        "!",
        ":",
        "1. ",
        "é",
        "行动",
        "**",
    ]
    return st.lists(st.sampled_from(tokens) | st.text(max_size=4), max_size=12).map("".join)


def _no_xml_action_tag(text: str) -> bool:
    lowered = text.lower()
    return "<action>" not in lowered and "</action>" not in lowered


any_text = st.one_of(
    st.text(),
    st.binary(max_size=300).map(lambda b: b.decode("utf-8", errors="replace")),
    st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
    _pieces(BABYAI),
    _pieces(CRAFTER),
)


# --------------------------------------------------------------------------- never raises
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("game", sorted(GAMES))
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(text=any_text)
@example(text="")
@example(text="\x00\x01\ud7ff\U0010ffff")
@example(text="<action></action><|ACTION|><|END|>ACTION:")
def test_any_text_gives_an_action_and_a_flag(text: str, game: str, strict: bool) -> None:
    actions, default = GAMES[game]
    parsed = parse_action(text, actions, default, strict)
    assert isinstance(parsed, ParsedAction)
    assert parsed.action in actions
    assert isinstance(parsed.valid, bool)
    if not parsed.valid:
        assert parsed.action == default
    assert len(parsed.candidate) <= max(len(text), 200)


@pytest.mark.parametrize("response", [b"\xff\xfego forward", bytearray(b"drop"), None, 42, 3.5, ["toggle"]])
@pytest.mark.parametrize("strict", [False, True])
def test_non_str_responses_are_converted_not_raised(response: object, strict: bool) -> None:
    parsed = parse_action(response, BABYAI, "go forward", strict)
    assert parsed.action in BABYAI
    if isinstance(response, bytearray):
        assert parsed == ParsedAction("drop", True, parsed.candidate)


@pytest.mark.parametrize("strict", [False, True])
def test_a_megabyte_response_parses_from_its_end(strict: bool) -> None:
    junk = "\x00é\n<action>" * 100_000  # 1 MB of junk with unclosed tags
    assert len(junk) >= 1_000_000
    assert parse_action(junk, BABYAI, "go forward", strict) == ParsedAction(
        "go forward", False, parse_action(junk, BABYAI, "go forward", strict).candidate
    )
    parsed = parse_action(junk + "\nACTION: toggle", BABYAI, "go forward", strict)
    assert (parsed.action, parsed.valid) == ("toggle", True)


# --------------------------------------------------------------------------- strict = BALROG
@pytest.mark.parametrize("game", sorted(GAMES))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_strict_mode_equals_balrog(game: str, data: st.DataObject) -> None:
    actions, default = GAMES[game]
    text = data.draw(st.one_of(_pieces(actions), st.text(max_size=40)))
    assume(_no_xml_action_tag(text))  # `<action>` tags are verlog's addition, tested below
    assume(len(_BALROG_TAGS.findall(text.strip())) <= 1)  # see test_strict_takes_the_first_robust_tag
    assume(len(text) < MAX_SCANNED_CHARS)
    parsed = parse_action(text, actions, default, strict=True)
    assert (parsed.action, parsed.valid) == balrog_parse(text, actions, default)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("go forward", "go forward"),
        ("go forward.", "go forward"),  # the letter filter drops the dot
        ("  go forward \n", "go forward"),  # the client strips the completion
        ("go forward !", None),  # filtered to "go forward " and not stripped again
        ("1. go forward", None),  # filtered to " go forward"
        ("Go forward", None),  # case-sensitive
        ("go  forward", None),  # whitespace is not collapsed
        ("go_forward", None),  # "_" is dropped: "goforward"
        ("I think so.\nACTION: toggle", "toggle"),
        ("ACTION:toggle.", "toggle"),
        ("ACTION: drop\nACTION: toggle", "toggle"),  # the last ACTION:
        ("action: toggle", None),  # ACTION: is case-sensitive
        ("thinking... <|ACTION|> pick up <|END|> done", "pick up"),
        ("<|ACTION|>pick up.<|END|>", None),  # tagged answers are not letter-filtered
        ("<action>drop</action>", "drop"),  # verlog's tag form, stripped like BALROG's
    ],
)
def test_strict_examples(response: str, expected: str | None) -> None:
    parsed = parse_action(response, BABYAI, "go forward", strict=True)
    if expected is None:
        assert (parsed.action, parsed.valid) == ("go forward", False)
    else:
        assert (parsed.action, parsed.valid) == (expected, True)


def test_strict_takes_the_first_robust_tag() -> None:
    text = "<|ACTION|>drop<|END|> no, rather <|ACTION|>toggle<|END|>"
    parsed = parse_action(text, BABYAI, "go forward", strict=True)
    assert (parsed.action, parsed.valid) == balrog_parse(text, BABYAI, "go forward") == ("drop", True)


# --------------------------------------------------------------------------- lenient formats
_CASES = (str, str.lower, str.upper, str.title)


@pytest.mark.parametrize("game", sorted(GAMES))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_lenient_accepts_every_documented_format(game: str, data: st.DataObject) -> None:
    actions, default = GAMES[game]
    action = data.draw(st.sampled_from(actions))
    word = data.draw(st.sampled_from(_CASES))(action)
    word = word.replace(" ", data.draw(st.sampled_from([" ", "  ", "_", "\t"])))
    word = data.draw(st.sampled_from(["", " ", "\n", '"', "'", "**"])) + word
    word += data.draw(st.sampled_from(["", ".", "!", " ", "\n", '"', "**", "."]))
    reasoning = data.draw(st.text(st.characters(blacklist_categories=["Cs"]), max_size=60))
    assume("action" not in reasoning.lower() and "<" not in reasoning and "|" not in reasoning)
    template = data.draw(
        st.sampled_from(
            [
                "{w}",
                "ACTION: {w}",
                "action:{w}",
                "{r}\nACTION: {w}",
                "{r}<action>{w}</action>",
                "<ACTION>{w}</ACTION>{r}",
                "{r}<|ACTION|>{w}<|END|>",
            ]
        )
    )
    text = template.format(w=word, r=reasoning)
    parsed = parse_action(text, actions, default)
    assert (parsed.action, parsed.valid) == (action, True), text


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Go Forward", "go forward"),
        ("GO_FORWARD!!", "go forward"),
        ("go forward. The ball is ahead.", "go forward"),  # a first line that starts with one action
        ("turn left, then I will look around\nmore text", "turn left"),
        ("<action>drop</action> or rather <action>toggle</action>", "toggle"),  # the last pair
        ("ACTION: pick up\n", "pick up"),
        ("forward", "go forward"),  # synonym
        ("1. up", None),
        ("", None),
        ("I will turn", None),
        ("drop toggle", "drop"),  # starts with exactly one action
    ],
)
def test_lenient_examples(response: str, expected: str | None) -> None:
    parsed = parse_action(response, BABYAI, "go forward", synonyms={"forward": "go forward"})
    assert (parsed.action, parsed.valid) == ((expected, True) if expected else ("go forward", False))


def test_lenient_rejects_a_first_line_that_starts_with_two_actions() -> None:
    actions = ("move", "move west", "noop")
    parsed = parse_action("move west quickly", actions, "noop")
    assert (parsed.action, parsed.valid) == ("noop", False)


def test_crafter_title_case_multiword() -> None:
    parsed = parse_action("Move West 3 steps", CRAFTER, "Noop")
    assert (parsed.action, parsed.valid) == ("Move West", True)
    assert parse_action("move west", CRAFTER, "Noop", strict=True).valid is False


def test_normalize() -> None:
    assert normalize("  Go__Forward!!\n") == "go forward"
    assert normalize("Make  Wood-Pickaxe") == "make wood pickaxe"
