"""Tiny model, prompts, the packed forward path and the transformers sampler, on the CPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from toy_env import TOY_ID

from verlog.models.loading import load_models
from verlog.models.prompts import PromptBuilder, PromptTooLong
from verlog.models.tiny import build_tiny
from verlog.ppo.forward import actor_logprobs, collate, collate_shared, critic_values, shared_prompt_logprobs
from verlog.sampling import TransformersSampler
from verlog.sampling.base import shared_prefix_length


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory):
    torch.set_num_threads(1)
    path = build_tiny(tmp_path_factory.mktemp("tiny") / "model", TOY_ID, {"size": 5})
    return load_models(str(path), with_reference=True)


def test_tiny_model_loads_through_from_pretrained(models) -> None:
    tok = models.tokenizer
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id
    text = "Line: ..@.T\nYou are at 2, the target is at 4. ünï"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert len(tok("Walk to the target T.")["input_ids"]) < 10  # trained on the env's own text
    assert models.reference is not None and not any(p.requires_grad for p in models.reference.parameters())


def test_prompt_uses_the_chat_template_and_falls_back_to_the_raw_observation(models) -> None:
    tok = models.tokenizer
    builder = PromptBuilder(tok, "think", max_prompt_tokens=80)
    ids = builder("Walk to the target T.", "Line: @..T")
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\nWalk to the target T.<|im_end|>")
    assert "ACTION: <one valid action>" in text and text.endswith("<|im_start|>assistant\n")
    assert builder.cuts == 0
    long_memory = "Observation:\nLine: @..T\n" * 50 + "Current Observation:\nLine: .@.T"
    ids = builder("Walk.", long_memory, raw_observation="Line: .@.T")
    assert len(ids) <= 80 and builder.cuts == 1 and "Line: .@.T" in tok.decode(ids)
    with pytest.raises(PromptTooLong, match="over prompt.max_prompt_tokens = 80"):
        builder("Walk.", long_memory, raw_observation=long_memory + "!")


def whole_text_ids(builder: PromptBuilder, instruction: str, observation: str) -> list[int]:
    tok = builder.tokenizer
    text = tok.apply_chat_template(
        builder.messages(instruction, observation), tokenize=False, add_generation_prompt=True
    )
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize(
    "env_id", ["verlog/BabyAI-GoTo-v0", "verlog/Crafter-v0", "verlog/BabaIsAI-goto_win-v0"]
)
def test_piecewise_prompt_ids_equal_whole_text_ids(models, env_id: str) -> None:
    """The cached pieces between added tokens give exactly the ids of tokenizing the whole prompt."""
    import gymnasium as gym

    from verlog.memory import History

    builder = PromptBuilder(models.tokenizer, "tags", max_prompt_tokens=100_000)
    assert builder.tokenize.added is not None and builder.tokenize.line_starts  # a Qwen2-style tokenizer
    env = History(gym.make(env_id), turns=2, reasoning=True)
    observation, info = env.reset(seed=3)
    for action in ["go forward", "<think>hm</think><action>turn left</action>", "garbage ünï", "move up"] * 3:
        assert builder.from_info(observation, info) == whole_text_ids(
            builder, info["instruction"], observation
        )
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            observation, info = env.reset()
    assert builder.tokenize.piecewise  # no fallback to whole-text tokenization was needed
    assert "Current Observation:\n" in builder.tokenize.cache  # a line that comes back every turn


def test_a_tokenizer_that_splits_differently_falls_back_to_whole_text(models) -> None:
    builder = PromptBuilder(models.tokenizer, "action", max_prompt_tokens=1000)
    builder.tokenize.added = re.compile("(ar)")  # cuts inside words, where pieces tokenize differently
    with pytest.warns(UserWarning, match="tokenized whole"):
        ids = builder("Walk to the target T.", "Line: @..T far")
    assert not builder.tokenize.piecewise
    assert ids == whole_text_ids(builder, "Walk to the target T.", "Line: @..T far")


def test_packed_forward_matches_unpadded_rows(models) -> None:
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13]]
    responses = [[20, 21, 22, 23], [24]]
    batch = collate(prompts, responses, models.tokenizer.pad_token_id)
    assert batch.input_ids.shape == (2, 10) and batch.prompt_len == 6
    with torch.no_grad():
        logprobs, entropy = actor_logprobs(models.actor, batch, with_entropy=True)
        values = critic_values(models.critic, batch)
        for i in range(2):
            ids = torch.tensor([prompts[i] + responses[i]])
            logits = models.actor(input_ids=ids).logits[0].log_softmax(-1)
            p = len(prompts[i])
            expected = logits[p - 1 : p - 1 + len(responses[i])].gather(
                -1, torch.tensor(responses[i])[:, None]
            )[:, 0]
            torch.testing.assert_close(logprobs[i, : len(responses[i])], expected, atol=1e-5, rtol=0)
            value_alone = models.critic(input_ids=ids).logits[0, p - 1 :, 0]
            torch.testing.assert_close(values[i, : len(responses[i]) + 1], value_alone, atol=1e-5, rtol=0)
    assert torch.isfinite(entropy).all() and (entropy > 0).all()


def test_a_prefix_every_row_shares_runs_once_with_the_same_scores_and_gradients(models) -> None:
    """``ppo.share_prompt_prefix``: the instruction every prompt starts with runs once per micro-batch; log-probs,
    entropy, values and the gradients they send back are those of the rows run whole."""
    head = list(range(5, 25))  # 20 shared tokens
    prompts = [head + [30, 31, 32], head + [33], head + [34, 35, 36, 37, 38]]
    responses = [[40, 41, 42], [43], [44, 45]]
    pad = models.tokenizer.pad_token_id
    whole = collate(prompts, responses, pad)
    split = collate(prompts, responses, pad, share_prefix=True)
    assert whole.prefix_ids is None and split.prefix_ids is not None and split.prefix_ids.tolist() == head
    assert split.input_ids.shape[1] == whole.input_ids.shape[1] - len(head)
    assert collate(prompts[:1], responses[:1], pad, share_prefix=True).prefix_ids is None  # nothing to share
    results = {}
    for name, batch in (("whole", whole), ("split", split)):
        models.actor.zero_grad()
        models.critic.zero_grad()
        logprobs, entropy = actor_logprobs(models.actor, batch, temperature=0.8, with_entropy=True)
        values = critic_values(models.critic, batch)
        mask = batch.response_mask
        ((logprobs * mask).sum() + (entropy * mask).sum() + values[:, :-1].sum()).backward()
        grads = [
            p.grad.clone()
            for m in (models.actor, models.critic)
            for p in m.parameters()
            if p.grad is not None
        ]
        results[name] = (logprobs * mask, entropy * mask, values, grads)
    for a, b in zip(results["whole"][:3], results["split"][:3], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert len(results["whole"][3]) == len(results["split"][3]) > 0
    for a, b in zip(results["whole"][3], results["split"][3], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    models.actor.zero_grad()
    models.critic.zero_grad()


@pytest.mark.parametrize("share_prefix", [False, True])
def test_prompts_padded_to_a_multiple_score_as_padded_to_the_longest(models, share_prefix: bool) -> None:
    """``ppo.pad_to_multiple``: extra left padding (masked) changes no log-prob, entropy or value, only the shape."""
    head = list(range(5, 25))
    prompts = [head + [30, 31, 32], head + [33], head + [34, 35, 36, 37, 38]]
    responses = [[40, 41, 42], [43], [44, 45]]
    pad = models.tokenizer.pad_token_id
    plain = collate(prompts, responses, pad, share_prefix)
    padded = collate(prompts, responses, pad, share_prefix, pad_multiple=16)
    assert padded.prompt_len % 16 == 0 and padded.prompt_len > plain.prompt_len
    assert padded.response_len == plain.response_len
    with torch.no_grad():
        for model_out in (
            lambda b: actor_logprobs(models.actor, b, temperature=0.8, with_entropy=True),
            lambda b: (critic_values(models.critic, b),),
        ):
            for a, b in zip(model_out(plain), model_out(padded), strict=True):
                torch.testing.assert_close(a * plain.response_mask if a.shape == plain.response_mask.shape else a,
                                           b * padded.response_mask if b.shape == padded.response_mask.shape else b,
                                           atol=1e-5, rtol=0)  # fmt: skip


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_answers_sharing_a_prompt_score_as_they_do_alone(models, temperature: float) -> None:
    """A played turn and its branches repeat one prompt: running it once gives every answer its own log-probs."""
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13]]
    responses = [[20, 21, 22, 23], [24], [25, 26], [27], [28, 29, 30]]
    owner = [0, 0, 1, 1, 0]
    pad = models.tokenizer.pad_token_id
    with torch.no_grad():
        shared = shared_prompt_logprobs(
            models.actor, collate_shared(prompts, responses, owner, pad), temperature
        )
        batch = collate([prompts[o] for o in owner], responses, pad)
        alone = actor_logprobs(models.actor, batch, temperature)[0] * batch.response_mask
    assert shared.shape == (5, 4)
    torch.testing.assert_close(shared, alone, atol=1e-5, rtol=0)
    with torch.no_grad():  # one-token answers only: the second pass feeds a token whose output is unused
        ones = shared_prompt_logprobs(models.actor, collate_shared(prompts, [[24], [27]], [1, 0], pad))
        expected, _ = actor_logprobs(models.actor, collate([prompts[1], prompts[0]], [[24], [27]], pad))
    torch.testing.assert_close(ones, expected, atol=1e-5, rtol=0)


def test_sampler_logprobs_match_the_actor_and_greedy_is_deterministic(models) -> None:
    sampler = TransformersSampler(
        models.actor, models.tokenizer, max_new_tokens=6, temperature=0.7, top_p=1.0
    )
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]
    torch.manual_seed(0)
    samples = sampler.generate(prompts)
    assert len(samples.token_ids) == 3 and all(1 <= len(ids) <= 6 for ids in samples.token_ids)
    batch = collate(prompts, samples.token_ids, models.tokenizer.pad_token_id)
    with torch.no_grad():
        actor, _ = actor_logprobs(models.actor, batch, temperature=0.7)
    for i, ids in enumerate(samples.token_ids):
        torch.testing.assert_close(torch.tensor(samples.logprobs[i]), actor[i, : len(ids)], atol=1e-4, rtol=0)
        assert samples.texts[i] == models.tokenizer.decode(ids, skip_special_tokens=True)
    torch.manual_seed(0)
    assert sampler.generate(prompts).token_ids == samples.token_ids  # seeded by torch's RNG
    greedy = sampler.generate(prompts, greedy=True)
    assert sampler.generate(prompts, greedy=True).token_ids == greedy.token_ids
    with torch.no_grad():
        logits = models.actor(input_ids=torch.tensor([prompts[2]])).logits[0, -1]
    assert greedy.token_ids[2][0] == int(logits.argmax())
    chunked = TransformersSampler(models.actor, models.tokenizer, max_new_tokens=6, batch_size=2)
    assert chunked.generate(prompts, greedy=True).token_ids == greedy.token_ids


def test_a_shared_prompt_prefix_is_prefilled_once_with_the_same_result(models) -> None:
    """Prompts that begin alike (system message, worked example) share one prefill of that prefix; greedy
    answers and sampled log-probs are those of the ordinary left-padded batch, and the log-probs still match
    the learner's scoring pass."""
    prefix = list(range(5, 30))  # 25 shared tokens, above MIN_SHARED_PREFIX
    prompts = [prefix + [40, 41, 42], prefix + [43], prefix + [44, 45, 46, 47, 48, 49]]
    assert shared_prefix_length(prompts) == 25
    assert shared_prefix_length([prefix, prefix]) == 24  # each row keeps a token of its own
    assert shared_prefix_length([[1, 2], [3, 4]]) == 0 and shared_prefix_length([prefix]) == 0
    make = lambda share: TransformersSampler(  # noqa: E731
        models.actor, models.tokenizer, max_new_tokens=6, temperature=0.7, share_prefix=share
    )
    shared, plain = make(True), make(False)
    assert shared.generate(prompts, greedy=True).token_ids == plain.generate(prompts, greedy=True).token_ids
    torch.manual_seed(3)
    a = shared.generate(prompts)
    torch.manual_seed(3)
    b = plain.generate(prompts)
    assert a.token_ids == b.token_ids
    batch = collate(prompts, a.token_ids, models.tokenizer.pad_token_id)
    with torch.no_grad():
        actor, _ = actor_logprobs(models.actor, batch, temperature=0.7)
    for i, ids in enumerate(a.token_ids):
        torch.testing.assert_close(
            torch.tensor(a.logprobs[i]), torch.tensor(b.logprobs[i]), atol=1e-5, rtol=0
        )
        torch.testing.assert_close(torch.tensor(a.logprobs[i]), actor[i, : len(ids)], atol=1e-4, rtol=0)


def test_a_rollouts_turns_reuse_the_shared_prefix_until_the_weights_change(models) -> None:
    """A rollout's turns begin with the same instruction: the second call with that prefix runs only the rows'
    own tokens and answers exactly as a fresh sampler does; after the weights move, update_weights drops the
    kept prefix, so the answers are the new weights' and not the old prefix's."""
    prefix = list(range(5, 30))
    first = [prefix + [40, 41], prefix + [43], prefix + [44, 45, 46]]
    second = [prefix + [47], prefix + [48, 49], prefix + [50, 51, 52]]
    fed: list[int] = []
    embed = models.actor.get_input_embeddings()
    hook = embed.register_forward_hook(lambda _m, args, _out: fed.append(args[0].shape[-1]))
    make = lambda: TransformersSampler(models.actor, models.tokenizer, max_new_tokens=4, temperature=0.7)  # noqa: E731
    sampler = make()
    try:
        sampler.generate(first, greedy=True)
        assert fed[0] == len(prefix)  # the prefix, one row
        fed.clear()
        torch.manual_seed(5)
        kept = sampler.generate(second)
        assert fed[0] == 3 and len(prefix) not in fed  # the rows' own tokens only: the prefix was kept
    finally:
        hook.remove()
    torch.manual_seed(5)
    fresh = make().generate(second)
    assert kept.token_ids == fresh.token_ids and kept.logprobs == fresh.logprobs

    saved = {name: tensor.clone() for name, tensor in models.actor.state_dict().items()}
    try:
        with torch.no_grad():  # as an optimiser step would: the same tensors, new values
            for weight in models.actor.parameters():
                weight.mul_(1.5)
        sampler.update_weights()
        torch.manual_seed(5)
        moved = sampler.generate(second)
        torch.manual_seed(5)
        assert moved.logprobs == make().generate(second).logprobs != kept.logprobs
    finally:
        models.actor.load_state_dict(saved)


def test_a_response_stops_at_eos_and_keeps_it(models) -> None:
    eos = models.tokenizer.eos_token_id

    def prefer_eos(module, args, output):  # the same model, steered to end at once
        output.logits[..., eos] += 100.0
        return output

    handle = models.actor.register_forward_hook(prefer_eos)
    try:
        samples = TransformersSampler(models.actor, models.tokenizer, max_new_tokens=8).generate(
            [[5, 6], [7]]
        )
    finally:
        handle.remove()
    assert samples.token_ids == [[eos], [eos]] and samples.texts == ["", ""]
    assert samples.logprobs[0][0] == pytest.approx(0.0, abs=1e-4)


def test_value_head_critic(tmp_path: Path, models) -> None:
    path = tmp_path / "m"
    models.actor.save_pretrained(path)
    models.tokenizer.save_pretrained(path)
    other = load_models(str(path), critic_head="value_head", with_reference=False)
    batch = collate([[5, 6, 7]], [[8, 9]], models.tokenizer.pad_token_id)
    values = critic_values(other.critic, batch)
    assert values.shape == (1, 3)
    values.sum().backward()
    assert other.critic.score.weight.grad is not None
