"""The documentation: README stays a short front page, the site builds strictly, and no figure drifts.

README's results table and the results page are made from ``benchmarks/results/*.json`` (``docs/hooks/results.py``);
the game pages' tables from the registry and the env classes (``docs/hooks/games.py``); the game pictures from
seeded states (``docs/gen_pictures.py``); the site is built with ``mkdocs build --strict`` (a broken link, anchor
or API reference fails) and, where chromium is installed, opened headless at 1280 px.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_floors import ORDER, ROOT_FLOORS

from verlog.cli import GAMES

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


results = _module(ROOT / "docs" / "hooks" / "results.py", "verlog_docs_results")
pictures = _module(ROOT / "docs" / "gen_pictures.py", "verlog_docs_pictures")
browser = _module(ROOT / "docs" / "browser_check.py", "verlog_docs_browser")
games = _module(ROOT / "docs" / "hooks" / "games.py", "verlog_docs_games")


# ---------------------------------------------------------------------------------------------- README
def test_readme_is_a_short_front_page_that_keeps_the_two_setup_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"
    heads = [line for line in lines if line.startswith("# Set up")]  # .ci/run greps the line under the second
    assert [
        h.startswith(("# Set up and run the main job", "# Set up and pass the tests")) for h in heads
    ] == [
        True,
        True,
    ]


def test_readme_links_and_images_point_at_files_that_exist() -> None:
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local, "README links to no documentation page"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_readme_results_table_is_what_the_results_files_say() -> None:
    text = README.read_text()
    assert results.readme_block(text) == text, (
        "README's results table differs from benchmarks/results/: run python docs/hooks/results.py --readme"
    )


def test_every_preset_is_in_readme_and_on_the_presets_page() -> None:
    presets = sorted(p.name for p in (ROOT / "envs").glob("*.toml"))
    for page in (README, ROOT / "docs" / "training" / "presets.md"):
        text = page.read_text()
        missing = [p for p in presets if f"envs/{p}" not in text]
        assert not missing, f"{page.relative_to(ROOT)} does not list {missing}"


# --------------------------------------------------------------------------------------------- results
#: Renderers that write sentences, not a table.
READINGS = (
    "crafter_reading",
    "crafter_reading_before_reading",
    "crafter_reading_free",
    "crafter_reading_unshaped",
)
#: Renderers that write one sentence with its figures.
SENTENCES = ("crafter_speed", "gpu_check_summary")


def test_every_results_table_renders_from_the_files() -> None:
    for name in results.RENDERERS:
        table = results.render(name)
        if name in READINGS:  # a list of sentences read off a table, one per row
            assert table.startswith("- ") and table.count("\n") >= 1, name
        elif name in SENTENCES:
            assert "\n" not in table and table.endswith(".") and "turns/s" in table, name
        else:
            assert table.startswith("| ") and table.count("\n") >= 2, name
    with pytest.raises(KeyError, match="no results table named"):
        results.render("no_such_table")
    with pytest.raises(ValueError, match="misspelt"):
        results.expand("<!-- results: Headline -->\n")


def test_an_ablation_variant_short_of_seeds_is_read_against_the_preset_on_the_same_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ablation runs cell by cell over sessions: a variant with seed 1 alone so far is compared with the full
    preset's seed 1, not with the preset's mean over three seeds (a seed's luck would read as the piece's)."""

    def row(variant: str, per_seed: dict[int, tuple[float, float]]) -> dict:
        rets, scores = [v[0] for v in per_seed.values()], [v[1] for v in per_seed.values()]
        return {"variant": variant, "seeds": list(per_seed), "updates": [234] * len(per_seed),
                "return": sum(rets) / len(rets), "return_se": 0.2, "crafter_score": sum(scores) / len(scores),
                "crafter_score_se": 0.8,
                "per_seed": {str(k): {"return": r, "crafter_score": c} for k, (r, c) in per_seed.items()}}  # fmt: skip

    table = [
        row("verlog", {1: (3.65, 5.67), 2: (3.24, 2.82), 3: (3.29, 4.77)}),
        row("no-warmup", {1: (3.30, 5.86)}),
    ]
    (tmp_path / "ablation.json").write_text(json.dumps({"table": table}))
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    reading = results.crafter_reading("ablation.json")
    assert "return 3.30 against 3.65 (-0.35), Crafter score 5.86 against 5.67 (+0.19)" in reading
    assert "1 seed (against the preset's seed 1)" in reading
    table[1] = row(
        "no-warmup", {1: (3.30, 5.86), 2: (3.0, 3.0), 3: (3.1, 4.0)}
    )  # every seed: the preset's mean
    (tmp_path / "ablation.json").write_text(json.dumps({"table": table}))
    assert f"against {sum((3.65, 3.24, 3.29)) / 3:.2f}" in results.crafter_reading("ablation.json")


def test_a_demonstration_with_a_new_layout_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Crafter's demonstration will write: per-seed initial/trained/random blocks scored by progression."""
    block = {
        "return": 2.5,
        "return_se": 0.3,
        "progression": 0.091,
        "progression_se": 0.01,
        "achievements": {},
    }
    trained = dict(block, progression=0.182, progression_se=0.012)
    data = {
        "seeds": [
            {"seed": 1, "passed": True, "initial": block, "trained": trained, "random": block, "wall_s": 600},
            {
                "seed": 2,
                "passed": False,
                "initial": block,
                "trained": {},
            },  # a field missing leaves a cell empty
        ]
    }
    (tmp_path / "learn_crafter.json").write_text(json.dumps(data))
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    table = results.headline([("learn_crafter.json", "SmolLM2, Crafter")])
    row = table.splitlines()[2]
    assert (
        "| SmolLM2, Crafter | progression | 9.1 ± 1.0 % | 9.1 ± 1.0 % | 18.2 ± 1.2 % (seed 1)<br> (seed 2) | 1 of 2 |"
        == row
    )
    per_seed = results.demonstrations([("learn_crafter.json", "SmolLM2, Crafter")]).replace(results.NBSP, " ")
    assert per_seed.splitlines()[0].startswith(
        "| recipe | seed | progression before, % | progression after, % |"
    )
    assert "| <code>learn_crafter</code> | 1 | 9.1 ± 1.0 | 18.2 ± 1.2 | +9.1 ± 1.6 |" in per_seed
    assert "| 10.0 | ✓ |" in per_seed and "✗" in per_seed


def test_crafter_achievement_rates_show_every_seed_with_its_standard_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rate over n episodes is a mean of 0/1 outcomes: SE sqrt(p (1 - p) / (n - 1)); no seed is averaged away."""

    def block(rates: dict[str, float]) -> dict:
        return {"episodes": 5, "achievement_rates": rates}

    data = {"seeds": [
        {"seed": 3, "random": block({"wake_up": 0.4}), "untrained": block({}), "trained": block({"eat_cow": 1.0})},
        {"seed": 4, "random": block({"wake_up": 0.4}), "untrained": block({}), "trained": block({"wake_up": 0.6})},
    ]}  # fmt: skip
    (tmp_path / "crafter.json").write_text(json.dumps(data))
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    lines = results.crafter_achievements("crafter.json").splitlines()
    assert lines[0] == "| achievement | random | untrained | seed 3 | seed 4 |"
    assert lines[2] == "| eat_cow | 0 ± 0 % | 0 ± 0 % | 100 ± 0 % | 0 ± 0 % |"
    assert lines[3] == "| wake_up | 40 ± 24 % | 0 ± 0 % | 0 ± 0 % | 60 ± 24 % |"  # sqrt(.24 / 4) = .245
    data["seeds"][0]["trained"]["episodes"] = 1  # one episode: a rate, no spread to show
    (tmp_path / "crafter.json").write_text(json.dumps(data))
    assert "| eat_cow | 0 ± 0 % | 0 ± 0 % | 100 % | 0 ± 0 % |" in results.crafter_achievements("crafter.json")


def test_a_lever_run_stopped_before_its_budget_says_how_far_it_got(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stopped by a signal is judged like a finished one; its row must not pass for the full budget."""
    judged = {"crafter_score": 2.0, "return": 2.0, "achievement_rates": {}}
    entry = {"random": judged, "trained": judged, "untrained": judged}
    data = {"seeds": [
        {**entry, "seed": 1, "updates": 30, "config": {"run": {"total_updates": 78}}},  # before the flag existed
        {**entry, "seed": 2, "updates": 78, "planned_updates": 78, "stopped_early": False},
        # a budget in turns (the ablation's) ends a run long before its bound on updates
        {**entry, "seed": 3, "updates": 234, "planned_updates": 100000, "planned_turns": 120832, "stopped_early": False},
    ]}  # fmt: skip
    (tmp_path / "learn_crafter.json").write_text(json.dumps(data))
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    row = results.tech_tree_levers([("a lever", ("learn_crafter.json",), "what it did")]).splitlines()[-1]
    assert row.startswith("| a lever | 1 (stopped at 30 of 78) 2 3 |")


def test_crafter_tables_show_the_score_beside_old_entries_and_the_published_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crafter's score ± SE beside return, achievements and progression; an entry from before the score existed
    leaves its cell empty (and the headline shows its progression); an SE from stored rates alone is marked; random's
    row and the Crafter paper's rows are there, labelled as another setting."""

    def block(ret: float, **more: float | str) -> dict:
        return {"episodes": 64, "return": ret, "return_se": 0.1, "achievements": 2.0, "achievements_se": 0.1,
                "progression": 0.1, "progression_se": 0.01, "length": 170.0, "length_se": 7.0, **more}  # fmt: skip

    scored = {"crafter_score": 1.64, "crafter_score_se": 0.12}
    rates_only = {**scored, "crafter_score_se_method": "rates-only bootstrap, ignores correlation"}
    old = {"variant": "verlog", "seed": 1, "passed": True, "random": block(1.2), "untrained": block(0.2),
           "trained": block(2.2), "gains": {"return_over_random": {"z": 4.9}, "progression_over_random": {"z": 4.9}}}  # fmt: skip
    new = {"variant": "verlog", "seed": 2, "passed": False, "judged": ["return", "crafter_score"],
           "random": block(1.2, crafter_score=1.56, crafter_score_se=0.15), "untrained": block(0.2, **rates_only),
           "trained": block(2.2, **rates_only),
           "gains": {"return_over_random": {"z": 4.9}, "crafter_score_over_random": {"z": 0.4},
                     "progression_over_random": {"z": 4.9}}}  # fmt: skip
    (tmp_path / "old.json").write_text(json.dumps({"episodes": 64, "eval_seed": 10_000, "seeds": [old]}))
    (tmp_path / "new.json").write_text(json.dumps({"episodes": 64, "eval_seed": 10_000, "seeds": [new]}))
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    lines = results.crafter("old.json").splitlines()
    assert lines[0].startswith("| agent | return | Crafter score | achievements | progression % |")
    assert (
        lines[4].startswith("| verlog, seed 1 | 2.20 ± 0.10 |  | 2.00 ± 0.10 | 10.0 ± 1.0 |")
        and "+4.9" in lines[4]
    )
    assert "| *DreamerV3 (published, pixels, 1M steps)* | 11.7 | 14.5 |" in lines[8]
    new_table = results.crafter("new.json")
    assert "| random | 1.20 ± 0.10 | 1.56 ± 0.15 |" in new_table  # random's from its episodes: no mark
    assert "| verlog, seed 2 | 2.20 ± 0.10 | 1.64 ± 0.12† |" in new_table
    assert "| +0.4 |" in new_table  # the smallest judged gain: the score's, not progression's
    assert "rates-only bootstrap" in new_table and "a different setting" in new_table
    headline = results.headline([("old.json", "old"), ("new.json", "new")])
    assert "| old | progression | 10.0 ± 1.0 % |" in headline
    assert "| new | Crafter score | 1.56 ± 0.15 | 1.64 ± 0.12† | 1.64 ± 0.12† (seed 2) | 0 of 1 |" in headline
    assert "rates-only bootstrap" in headline
    assert "| **Crafter score** |  |  |  |" in results.crafter_achievements("old.json")


def test_a_mix_judged_per_kind_is_one_row_a_kind_beside_verlogs_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """learn.py's per-kind layout as Verlog's table: random and the untrained model once (the same episodes for
    every seed), each seed's trained figure, the seeds that passed the kind, Verlog's before → after where it
    has one, and the line that says its model, budget and prompt differ."""

    def block(success: float, se: float) -> dict:
        return {"episodes": 128, "success": success, "success_se": se, "invalid_action_rate": 0.1}

    def kind(trained: float, passed: bool) -> dict:
        return {"initial": block(0.1, 0.02), "random": block(0.25, 0.04), "trained": block(trained, 0.03),
                "verdict": {"passed": passed}}  # fmt: skip

    model = {"config": {"model": {"build_tiny": True}}}
    data = {
        "task": {"env_id": "verlog/BabyAI-Mixed-v0", "kinds": ["goto", "putnext"]},
        "episodes": 128, "eval_seed": 10_000, "z_required": 3.0,
        "seeds": [
            {"seed": 1, "turns": 92_160, "wall_s": 2400, "tasks": {"goto": kind(0.9, True), "putnext": kind(0.2, False)}, **model},
            {"seed": 2, "turns": 92_160, "wall_s": 2460, "tasks": {"goto": kind(0.8, True), "putnext": kind(0.3, False)}, **model},
        ],
    }  # fmt: skip
    (tmp_path / "mix.json").write_text(json.dumps(data))
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    lines = results.per_task("mix.json").splitlines()
    assert (
        lines[0] == "| task | random | before | after | seeds passed | Verlog, Qwen2.5-3B (before → after) |"
    )
    assert lines[2] == (
        "| goto | 25.0 ± 4.0 % | 10.0 ± 2.0 % | 90.0 ± 3.0 % (seed 1)<br>80.0 ± 3.0 % (seed 2) | 2 of 2 | 88 → 100 % |"
    )
    assert lines[3].startswith("| putnext | 25.0 ± 4.0 % |") and lines[3].endswith("| 0 of 2 |  |")
    note = lines[-1]
    assert "128 held-out episodes (seeds from 10,000)" in note and "3 SE of the difference" in note
    assert "a tiny randomly initialised model" in note and "92,160 turns in 40.0 min (seed 1)" in note
    assert "A different model, budget and prompt" in note
    assert set(results.VERLOG_REFERENCE) >= {"pick_up_seq_go_to", "two_room-maybe_break_stop-goto_win"}
    data["seeds"][1]["tasks"]["goto"]["initial"] = block(0.2, 0.02)  # seeds that did differ show each
    (tmp_path / "mix.json").write_text(json.dumps(data))
    assert "10.0 ± 2.0 % (seed 1)<br>20.0 ± 2.0 % (seed 2)" in results.per_task("mix.json")
    # README's one table: every game's kinds, each row named by its game, one note with each game's budget
    (tmp_path / "other.json").write_text(json.dumps({**data, "task": {"kinds": ["goto"]}}))
    readme = results.verlog_table([("BabyAI", "mix.json"), ("BabaIsAI", "other.json")]).splitlines()
    assert [line.split(" | ")[0] for line in readme[2:5]] == [
        "| BabyAI goto",
        "| BabyAI putnext",
        "| BabaIsAI goto",
    ]
    assert readme[-1].count("92,160 turns in 40.0 min (seed 1)") == 2 and readme[-1].startswith(
        "Each kind: 128"
    )


def test_the_tiny_demo_reports_its_held_out_gain_as_every_demonstration_does() -> None:
    """learn.json's gain in the tables is the held-out one over the initial model (its seeds' ``z``), not the
    training windows' (under ``windows``, which the tiny demo's own table shows)."""
    (entry,) = results.seeds(results.load("learn.json"))
    assert entry["z"] == entry["evaluation_verdict"]["vs_initial"]["z"] != entry["windows"]["z"]
    assert f"z = {entry['windows']['z']:.1f}" in results.learn_demo()


def test_the_per_seed_tables_hold_one_measure_a_column_and_the_held_out_gain() -> None:
    """A table per measure (success, Crafter score), so before, after and their difference mean the same in every
    row; the difference is the held-out one the verdict used: its z is the file's (the tiny demo's too, not its
    training windows')."""
    files = results.DEMONSTRATIONS + results.OTHER_RECIPES
    text = results.demonstrations(files).replace(results.NBSP, " ")
    headers = [t.splitlines()[0] for t in text.split("\n\n") if t.startswith("| recipe | seed |")]
    measures = [h.split(" | ")[2] for h in headers]
    assert sorted(measures) == ["Crafter score before", "success before, %"], measures
    for name, _ in files:
        for entry in results.seeds(results.load(name)):
            key = results._measure(results.before_after(entry)[0])
            gain, se = results._gain(entry, key)
            z = entry["z"] if "z" in entry else entry["gains"][f"{key}_over_untrained"]["z"]
            assert gain / se == pytest.approx(z), (name, entry.get("seed"))
    assert "| <code>learn</code> | 1 | 12.5 ± 3.4 | 96.9 ± 1.8 | +84.4 ± 3.8 |" in text
    assert "<code>learn_crafter_<wbr>constrained_<wbr>critic_ent</code>" in text  # breaks between words


def test_the_headline_rows_follow_the_demonstrations_list() -> None:
    rows = [
        line for line in results.headline().splitlines()[2:] if line.startswith("| ")
    ]  # the table, not its note
    assert len(rows) == len(results.DEMONSTRATIONS)
    for row, (name, title) in zip(rows, results.DEMONSTRATIONS, strict=True):
        assert row.startswith(f"| {title} |"), name
        passed, total = re.search(r"(\d+) of (\d+) \|$", row).groups()
        data = results.load(name)
        assert int(total) == len(data.get("seeds", [data]))


# -------------------------------------------------------------------------------------------- pictures
@pytest.mark.parametrize("game", ["babyai", "crafter", "babaisai"])
def test_game_pictures_and_texts_are_what_the_script_makes(game: str) -> None:
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    picture, text = pictures.shoot(game)
    committed = ROOT / "docs" / "games"
    hint = f"docs/games/*/{game}.* are stale: run python docs/gen_pictures.py {game}"
    assert (committed / "text" / f"{game}.txt").read_text() == text.rstrip("\n") + "\n", hint
    with image.open(committed / "img" / f"{game}.png") as png:
        assert np.array_equal(np.asarray(png.convert("RGB")), picture), hint


@pytest.mark.parametrize("game", ["nethack", "minihack", "textworld"])
def test_text_only_games_screens_and_texts_are_what_the_script_makes(game: str) -> None:
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    try:
        picture, text = pictures.shoot(game)
    except ImportError as error:
        pytest.skip(f"{game} is not installed ({error})")
    hint = f"docs/games/*/{game}.* are stale: run python docs/gen_pictures.py {game}"
    assert (ROOT / "docs" / "games" / "text" / f"{game}.txt").read_text() == text.rstrip("\n") + "\n", hint
    with image.open(ROOT / "docs" / "games" / "img" / f"{game}.png") as png:
        assert np.array_equal(np.asarray(png.convert("RGB")), picture), hint


def test_a_text_game_screen_is_its_terminal_rows() -> None:
    """NetHack's and MiniHack's: the message row, then the map block (tty rows 1-23); TextWorld's: its text."""
    state = (
        "inventory:\na: a sword\n\nmessage:\nHello!\nmore\n\ncursor:\n(x=1, y=2)\n\nmap:\n\n  @.\nDlvl:1\n"
    )
    assert pictures.screen(state) == ["Hello!", "", "  @.", "Dlvl:1"]
    assert pictures.screen("-= Cellar =-\n" + "word " * 20) == [
        "-= Cellar =-",
        "word " * 15 + "word",
        "word " * 3 + "word",
    ]
    picture = pictures.terminal(["@"])
    assert picture.shape[1] == (pictures.COLUMNS * 6 + 2 * pictures.MARGIN) * pictures.SCALE


# ------------------------------------------------------------------------------------------- game pages
FAMILIES = [game.name.lower() for game in GAMES]


def test_every_id_is_in_a_family_with_a_page_a_picture_a_nav_entry_and_the_browser_check() -> None:
    import gymnasium as gym

    from verlog.cli import _groups

    ids = [env_id for env_id in gym.registry if env_id.startswith("verlog/")]
    assert [game.name for game in _groups(ids)] == [game.name for game in GAMES], "an id of no game family"
    nav = (ROOT / "mkdocs.yml").read_text()
    for slug in FAMILIES:
        page = ROOT / "docs" / "games" / f"{slug}.md"
        assert page.is_file(), f"no page for the {slug} ids: {page}"
        text = page.read_text()
        missing = [part for part in games.RENDERERS if f"<!-- game: {slug} {part} -->" not in text]
        assert not missing, f"docs/games/{slug}.md has no table of its {missing}"
        assert f"](img/{slug}.png)" in text and (ROOT / "docs" / "games" / "img" / f"{slug}.png").is_file()
        assert f": games/{slug}.md" in nav, f"mkdocs.yml's nav has no games/{slug}.md"
        assert f"games/{slug}/" in browser.PAGES, f"docs/browser_check.py does not open games/{slug}/"


def _table(markdown: str) -> list[list[str]]:
    """A markdown table's body rows, each a list of cells."""
    return [line.strip("| ").split(" | ") for line in markdown.splitlines()[2:] if line.startswith("| ")]


@pytest.mark.parametrize("slug", FAMILIES)
def test_a_family_page_tables_match_the_registry_and_the_env_class(slug: str) -> None:
    """The ids are the registry's; each keyword argument's default is the constructor's that declares it, the
    constructor takes every one of them, and takes no other; the actions are those an env made for the id offers."""
    pytest.importorskip("griffe", reason="the dev extra's mkdocstrings brings griffe")
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    facts = games.family(slug)
    assert not facts.problems, facts.problems
    (game,) = [g for g in GAMES if g.name.lower() == slug]
    registered = [env_id for env_id in gym.registry if env_id.startswith(game.prefix)]
    assert [row[0].strip("`") for row in _table(games.ids(slug))] == registered
    arguments = {row[0].strip("`"): row[1].split("`")[1] for row in _table(games.kwargs(slug))}
    assert list(arguments) == [a.name for a in facts.arguments] and all(
        a.description for a in facts.arguments
    )
    assert f"| **Ids** | {len(registered)}," in games.card(slug)
    try:
        cls = load_env_creator(facts.entry_point)
    except ImportError as error:
        pytest.skip(f"{game.name} is not installed ({error}): its tables come from the source alone")
    declared = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass) and klass is not object:
            declared.update(inspect.signature(klass.__init__).parameters)
    own = [p for p in inspect.signature(cls.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY or (
        p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self")]  # fmt: skip
    assert {p.name for p in own} <= set(arguments), "a constructor argument the table leaves out"
    for name, default in arguments.items():
        assert declared[name].default == ast.literal_eval(default), name
    spec = gym.registry[registered[0]]
    given = {name: ast.literal_eval(d) for name, d in arguments.items() if name not in spec.kwargs}
    gym.make(registered[0], **given).close()  # every argument is taken at its listed default
    with pytest.raises(TypeError):
        gym.make(registered[0], no_such_argument=1)
    for facts_id in facts.ids:
        env = gym.make(facts_id.env_id).unwrapped
        try:
            assert facts_id.actions == tuple(env.offered_actions), facts_id.env_id
        finally:
            env.close()


def test_a_family_table_without_its_games_packages_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ids, the arguments and the card's prose come from the source; only the actions and caps need the
    game, and without it their cells name the install."""
    pytest.importorskip("griffe", reason="the dev extra's mkdocstrings brings griffe")
    import gymnasium as gym

    from verlog.extras import MissingPackage

    def absent(env_id: str, **kwargs: object) -> None:
        raise MissingPackage(
            "verlog's NetHack and MiniHack envs need nle, which is not installed: pip install ..."
        )

    monkeypatch.setattr(gym, "make", absent)
    monkeypatch.setattr(games, "family", games.family.__wrapped__)  # not the cached facts
    card, ids, kwargs = (games.render("nethack", part) for part in ("card", "ids", "kwargs"))
    assert "needs the nethack extra and nle (not installed here)" in card
    assert "| `verlog/NetHack-v0` |" in ids and "needs the nethack extra and nle" in ids
    assert "| `max_steps` | `100000` |" in kwargs


# ------------------------------------------------------------------------------------- the layout page
SRC = ROOT / "src" / "verlog"


def _layout_rows() -> list[tuple[list[str], list[str]]]:
    """The Layout table of docs/development.md: each row's backticked names, in its path cell and in its
    description."""
    text = (ROOT / "docs" / "development.md").read_text()
    table = text[text.index("**Layout.**") :].split("\n## ")[0]
    rows = []
    for line in table.splitlines():
        if line.startswith("| `"):
            path_cell, what = line.strip("| ").split(" | ", 1)
            rows.append((re.findall(r"`([^`]+)`", path_cell), re.findall(r"`([^`]+)`", what)))
    return rows


def _source_floor(names: list[str]) -> str:
    """The floor of a source row: its folder's, or its root modules' (one floor per row)."""
    if names[0].endswith("/"):
        return names[0].removeprefix("src/verlog/").strip("/")
    floors = {ROOT_FLOORS[name.removeprefix("src/verlog/")] for name in names}
    assert len(floors) == 1, f"the row of {names} holds modules of the floors {sorted(floors)}"
    return floors.pop()


def test_the_layout_page_says_the_floor_rule_and_the_preset_count_as_they_are() -> None:
    text = (ROOT / "docs" / "development.md").read_text()
    rule = "a floor imports only the floors below it"
    assert rule in " ".join(text.split()), f"docs/development.md does not say {rule!r}"
    counts = [int(n) for n in re.findall(r"the (\d+) presets", text)]
    assert counts == [len(list((ROOT / "envs").glob("*.toml")))], "docs/development.md miscounts envs/*.toml"


def test_the_layout_table_names_every_module_in_its_floor_and_in_the_floors_order() -> None:
    rows = _layout_rows()
    sources = [(paths, what) for paths, what in rows if paths[0].startswith("src/verlog/")]
    problems = [f"{paths[0]} does not exist" for paths, _ in rows if not (ROOT / paths[0]).exists()]
    named_roots = []
    for paths, what in sources:
        if not paths[0].endswith("/"):
            named_roots += [name.removeprefix("src/verlog/") for name in paths]
            continue
        folder = ROOT / paths[0]
        modules = {p.name for p in folder.glob("*.py")} - {"__init__.py", "__main__.py"}
        modules |= {f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").is_file()}
        problems += [f"{paths[0]}'s row does not name {m}" for m in sorted(modules - set(what))]
        problems += [
            f"{paths[0]}'s row names {name}, not in the folder"
            for name in what
            if name.endswith(".py") and "/" not in name and not (folder / name).is_file()
        ]
    roots = sorted(p.name for p in SRC.glob("*.py") if not p.name.startswith("__"))
    problems += [f"no row names src/verlog/{name}" for name in roots if name not in named_roots]
    problems += [f"src/verlog/{name} is named but is not there" for name in named_roots if name not in roots]
    folders = sorted(f"src/verlog/{p.name}/" for p in SRC.iterdir() if (p / "__init__.py").is_file())
    problems += [f"no row for {f}" for f in folders if f not in [paths[0] for paths, _ in sources]]
    ranks = [ORDER.index(_source_floor(paths)) for paths, _ in sources]
    if ranks != sorted(ranks):
        problems.append(f"the rows are not in the floors' order {ORDER}: {[p[0] for p, _ in sources]}")
    assert not problems, "docs/development.md's Layout disagrees with the tree:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------- site
@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="the dev extra installs mkdocs-material and mkdocstrings")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, (
        "mkdocs build --strict failed:\n" + built.stdout[-3000:] + built.stderr[-6000:]
    )
    return out


def test_the_site_builds_strictly_with_pictures_tables_and_api(site: Path) -> None:
    for game in ("babyai", "crafter", "babaisai"):
        assert (site / "games" / "img" / f"{game}.png").is_file()
    html = (site / "results" / "index.html").read_text()
    assert "<!-- results:" not in html and html.count("<table>") >= 5
    for name, _ in results.DEMONSTRATIONS:
        figure = site / "results" / "img" / name.replace(".json", ".png")
        assert figure.is_file(), figure
    api = (site / "api" / "index.html").read_text()
    assert "make_vec" in api and "WatchdogConfig" in api and "lr_factor" in api
    crafter = (site / "games" / "crafter" / "index.html").read_text()
    assert 'src="../img/crafter.png"' in crafter and "You face grass" in crafter
    for slug in FAMILIES:
        page = (site / "games" / slug / "index.html").read_text()
        assert f'src="../img/{slug}.png"' in page and page.count("<table>") >= 3, slug
        assert "<!-- game:" not in page and "Keyword arguments" in page and 'id="ids"' in page, slug


def test_the_site_renders_in_a_headless_browser(site: Path, tmp_path: Path) -> None:
    if browser.chromium() is None:
        pytest.skip(
            "chromium is not installed (apt-get install -y chromium); nox -s docs_browser runs this check"
        )
    pages = [page for page in browser.PAGES if page.startswith("games/") and page != "games/"] + ["results/"]
    checked = browser.check(site, pages, shots=tmp_path)  # the layout at 1280 px too
    for page in checked:
        assert not page.problems, (page.page, page.problems)
        assert page.nav_links > 20 and page.images >= 1 and page.screenshot.is_file()
