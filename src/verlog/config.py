"""The configuration of a run: dataclasses loaded from TOML and overridden by ``section.key=value`` arguments.

It sits at the package root, beside :mod:`verlog.tomlconfig`, so the learner (:mod:`verlog.ppo`), the evaluation
(``verlog eval`` reads a run's ``config.toml``) and the report all read it without importing each other; it
imports neither torch nor any floor above the root.

Each field carries a one-line docstring; :func:`describe` prints them, and a key or value that does not parse
names the bad key and lists the valid ones. Whether the values can work together is checked in one place,
:mod:`verlog.runkit.validate`; sizes that follow from several fields are computed once, in :meth:`Config.derive`.
The ``algo`` section picks the advantage estimator (:mod:`verlog.ppo.advantages`).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from verlog import tomlconfig
from verlog.tomlconfig import ConfigError

__all__ = [
    "ESTIMATOR_NAMES",
    "AlgoConfig",
    "Config",
    "ConfigError",
    "CurriculumConfig",
    "Derived",
    "EnvConfig",
    "ModelConfig",
    "PanelConfig",
    "PPOConfig",
    "PromptConfig",
    "RunConfig",
    "SamplingConfig",
    "WatchdogConfig",
    "describe",
    "load_config",
]


@dataclass
class RunConfig:
    name: str = "verlog"
    """Run name; the run folder is ``<output_dir>/<name>-NNNN``."""
    output_dir: str = "runs"
    """Folder that holds the run folders."""
    seed: int = 1
    """Seed of envs (``seed + rank * num_envs``), torch and sampling."""
    total_updates: int = 300
    """Number of PPO updates (each one is turns_per_update turns from every env)."""
    total_turns: int = 0
    """Also stop after the update that brings the turns played (critic pre-training's included) to this many (0 = no limit): one budget for methods whose updates differ in size."""
    max_minutes: float = 0.0
    """Also stop (and checkpoint) before an update would end past this many minutes of training (0 = no limit)."""
    checkpoint_every: int = 10
    """Save a checkpoint every k updates (0: only after the last update)."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints to keep."""
    export_actor: bool = True
    """Also save the actor and tokenizer in Hugging Face format in each checkpoint (for evaluation)."""
    trackers: list[str] = field(default_factory=list)
    """accelerate trackers to log to besides metrics.jsonl, e.g. ["tensorboard"], ["wandb"], ["swanlab"]."""
    project: str = "verlog"
    """Tracker project name."""
    run_name: str = ""
    """Tracker run name ("" = the run folder's name, e.g. tiny-0003)."""
    tracker_kwargs: dict[str, Any] = field(default_factory=dict)
    """Per-tracker init arguments, e.g. { wandb = { mode = "offline" }, swanlab = { mode = "local" } }."""
    samples_every: int = 1
    """Write sampled turns to samples.jsonl (and tracker tables) every k updates (0 = never)."""
    samples_per_family: int = 2
    """Turns kept per env family (a Mixed env's task or level) each time samples are written."""
    console: bool = True
    """Show a progress bar and a per-update table on the console."""
    note: str = ""
    """A line the console ends the run on: what this preset shows and where to see more (envs/tiny.toml's)."""
    torch_threads: int = 0
    """CPU threads of torch (0 = torch's default; 1 is fastest for tiny models on a busy machine)."""
    heap_map_kib: int = 0
    """Allocations of this many KiB or more get a mapping of their own, returned when freed (glibc's
    ``M_MMAP_THRESHOLD``, fixed); 0 = glibc's sliding default. Lowers a CPU run's high-water mark, costs speed."""
    collective_timeout: float = 600.0
    """Seconds a process waits for the others in a collective before it reports a lost machine and stops."""
    eval_every: int = 0
    """Play the held-out validation panel every k updates (and after the last); 0 = never. See [panel]."""


@dataclass
class PanelConfig:
    episodes: int = 32
    """Held-out episodes of the validation panel (the same seeds every time)."""
    seed: int = 900_000
    """Base seed of the panel's episodes (far from the training seeds, so the panel is held out)."""
    env_id: str = ""
    """Env of the panel ("" = env.id), e.g. BALROG's own task while training on an easier one."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the panel's env, over env.kwargs (a curriculum's stage does not apply), e.g. { room_size = 8 }."""
    greedy: bool = True
    """Greedy answers (true) or sampled at sampling.temperature (false)."""
    num_envs: int = 0
    """Episodes played at once (0 = env.num_envs)."""


@dataclass
class WatchdogConfig:
    enabled: bool = True
    """Roll a collapsed run back to its last good checkpoint with a lower actor learning rate."""
    reference_updates: int = 4
    """The per-update signals compare an update with the mean of this many recent healthy updates (1 = the last)."""
    invalid_rise: float = 0.3
    """Collapse: the invalid-action rate rose this much above the reference (absolute, 0..1)."""
    entropy_nats: float = 2.0
    """Collapse: the entropy moved more than this many nats from the reference, either way."""
    capped_share: float = 0.9
    """Collapse: this share of answers ran to the token cap, up by 0.3 or more on the reference."""
    eval_drop_se: float = 3.0
    """Collapse: panel success fell this many standard errors below the best panel success."""
    lr_factor: float = 0.5
    """The actor's learning rate is multiplied by this at each rollback."""
    max_rollbacks: int = 3
    """Stop the run (exit 1) at the next collapse after this many rollbacks."""


@dataclass
class EnvConfig:
    id: str = "verlog/BabyAI-Mixed-v0"
    """Gymnasium id of the env (any ``verlog/...`` id)."""
    num_envs: int = 32
    """Envs stepped in lockstep per process (N)."""
    vectorization_mode: Literal["sync", "async"] = "sync"
    """Vector env kind: "sync" (one process) or "async" (a worker process per env); both resume exactly."""
    memory: Literal["none", "history", "notes"] = "history"
    """Memory wrapper that turns observations into the text the agent sees."""
    memory_kwargs: dict[str, Any] = field(default_factory=lambda: {"turns": 1, "reasoning": True})
    """Keyword arguments of the memory wrapper (history: turns, reasoning, max_chars)."""
    kwargs: dict[str, Any] = field(default_factory=lambda: {"invalid_action_penalty": -0.1})
    """Keyword arguments of the env (e.g. invalid_action_penalty, max_steps)."""
    binary_reward: bool = False
    """Replace a positive step reward by 1.0 (Verlog's BabyAI and BabaIsAI setting)."""
    step_timeout_s: float = 0.0
    """Async envs: seconds a sub-env may take for one step or reset before the run stops naming it (0 = no limit)."""


@dataclass
class ModelConfig:
    path: str = ""
    """Actor checkpoint: a local folder, a Hugging Face id, or a .gguf file (converted once under runs/models/gguf/)."""
    critic_path: str = ""
    """Critic checkpoint ("" = the actor's); it must share the actor's tokenizer."""
    critic_head: Literal["token_classification", "value_head"] = "token_classification"
    """Critic kind: AutoModelForTokenClassification(num_labels=1), or an AutoModel backbone plus a linear head."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype; keep float32 and use ``accelerate launch --mixed_precision bf16`` for bf16 compute."""
    mixed_precision: Literal["", "auto", "no", "bf16", "fp16"] = ""
    """Autocast compute over float32 weights: "" = accelerate launch's --mixed_precision; "auto" = bf16 where the hardware has it (a GPU, a CPU with AVX512-BF16/AMX), else float32."""
    attn_implementation: str = ""
    """Attention kernel passed to from_pretrained ("" = the transformers default)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, more time)."""
    build: str = ""
    """Build into ``path`` on first use: "tiny", or a registry model like "smollm2-135m-instruct" (path defaults to runs/models/<name>)."""
    build_tiny: bool = False
    """Shorthand for build = "tiny"."""
    tiny_tokenizer: Literal["bpe", "words", "action-words"] = "bpe"
    """The tiny model's tokenizer: byte-level BPE (any text), one token per word of the game, or that and one token per action name."""
    tiny_hidden_size: int = 64
    """The tiny model's width (a multiple of its 4 heads); asked for another size than 64 x 2, a folder built at a different one is refused, not reused."""
    tiny_layers: int = 2
    """The tiny model's decoder layers."""
    lora_r: int = 0
    """LoRA rank of the actor (0 = full fine-tuning); with LoRA the reference is the base, adapters off."""
    lora_alpha: float = 32.0
    """LoRA scaling numerator (the update is scaled by lora_alpha / lora_r)."""
    lora_target_modules: list[str] = field(default_factory=list)
    """Module names that get adapters ([] = every linear layer except the output heads)."""
    critic_lora: bool = False
    """Also train the critic through LoRA adapters (its value head trains fully); needs lora_r > 0."""
    trainable_layers: int = 0
    """Train only the actor's top N decoder layers, final norm and head (0 = all): the backward pass stops there."""
    critic_layers: int = 0
    """Build the critic from the bottom N decoder layers only (0 = all): a shallower, cheaper value model."""
    critic_shares_actor: bool = False
    """The critic is a linear value head on the actor's own decoder, one network that the policy loss and the value loss (times ppo.value_coef) both train, as the Atari PPO of CleanRL and pytorch-a2c-ppo-acktr-gail: where the reward is too sparse for the policy gradient alone to teach the network to read the observation, the value loss, which has a target every turn, does (critic pre-training then trains the shared decoder too). One process, no DeepSpeed, LoRA or trunk cache, a critic from the actor's checkpoint."""


@dataclass
class PromptConfig:
    style: Literal["short", "full"] = "short"
    """Prompt style: "short" (goal, observation and action list; for small models) or "full" (BALROG's instruction)."""
    examples: int = 1
    """Worked turns of the game shown before the real one, the first k of the env's prompt_examples (BabaIsAI has 4, one per direction; BabyAI and Crafter 1; 1 = the game's example if it has one)."""
    format: Literal["action", "think", "tags"] = "action"
    """Answer format asked for: the bare action, "THINK: ... ACTION: ...", or <think>/<action> tags."""
    format_request: str = ""
    """Text appended to the user message to ask for the format ("" = the style's default for `format`)."""
    list_actions: bool = True
    """The short style lists the valid actions after the observation; with answers constrained to them
    (sampling.constrain = "actions") the list is only tokens to read, and false leaves it out."""
    max_prompt_tokens: int = 1024
    """Longest prompt; a longer one falls back to the current observation alone (counted in env/prompt_cuts)."""
    max_response_tokens: int = 64
    """Longest response in tokens (R); generation stops at EOS or here."""


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    """Sampling temperature; the learner scores tokens at the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling threshold (1.0 = off)."""
    batch_size: int = 0
    """Prompts per generate call (0 = all envs at once)."""
    constrain: Literal["off", "actions"] = "off"
    """"actions": every answer names one of the turn's valid actions (info["valid_actions"]) in prompt.format, by decoding restricted to them (xgrammar, in every sampler); the learner scores the same restricted distribution. "off": free text, parsed leniently, an invalid answer runs the game's default action."""
    backend: Literal["auto", "transformers", "vllm"] = "auto"
    """Generation engine: "auto" takes vLLM where it imports, on a GPU or (CPU) for a model of 100 MB or more."""
    vllm_gpu_memory_utilization: float = 0.3
    """Fraction of the GPU vLLM may take (weights + KV cache); the rest is left to training."""
    vllm_sleep_level: int = 1
    """vLLM sleep while training (GPU only): 1 = weights to CPU, KV cache freed; 2 = weights dropped too; 0 = awake."""
    vllm_cpu_kvcache_gib: float = 0.0
    """KV cache of vLLM on a CPU, in GiB (VLLM_CPU_KVCACHE_SPACE); 0 = what one generate call's prompts need at max_prompt_tokens (8 SmolLM2 prompts of 1k tokens: ~0.5 GiB), 1 GiB where that count is unknown (evaluation)."""
    vllm_enforce_eager: bool = True
    """Run vLLM without torch.compile / CUDA graphs: on a CPU it loads in seconds instead of minutes."""
    vllm_prefix_caching: bool = True
    """Reuse the KV cache of prompt prefixes vLLM has already run (the instruction and worked examples every prompt repeats); off only to measure what it saves (benchmarks/speed/prefix_cache.py)."""


@dataclass
class PPOConfig:
    turns_per_update: int = 8
    """Turns collected from each env per update (T)."""
    num_minibatches: int = 2
    """Optimiser steps per epoch; the T*N turns are split into this many shuffled minibatches."""
    epochs: int = 1
    """Passes over the batch per update."""
    micro_batch_tokens: int = 16384
    """Token budget of one forward pass (rows x padded length); gradients accumulate over micro-batches."""
    share_prompt_prefix: bool = False
    """Run the prompt prefix every row of a micro-batch shares (instruction, worked examples) once, not once per row, in scoring and in the update: the same scores and gradients up to float rounding, fewer tokens through the model (benchmarks/speed/prefix_update.py). Not with DeepSpeed across processes, whose forwards are collective."""
    share_branch_prompts: bool = False
    """With algo.branch_actions: the update moves a played turn and its one-step branches (which repeat its prompt) as one, and runs each prompt once for all of them, as scoring does: the same log-probs and gradients up to float rounding, about (1 + branches) times fewer prompt tokens through the model (SmolLM2 on BabaIsAI: four branches a turn). Minibatches are then drawn by prompt, not by turn. Not with ppo.trunk_cache or ppo.reading_coef."""
    pad_to_multiple: int = 1
    """Left-pad each scored and trained micro-batch's prompts to a multiple of this many tokens (1 = to the longest): the same scores, a few more tokens, and far fewer distinct shapes, so the CPU's matrix kernels (oneDNN, which builds and keeps one primitive per shape) are reused rather than built again, and their cache stops growing (benchmarks/speed/pad_shapes.py)."""
    trunk_cache: bool = False
    """With model.trainable_layers: run the frozen layers below the trained ones once per turn (in scoring) and keep their output for the update, which then runs the trained layers alone; the KL reference keeps only its top layers and runs from the same states. With the transformers sampler the trunk runs while it answers: it keeps those states and scoring runs no trunk at all. The same log-probs and gradients up to float rounding (tests/test_trunk_cache.py; its speed: nox -s bench_trunk_cache). One process, no DeepSpeed, no LoRA."""
    trunk_cache_mib: float = 1024.0
    """Memory the kept trunk states may take; the update runs the trunk again (without gradients) for turns past it."""
    trunk_critic: bool = False
    """With ppo.trunk_cache: the critic reads the trunk's states too. Its layers are then the checkpoint's from the first trained one up (model.critic_layers of them, 0 = as many as the actor trains), with the final norm and value head: no trunk of its own to run, and a value model that starts from the features the actor's trained layers read. Needs a critic from the actor's checkpoint (model.critic_path empty)."""
    actor_lr: float = 1e-6
    """Actor AdamW learning rate."""
    actor_lr_milestones: list[int] = field(default_factory=list)
    """Updates after which the actor's learning rate is multiplied by ``actor_lr_gamma`` (torch's MultiStepLR, counted in updates)."""
    actor_lr_gamma: float = 0.5
    """Factor applied to the actor's learning rate at each of ``actor_lr_milestones``."""
    critic_lr: float = 1e-5
    """Critic AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay of both models."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm of each model."""
    clip_ratio_low: float = 0.2
    """PPO clip: the ratio is kept above 1 - clip_ratio_low."""
    clip_ratio_high: float = 0.2
    """PPO clip: the ratio is kept below 1 + clip_ratio_high."""
    dual_clip: float = 3.0
    """Dual clip c for negative advantages: the token loss is at most -c*A (0 = off)."""
    entropy_coef: float = 1e-3
    """Entropy bonus coefficient (at the start, with ``entropy_anneal_updates``)."""
    entropy_coef_final: float = 0.0
    """The entropy bonus once ``entropy_anneal_updates`` updates are done: explore early, then let the policy sharpen."""
    entropy_anneal_updates: int = 0
    """Updates over which the entropy bonus goes linearly from ``entropy_coef`` to ``entropy_coef_final`` (0 = constant ``entropy_coef``)."""
    entropy_target: float = 0.0
    """A target for the policy's entropy in nats per response token (``losses/entropy``): > 0 adapts the entropy bonus after each update, from ``entropy_coef``, up while the entropy is under it and down while over (:class:`verlog.ppo.update.EntropyBonus`), so a policy cannot collapse onto the one answer that pays most often; 0 = off (the fixed or annealed ``entropy_coef``)."""
    entropy_target_rate: float = 0.1
    """With ``entropy_target``: the most the bonus moves in one update, as a log-factor (0.1: at most x1.105 or /1.105)."""
    answer_entropy_coef: float = 0.0
    """Bonus on the entropy of the mean first-answer distribution over each micro-batch's turns, H(mean): it keeps the mix of answers broad across states without keeping any one state's answer random, as the per-turn bonus (entropy_coef) does, so the policy can only follow the reward by answering differently in different states. losses/answer_information, logged always, is the answer's mutual information with the state, I(S; A) = H(mean) - mean H: 0 for a policy that plays one fixed mix of answers whatever it reads. Both are read at the first answer token: exact where each action is one token (the tiny models' action-words); where names span tokens and a constraint allows other spellings of one action (byte-level fallback: "p" as well as "pick"), the bonus can be met by spelling an action differently (SmolLM2 on Pickup: 2.05 nats over four actions)."""
    reading_coef: float = 0.0
    """Weight of an auxiliary reading loss at the answer's position: the same logits that answer must also name the prompt token that follows ``ppo.reading_after`` (Crafter: the word after "face", what the player faces), through the language-model head over the tokens the answer may NOT use (so the answer's distribution, renormalised over the actions, is left to the policy loss). Where the reward is too sparse for the policy gradient to teach a small model to read the observation, this target, present every turn, makes the answer's state carry what is read (as UNREAL's auxiliary tasks). Needs sampling.constrain = "actions". losses/reading_loss and losses/reading_accuracy are logged, averaged over the turns with a target."""
    reading_after: str = ""
    """The prompt word whose next token is the reading loss's target (the last occurrence in each prompt; a turn whose prompt lacks it has no target). Needed when ppo.reading_coef > 0."""
    value_coef: float = 1.0
    """Weight of the value loss in the critic's backward: with model.critic_shares_actor, how much the value loss moves the shared decoder against the policy loss (CleanRL's vf_coef, 0.5); with a critic of its own, only its scale before gradient clipping."""
    value_clip: float = 0.5
    """Value clipping range around the rollout values."""
    first_value_weight: float = 3.0
    """Weight of each turn's first value (the state value) in the value loss."""
    turn_gamma: float = 0.99
    """Discount across turns."""
    turn_lam: float = 0.95
    """GAE lambda across turns."""
    critic_lam: float = -1.0
    """GAE lambda across turns of the critic's targets (VAPO decouples them: 1.0, targets that are the discounted returns that followed, bootstrapped only at the batch end); negative = turn_lam, one lambda for both."""
    token_gamma: float = 1.0
    """Discount across the tokens of one response."""
    token_lam: float = 1.0
    """GAE lambda across the tokens of one response."""
    reuse_sampler_logprobs: bool = False
    """Take the sampler's log-probs as the old ones, skipping the actor's scoring pass: exact with the transformers sampler; vLLM's differ by its kernels (1e-6 per token in float32 on the CPU; see charts/sampler_logprob_gap with this off)."""
    kl_coef: float = 1e-3
    """Per-token KL penalty to the frozen reference, in the reward (0 = no reference model)."""
    window_bootstrap: bool = True
    """Bootstrap an episode still running at the batch end with the critic's value of its next state (False: that value is taken as 0, as a trainer that treats a batch end as an episode end; for ablations)."""
    whiten_advantages: bool = True
    """GAE: scale the batch's advantages to mean 0, std 1 (False: only the reward's own scale; a batch where no reward came then moves the policy by its small advantages, not by critic noise made unit-sized)."""
    critic_warmup_batches: int = 0
    """Critic pre-training: batches of T turns per env collected once before the actor moves (W; 0 = off)."""
    critic_warmup_iters: int = 0
    """Critic pre-training iterations (S), each recomputing values and targets (0 = off)."""
    critic_warmup_sample: int = 10
    """Batches the critic trains on in each warm-up iteration, drawn at random from the W collected."""
    max_weight_abs: float = 1e4
    """Stop the run (before saving) when a weight's magnitude exceeds this after an update: divergence (0 = off)."""
    max_skipped_updates: int = 3
    """Stop the run after this many updates in a row whose every optimiser step was skipped (0 = never)."""

    def entropy_coef_after(self, updates: int) -> float:
        """The entropy bonus of the update after ``updates`` are done: a function of the update count, as the
        learning rate's schedule, so a resumed or rolled-back run gets the same bonus."""
        if self.entropy_anneal_updates <= 0:
            return self.entropy_coef
        done = min(updates, self.entropy_anneal_updates) / self.entropy_anneal_updates
        return self.entropy_coef + done * (self.entropy_coef_final - self.entropy_coef)

    def actor_lr_after(self, updates: int) -> float:
        """The scheduled actor learning rate once ``updates`` updates are done (rollbacks aside): a function of
        the update count, so a resumed or rolled-back run gets the same rate without a scheduler's state."""
        passed = sum(1 for milestone in self.actor_lr_milestones if updates >= milestone)
        return self.actor_lr * self.actor_lr_gamma**passed


#: The ``algo.advantage`` names; each is computed by :data:`verlog.ppo.advantages.ESTIMATORS` (one registry).
ESTIMATOR_NAMES = ("gae", "grpo", "gigpo", "rloo")


@dataclass
class AlgoConfig:
    advantage: Literal["gae", "grpo", "gigpo", "rloo"] = "gae"
    """Advantage estimator: "gae" (PPO with a critic), "grpo" (group-normalised episode return, no critic), "gigpo" (GRPO plus a step term from repeated states, no critic) or "rloo" (each episode's return minus the mean of the others in its group, no critic)."""
    group_size: int = 0
    """grpo/gigpo/rloo: envs per group (G), reset with one seed each batch; 0 = the largest divisor of env.num_envs up to 8."""
    max_episode_turns: int = 32
    """grpo/gigpo/rloo: turn cap of an episode; an episode still running there ends truncated (counted)."""
    late_windows: int = 0
    """grpo/gigpo/rloo with algo.branch_actions and groups of one: each episode first plays k * max_episode_turns turns with the policy, unrecorded, k drawn uniformly from 0..late_windows per env and batch, so the recorded windows cover turns 0 .. (late_windows + 1) * max_episode_turns - 1 equally at the same training cost (an episode that ends before its window is reset to its seed and recorded from its first turn). The branches judge each state alone, so a window that starts late still has its signal; 0: every window starts at the reset."""
    norm: Literal["mean", "mean_std"] = "mean_std"
    """grpo/gigpo: subtract the group mean ("mean"), or also divide by the group's std + 1e-6 ("mean_std")."""
    pool: Literal["episode", "turn"] = "episode"
    """grpo/gigpo: episode statistics over the group's episodes, one return each ("episode"), or over every turn's copy of its episode's return ("turn", verl-agent's default: long episodes weigh more)."""
    resample_attempts: int = 0
    """grpo/gigpo/rloo: times a group whose turns all have a zero advantage is played again from a fresh seed (dynamic sampling; 0 = never: under a turn budget with rare successes it cost more than it gave, see docs/training/critic-free.md)."""
    filter_no_signal: bool = True
    """grpo/gigpo/rloo: leave groups still without signal after resampling out of the update (all of them only if every group has none)."""
    step_weight: float = 1.0
    """gigpo: weight w of the step term, A = A_episode + w * A_step (verl-agent's step_advantage_w, 1.0)."""
    step_gamma: float = 0.95
    """gigpo: discount of the return from a turn, compared within a step group (verl-agent's gamma, 0.95)."""
    center_actions: bool = False
    """grpo/gigpo/rloo: subtract each action's mean advantage over the batch from its turns (info["executed_action"]; invalid answers keep theirs), so no action gains everywhere for faring well on average: only the state it was chosen in decides."""
    branch_actions: bool = False
    """grpo/gigpo/rloo: from every state played, also try each offered action once in a deep copy of the env and train on those one-step branches, each with advantage step_weight * (its reward - the mean over the state's branches, and the played answer if it was invalid); the played turn keeps its group advantage alone. Needs copyable envs, a reward that tells one step apart (a shaping reward) and ppo.reuse_sampler_logprobs = false."""
    branch_weight: Literal["uniform", "policy", "best"] = "uniform"
    """algo.branch_actions: how a state's branches are weighed. "uniform": each as if it had been sampled, w * (r - mean of the branches); the logits then move by about +rate * advantage every update whatever the policy already does, an objective without an optimum that sharpens without end (the tiny BabaIsAI mix blew up under it, docs/log.md). "policy": each by the probability the policy gave it before the update, w * pi(b|s) * (r - sum_b pi r / sum_b pi): the exact gradient of the expected one-step reward (Mean Actor-Critic, Allen et al. 2017), which stops pushing once the policy puts its mass on the best moves, and pushes little on a best move the policy has nearly ruled out. "best": w / k on each of the state's k best moves, 0 on the others: the cross-entropy toward the one-step greedy policy, classification-based policy iteration (Lagoudakis and Parr 2003) with the branches as its rollouts; it stops at the best moves and pulls as hard on one the policy has ruled out (a state whose moves all earn the same pulls toward uniform)."""

    branch_balance: float = 0.0
    """algo.branch_weight = "best": weigh each best move by (mean / M_a) ** branch_balance, M_a the batch's weight on that action as a best move and the mean over the actions ever best, rescaled so the batch's total is unchanged: 1 gives an action that is best in few states (BabyAI's toggle, drop) as much of the update as one best in many, 0.5 the square root of that, 0 nothing (the metrics branch_best/<action>/probability and /share show whether a rare one is learned)."""

    @property
    def critic(self) -> bool:
        """Whether this estimator needs a critic."""
        return self.advantage == "gae"

    def groups_of(self, num_envs: int) -> int:
        """The group size G for ``num_envs`` envs: ``group_size``, or for 0 the largest divisor up to 8."""
        if self.group_size:
            return self.group_size
        return max(g for g in range(1, min(8, max(num_envs, 1)) + 1) if num_envs % g == 0)


@dataclass
class CurriculumConfig:
    stages: list[dict] = field(default_factory=list)
    """Env keyword arguments per stage, easiest first, each merged over env.kwargs (not over the stage before), e.g. [{ room_size = 5 }, { room_size = 8 }] (empty: no curriculum)."""
    threshold: float = 0.5
    """Move to the next stage once the success rate over the last `window` finished episodes reaches this (0.5: about half won)."""
    window: int = 64
    """Finished episodes (all processes together) the success rate is measured over."""


@dataclass
class Derived:
    """Sizes that follow from the configuration, computed once by :meth:`Config.derive`."""

    world_size: int
    batch_turns: int  # turns per update per process: T * N
    minibatch_turns: int  # turns per optimiser step per process
    global_batch_turns: int  # turns per update over all processes
    warmup_turns: int  # turns per env collected for critic pre-training (W * T)
    warmup_sample_turns: int  # turns the critic trains on per warm-up iteration, per process


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    """Run folder, seed, length, checkpoints and logging."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Which env, how many, with which memory."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Actor, critic and reference checkpoints."""
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """Prompt format and lengths."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """Generation settings during training."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """The algorithm's hyperparameters."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """The advantage estimator: PPO's critic, or a critic-free group baseline (GRPO, GiGPO, RLOO)."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """Stages of env difficulty, advanced on recent success."""
    panel: PanelConfig = field(default_factory=PanelConfig)
    """The held-out validation panel played every run.eval_every updates."""
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)
    """Collapse detection and rollback."""

    def derive(self, world_size: int = 1) -> Derived:
        """The sizes that follow from the config (checked first by :func:`verlog.runkit.validate.validate`)."""
        ppo, env = self.ppo, self.env
        batch = ppo.turns_per_update * env.num_envs
        return Derived(
            world_size=world_size,
            batch_turns=batch,
            minibatch_turns=batch // ppo.num_minibatches,
            global_batch_turns=batch * world_size,
            warmup_turns=ppo.critic_warmup_batches * ppo.turns_per_update,
            warmup_sample_turns=min(ppo.critic_warmup_sample, ppo.critic_warmup_batches) * batch,
        )

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

    def to_toml(self) -> str:
        """The resolved configuration as TOML (what ``config.toml`` in a run folder holds)."""
        return tomlconfig.to_toml(self)


# --------------------------------------------------------------------------- loading


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    """Read a TOML file (or start from the defaults) and apply ``section.key=value`` overrides."""
    if path is not None and not Path(path).is_file():
        raise ConfigError(_no_preset(Path(path)))
    return tomlconfig.load(Config, path, overrides)


def _no_preset(path: Path) -> str:
    """A missing preset: the closest files by name, in its folder or in ``envs/``, and every preset there."""
    from verlog.hints import did_you_mean

    envs = Path("envs")
    if not envs.is_dir():  # run from elsewhere: the presets of the checkout verlog is installed from, if any
        envs = Path(__file__).resolve().parents[2] / "envs"
    shown: dict[str, str] = {}  # a file's name -> the path to suggest (its own folder's first)
    for folder in (path.parent, envs):
        for file in sorted(folder.glob("*.toml")) if folder.is_dir() else ():
            shown.setdefault(file.name, str(file))
    close = did_you_mean(path.name, shown)
    for name, where in shown.items():
        close = close.replace(repr(name), repr(where))
    line = f"no such file: {path}" + (f" ({close})" if close else "")
    presets = sorted(p.stem for p in envs.glob("*.toml"))
    return line + (f"; the presets in {envs}/: {', '.join(presets)}" if presets else "")


def describe() -> str:
    """Every key with its type, default and docstring (``agents/ppo.py --help-config``)."""
    return tomlconfig.describe(Config)
