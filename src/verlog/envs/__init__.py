"""The games, as Gymnasium text environments (floor 1: no torch, no models)."""

from verlog.envs.base import INFO_KEYS, TextEnv
from verlog.envs.parsing import ParsedAction, parse_action
from verlog.envs.registration import prompt_examples, register_envs

__all__ = ["INFO_KEYS", "ParsedAction", "TextEnv", "parse_action", "prompt_examples", "register_envs"]
