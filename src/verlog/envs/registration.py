"""One function registers every ``verlog/...`` id with Gymnasium (Minigrid style: variants are kwargs)."""

from __future__ import annotations

from typing import Any

from gymnasium.envs.registration import register, registry

__all__ = [
    "BABYAI_TASKS",
    "MINIHACK_TASKS",
    "TEXTWORLD_TASKS",
    "has_success",
    "prompt_examples",
    "register_envs",
]

#: BabyAI task kinds, as BALROG names them, and the id suffix each is registered under.
BABYAI_TASKS = {
    "goto": "GoTo",
    "pickup": "Pickup",
    "open": "Open",
    "putnext": "PutNext",
    "pick_up_seq_go_to": "PickUpSeqGoTo",
}

#: BALROG's MiniHack tasks (without Boxoban, whose level files no registry package ships) and the goal BALROG's
#: prompt gives each; plain data, so registering needs no nle.
MINIHACK_TASKS = {
    "Corridor-R3": "reach the stairs down",
    "CorridorBattle-Dark": "reach the stairs down",
    "Quest-Easy": "explore, fight and cross rooms and mazes to reach the stairs down",
    "Quest-Medium": "explore, fight and cross rooms and mazes to reach the stairs down",
    "MazeWalk-9x9": "get as far as possible",
    "MazeWalk-15x15": "get as far as possible",
}

#: BALROG's TextWorld task kinds and the id suffix each is registered under.
TEXTWORLD_TASKS = {
    "coin_collector": "CoinCollector",
    "treasure_hunter": "TreasureHunter",
    "cooking": "Cooking",
}


#: Games no episode "succeeds" in: Crafter's 22 achievements and NetHack's depth and experience make a
#: progression and nothing more, so a console shows progression where another game shows its success rate.
NO_SUCCESS = ("verlog/Crafter-", "verlog/NetHack-")


def has_success(env_id: str) -> bool:
    """Whether an episode of ``env_id`` can end in a success (not Crafter, not NetHack)."""
    return not env_id.startswith(NO_SUCCESS)


def _register(env_id: str, entry_point: str, description: str, **kwargs: Any) -> None:
    if env_id in registry:
        return
    register(id=env_id, entry_point=entry_point, kwargs=kwargs, disable_env_checker=False)
    registry[
        env_id
    ].description = description  # shown by `verlog list`: short, it fits 80 columns beside the id


def register_envs() -> None:
    """Register every verlog env id. Importing :mod:`verlog` calls this; calling it again is harmless."""
    # --- BabyAI: the five MixedTrainLocal task kinds, and a mix drawn per reset
    for task, suffix in BABYAI_TASKS.items():
        _register(
            f"verlog/BabyAI-{suffix}-v0",
            "verlog.envs.babyai:BabyAITextEnv",
            f"BabyAI {task.replace('_', ' ')} (BALROG)",
            task=task,
        )
    _register(
        "verlog/BabyAI-Mixed-v0",
        "verlog.envs.babyai:BabyAITextEnv",
        "BabyAI, a task kind drawn per reset",
        task=tuple(BABYAI_TASKS),
    )

    # --- Crafter
    _register(
        "verlog/Crafter-v0",
        "verlog.envs.crafter:CrafterTextEnv",
        "Crafter (BALROG), achievements / 22",
    )

    # --- BabaIsAI: the 40 BALROG level families, one id each; any family by level=; a mix drawn per reset
    from verlog.envs.babaisai.levels import LEVELS

    for family in LEVELS:
        _register(
            f"verlog/BabaIsAI-{family}-v0",
            "verlog.envs.babaisai:BabaIsAIEnv",
            "BabaIsAI level family (BALROG)",
            level=family,
        )
    _register(
        "verlog/BabaIsAI-v0",
        "verlog.envs.babaisai:BabaIsAIEnv",
        "BabaIsAI, the family given as level=",
    )
    _register(
        "verlog/BabaIsAI-Mixed-v0",
        "verlog.envs.babaisai:BabaIsAIEnv",
        "BabaIsAI, a family drawn per reset",
        levels=LEVELS,
    )

    # --- NetHack and MiniHack (nle; BALROG's tasks, text and progression)
    _register(
        "verlog/NetHack-v0",
        "verlog.envs.nethack:NetHackTextEnv",
        "NetHack (NLE challenge, BALROG's text)",
    )
    for task in MINIHACK_TASKS:
        _register(
            f"verlog/MiniHack-{task}-v0",
            "verlog.envs.nethack:MiniHackTextEnv",
            f"MiniHack {task} (BALROG)",
            task=task,
        )

    # --- TextWorld (BALROG's three task kinds; games generated locally with TextWorld's generator, cached)
    for task, suffix in TEXTWORLD_TASKS.items():
        _register(
            f"verlog/TextWorld-{suffix}-v0",
            "verlog.envs.textworld_games:TextWorldTextEnv",
            f"TextWorld {task.replace('_', ' ')} (BALROG)",
            task=task,
        )


def prompt_examples(env_id: str, count: int = 1) -> tuple[tuple[str, str, str], ...]:
    """The first ``count`` worked turns (observation, reason, action) the env's class offers for few-shot prompts.

    Read from the registered class without making an env, so a learner or an evaluation can build its
    prompts before (or without) stepping one. ``count = 1`` means "the game's example, if it has one" (most
    BALROG games have none); a larger count than the class offers is an error that says how many it has.
    """
    from gymnasium.envs.registration import load_env_creator

    if count < 0:
        raise ValueError(f"prompt.examples must be >= 0, got {count}")
    spec = registry.get(env_id)
    if count == 0 or spec is None or spec.entry_point is None:
        return ()
    entry = spec.entry_point
    offered = tuple(
        getattr(load_env_creator(entry) if isinstance(entry, str) else entry, "prompt_examples", ())
    )
    if count > 1 and count > len(offered):
        raise ValueError(
            f"prompt.examples = {count}, but {env_id} offers {len(offered)} worked example(s); use at most "
            f"{max(1, len(offered))}"
        )
    return offered[:count]
