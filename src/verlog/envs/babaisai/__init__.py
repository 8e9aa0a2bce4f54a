"""BabaIsAI: our own engine for the BALROG BabaIsAI levels, as Gymnasium text environments.

Modules: :mod:`.engine` (grid, rules, one step), :mod:`.levels` (the 40 families), :mod:`.text` (the
observation), :mod:`.env` (the Gymnasium env), :mod:`.solver` and :mod:`.heuristic` (the oracle),
:mod:`.render` (ansi and rgb pictures).

Where the brief was silent, the engine does what Baba Is You does, with these choices:

* Only the top object of a cell takes part in the game: it is what rules are read from, what is pushed,
  what stops, what is entered; a buried object waits until it is uncovered.
* Several YOU objects move in one step, the one furthest ahead first, so a line of them moves together.
  MOVE objects move after them and turn round when blocked (as in Baba Is You; the reference does not).
* A PUSH object that cannot move blocks the mover (Baba Is You; the reference lets it be walked over).
  YOU and PULL do not imply STOP (the reference makes them STOP).
* Win: a YOU object that enters a cell whose top object is WIN. A YOU object that is itself WIN does not win
  by standing still (the reference does the same; Baba Is You would call it a win). When one step both wins
  and enters a DEFEAT cell, the win counts.
* Defeat: a YOU object that enters a cell whose top object is DEFEAT loses the episode (reward -1), which
  is the reference's reading; Baba Is You would only destroy that object.
* ``<noun> is <noun>`` turns every object of the first kind, buried ones too, into the second kind, with
  that kind's usual colour, at the end of the step that formed the rule and every step after;
  ``<noun> is <same noun>`` protects a kind from it; with two targets, the first rule in reading order wins.
* No object YOU any more: the episode terminates as a failure (reward 0, ``info["end_reason"] ==
  "no_you"``), instead of the reference's silent regeneration of the level. A YOU object buried under
  another object cannot act, so it does not count.
* ``idle`` only advances the clock; MOVE objects do not move on it.
* The property word for DEFEAT reads ``defeat`` (the reference's text said ``lose``; no BALROG level has it).
* Levels follow the reference's placements but draw from the env's seeded generator (uniformly among the
  empty cells of an area), so they are not the reference's levels for the same seed. The extra win rule of
  ``distr_win_rule`` is laid down before the random draws, so that no block ends up buried under it.
"""

from verlog.envs.babaisai.env import INSTRUCTION, BabaIsAIEnv
from verlog.envs.babaisai.levels import LEVELS
from verlog.envs.babaisai.solver import solve

__all__ = ["INSTRUCTION", "LEVELS", "BabaIsAIEnv", "solve"]
