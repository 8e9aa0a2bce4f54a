"""Convert a GGUF file into an ordinary Hugging Face folder, once, and check the result.

transformers reads GGUF (``from_pretrained(folder, gguf_file=name)``, dequantised to float) but, from 5.2x
on, refuses to ``save_pretrained`` such a model ("quantized with gguf, not serializable"). So the weights
are copied into a plain model built from the same config, which saves like any other. The folder is written
under a temporary name and renamed into place only after three checks pass:

- it reloads with plain ``from_pretrained(folder)`` (model and tokenizer);
- the chat template survived and is the GGUF's own;
- a short greedy generation from a chat prompt is token for token the same before and after.

``verlog-model.json`` in the folder records where it came from and what was checked.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from verlog.extras import require
from verlog.quiet import native_output

__all__ = ["CHECK_PROMPT", "CONVERSION_NEEDS", "ConversionError", "convert_gguf", "require_conversion"]

#: What reading a GGUF file takes (transformers' GGUF loader imports ``gguf``): all in the ``train`` extra.
CONVERSION_NEEDS = ("torch", "transformers", "gguf")


def require_conversion() -> None:
    """One line naming the install command when a package the conversion imports is missing."""
    require("converting a GGUF model", *CONVERSION_NEEDS)


#: The chat used for the before/after generation check.
CHECK_PROMPT = [{"role": "user", "content": "Name one colour of the rainbow."}]
CHECK_TOKENS = 20
MANIFEST = "verlog-model.json"


class ConversionError(RuntimeError):
    """The converted folder failed one of its checks; nothing was put in place."""


def convert_gguf(gguf_file: str | Path, out: str | Path, *, source: dict[str, Any] | None = None) -> Path:
    """Write ``gguf_file`` as a float32 Hugging Face folder at ``out`` (atomically) and return ``out``."""
    require_conversion()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-tensor bars for a one-off step say nothing useful
    gguf_file, out = Path(gguf_file), Path(out)
    folder, name = str(gguf_file.parent), gguf_file.name
    clock = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if not getattr(tokenizer, "chat_template", None):
        raise ConversionError(f"{gguf_file} carries no chat template; verlog prompts need one")
    with native_output(f"reading {gguf_file}"):  # transformers' own per-tensor tqdm bar, while quiet
        quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or {})
    if unexpected or [k for k in missing if k not in tied]:
        raise ConversionError(f"{gguf_file}: weights do not match the config ({missing=}, {unexpected=})")
    model.generation_config = quantised.generation_config
    before = _greedy(quantised, tokenizer)
    del quantised

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    tmp.chmod(0o755)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        del model
        reloaded_tokenizer = AutoTokenizer.from_pretrained(tmp)
        if reloaded_tokenizer.chat_template != tokenizer.chat_template:
            raise ConversionError("the chat template did not survive save_pretrained")
        reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        after = _greedy(reloaded, reloaded_tokenizer)
        if after != before:
            raise ConversionError(
                f"greedy output changed in conversion: {tokenizer.decode(before)!r} -> "
                f"{reloaded_tokenizer.decode(after)!r}"
            )
        manifest = {
            "source": source or {"gguf": str(gguf_file)},
            "dtype": "float32",
            "checks": {
                "reloads_with_from_pretrained": True,
                "chat_template_kept": True,
                "greedy_tokens_identical": len(after),
                "greedy_text": reloaded_tokenizer.decode(after, skip_special_tokens=True),
            },
            "seconds": round(time.perf_counter() - clock, 1),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, out)
    except OSError:
        if not (out / MANIFEST).exists():  # another process finished first: fine, else a real error
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _greedy(model: Any, tokenizer: Any) -> list[int]:
    import torch

    ids = tokenizer.apply_chat_template(CHECK_PROMPT, add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if not torch.is_tensor(ids) else ids
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=CHECK_TOKENS,
            pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        )
    return out[0, ids.shape[1] :].tolist()
