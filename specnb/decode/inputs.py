"""Prompts into token ids, the way every loop and measurement feeds them."""

from __future__ import annotations

from specnb.core.padding import left_pad_ids


def encode_prompts(tokenizer, prompts: list[str], chat: bool = True, device=None):
    """Tokenize prompts, each as a user chat turn when the tokenizer has a template; LEFT padded.

    Returns ``(input_ids [B, S], attention_mask [B, S])``. Left padding keeps every row's last
    real token in the last column, which the decoding loops rely on.
    """
    rows = []
    for prompt in prompts:
        if chat and getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                 add_generation_prompt=True, tokenize=False)
            rows.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        else:
            rows.append(tokenizer(prompt)["input_ids"])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    input_ids, attention_mask = left_pad_ids(rows, pad)
    return input_ids.to(device or "cpu"), attention_mask.to(device or "cpu")
