"""Samplers (floor 2): prompt token ids in, response token ids, text and log-probs out.

:mod:`verlog.sampling.base` holds the :class:`Sampler` interface, the ``transformers`` sampler and the backend
choice; :mod:`verlog.sampling.constrain` the answers restricted to the valid actions (``sampling.constrain``);
:mod:`verlog.sampling.vllm` the vLLM engine (imported only when asked for, since it imports vLLM).
"""

from verlog.sampling.base import (
    INSTALL_HINT,
    Sampler,
    SamplerError,
    Samples,
    TransformersSampler,
    checkpoint_bytes,
    eos_token_ids,
    select_backend,
    vllm_unavailable,
)
from verlog.sampling.constrain import ActionConstraint, ConstraintError, valid_actions

__all__ = [
    "INSTALL_HINT",
    "ActionConstraint",
    "ConstraintError",
    "Sampler",
    "SamplerError",
    "Samples",
    "TransformersSampler",
    "checkpoint_bytes",
    "eos_token_ids",
    "select_backend",
    "valid_actions",
    "vllm_unavailable",
]
