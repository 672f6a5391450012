"""The torch_lm example's model and data: a small decoder-only transformer
(GPT-style: pre-norm blocks of causal self-attention and an MLP) that models
text one character at a time, on the fortune cookies Debian's `fortunes`
package ships in /usr/share/games/fortunes (offline, the same on every
machine that has the package).

Shared by train.py and bench/torch_lm/ (which must run the same model).
"""

import math
import os
import re

import torch
import torch.nn.functional as F

FORTUNES_DIR = "/usr/share/games/fortunes"
# Characters outside printable ASCII (and newline) are dropped, so the
# vocabulary is small and the same whatever the locale.
_DROPPED = re.compile(r"[^\x20-\x7e\n]")


class CorpusMissing(RuntimeError):
    """The fortunes data is not installed."""


def load_corpus(directory=FORTUNES_DIR):
    """Every fortune file of `directory` (the plain-text ones, not the .dat
    indexes nor the .u8 links), in name order, as one string; the '%' lines
    that separate fortunes become blank lines."""
    if not os.path.isdir(directory):
        raise CorpusMissing(
            f"{directory} does not exist: install Debian's fortunes package "
            "(tools/setup.sh does)")
    pieces = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if "." in name or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().replace("\t", " ")
        lines = ["" if line == "%" else line for line in text.split("\n")]
        pieces.append(_DROPPED.sub("", "\n".join(lines)))
    if not pieces:
        raise CorpusMissing(f"no fortune files in {directory}: install "
                            "Debian's fortunes package (tools/setup.sh does)")
    return "\n".join(pieces)


class Vocabulary:
    """Characters <-> ids: every character the corpus uses, sorted."""

    def __init__(self, text):
        self.chars = sorted(set(text))
        if len(self.chars) > 256:
            raise ValueError(f"{len(self.chars)} characters: more than a "
                             "byte holds")
        # ASCII code -> id, so that encoding is one bytes.translate: no
        # large temporaries (the benchmark measures peak memory).
        table = bytearray(256)
        for i, c in enumerate(self.chars):
            table[ord(c)] = i
        self._table = bytes(table)

    def __len__(self):
        return len(self.chars)

    def encode(self, text):
        """`text` as a uint8 tensor of ids (model.batch widens windows)."""
        ids = bytearray(text.encode("ascii").translate(self._table))
        return torch.frombuffer(ids, dtype=torch.uint8)

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


def split_corpus(ids, validation_fraction=0.05):
    """The corpus' ids as (train, validation): the last fraction held out."""
    cut = int(len(ids) * (1 - validation_fraction))
    return ids[:cut], ids[cut:]


def batch(ids, seed, rank, world_size, step, batch_size, context):
    """Rank `rank`'s (inputs, targets) for `step`: its slice of a global
    batch of random windows drawn from (seed, step) alone, so every rank
    agrees without talking and the union over ranks is the batch one process
    would take. Targets are the inputs shifted by one character."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(len(ids) - context - 1,
                           (batch_size * world_size,), generator=generator)
    starts = starts[rank * batch_size:(rank + 1) * batch_size]
    offsets = torch.arange(context + 1)
    windows = ids[starts.unsqueeze(1) + offsets].long()
    return windows[:, :-1], windows[:, 1:]


def next_character_loss(logits, targets):
    """Mean cross-entropy of (batch, time, vocabulary) logits against the
    next characters (a DDP-wrapped model's forward output goes here too)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           targets.reshape(-1))


class CausalSelfAttention(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        if width % heads != 0:
            raise ValueError(f"width {width} is not a multiple of heads "
                             f"{heads}")
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x):
        b, t, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        # (b, heads, t, head_width)
        q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2)
                   for y in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        # Causal: position i sees positions <= i. Built per call rather than
        # kept as a buffer, so DDP has no buffer to broadcast every step.
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, width))


class Block(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
            torch.nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class CharTransformer(torch.nn.Module):
    """Decoder-only transformer over characters: token and learned position
    embeddings, `layers` pre-norm blocks, a final LayerNorm and a linear head
    to the vocabulary's logits."""

    def __init__(self, vocab_size, context=64, width=128, layers=4, heads=4):
        super().__init__()
        self.context = context
        self.token_embedding = torch.nn.Embedding(vocab_size, width)
        self.position_embedding = torch.nn.Embedding(context, width)
        self.blocks = torch.nn.ModuleList(
            Block(width, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab_size)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def loss(self, inputs, targets):
        return next_character_loss(self(inputs), targets)

    @torch.no_grad()
    def generate(self, prompt_ids, length, generator, temperature=0.8):
        """`length` characters sampled after `prompt_ids` (1-D), on the
        model's device, drawn on the CPU with `generator` (a CPU one)."""
        device = self.head.weight.device
        ids = prompt_ids.long().unsqueeze(0).to(device)
        for _ in range(length):
            logits = self(ids[:, -self.context:])[0, -1] / temperature
            next_id = torch.multinomial(F.softmax(logits, dim=-1).cpu(), 1,
                                        generator=generator)
            ids = torch.cat([ids, next_id.to(device).unsqueeze(0)], dim=1)
        return ids[0, len(prompt_ids):].tolist()


# AdamW without weight decay on biases and LayerNorm gains (the GPT recipe);
# as pshard's param-group globs and as torch param groups, for the peers.
NO_DECAY_PATTERNS = ["*.bias", "*ln_*.weight"]


def optimizer_spec(lr, weight_decay):
    """pshard's OptimizerSpec (JSON mapping) for this model."""
    return {
        "kind": "ADAMW",
        "hyper_parameters": {"lr": lr, "weight_decay": weight_decay,
                             "betas": [0.9, 0.95]},
        "param_groups": [{"params": NO_DECAY_PATTERNS,
                          "hyper_parameters": {"weight_decay": 0}}],
    }


def torch_param_groups(model, weight_decay):
    """The same split as torch.optim param groups (for the DDP peers of
    bench/torch_lm, which must run the same optimizer)."""
    import fnmatch
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        skip = any(fnmatch.fnmatchcase(name, pattern)
                   for pattern in NO_DECAY_PATTERNS)
        (no_decay if skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]
