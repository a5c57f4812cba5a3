"""GPT-2 small as Hugging Face defines it (transformers GPT2Model / the
GPT2LMHeadModel whose LM head is tied to the token embedding ``wte``).

12 blocks, hidden 768, vocabulary 50,257, 1,024 positions: 124,439,808
parameters (the tied LM head counted once, as published), 148 tensors;
names are GPT2Model's (``h.0.attn.c_attn.weight``; GPT-2's Conv1D stores
weights as (in, out)).

Layer = the embeddings (wte, wpe); then each block's attention sub-layer
(ln_1, c_attn, c_proj) and MLP sub-layer (ln_2, c_fc, c_proj); then ln_f,
which also carries the tied LM head's compute: 26 layers. ``wte``'s gradient
is complete only when the embedding's backward adds its part, i.e. last,
which is where layer 0 puts it. A sample is one sequence of ``SEQ_LEN`` tokens.
"""
from __future__ import annotations

from workload.compute import attention_flops, linear_flops
from workload.models.base import LayerSpec, ModelProfile, build_profile

BATCH_SIZE = 8          # sequences per worker (not from the paper)
SEQ_LEN = 1024          # GPT-2's context
HIDDEN, MLP, BLOCKS, VOCAB, POSITIONS = 768, 3072, 12, 50257, 1024


def _conv1d(spec: LayerSpec, name: str, n_in: int, n_out: int, tokens: int) -> LayerSpec:
    spec.fwd_flops += linear_flops(n_in, n_out, tokens)
    return spec.add(f"{name}.weight", n_in, n_out).add(f"{name}.bias", n_out)


def specs(seq_len: int = SEQ_LEN) -> list[LayerSpec]:
    out = [LayerSpec("embeddings").add("wte.weight", VOCAB, HIDDEN).add("wpe.weight", POSITIONS, HIDDEN)]
    for i in range(BLOCKS):
        p = f"h.{i}"
        att = LayerSpec(f"{p}.attn", fwd_flops=attention_flops(seq_len, HIDDEN))
        att.add(f"{p}.ln_1.weight", HIDDEN).add(f"{p}.ln_1.bias", HIDDEN)
        _conv1d(att, f"{p}.attn.c_attn", HIDDEN, 3 * HIDDEN, seq_len)
        _conv1d(att, f"{p}.attn.c_proj", HIDDEN, HIDDEN, seq_len)
        mlp = LayerSpec(f"{p}.mlp")
        mlp.add(f"{p}.ln_2.weight", HIDDEN).add(f"{p}.ln_2.bias", HIDDEN)
        _conv1d(mlp, f"{p}.mlp.c_fc", HIDDEN, MLP, seq_len)
        _conv1d(mlp, f"{p}.mlp.c_proj", MLP, HIDDEN, seq_len)
        out += [att, mlp]
    head = LayerSpec("ln_f", fwd_flops=linear_flops(HIDDEN, VOCAB, seq_len))  # tied LM head
    out.append(head.add("ln_f.weight", HIDDEN).add("ln_f.bias", HIDDEN))
    return out


def profile(*, batch_size: int | None = None, gpu: str = "V100", gpu_speed: float = 1.0) -> ModelProfile:
    return build_profile("gpt2-small", specs(), batch_size=batch_size or BATCH_SIZE, gpu=gpu,
                         gpu_speed=gpu_speed, sample_unit=f"sequences of {SEQ_LEN} tokens",
                         notes="Hugging Face GPT2Model (gpt2), LM head tied to wte; "
                               "layer = embeddings | attention sub-layer | MLP sub-layer | ln_f + head")
