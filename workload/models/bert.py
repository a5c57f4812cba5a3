"""BERT-base as Hugging Face defines it (transformers BertModel for
bert-base-uncased, with the pooler; no pre-training heads).

12 encoder blocks, hidden 768, 12 heads, FFN 3072, vocabulary 30,522,
512 positions: 109,482,240 parameters (the published count of
bert-base-uncased), 199 tensors.

Layer = the embeddings; then each block's attention sub-layer (Q, K, V,
output projection, LayerNorm) and its feed-forward sub-layer (two linear
layers, LayerNorm); then the pooler: 26 layers. Finer than a block so that
a block's two halves, which backward finishes at different times, are
separate priorities; coarser than a module so that a LayerNorm's 3 KB never
is a layer of its own. A sample is one sequence of ``SEQ_LEN`` tokens.
"""
from __future__ import annotations

from workload.compute import attention_flops, linear_flops
from workload.models.base import LayerSpec, ModelProfile, build_profile

BATCH_SIZE = 32         # sequences per worker (not from the paper, which trains no transformer)
SEQ_LEN = 128           # BERT pre-training phase 1
HIDDEN, FFN, BLOCKS, VOCAB, POSITIONS, TYPES = 768, 3072, 12, 30522, 512, 2


def _linear(spec: LayerSpec, name: str, n_in: int, n_out: int, tokens: int) -> LayerSpec:
    spec.fwd_flops += linear_flops(n_in, n_out, tokens)
    return spec.add(f"{name}.weight", n_out, n_in).add(f"{name}.bias", n_out)


def specs(seq_len: int = SEQ_LEN) -> list[LayerSpec]:
    emb = (LayerSpec("embeddings")
           .add("embeddings.word_embeddings.weight", VOCAB, HIDDEN)
           .add("embeddings.position_embeddings.weight", POSITIONS, HIDDEN)
           .add("embeddings.token_type_embeddings.weight", TYPES, HIDDEN)
           .add("embeddings.LayerNorm.weight", HIDDEN).add("embeddings.LayerNorm.bias", HIDDEN))
    out = [emb]
    for i in range(BLOCKS):
        p = f"encoder.layer.{i}"
        att = LayerSpec(f"{p}.attention", fwd_flops=attention_flops(seq_len, HIDDEN))
        for proj in ("query", "key", "value"):
            _linear(att, f"{p}.attention.self.{proj}", HIDDEN, HIDDEN, seq_len)
        _linear(att, f"{p}.attention.output.dense", HIDDEN, HIDDEN, seq_len)
        att.add(f"{p}.attention.output.LayerNorm.weight", HIDDEN)
        att.add(f"{p}.attention.output.LayerNorm.bias", HIDDEN)
        ffn = LayerSpec(f"{p}.ffn")
        _linear(ffn, f"{p}.intermediate.dense", HIDDEN, FFN, seq_len)
        _linear(ffn, f"{p}.output.dense", FFN, HIDDEN, seq_len)
        ffn.add(f"{p}.output.LayerNorm.weight", HIDDEN).add(f"{p}.output.LayerNorm.bias", HIDDEN)
        out += [att, ffn]
    out.append(_linear(LayerSpec("pooler"), "pooler.dense", HIDDEN, HIDDEN, 1))  # [CLS] only
    return out


def profile(*, batch_size: int | None = None, gpu: str = "V100", gpu_speed: float = 1.0) -> ModelProfile:
    return build_profile("bert-base", specs(), batch_size=batch_size or BATCH_SIZE, gpu=gpu,
                         gpu_speed=gpu_speed, sample_unit=f"sequences of {SEQ_LEN} tokens",
                         notes="Hugging Face BertModel bert-base-uncased with pooler; "
                               "layer = embeddings | attention sub-layer | FFN sub-layer | pooler")
