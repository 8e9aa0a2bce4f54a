"""The learner's configuration: TOML, key=value overrides, clear errors, derived sizes, presets."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from verlog.config import Config, ConfigError, describe, load_config
from verlog.runkit.validate import problems, validate
from verlog.tomlconfig import tomllib

ROOT = Path(__file__).resolve().parents[1]
#: The presets, and the past attempts' configs (outside envs/, still loadable: the docs say how to rerun them).
PRESETS = sorted((ROOT / "envs").glob("*.toml")) + sorted(
    (ROOT / "benchmarks" / "demos" / "attempts").glob("*.toml")
)


def _ppo_script():
    spec = importlib.util.spec_from_file_location("agents_ppo", ROOT / "agents" / "ppo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_toml_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[model]\npath = "m"\n[ppo]\nactor_lr = 3e-6\nturns_per_update = 4\n[env]\nnum_envs = 8\n'
    )
    config = load_config(
        path,
        [
            "ppo.critic_lr=2",  # an int where a float is expected is converted
            "model.path=/models/Qwen2.5-3B-Instruct",  # not TOML: taken as a string
            'run.trackers=["tensorboard"]',
            "env.kwargs.max_steps=50",
            "env.memory_kwargs={turns = 3}",
        ],
    )
    assert config.ppo.actor_lr == 3e-6 and config.ppo.turns_per_update == 4
    assert config.ppo.critic_lr == 2.0 and isinstance(config.ppo.critic_lr, float)
    assert config.model.path == "/models/Qwen2.5-3B-Instruct"
    assert config.run.trackers == ["tensorboard"]
    assert config.env.kwargs == {"max_steps": 50}
    assert config.env.memory_kwargs == {"turns": 3}
    derived = config.derive(world_size=2)
    assert (derived.batch_turns, derived.minibatch_turns, derived.global_batch_turns) == (32, 16, 64)


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    config = load_config(ROOT / "envs" / "babyai.toml", ['prompt.format_request="Say \\"go\\".\\nNow"'])
    path = tmp_path / "config.toml"
    path.write_text(config.to_toml())
    assert load_config(path) == config


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ppo.actor_lrr=1e-6", "unknown key 'ppo.actor_lrr' (did you mean 'ppo.actor_lr'?)"),
        ("trainer.seed=1", "unknown key 'trainer.seed' (did you mean 'run.seed' or 'panel.seed'?)"),
        ("ppo.zzzqqq=1", "unknown key 'ppo.zzzqqq' (python agents/ppo.py --help-config lists every key)"),
        ("ppo.turns_per_update=2.5", "ppo.turns_per_update must be of type int, got 2.5"),
        ("run.console=yes", "run.console must be of type bool, got 'yes'"),
        ('ppo.actor_lr_milestones=["a"]', "ppo.actor_lr_milestones must be of type list[int], got ['a']"),
        ("prompt.format=json", "prompt.format must be one of ['action', 'think', 'tags'], got 'json'"),
        ("ppo", "override 'ppo' is not of the form section.key=value, e.g. ppo.actor_lr=1e-4"),
    ],
)
def test_errors_name_the_key_and_the_closest_keys_in_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(None, ["model.path=m", override])
    assert str(error.value) == message or message in str(error.value)
    assert "\n" not in str(error.value) and len(str(error.value)) < 100


def test_derived_sizes_are_checked() -> None:
    config = load_config(
        None, ["model.path=m", "env.num_envs=3", "ppo.turns_per_update=3", "ppo.num_minibatches=2"]
    )
    with pytest.raises(ConfigError, match="9 turns does not divide into ppo.num_minibatches = 2"):
        validate(config)
    with pytest.raises(ConfigError, match="model.path is required"):
        validate(Config())
    half = load_config(None, ["model.path=m", "ppo.critic_warmup_batches=4"])
    with pytest.raises(ConfigError, match="critic_warmup_iters"):
        validate(half)


def test_every_field_is_documented_within_80_columns() -> None:
    text = describe()
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    docs: dict[str, str] = {}
    key = ""
    for line in lines:  # a key's doc follows it on its line, or on the indented lines below it
        if line.startswith("      # "):
            docs[key] += line.removeprefix("      # ")
        elif line.startswith("  "):
            key, _, doc = line.strip().partition("  # ")
            docs[key] = doc
    assert len(docs) > 50
    assert all(docs.values()), "a field has no docstring"
    assert "ppo.first_value_weight = 3.0" in docs


VERLOG_PRESETS = ("babyai.toml", "babaisai.toml", "crafter.toml")


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_presets_load(preset: Path) -> None:
    config = load_config(preset)
    config.derive()
    if preset.name in VERLOG_PRESETS:  # Verlog's tuned values (shared/research/verlog-algorithm.md)
        assert (config.ppo.actor_lr, config.ppo.critic_lr, config.ppo.kl_coef) == (1e-6, 1e-5, 1e-3)
        assert (config.ppo.turn_gamma, config.ppo.turn_lam) == (0.99, 0.95)
        assert config.ppo.turns_per_update * config.env.num_envs in (256, 2048)


def test_script_reports_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    script = _ppo_script()
    assert script.main(["--config", str(ROOT / "envs" / "tiny.toml"), "ppo.num_minibatch=3"]) == 2
    err = capsys.readouterr().err
    assert err.endswith(": config: unknown key 'ppo.num_minibatch' (did you mean 'ppo.num_minibatches'?)\n")
    assert len(err.splitlines()) == 1  # one line, no usage block
    assert script.main(["--help-config"]) == 0
    assert "ppo.turns_per_update" in capsys.readouterr().out


def test_the_actor_rate_schedule_is_checked_and_counted_in_updates() -> None:
    config = load_config(None, ["ppo.actor_lr=2e-5", "ppo.actor_lr_milestones=[16, 40]"])
    rates = [config.ppo.actor_lr_after(done) for done in (0, 15, 16, 39, 40, 64)]
    assert rates == pytest.approx([2e-5, 2e-5, 1e-5, 1e-5, 5e-6, 5e-6])
    for bad, said in (
        ("ppo.actor_lr_milestones=[16, 8]", "ppo.actor_lr_milestones must be increasing"),
        ("ppo.actor_lr_milestones=[0]", "ppo.actor_lr_milestones must be increasing"),
        ("ppo.actor_lr_gamma=0", "ppo.actor_lr_gamma must be in (0, 1]"),
        (
            "ppo.entropy_anneal_updates=-1",
            "ppo.entropy_anneal_updates, ppo.entropy_coef_final and ppo.entropy_target must be >= 0",
        ),
    ):
        assert any(said in problem for problem in problems(load_config(None, [bad]))), bad


def test_a_missing_preset_names_the_close_ones_and_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    script = _ppo_script()
    assert script.main(["--config", str(ROOT / "envs" / "quik.toml")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"did you mean '{ROOT / 'envs' / 'quick.toml'}'?" in err
    presets = sorted(p.stem for p in (ROOT / "envs").glob("*.toml"))
    assert "; the presets in " in err and err.rstrip().endswith(f"envs/: {', '.join(presets)}")


def test_a_bare_word_override_is_a_string() -> None:
    """README writes algo.advantage=grpo: no shell quoting of TOML quotes."""
    config = load_config(None, ["algo.advantage=grpo", "algo.norm=mean", 'run.name="quoted"'])
    assert (config.algo.advantage, config.algo.norm, config.run.name) == ("grpo", "mean", "quoted")


def test_a_variant_names_its_base_and_says_only_what_differs(tmp_path: Path) -> None:
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "base.toml").write_text(
        '[run]\nname = "base"\nseed = 3\n[ppo]\nkl_coef = 0.0\nentropy_coef = 0.03\n[env.kwargs]\nmax_steps = 200\n'
    )
    variant = tmp_path / "variant.toml"
    variant.write_text('base = "presets/base.toml"\n[run]\nname = "variant"\n[ppo]\nkl_coef = 0.02\n')
    config = load_config(variant, ["env.kwargs.invalid_action_penalty=-0.1"])
    assert (config.run.name, config.run.seed) == ("variant", 3)
    assert (config.ppo.kl_coef, config.ppo.entropy_coef) == (0.02, 0.03)
    assert config.env.kwargs == {"max_steps": 200, "invalid_action_penalty": -0.1}  # tables merge key by key
    assert "base" not in config.to_toml()  # the resolved file stands alone


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('base = "nowhere.toml"\n', "base 'nowhere.toml' is not a file"),
        ("base = 3\n", "base must be a file name in quotes"),
        ('base = "variant.toml"\n', "the bases form a loop (variant.toml -> variant.toml)"),
    ],
)
def test_a_bad_base_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    variant = tmp_path / "variant.toml"
    variant.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(variant)


@pytest.mark.parametrize(
    "attempt", sorted((ROOT / "benchmarks" / "demos" / "attempts").glob("*.toml")), ids=lambda p: p.name
)
def test_an_attempt_bases_only_on_attempts(attempt: Path) -> None:
    """An attempt reruns exactly as it ran: its base chain stays among the frozen attempts, never a preset in
    envs/, which may change under it."""
    path = attempt
    while "base" in (data := tomllib.loads(path.read_text())):
        path = (path.parent / data["base"]).resolve()
        assert path.parent == attempt.parent.resolve(), (
            f"{attempt.name} bases on {path}, outside the attempts"
        )
