"""ppo.trunk_cache: the frozen layers below model.trainable_layers run once per turn, and everything that reads
them (old log-probs, the KL reference, the update) gets what the whole model gives, to float rounding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.config import ConfigError, load_config
from verlog.models.loading import (
    decoder_layers,
    freeze_below,
    load_actor,
    load_critic,
    load_reference,
    load_tokenizer,
)
from verlog.models.tiny import build_tiny
from verlog.models.trunk import TopLayers, drop_bottom_layers
from verlog.ppo.forward import Trunk, actor_logprobs, collate, critic_values
from verlog.ppo.scoring import score, state_values
from verlog.ppo.storage import TurnStorage
from verlog.ppo.trainer import Trainer
from verlog.runkit.validate import validate
from verlog.sampling import TransformersSampler


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(tmp_path_factory.mktemp("tiny") / "model", TOY_ID, num_layers=3)


def _batches(pad: int) -> dict[str, object]:
    head = list(range(5, 25))  # 20 tokens every prompt starts with
    prompts = [head + [30, 31, 32], head + [33], head + [34, 35, 36, 37, 38]]
    responses = [[40, 41, 42], [43], [44, 45]]
    return {
        "whole": collate(prompts, responses, pad),
        "shared prefix": collate(prompts, responses, pad, share_prefix=True),
    }


@pytest.mark.parametrize("layout", ["whole", "shared prefix"])
def test_the_top_layers_from_the_trunk_give_the_whole_models_logprobs_entropy_and_gradients(
    model_path: Path, layout: str
) -> None:
    actor = load_actor(str(model_path), trainable_layers=1)
    reference = load_reference(str(model_path))
    batch = _batches(pad=0)[layout]
    trunk = Trunk(actor, start=2)
    results = []
    for model, inputs in ((actor, batch), (trunk.top, trunk.states(batch))):
        actor.zero_grad()
        logprobs, entropy = actor_logprobs(model, inputs, temperature=0.8, with_entropy=True)
        mask = inputs.response_mask
        ((logprobs * mask).sum() + (entropy * mask).sum()).backward()
        grads = [p.grad.clone() for p in actor.parameters() if p.grad is not None]
        results.append((logprobs * mask, entropy * mask, grads))
    (lp_a, ent_a, grads_a), (lp_b, ent_b, grads_b) = results
    torch.testing.assert_close(lp_a, lp_b, atol=1e-5, rtol=0)
    torch.testing.assert_close(ent_a, ent_b, atol=1e-5, rtol=0)
    assert len(grads_a) == len(grads_b) > 0  # the top layer, the final norm
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    whole_reference, _ = actor_logprobs(reference, batch)
    drop_bottom_layers(reference, 2)
    assert len(decoder_layers(reference)) == 1
    top_reference, _ = actor_logprobs(TopLayers(reference, 0), trunk.states(batch))
    torch.testing.assert_close(whole_reference * batch.response_mask, top_reference * batch.response_mask)


@pytest.mark.parametrize("layout", ["whole", "shared prefix"])
def test_a_critic_on_the_trunk_gives_the_values_and_gradients_of_the_stack_it_stands_for(
    model_path: Path, layout: str
) -> None:
    """ppo.trunk_critic: the checkpoint's layer above the trunk, run from the actor's trunk states, is the critic
    built on the checkpoint's whole stack with the trunk's layers frozen: the same values and gradients."""
    batch = _batches(pad=0)[layout]
    stacked = load_critic(str(model_path))
    freeze_below(stacked, 1)
    on_trunk = load_critic(str(model_path))
    # a new value head is drawn at random at each load: the same one for both
    on_trunk.score.load_state_dict(stacked.score.state_dict())
    drop_bottom_layers(on_trunk, 2, keep=1)
    assert len(decoder_layers(on_trunk)) == 1
    assert not on_trunk.get_input_embeddings().weight.requires_grad  # never read: no optimiser state for it
    trunk = Trunk(load_actor(str(model_path), trainable_layers=1), start=2, critic_on_trunk=True)
    results = []
    for critic, values in ((stacked, critic_values), (on_trunk, trunk.critic_values)):
        out = values(critic, batch)
        out.sum().backward()
        results.append((out.detach(), [p.grad for p in critic.parameters() if p.grad is not None]))
    (values_a, grads_a), (values_b, grads_b) = results
    torch.testing.assert_close(values_a, values_b, atol=1e-5, rtol=0)
    assert len(grads_a) == len(grads_b) > 2  # the layer, the final norm, the head
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("on_trunk", [False, True], ids=["own critic", "critic on the trunk"])
def test_bootstrap_values_with_the_shared_prefix_run_once_are_the_whole_prompts_values(
    model_path: Path, on_trunk: bool
) -> None:
    """The values of the bootstrap state (slot T) pack their prompts as scoring does: the prefix all prompts
    share runs once (through the trunk too, for a critic on it), padded to the scoring's multiple; same values."""
    head = list(range(5, 25))
    prompts = [head + [30, 31, 32], head + [33], head + [34, 35, 36, 37, 38]]
    critic = load_critic(str(model_path))
    trunk, reader = None, critic  # the model whose embeddings read the prompts
    if on_trunk:
        drop_bottom_layers(critic, 2, keep=1)
        reader = load_actor(str(model_path), trainable_layers=1)
        trunk = Trunk(reader, start=2, critic_on_trunk=True)
    common = {"pad_id": 0, "max_tokens": 4096, "device": "cpu", "trunk": trunk}
    whole = state_values(critic, prompts, **common)
    shared = state_values(critic, prompts, **common, share_prefix=True, pad_multiple=16)
    torch.testing.assert_close(shared, whole, atol=1e-5, rtol=0)
    assert whole.abs().sum() > 0

    # and scoring's bootstrap packs slot T so: with the storage's sharing on, the critic reads the prefix once
    fed: list[int] = []
    embed = reader.get_input_embeddings()
    hook = embed.register_forward_hook(lambda _m, args, _out: fed.append(args[0].numel()))
    bootstrap = {}
    try:
        for sharing in (False, True):
            storage = TurnStorage(num_turns=1, num_envs=3, max_response_tokens=2, pad_id=0)
            storage.share_prefix, storage.pad_multiple = sharing, 1
            storage.reset_first([[40 + n] for n in range(3)])  # slot 0 shares nothing: only slot T differs
            storage.insert(prompts, [[41], [42], [43]], [[0.0]] * 3, [0.0] * 3, [False] * 3, [False] * 3)
            fed.clear()
            score(storage, actor=None, critic=critic, reference=None, temperature=1.0, max_tokens=4096,
                  device="cpu", trunk=trunk)  # fmt: skip
            bootstrap[sharing] = (sum(fed), storage.values[1].clone())
    finally:
        hook.remove()
    torch.testing.assert_close(bootstrap[True][1], whole, atol=1e-5, rtol=0)
    assert bootstrap[False][0] - bootstrap[True][0] == 2 * len(head)  # two of the three rows skip the prefix


@pytest.mark.parametrize("head", [20, 0], ids=["shared prefix", "no shared prefix"])
def test_the_transformers_sampler_keeps_the_states_the_trunk_gives(model_path: Path, head: int) -> None:
    """With ``trunk_layer`` the sampler keeps, for every prompt and answer token it ran, the states the learner's
    trunk computes over the scored turn: scoring then need not run the trunk again. The second call reuses the
    shared prefix kept from the first (a rollout's next turn), and its states are the trunk's all the same."""
    torch.manual_seed(0)
    actor = load_actor(str(model_path), trainable_layers=1)
    tokenizer = load_tokenizer(str(model_path))
    sampler = TransformersSampler(actor, tokenizer, max_new_tokens=5, trunk_layer=2)
    start = list(range(5, 5 + head))
    turns = [
        [start + [30, 31, 32], start + [33], start + [34, 35, 36, 37, 38]],
        [start + [39], start + [40, 41, 42, 43], start + [44, 45]],
    ]
    for prompts in turns:
        samples = sampler.generate(prompts)
        assert samples.states is not None and len(samples.states) == len(prompts)
        batch = Trunk(actor, 2).states(collate(prompts, samples.token_ids, 0, share_prefix=True))
        for i, (prompt, answer) in enumerate(zip(prompts, samples.token_ids, strict=True)):
            row = batch.hidden[i][batch.attention_mask[i].bool()]
            expected = row if batch.prefix_hidden is None else torch.cat([batch.prefix_hidden, row])
            kept = samples.states[i]
            assert kept.shape == expected.shape == (len(prompt) + len(answer), expected.shape[-1])
            torch.testing.assert_close(
                kept[:-1], expected[:-1], atol=1e-5, rtol=1e-4
            )  # the last token never ran
            assert not kept[-1].any()
    assert TransformersSampler(actor, tokenizer, max_new_tokens=5).generate(prompts).states is None


def test_a_top_layers_model_refuses_a_batch_without_trunk_states(model_path: Path) -> None:
    actor = load_actor(str(model_path), trainable_layers=1)
    with pytest.raises(ValueError, match="with_trunk_states"):
        actor_logprobs(Trunk(actor, 2).top, _batches(pad=0)["whole"])


def test_the_storage_keeps_trunk_states_within_its_budget_and_rebuilds_the_batch_layout(
    model_path: Path,
) -> None:
    actor = load_actor(str(model_path), trainable_layers=1)
    trunk = Trunk(actor, 2)
    storage = TurnStorage(num_turns=1, num_envs=3, max_response_tokens=4, pad_id=0)
    prompts = [list(range(5, 12)), list(range(5, 9)), list(range(5, 15))]
    storage.reset_first(prompts)
    storage.insert(
        prompts,
        [[40, 41], [42], [43, 44, 45]],
        [[0.0] * 2, [0.0], [0.0] * 3],
        [0.0] * 3,
        [False] * 3,
        [False] * 3,
    )
    rows = storage.rows()
    micro = next(storage.micro_batches(rows, max_tokens=10_000))
    scored = trunk.states(micro.batch)
    one_row = scored.hidden[0][scored.attention_mask[0].bool()]
    storage.trunk_budget = 2 * one_row.numel() * one_row.element_size()  # room for the longest row twice
    storage.keep_trunk_states(micro.rows, scored)
    assert len(storage.trunk_states) == 2 and storage.trunk_bytes <= storage.trunk_budget
    assert next(storage.micro_batches(rows, max_tokens=10_000)).batch.hidden is None  # one row missing: none
    storage.trunk_budget = 1 << 30
    storage.keep_trunk_states(micro.rows, scored)
    kept = next(
        storage.micro_batches(list(reversed(rows)), max_tokens=10_000)
    ).batch  # another order, padding
    assert kept.hidden is not None
    fresh = trunk.states(kept)
    real = kept.attention_mask.bool()
    torch.testing.assert_close(kept.hidden[real], fresh.hidden[real], atol=1e-5, rtol=0)
    storage.after_update()
    assert not storage.trunk_states


def _config(tmp_path: Path, model_path: Path, name: str, *extra: str):
    return load_config(
        None,
        [
            f"run.output_dir={tmp_path}",
            f"run.name={name}",
            "run.console=false",
            "run.torch_threads=1",
            "run.export_actor=false",
            "run.checkpoint_every=0",
            "run.total_updates=1",
            "run.seed=3",
            f"model.path={model_path}",
            "model.trainable_layers=1",
            "model.critic_layers=1",
            f"env.id={TOY_ID}",
            "env.num_envs=2",
            "env.memory=none",
            "env.memory_kwargs={}",
            "prompt.max_response_tokens=3",
            "ppo.turns_per_update=3",
            "ppo.actor_lr=1e-2",
            "ppo.critic_lr=1e-2",
            "ppo.kl_coef=0.1",
            "ppo.reuse_sampler_logprobs=false",
            "ppo.share_prompt_prefix=true",
            "ppo.critic_warmup_iters=0",
            *extra,
        ],
    )


@pytest.mark.parametrize("budget", ["1024", "0"])
def test_an_update_with_the_trunk_cache_trains_as_the_whole_model_does(
    model_path: Path, tmp_path: Path, budget: str
) -> None:
    """One PPO update from the same seed, with and without the cache (budget 0: every turn's trunk runs again in
    the update): the same scores, the same first-epoch ratio of 1, the same trained weights. Within the budget the
    states are the ones the (transformers) sampler kept while it answered."""
    outcomes = []
    for name, extra in (("whole", []), ("cached", ["ppo.trunk_cache=true", f"ppo.trunk_cache_mib={budget}"])):
        trainer = Trainer(_config(tmp_path, model_path, f"{name}-{budget}", *extra))
        try:
            metrics = trainer.train_update()
            actor = trainer.accelerator.unwrap_model(trainer.learner.models.actor)
            outcomes.append((metrics, {k: v.detach().clone() for k, v in actor.state_dict().items()}))
            if name == "cached":
                assert isinstance(trainer.learner.models.reference, TopLayers)
                assert len(decoder_layers(trainer.learner.models.reference.model)) == 1
        finally:
            trainer.envs.close()
            trainer.logger.close()
    (whole, whole_weights), (cached, cached_weights) = outcomes
    assert cached["sys/trunk_cached_turns"] == (6.0 if budget != "0" else 0.0)
    # the transformers sampler ran the trunk while answering: scoring read its states and ran it for none
    assert cached["sys/trunk_sampled_turns"] == (6.0 if budget != "0" else 0.0)
    assert (cached["sys/trunk_cache_mb"] > 0) == (budget != "0")
    for key in ("charts/kl_to_reference", "losses/approx_kl", "losses/policy_loss", "charts/value"):
        assert cached[key] == pytest.approx(whole[key], abs=1e-5), key
    for key, value in whole_weights.items():  # the sampler's states come from its token-by-token passes
        torch.testing.assert_close(cached_weights[key], value, atol=5e-5, rtol=1e-4)


def test_an_update_with_a_critic_on_the_trunk_trains_it_and_resumes_it(
    model_path: Path, tmp_path: Path
) -> None:
    """A run with ppo.trunk_critic: the critic is the one layer above the trunk, scored and trained from the kept
    states, its weights move, and a resume rebuilds it and loads them as saved."""
    config = _config(
        tmp_path, model_path, "critic-on-trunk", "ppo.trunk_cache=true", "ppo.trunk_critic=true",
        "model.critic_layers=0", "run.checkpoint_every=1", "ppo.critic_warmup_iters=1",
    )  # fmt: skip
    trainer = Trainer(config)
    try:
        critic = trainer.accelerator.unwrap_model(trainer.learner.models.critic)
        assert len(decoder_layers(critic)) == 1 and trainer.learner.models.trunk.critic_on_trunk
        before = {k: v.detach().clone() for k, v in critic.state_dict().items()}
        metrics = trainer.train_update()
        after = {k: v.detach().clone() for k, v in critic.state_dict().items()}
        trainer.save()
    finally:
        trainer.envs.close()
        trainer.logger.close()
    assert all(torch.isfinite(torch.tensor(metrics[key])) for key in ("charts/value", "losses/value_loss"))
    assert not torch.equal(before["score.weight"], after["score.weight"])
    assert not torch.equal(
        before["model.layers.0.mlp.up_proj.weight"], after["model.layers.0.mlp.up_proj.weight"]
    )
    assert torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    resumed = Trainer(load_config(trainer.run_dir / "config.toml"), resume=trainer.run_dir)
    try:
        loaded = resumed.accelerator.unwrap_model(resumed.learner.models.critic).state_dict()
        for key, value in after.items():
            torch.testing.assert_close(loaded[key], value, atol=0, rtol=0)
    finally:
        resumed.envs.close()
        resumed.logger.close()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["ppo.trunk_cache=true"], "needs model.trainable_layers > 0"),
        (
            ["ppo.trunk_cache=true", "model.trainable_layers=2", "ppo.trunk_cache_mib=-1"],
            "trunk_cache_mib must be >= 0",
        ),
        (["model.trainable_layers=2", "ppo.trunk_critic=true"], "set ppo.trunk_cache=true as well"),
        (
            [
                "model.trainable_layers=2",
                "ppo.trunk_cache=true",
                "ppo.trunk_critic=true",
                "model.critic_path=other",
            ],
            "leave model.critic_path empty",
        ),
        (
            [
                "model.trainable_layers=2",
                "model.critic_layers=3",
                "ppo.trunk_cache=true",
                "ppo.trunk_critic=true",
            ],
            "set model.critic_layers <= that",
        ),
        (
            [
                "model.trainable_layers=2",
                "ppo.trunk_cache=true",
                "ppo.trunk_critic=true",
                "algo.advantage=grpo",
            ],
            "needs a critic",
        ),
    ],
)
def test_trunk_cache_settings_that_cannot_work_are_refused_before_loading(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(load_config(None, ["model.path=somewhere", *overrides]))
