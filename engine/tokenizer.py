"""Tokenizers built from GGUF metadata through transformers (slow, so cached on disk), and chat
prompts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import BubblelabError
from .gguf_loader import building, gguf_cache_dir

if TYPE_CHECKING:  # transformers takes seconds to import: only where a tokenizer is built
    from transformers import PreTrainedTokenizerFast


def load_gguf_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """The GGUF's tokenizer (vocab, merges, special tokens, chat template), converted once and
    cached."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    out = gguf_cache_dir(path) / "tokenizer"
    if not (out / "tokenizer.json").exists():
        with building(out) as scratch:
            try:
                tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            except Exception as e:
                raise BubblelabError(
                    f"cannot build a tokenizer from {path}: {str(e).splitlines()[0]}"
                ) from None
            tokenizer.save_pretrained(scratch)
    return PreTrainedTokenizerFast.from_pretrained(out)


def chat_prompt_ids(tokenizer: PreTrainedTokenizerFast, user_text: str) -> list[int]:
    """Token ids of one user turn in the model's chat template, up to where the assistant's answer
    starts."""
    if not tokenizer.chat_template:
        raise BubblelabError("this tokenizer has no chat template")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], add_generation_prompt=True, tokenize=False
    )
    # The template already holds the special tokens.
    return tokenizer.encode(text, add_special_tokens=False)
