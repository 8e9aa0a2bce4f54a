"""Sessions for tests, lint, the documentation site, benchmarks, the learning demonstration and sweeps.

Sessions run in the current environment (``venv_backend="none"``): install verlog once with
``pip install torch==2.13.0 -e ".[train,dev]"`` and every session uses it.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "tests"]


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (pytest), its files on two workers as README's command runs it; extra arguments go to pytest."""
    session.run("python", "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", *session.posargs)


@nox.session
def multinode(session: nox.Session) -> None:
    """Two machines on one host (loopback), every case: the suite's, plus DeepSpeed ZeRO-3 resume and equivalence."""
    session.run(
        "python", "-m", "pytest", "-q", "-m", "slow or not slow", "tests/test_multinode.py", *session.posargs
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site into site/ (mkdocs build --strict: a broken link or reference fails); -- serve to serve it."""
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session
def docs_browser(session: nox.Session) -> None:
    """Build the site, open pages in headless chromium, check navigation and pictures (screenshots: site-shots/)."""
    import shutil

    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        if shutil.which("apt-get") is None:
            session.error("no chromium: install it (Debian: apt-get install -y chromium), or set $CHROMIUM")
        session.run("apt-get", "install", "-y", "chromium", external=True)
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    session.run("mkdocs", "build", "--strict")
    session.run("python", "docs/browser_check.py", "site", "--shots", "site-shots", *session.posargs)


@nox.session
def bench_envs(session: nox.Session) -> None:
    """Steps/s of raw games, text envs and vector envs; Crafter reset time."""
    session.run("python", "-m", "benchmarks.speed.envs", *session.posargs)


@nox.session
def bench_gae(session: nox.Session) -> None:
    """Vectorised dual-discount GAE vs the per-token loop: agreement and speed (T=16, N=128, R sweep)."""
    session.run("python", "-m", "benchmarks.speed.gae", *session.posargs)


@nox.session
def bench_rollout(session: nox.Session) -> None:
    """Rollout turns/s and tokens/s with envs/tiny.toml, split into prompt, generation, env and storage."""
    session.run("python", "-m", "benchmarks.speed.rollout", *session.posargs)


@nox.session
def bench_branch_scoring(session: nox.Session) -> None:
    """Scoring one-step branches: each row whole against each shared prompt run once (SmolLM2, BabaIsAI)."""
    session.run("python", "-m", "benchmarks.speed.branch_scoring", *session.posargs)


@nox.session
def bench_prefix_update(session: nox.Session) -> None:
    """Scoring and update time with the shared prompt prefix off and on (SmolLM2 on Crafter)."""
    session.run("python", "-m", "benchmarks.speed.prefix_update", *session.posargs)


@nox.session
def bench_pad_shapes(session: nox.Session) -> None:
    """Resident memory and time when every batch takes a new shape, and with prompts padded to a multiple of 16."""
    session.run("python", "-m", "benchmarks.speed.pad_shapes", *session.posargs)


@nox.session
def bench_prefix_cache(session: nox.Session) -> None:
    """vLLM generation time with its prefix cache off and on, on a preset's own prompts (SmolLM2 on Crafter)."""
    session.run("python", "-m", "benchmarks.speed.prefix_cache", *session.posargs)


@nox.session
def bench_update(session: nox.Session) -> None:
    """PPO update tokens/s with the tiny model (and a real small architecture on a GPU when present)."""
    session.run("python", "-m", "benchmarks.speed.update", *session.posargs)


@nox.session
def bench_training(session: nox.Session) -> None:
    """A preset's turns/s and where an update's time goes (default envs/learn_crafter.toml; run on idle cores)."""
    session.run("python", "-m", "benchmarks.speed.training", *session.posargs)


@nox.session
def bench_trunk_cache(session: nox.Session) -> None:
    """The SmolLM2 Crafter preset's turns/s, scoring and update time and memory, without and with the frozen trunk
    run once (ppo.trunk_cache), with the critic on that trunk too (ppo.trunk_critic), and with the transformers
    sampler, which keeps the trunk's states as it answers, in place of vLLM, and with both; run on idle cores."""
    trunk, critic, sampler = (
        ["ppo.trunk_cache=true"],
        ["ppo.trunk_critic=true"],
        ["sampling.backend=transformers"],
    )
    for lever in ([], trunk, [*trunk, *critic], [*trunk, *sampler], [*trunk, *critic, *sampler]):
        session.run("python", "-m", "benchmarks.speed.training", "--config", "envs/learn_crafter_real.toml",
                    "--updates", "6", *lever, *session.posargs)  # fmt: skip


@nox.session
def bench_replay(session: nox.Session) -> None:
    """Time to rebuild a Crafter sub-env on resume by replaying 2000 and 10000 actions."""
    session.run("python", "-m", "benchmarks.speed.replay", *session.posargs)


@nox.session
def learn(session: nox.Session) -> None:
    """The learning demonstration: PPO from a tiny random model on BabyAI GoTo; fails unless it learns."""
    session.run("python", "-m", "benchmarks.demos.learn", *session.posargs)


@nox.session
def learn_babyai_mix(session: nox.Session) -> None:
    """A tiny model on BabyAI's five kinds together, judged per kind on 128 episodes each (-- --seed N)."""
    session.run(
        "python", "-m", "benchmarks.demos.learn", "--config", "envs/learn_babyai_mix.toml", "--stem",
        "learn_babyai_mix", "--budget-min", "60", *session.posargs,
    )  # fmt: skip


@nox.session
def learn_babaisai_mix(session: nox.Session) -> None:
    """A tiny model on Verlog's four BabaIsAI families together, judged per family on 512 episodes each (-- --seed N):
    random already wins 73 % of goto_win-distr_obj, where 128 episodes cannot tell a 10-point gain from chance."""
    session.run(
        "python", "-m", "benchmarks.demos.learn", "--config", "envs/learn_babaisai_mix.toml", "--stem",
        "learn_babaisai_mix", "--budget-min", "60", "--eval-episodes", "512", *session.posargs,
    )  # fmt: skip


@nox.session
def learn_crafter(session: nox.Session) -> None:
    """PPO from a tiny model on Crafter, judged against it untrained and random (-- --seed N); non-zero unless it learned."""
    session.run("python", "-m", "benchmarks.demos.learn_crafter", *session.posargs)


@nox.session
def learn_crafter_free(session: nox.Session) -> None:
    """learn_crafter as it was before answers were constrained (free answers, entropy 0.01; -- --seed N)."""
    session.run(
        "python", "-m", "benchmarks.demos.learn_crafter", "--stem", "learn_crafter_free", "sampling.constrain=off",
        "ppo.entropy_coef=0.01", "run.name=learn-crafter-free", *session.posargs,
    )  # fmt: skip


@nox.session
def learn_crafter_constrained(session: nox.Session) -> None:
    """learn_crafter_free with answers constrained, nothing else changed (-- --seed N): what the constraint buys."""
    session.run(
        "python", "-m", "benchmarks.demos.learn_crafter", "--stem", "learn_crafter_constrained",
        "ppo.entropy_coef=0.01", "run.name=learn-crafter-constrained", *session.posargs,
    )  # fmt: skip


@nox.session
def learn_crafter_real(session: nox.Session) -> None:
    """SmolLM2-135M-Instruct on Crafter, 200-step episodes, judged against it zero-shot and random (-- --seed N)."""
    session.run(
        "python",
        "-m",
        "benchmarks.demos.learn_crafter",
        "--config",
        "envs/learn_crafter_real.toml",
        "--stem",
        "learn_crafter_real",
        "--budget-min",
        "50",
        "--episodes",
        "32",
        "--eval-envs",
        "16",
        *session.posargs,
    )


@nox.session
def ablation_crafter(session: nox.Session) -> None:
    """The Crafter preset without the window-edge bootstrap, without critic pre-training, as GRPO and as GiGPO."""
    session.run("python", "-m", "benchmarks.demos.ablation_crafter", *session.posargs)


@nox.session
def long_run(session: nox.Session) -> None:
    """An hour of Crafter training: resident memory must stay flat; cut episodes and prompts are counted."""
    session.run("python", "-m", "benchmarks.probes.long_run", *session.posargs)


@nox.session
def learn_real(session: nox.Session) -> None:
    """PPO from SmolLM2-135M-Instruct on BabyAI GoTo, small room (CPU; -- --seed N); non-zero unless it learned."""
    session.run("python", "-m", "benchmarks.demos.learn_real", *session.posargs)


@nox.session
def learn_real_constrained(session: nox.Session) -> None:
    """learn_real with every answer constrained to the valid actions (-- --seed N): what the constraint buys."""
    session.run(
        "python", "-m", "benchmarks.demos.learn_real", "--stem", "learn_real_constrained",
        "sampling.constrain=actions", "prompt.max_response_tokens=10", "run.name=learn-real-constrained",
        *session.posargs,
    )  # fmt: skip


@nox.session
def learn_goto(session: nox.Session) -> None:
    """SmolLM2 on BALROG's own GoTo through a curriculum (CPU; -- --seed N); non-zero unless it learned."""
    session.run(
        "python",
        "-m",
        "benchmarks.demos.learn_real",
        "--config",
        "envs/learn_goto.toml",
        "--episodes",
        "64",
        "--judge",
        "best",
        *session.posargs,
    )


@nox.session
def learn_pickup(session: nox.Session) -> None:
    """SmolLM2 on BALROG's Pickup, which random plays better than it untrained, via a curriculum (-- --seed N)."""
    session.run(
        "python", "-m", "benchmarks.demos.learn_real", "--config", "envs/learn_pickup.toml", "--episodes", "64",
        "--judge", "best", *session.posargs,
    )  # fmt: skip


@nox.session
def learn_babaisai(session: nox.Session) -> None:
    """SmolLM2 on BabaIsAI's goto_win with one-step branches (CPU; -- --seed N); non-zero unless it learned."""
    session.run(
        "python",
        "-m",
        "benchmarks.demos.learn_real",
        "--config",
        "envs/learn_babaisai_branch.toml",
        "--judge",
        "best",
        "--episodes",
        "64",
        *session.posargs,
    )


@nox.session
def learn_two_room(session: nox.Session) -> None:
    """SmolLM2 on BabaIsAI's two_room-goto_win, which random plays better than it untrained (-- --seed N)."""
    session.run(
        "python", "-m", "benchmarks.demos.learn_real", "--config", "envs/learn_babaisai_two_room.toml", "--judge",
        "newest", "--stem", "learn_babaisai_two_room", *session.posargs,
    )  # fmt: skip


@nox.session
def sweep(session: nox.Session) -> None:
    """A grid of runs: nox -s sweep -- KEY=V1,V2 ... --seeds 3 --config envs/tiny.toml."""
    session.run("python", "-m", "benchmarks.probes.sweep", *session.posargs)


@nox.session
def compare(session: nox.Session) -> None:
    """PPO+GAE vs GRPO vs GiGPO on the tiny model, same seeds and turn budget (benchmarks/results/compare.*)."""
    session.run("python", "-m", "benchmarks.probes.compare", *session.posargs)


@nox.session
def bench_prompts(session: nox.Session) -> None:
    """Zero-shot valid-action rate of SmolLM2 for each prompt style, example, format and memory."""
    session.run("python", "-m", "benchmarks.probes.prompts", *session.posargs)


@nox.session
def bench_first_moves(session: nox.Session) -> None:
    """Does SmolLM2's first answer on BabaIsAI point toward the WIN object, for 0, 1 and 4 worked examples?"""
    session.run("python", "-m", "benchmarks.probes.first_moves", *session.posargs)


@nox.session
def bench_action_mixes(session: nox.Session) -> None:
    """Fixed mixes of Crafter actions played blind on learn_crafter_real's judged episodes: what a mix alone scores."""
    session.run("python", "-m", "benchmarks.probes.action_mixes", *session.posargs)


@nox.session
def probe_state_dependence(session: nox.Session) -> None:
    """Does a trained Crafter policy read the observation? The mutual information between state and answer, and the
    answer by what the player faces, for the preset's seeds (or the run folders given)."""
    session.run("python", "-m", "benchmarks.probes.state_dependence", *session.posargs)


@nox.session
def probe_supervised_aim(session: nox.Session) -> None:
    """Can the tiny BabaIsAI model read where to go at all? The same untrained model trained on labelled states
    toward the best moves, and with the one-step branches' two policy-gradient weightings, judged held out."""
    for objective in ("cross-entropy", "branches-uniform", "branches-policy"):
        session.run("python", "-m", "benchmarks.probes.supervised_aim", "--steps", "600", "--every", "50",
                    "--objective", objective, *session.posargs)  # fmt: skip


@nox.session
def probe_plan_following(session: nox.Session) -> None:
    """Where does a trained BabaIsAI policy leave the plan? Per family on its own episodes: best-move accuracy inside
    and beyond the training window, wins by plan length, and lost episodes dead or out of steps."""
    session.run("python", "-m", "benchmarks.probes.plan_following", *session.posargs)


@nox.session
def probe_judge_temperature(session: nox.Session) -> None:
    """Which decoding temperature should the judge play trained runs at? Chosen on validation episodes (never the
    judge's), per task kind, at 1, 0.5, 0.25 and greedy: the seeds of learn_babaisai_mix_long.json by default."""
    session.run("python", "-m", "benchmarks.probes.judge_temperature", *session.posargs)


@nox.session
def probe_bot_following(session: nox.Session) -> None:
    """Where does a trained BabyAI policy leave the bot's path? Per kind on its own episodes: agreement with the
    bot's advice, each interaction answered where advised and elsewhere, wins by the bot's length, how losses end."""
    session.run("python", "-m", "benchmarks.probes.bot_following", *session.posargs)


@nox.session
def gpu_check(session: nox.Session) -> None:
    """The learner on one GPU in 8 minutes: tiny preset, 0.5B/3B shapes (LoRA or not, critic or not), FSDP2, the
    GPU tests; writes benchmarks/results/gpu.json (-- --cpu-smoke: the same legs on the CPU, tiny models)."""
    session.run("python", "-m", "benchmarks.speed.gpu_check", *session.posargs)
