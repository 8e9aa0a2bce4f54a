"""The rule probe reads Crafter's text as the env writes it: a change to the text must not leave it blind."""

from __future__ import annotations

import random

from benchmarks.probes.crafter_rules import read, rule_action
from verlog.envs.crafter import CrafterTextEnv


def test_the_rules_read_inventory_vitals_the_nearest_things_and_the_facing_cell() -> None:
    env = CrafterTextEnv()
    text, _ = env.reset(seed=3)
    for action in ["Move South", "Move West", "Move West", "Move West", "Do"]:  # seed 3: wood on the fifth
        text, *_ = env.step(action)
    inventory, vitals, seen, face = read(text)
    assert inventory == {"wood": 1}
    assert set(vitals) == {"health", "food", "drink", "energy"} and all(0 <= v <= 9 for v in vitals.values())
    assert face == "grass"
    assert seen["tree"] == (3, "west") and seen["cow"] == (6, "south-west")  # one line a kind, as written


def test_the_rules_chop_the_tree_they_face_and_always_answer_an_action() -> None:
    env = CrafterTextEnv()
    text, info = env.reset(seed=3)
    for action in ["Move South", "Move West", "Move West", "Move West"]:
        text, *_, info = env.step(action)
    assert rule_action(text, random.Random(0), explore=0.0) == "Do"  # facing the tree, with no wood yet
    rng = random.Random(0)
    for _ in range(50):
        action = rule_action(text, rng, explore=0.5)
        assert action in info["valid_actions"]
        text, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
