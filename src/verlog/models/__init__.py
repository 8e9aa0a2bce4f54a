"""Where models come from and how they are loaded (floor 2, used by the learner and the evaluation alike).

``sources`` resolves ``model.path``/``model.build`` to a Hugging Face folder (a tiny model built locally, a
model shipped in a registry package, a local ``.gguf``); ``loading`` loads actor, critic and reference from
it; ``value_head`` is the critic head for any backbone; ``weights`` reads weights back as HF tensors;
``prompts`` and ``piecewise`` turn env text into prompt ids through the tokenizer's chat template.
"""
