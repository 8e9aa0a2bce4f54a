"""The training loop: per update, collect a batch, score it, advantages, PPO update, log, checkpoint.

The batch is the estimator's: T turns from each of N envs (with a critic), or N whole episodes in groups (the
critic-free estimators). The models are one bundle (:class:`~verlog.ppo.build.Learner`), passed whole.

With a critic, before the actor moves, optional critic pre-training collects W batches once and runs S
critic-only iterations, recomputing values and targets with the improving critic each time (Verlog's
warm-up, without its two faults: the actor's first update uses fresh data, and log-probs are not recomputed
each iteration).

The same loop runs on one process or many (``accelerate launch``, see :mod:`verlog.runkit.distributed`): each
process steps its own N envs (seeds ``seed + rank * N``, disjoint), generates for them and scores them; the
update is data-parallel (DDP, or DeepSpeed ZeRO with one engine per model); metrics are reduced over processes
before they are logged; one run folder is chosen by the main process; checkpoints hold every process's part.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import torch

from verlog.config import Config
from verlog.evaluation.panel import panel_line, play_panel
from verlog.models.loading import LoraSpec
from verlog.models.prompts import PromptBuilder, prompt_builder
from verlog.ppo.advantages import compute_advantages
from verlog.ppo.build import Learner, load_learner, lora_spec, make_batches
from verlog.ppo.checkpoints import TrainerCheckpoints
from verlog.ppo.scoring import score_batch
from verlog.ppo.storage import TurnStorage
from verlog.ppo.update import EntropyBonus, ppo_update
from verlog.quiet import attach_run_log, detail
from verlog.runkit.curriculum import Curriculum, stage_envs
from verlog.runkit.distributed import (
    from_main_process,
    init_processes,
    mean_over_processes,
    setup,
    sum_over_processes,
)
from verlog.runkit.faults import Diverged, Guard
from verlog.runkit.folder import CONFIG_FILE, discard_if_refused, latest_checkpoint, mark_best, new_run_dir
from verlog.runkit.logger import RunLogger, flat_hyperparameters, tracker_init_kwargs
from verlog.runkit.memory import map_large_blocks, memory_metrics
from verlog.runkit.samples import SampleWriter, decoded_samples, pick_turns
from verlog.runkit.stop import EarlyStop
from verlog.runkit.watchdog import Watchdog

__all__ = ["Trainer"]


class Trainer:
    """Builds everything from a :class:`Config` (or resumes a run folder) and runs :meth:`train`."""

    def __init__(self, config: Config, *, resume: str | Path | None = None) -> None:
        self.config = config
        algo = config.algo
        if not algo.critic:  # resolved once, so config.toml (and a resume) records the group size used
            algo.group_size = algo.groups_of(config.env.num_envs)
        torch.set_num_threads(config.run.torch_threads or torch.get_num_threads())  # 0: torch's default
        map_large_blocks(config.run.heap_map_kib)  # 0: glibc's default
        lora = lora_spec(config.model)
        self._start_processes(resume, lora)
        with discard_if_refused(self.run_dir, resume is None and self.accelerator.is_main_process):
            self.learner: Learner = load_learner(config, self.dist, lora)  # the models, sampler, constraint
            prompts = self._assemble()
            if resume is None:
                observations, infos = self.envs.reset()
                self.storage.reset_first(
                    self.rollout.first_prompts(observations, infos), self.rollout.actions(infos)
                )
            else:
                self.checkpoints.resume()  # last: it restores the RNG states
            self._open_run(self.learner.backend, self.learner.backend_reason, prompts)

    def _start_processes(self, resume: str | Path | None, lora: LoraSpec | None) -> None:
        """The processes, the sizes that follow from their number, the run folder and the accelerators."""
        config, ppo = self.config, self.config.ppo
        state = init_processes(config.run.collective_timeout)
        self.derived = config.derive(state.num_processes)
        if resume is None:
            main = state.is_main_process
            self.run_dir = Path(
                from_main_process(str(new_run_dir(config.run.output_dir, config.run.name)) if main else "")
            )
        else:
            self.run_dir = Path(resume)
        attach_run_log(self.run_dir, state.process_index)  # the libraries' notices, out of the console
        self.dist = setup(
            max_grad_norm=ppo.max_grad_norm,
            project_dir=str(self.run_dir),
            log_with=config.run.trackers,
            mixed_precision=config.model.mixed_precision,
            reference_engine=ppo.kl_coef > 0 and lora is None,
        )
        self.accelerator = self.dist.actor

    def _assemble(self) -> PromptBuilder:
        """Curriculum, envs, watchdog, rollout and storage, counters and checkpoints; returns the prompts."""
        config = self.config
        stages = config.curriculum
        self.curriculum = (
            Curriculum(stages.stages, threshold=stages.threshold, window=stages.window)
            if stages.stages
            else None
        )
        self.envs = self._make_envs()
        self.watchdog = Watchdog(config.watchdog) if config.watchdog.enabled else None
        self.entropy_bonus = EntropyBonus(config.ppo)  # scheduled, or adapted to ppo.entropy_target
        self.best_score = -math.inf  # the validation panel's best score so far
        prompts = prompt_builder(self.learner.tokenizer, config.prompt, config.env.id)
        self.rollout, self.storage = make_batches(
            config,
            self.envs,
            self.learner.sampler,
            prompts,
            self.learner.tokenizer.pad_token_id,
            rank=self.accelerator.process_index,
            world_size=self.derived.world_size,
            any_running=self._any_running if self.dist.lockstep else None,
        )
        self.storage.share_prefix = config.ppo.share_prompt_prefix and not self.dist.lockstep  # collectives
        self.storage.trunk_budget = int(config.ppo.trunk_cache_mib * 2**20) if config.ppo.trunk_cache else 0
        self.storage.constraint = self.learner.constraint
        self.update = self.global_step = 0
        self.warmed_up = config.ppo.critic_warmup_iters == 0 or not config.algo.critic  # no critic: none
        self.sample_rng = random.Random(config.run.seed)  # which turns go to samples.jsonl
        self.checkpoints = TrainerCheckpoints(
            self,
            run_dir=self.run_dir,
            dist=self.dist,
            learner=self.learner,
            config=config.run,
            watchdog=self.watchdog,
        )
        return prompts

    def _open_run(self, backend: str, reason: str, prompts: PromptBuilder) -> None:
        """config.toml, trackers, samples file, logger (saying the setup, the sampler ``backend`` and the
        ``reason`` for it), the guard and the panel's prompts: what the run writes to, once its counters are known."""
        config, accelerator = self.config, self.accelerator
        algo, ppo = config.algo, config.ppo
        if accelerator.is_main_process:
            (self.run_dir / CONFIG_FILE).write_text(config.to_toml())
        # One tracker run per run folder (tensorboard writes under <run>/<project>/).
        accelerator.init_trackers(
            config.run.project,
            config=flat_hyperparameters(config.to_dict()),
            init_kwargs=tracker_init_kwargs(
                config.run.run_name or self.run_dir.name, self.run_dir, config.run.tracker_kwargs
            ),
        )
        self.samples = SampleWriter(self.run_dir) if accelerator.is_main_process else None
        self.logger = RunLogger(
            self.run_dir,
            accelerator,
            total=config.run.total_updates,
            console=config.run.console,
            start=self.update,
            env_id=config.env.id,
        )
        self.logger.print(f"setup: {self.dist.describe()}, {backend} sampler")
        detail(
            f"setup, why: {self.dist.precision} ({self.dist.precision_reason}); {backend} sampler ({reason})"
        )
        if not algo.critic:
            skipped = ", no critic pre-training" if ppo.critic_warmup_iters else ""
            self.logger.print(
                f"{algo.advantage}: groups of {algo.group_size} envs, up to {algo.resample_attempts} resamples of "
                f"a group without signal{skipped} (no critic)"
            )
        self.guard = Guard(ppo, accelerator.device, self.logger.print)  # diverged weights, skipped updates
        panel_env = config.panel.env_id or config.env.id
        self.panel_prompts = (
            prompts
            if panel_env == config.env.id
            else prompt_builder(self.learner.tokenizer, config.prompt, panel_env)
        )

    def _rebuild_envs(self) -> None:
        """New envs at the curriculum's current stage, in place of the old ones (the rollout's too)."""
        self.envs.close()
        self.envs = self.rollout.envs = self._make_envs()

    def _make_envs(self) -> Any:
        """This process's N envs, at the curriculum's stage."""
        seed = self.config.run.seed + self.accelerator.process_index * self.config.env.num_envs
        return stage_envs(self.config.env, seed, self.curriculum)

    def _next_stage(self, metrics: dict[str, float]) -> None:
        """After an update: count its episodes; at a new stage, new envs (episodes in flight end, uncounted)."""
        if self.curriculum is None:
            return
        metrics["curriculum/stage"] = float(self.curriculum.stage + 1)  # the stage this update played
        if self.curriculum.observe(metrics):
            self._rebuild_envs()
            if self.config.algo.critic:  # turn batches continue across updates: slot 0 starts afresh
                observations, infos = self.envs.reset()
                self.storage.reset_first(
                    self.rollout.first_prompts(observations, infos), self.rollout.actions(infos)
                )
            self.rollout.episode_return[:], self.rollout.episode_length[:] = 0.0, 0
            self.logger.print(f"curriculum: {self.curriculum.describe()}")

    def _any_running(self, running: bool) -> bool:
        """Whether any process still has an episode to play (collective generation keeps them in step)."""
        return self._all_reduce(torch.tensor([float(running)])).item() > 0

    def _guarded(self) -> dict[str, torch.nn.Module | None]:
        """The models whose weights :class:`~verlog.runkit.faults.Guard` checks (no critic: critic-free algos)."""
        models = self.learner.models
        critic = None if models.critic is None else self._unwrap(models.critic)
        return {"actor": self._unwrap(models.actor), "critic": critic}

    def _unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model without its DDP or DeepSpeed wrapper: generation and no-grad scoring call it directly."""
        return self.accelerator.unwrap_model(model)

    # ------------------------------------------------------------------ the loop
    def train(self) -> None:
        """Run updates until ``run.total_updates`` (or ``run.total_turns``, ``run.max_minutes``), with critic
        pre-training first on a fresh run."""
        run = self.config.run
        when = lambda: f"when update {self.update + 1} ends"  # noqa: E731
        with EarlyStop(run.max_minutes, self.logger.print, when) as self.early_stop:
            try:
                self._train(run)
            except BaseException:
                self.close(end_group=False)  # a lost peer's group cannot end; exit_on_peer_loss reads it
                raise
        self.close()

    def _train(self, run: Any) -> None:
        """:meth:`train`'s loop, under :class:`EarlyStop`: the budget or a signal ends it after an update."""
        if not self.warmed_up:
            self.warmup_critic()
            self.guard.after_update(0, {}, {"critic": self._guarded()["critic"]})
            if run.checkpoint_every:
                self.save()
        if self.watchdog is not None and latest_checkpoint(self.run_dir) is None:
            self.save()  # a good point to roll back to before the first update
        while self.update < run.total_updates:
            metrics = self.train_update()
            self._next_stage(metrics)
            last = self.update == run.total_updates or 0 < run.total_turns <= self.global_step
            last = last or self.early_stop.due(metrics["time/total"])
            if run.eval_every and (last or self.update % run.eval_every == 0):
                metrics.update(self._panel())
            reason = self._collapse(metrics)
            if reason is not None:
                self._roll_back(reason)  # or Collapsed past watchdog.max_rollbacks
                continue
            self.logger.log(metrics, step=self.global_step)
            best = metrics.get("eval/score", -math.inf) > self.best_score
            if best or last or (run.checkpoint_every and self.update % run.checkpoint_every == 0):
                self.save()
            if best:
                self.best_score = metrics["eval/score"]
                if self.accelerator.is_main_process:
                    scores = {k: v for k, v in metrics.items() if k.startswith("eval/")}
                    mark_best(self.run_dir, self.update, scores)
            if last:
                break
        self.logger.summary(
            updates=self.update, turns=self.global_step, env_id=self.config.env.id, note=run.note
        )

    def close(self, *, end_group: bool = True) -> None:
        """Close the logger, envs and samples file, and end a launch's process group: left to interpreter exit,
        Gloo's threads can abort a finished process (SIGABRT). A lone process's group, if any, is vLLM's."""
        self.logger.close()
        self.envs.close()
        if self.samples is not None:
            self.samples.close()
        if end_group and self.accelerator.num_processes > 1:
            self.accelerator.state.destroy_process_group()

    def _panel(self) -> dict[str, float]:
        """Play the validation panel on the current weights (:mod:`verlog.evaluation.panel`); one console line."""
        self.learner.sampler.update_weights()
        metrics = play_panel(self.config, self.learner.sampler, self.panel_prompts)
        self.learner.sampler.offload()
        self.logger.print(panel_line(self.update, metrics))
        return metrics

    def _collapse(self, metrics: dict[str, float]) -> str | None:
        """Why this update looks collapsed (the watchdog's signals or diverged weights), or None; without the
        watchdog, diverged weights stop the run as before."""
        try:
            self.guard.after_update(self.update, metrics, self._guarded())
        except Diverged as error:
            if self.watchdog is None:
                self.logger.log(metrics, step=self.global_step)  # the update that diverged, then the stop
                raise
            return str(error)
        if self.watchdog is None:
            return None
        metrics["watchdog/rollbacks"] = float(self.watchdog.rollbacks)
        metrics["watchdog/actor_lr"] = metrics["charts/actor_lr"]  # the rate this update trained with
        reason = self.watchdog.check(metrics)  # before any healthy update, only the panel's drop can say
        if reason is None:
            self.watchdog.healthy(metrics)
        return reason

    def _apply_actor_lr(self) -> None:
        """Set the actor's rate before each update (the only place the actor trains): the schedule with the
        watchdog's rollbacks applied, whatever rate a loaded optimiser state was saved with."""
        for group in self.learner.models.actor_optimizer.param_groups:
            group["lr"] = self.actor_lr_now()

    def actor_lr_now(self) -> float:
        """The actor learning rate the next update trains with."""
        scale = self.watchdog.lr_scale if self.watchdog else 1.0
        return self.config.ppo.actor_lr_after(self.update) * scale

    def train_update(self) -> dict[str, float]:
        """One update: collect, score, advantages, PPO, then slot T becomes slot 0."""
        cfg = self.config
        start = time.perf_counter()
        self._apply_actor_lr()  # the schedule's rate for this update
        self.learner.sampler.update_weights()
        sync = getattr(self.learner.sampler, "weight_sync_seconds", 0.0)  # 0 for the transformers sampler
        every = cfg.run.samples_every
        # Numbered as logged (update 1 is the first): samples of update k, 2k, ... and so of the last.
        turns: list[dict[str, Any]] | None = [] if every and (self.update + 1) % every == 0 else None
        metrics = self.rollout.collect(self.storage, samples=turns)
        metrics["time/weight_sync"] = sync
        metrics["charts/actor_lr"] = self.actor_lr_now()
        self.learner.sampler.offload()
        metrics.update(self._score(self.storage, logprobs=True))
        if self.rollout.calibration is not None:  # V(s_T), to be set against the return that follows it
            self.rollout.calibration.open(self.storage.values[-1].tolist())
        metrics.update(compute_advantages(self.storage, cfg, all_reduce=self._all_reduce))
        clock = time.perf_counter()
        metrics.update(self._ppo(self.storage, train_actor=True))
        metrics["time/update"] = time.perf_counter() - clock
        self.storage.after_update()
        self.update += 1
        batch = self.derived.global_batch_turns if cfg.algo.critic else self._batch_turns()
        self.global_step += batch
        if turns is not None:
            self._write_samples(turns)
        elapsed = time.perf_counter() - start
        metrics["time/total"] = elapsed
        # Rates over all processes: turns are the global batch (averaged below), tokens this process's (summed).
        metrics["charts/turns_per_s"] = batch / elapsed
        metrics["charts/tokens_per_s"] = metrics["charts/generated_tokens"] / elapsed
        metrics["charts/temperature"] = cfg.sampling.temperature
        # Resident memory between updates (should stay flat over a long run) and the high-water mark inside one.
        metrics.update(memory_metrics())
        metrics = self._mean_over_processes(metrics, self.rollout.episode_counts)
        self.entropy_bonus.observe(metrics)
        return metrics

    def warmup_critic(self) -> None:
        """Critic pre-training: collect W batches once, then S iterations of (re-score values, targets, fit)."""
        ppo = self.config.ppo
        storage = self.storage.like(self.derived.warmup_turns)
        storage.load_state_dict(self.storage.state_dict())
        self.logger.print(
            f"critic pre-training: {self.derived.warmup_turns} turns per env, {ppo.critic_warmup_iters} iterations"
        )
        self.learner.sampler.update_weights()
        collected = self.rollout.collect(storage)
        self.learner.sampler.offload()
        self.global_step += self.derived.warmup_turns * self.storage.num_envs * self.derived.world_size
        for iteration in range(1, ppo.critic_warmup_iters + 1):
            metrics = dict(collected) if iteration == 1 else {}
            # No policy step yet (a shared critic moves only its decoder): the KL reward is 0, log-probs unused.
            metrics.update(self._score(storage, logprobs=False))
            compute_advantages(storage, self.config, kl_coef=0.0)  # the critic's targets
            clock = time.perf_counter()
            limit = self.derived.warmup_sample_turns
            metrics.update(self._ppo(storage, train_actor=False, limit=limit))
            metrics.update({"time/update": time.perf_counter() - clock, "warmup/iteration": float(iteration)})
            counts = self.rollout.episode_counts if iteration == 1 else {}
            self.logger.log(self._mean_over_processes(metrics, counts), step=self.global_step, advance=False)
        storage.after_update()
        self.storage.load_state_dict(storage.state_dict())
        self.warmed_up = True

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        """A checkpoint of the run (:class:`~verlog.ppo.checkpoints.TrainerCheckpoints`), said on the console."""
        clock = time.perf_counter()
        path = self.checkpoints.save()
        self.logger.print(f"checkpoint {path} ({time.perf_counter() - clock:.1f}s)")
        return path

    def _roll_back(self, reason: str) -> None:
        """Back to the newest good checkpoint with a lower actor learning rate (or :class:`Collapsed`)."""
        at = self.update
        path = self.checkpoints.roll_back(reason)  # raises Collapsed past watchdog.max_rollbacks
        dog, most = self.checkpoints.watchdog, self.config.watchdog.max_rollbacks
        self.logger.print(
            f"watchdog: {reason} at update {at}: rolled back to checkpoint {path.name}, actor lr "
            f"{self.actor_lr_now():g} (x{dog.lr_scale:g}; rollback {dog.rollbacks} of {most})"
        )

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds of the run besides weights, optimisers and RNG states (the
        :class:`~verlog.ppo.checkpoints.Checkpointed` interface)."""
        return {
            "update": self.update,
            "global_step": self.global_step,
            "warmed_up": self.warmed_up,
            "storage": self.storage.state_dict(),
            "rollout": self.rollout.state_dict(),
            "prompt_cuts": self.rollout.prompts.cuts,
            "sample_rng": self.sample_rng.getstate(),
            "curriculum": self.curriculum.state_dict() if self.curriculum else None,
            "watchdog": self.watchdog.state_dict() if self.watchdog else None,
            "entropy_bonus": self.entropy_bonus.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], env_states: list[Any]) -> None:
        """Put :meth:`state_dict`'s state back: the curriculum's stage and its envs first, then each env's
        episode (replayed), the storage, the rollout and the counters."""
        if self.curriculum is not None and state.get("curriculum"):
            self.curriculum.load_state_dict(state["curriculum"])
            self._rebuild_envs()
        if len(env_states) != self.envs.num_envs:
            raise ValueError(
                f"the checkpoint holds {len(env_states)} env states for {self.envs.num_envs} sub-envs"
            )
        self.envs.set_attr("replay_state", env_states)  # replays each sub-env's episode (seed + actions)
        self.storage.load_state_dict(state["storage"])
        self.rollout.load_state_dict(state["rollout"])
        for counter in ("update", "global_step", "warmed_up"):
            setattr(self, counter, state[counter])
        self.rollout.prompts.cuts = state["prompt_cuts"]
        version, internal, gauss = state["sample_rng"]
        self.sample_rng.setstate((version, tuple(internal), gauss))
        if self.watchdog is not None and state.get("watchdog"):
            self.watchdog.load_state_dict(state["watchdog"])
        self.entropy_bonus.load_state_dict(state.get("entropy_bonus"))

    def env_states(self) -> list[Any]:
        return list(self.envs.call("replay_state"))

    # ------------------------------------------------------------------ pieces
    def _write_samples(self, turns: list[dict[str, Any]]) -> None:
        """Keep a few turns per env family, with their prompts decoded, in samples.jsonl and tracker tables."""
        if self.samples is None:
            return
        picked = pick_turns(turns, self.config.run.samples_per_family, self.sample_rng)
        decode = self.learner.tokenizer.decode
        records = decoded_samples(picked, decode, update=self.update, global_step=self.global_step)
        self.samples.write_many(records)
        self.logger.log_samples(records, step=self.global_step)

    def _score(self, storage: TurnStorage, *, logprobs: bool) -> dict[str, float]:
        """Score in the actor's precision: the prepared actor and critic autocast themselves, the frozen
        reference (not prepared, so checkpoints leave it out) only inside this context."""
        with self.accelerator.autocast():
            return score_batch(
                storage,
                self.learner.models,
                unwrap=self._unwrap,
                logprobs=logprobs,
                reuse_sampler_logprobs=self.config.ppo.reuse_sampler_logprobs,
                temperature=self.config.sampling.temperature,
                max_tokens=self.config.ppo.micro_batch_tokens,
                device=self.accelerator.device,
                common_count=self.dist.common_count if self.dist.lockstep else None,
            )

    def _ppo(self, storage: TurnStorage, *, train_actor: bool, limit: int | None = None) -> dict[str, float]:
        """The PPO update over the storage: ``ppo.num_minibatches`` steps per epoch, or, over a ``limit`` of
        turns (critic pre-training's sample), as many steps as the minibatches of that many turns."""
        count = self.config.ppo.num_minibatches if limit is None else limit // self.derived.minibatch_turns
        return ppo_update(
            storage,
            self.learner.models,
            accelerator=self.dist.actor,
            critic_accelerator=self.dist.critic,
            config=self.config.ppo,
            num_minibatches=count,
            temperature=self.config.sampling.temperature,
            train_actor=train_actor,
            limit=limit,
            entropy_coef=self.entropy_bonus.coef_after(self.update),
        )

    def _batch_turns(self) -> int:
        """Turns played in this update over all processes (whole-episode batches vary in length; a group played
        again counts each time, so a turn budget is the same for every estimator)."""
        return int(self._all_reduce(torch.tensor([float(self.rollout.turns_played)])).item())

    def _all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return sum_over_processes(self.accelerator, tensor)

    def _mean_over_processes(self, metrics: dict[str, float], counts: dict[str, int]) -> dict[str, float]:
        metrics = {**metrics, "update": float(self.update), "global_step": float(self.global_step)}
        return mean_over_processes(self.accelerator, metrics, counts)
