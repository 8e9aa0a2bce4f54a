"""NetHack and MiniHack, BALROG's way, as verlog text envs (``pip install -e ".[nethack]"`` / ``".[minihack]"``).

Facts relied on (BALROG af7d1f1, its ``balrog-nle`` 0.9.0 translator, ``nle`` 1.3.0, ``minihack`` 1.0.2):

* **Tasks.** NetHack is ``NetHackChallenge-v0`` (random role, 100 000-step cap, NLE's own stop after 150
  steps without game time passing, which truncates; nle 1.3.0's ``_check_abort`` counts a stalled step
  twice, so a stall ends after 75 agent steps). MiniHack: Corridor-R3, CorridorBattle-Dark, Quest-Easy,
  Quest-Medium, MazeWalk-9x9, MazeWalk-15x15 with ``penalty_step -0.01``, ``penalty_time 0``, constant
  penalty mode, no autopickup, 100 steps. BALROG also plays Boxoban Hard/Medium, which need DeepMind's level
  files; no registry package ships them and nothing may be downloaded, so they are left out.
* **AutoMore.** Every ``--More--`` is answered inside the step (one agent action may be several NLE steps);
  the message pieces are joined with newlines and their rewards summed.
* **Text** (BALROG's "hybrid" mode for text models): blocks ``name:\\nvalue\\n`` joined by a newline, in the
  order BALROG's current turn shows them: ``inventory`` (``a: <item>``), ``message``, ``language
  observation``, ``cursor`` (``Yourself a <role>`` or ``<distance> <direction> <name>``, then
  ``(x=col, y=row)``) and ``map`` (the 24x80 tty without its message row, so ending with the status lines).
  The language observation (:mod:`.language`): monsters, objects and the notable features (doors, bars,
  trees, stairs, ladders, altar, grave, throne, sink, fountain, pool, ice, lava, raised drawbridges) anywhere
  on the map; other features along 8 rays of 9 cells, each ray stopping at a wall, dark area, closed door or
  raised drawbridge; distance words by Chebyshev distance (1 adjacent, 2 very near, 3-5 near, 6-19 far,
  else very far); 16 compass words; lines far to near, then in compass order; one line per (name,
  distance) with its directions joined "a, b, and c", the name pluralised when one direction holds several.
* **Actions.** BALROG's names: compass words, ``far <dir>``, and each command's name in lower case
  (``pickup``, ``esc``, ``turnundead``; a key shared by a command and a text key names the command, so
  ``+`` is ``seespells``). NetHack offers the 86 names of NLE's useful actions plus the letters that are keys
  of its action set (inventory and menu answers); BALROG's digit strings are left out (its two-digit ones crash
  its own step). MiniHack offers the task's actions among the 33 names of BALROG's prompt. Invalid answers
  run ``esc`` (NetHack) or ``north`` (MiniHack).
* **Progression.** NetHack: the highest value over the episode of BALROG's tables for ``Dlvl`` (depth,
  blstats[12]) and ``Xp`` (experience level, blstats[18]); level 1 is 0. MiniHack: 1 when the last step's
  reward is at least 1 (a win), else 0.
* **Seeding.** nle 1.3.0 seeds only gymnasium's generator at ``reset(seed=)`` and NetHackChallenge refuses
  ``seed()``; verlog draws NetHack's core and display seeds from ``self.np_random`` and sets them through the
  class-level ``set_initial_seeds`` (MiniHack: ``seed(core, disp, reseed=False)``), so ``reset(seed=s)``
  fixes the episode; the moon's phase, Friday the 13th, night and midnight come from those seeds too (NLE's
  ``fix_moon_phase``; BALROG reads them from the clock), so a seed gives one game on any night. Still from the
  clock in nle 1.3.0: the hero's birthday, which names shopkeepers and labels scrolls. Pickling replays the
  episode's raw actions from its seeds (NLE's C state is not picklable).

What differs from BALROG: the translator is Python, not the compiled ``nle_language_obsv`` (which comes only
inside ``balrog-nle``, an NLE 0.9 fork that installs its own ``nle`` package and pins gym 0.23), so object
names of unidentified items and the wall-piece names are ours; ``max_steps`` counts agent actions, not NLE
steps.
"""

from __future__ import annotations

from verlog.extras import NLE_INSTALL, MissingPackage, missing

if missing("nle"):
    raise MissingPackage(
        f"verlog's NetHack and MiniHack envs need nle, which is not installed: {NLE_INSTALL}"
    )

from verlog.envs.nethack.env import (  # noqa: E402
    MINIHACK_TASKS,
    PROGRESSION_DLVL,
    PROGRESSION_XP,
    MiniHackTextEnv,
    NetHackTextEnv,
)

__all__ = ["MINIHACK_TASKS", "PROGRESSION_DLVL", "PROGRESSION_XP", "MiniHackTextEnv", "NetHackTextEnv"]
