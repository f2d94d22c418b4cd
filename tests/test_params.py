"""Per-rank parameter counts under TP, EP and ETP, derived by hand from the shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppb_core.config.hf import read_hf_config, spec_from_hf
from ppb_core.model.kinds import body_kind, head_kind, tail_kind
from ppb_core.model.params import body_params, head_params, tail_params

HF = Path(__file__).resolve().parents[1] / "configs" / "hf"


@pytest.fixture(scope="module")
def llama():
    return read_hf_config(HF / "llama3-8b.json")


def test_llama3_8b_layer_whole_and_over_two_ranks(llama):
    kind = body_kind(llama, 0)
    # tp 1: q 4096·4096 + k, v 4096·1024 each + o 4096·4096 = 41,943,040; MLP 3·4096·14336 = 176,160,768;
    # two RMSNorm weights 2·4096 = 8,192. Sum 218,112,000.
    assert body_params(kind).total == 218_112_000
    # tp 2: 16 q heads and 4 kv heads per rank: q 4096·2048 = 8,388,608, k and v 4096·512 = 2,097,152
    # each, o 8,388,608 -> 20,971,520; MLP 3·4096·7168 = 88,080,384; norms replicated 8,192.
    assert body_params(kind, tp=2).total == 20_971_520 + 88_080_384 + 8_192


def test_kv_heads_fewer_than_ranks_are_replicated(llama):
    kind = body_kind(llama, 0)
    # tp 16: 2 q heads per rank (q and o 4096·256 each), 8 kv heads over 16 ranks -> one head per rank
    # (k and v 4096·128 each); MLP 3·4096·896; norms 8,192.
    expected = 2 * 4096 * 256 + 2 * 4096 * 128 + 3 * 4096 * 896 + 8_192
    assert body_params(kind, tp=16).total == expected


def test_vocab_parallel_head_and_tied_tail(llama):
    head = head_kind(llama, llama.vocab_size)
    # 128256 / 2 = 64128 rows of 4096.
    assert head_params(head, tp=2).total == 64_128 * 4096
    tied = tail_kind(llama.model_copy(update={"tied_embeddings": True}), llama.vocab_size)
    # One stage: the HEAD holds the shared table, the TAIL only the final norm.
    assert tail_params(tied, tp=2, pp=1).total == 4096
    # Across stages the last one keeps its own copy of the table.
    assert tail_params(tied, tp=2, pp=4).total == 4096 + 64_128 * 4096
    untied = tail_kind(llama, llama.vocab_size)
    assert tail_params(untied, tp=2, pp=1).total == 4096 + 64_128 * 4096


def test_mixtral_experts_over_ep_and_etp():
    mixtral = read_hf_config(HF / "mixtral-8x7b.json")
    kind = body_kind(mixtral, 0)
    moe = body_params(kind, tp=2, ep=8, etp=1)
    # One of 8 experts per rank, whole (etp 1): 3·4096·14336 = 176,160,768.
    assert moe.expert == 176_160_768
    # Attention as Llama-3-8B's at tp 2 (20,971,520) + norms 8,192 + router 4096·8 = 32,768 (replicated).
    assert moe.non_expert == 20_971_520 + 8_192 + 32_768
    # ep 4, etp 2: two experts per rank, each half as wide: 2·3·4096·7168.
    assert body_params(kind, tp=2, ep=4, etp=2).expert == 2 * 3 * 4096 * 7168


def test_mla_without_latent_norms_has_no_norm_weights():
    # Megatron's MLA without --qk-layernorm has no latent norms (gpt_layer_specs.py d98e8a64): DeepSeek-V3's
    # layer less the q norm's 1536 and the kv norm's 512 weights
    deepseek = read_hf_config(HF / "deepseek-v3.json")
    plain = deepseek.model_copy(update={"mla_latent_norms": False})
    assert body_params(body_kind(deepseek, 0), tp=4).total - body_params(body_kind(plain, 0), tp=4).total == 2048


def test_deepseek_mla_attention_over_four_ranks():
    deepseek = read_hf_config(HF / "deepseek-v3.json")
    kind = body_kind(deepseek, 0)
    # Replicated: q_a 7168·1536 + its norm 1536 + kv_a 7168·(512+64) + its norm 512 = 15,140,864.
    # Column/row-parallel over 4 ranks (32 heads each): q_b 1536·32·192 = 9,437,184;
    # kv_b 512·32·(128+128) = 4,194,304; o 32·128·7168 = 29,360,128.
    attention_tp4 = 15_140_864 + 9_437_184 + 4_194_304 + 29_360_128
    dense_mlp_tp4 = 3 * 7168 * (18432 // 4)
    assert body_params(kind, tp=4).total == attention_tp4 + dense_mlp_tp4 + 2 * 7168
    moe = body_kind(deepseek, 3)
    counted = body_params(moe, tp=1, ep=64, etp=1)
    # 256 experts over 64 ranks: 4 per rank, 3·7168·2048 each.
    assert counted.expert == 4 * 3 * 7168 * 2048
    # Router 7168·256 and one shared expert 3·7168·2048, plus attention and norms.
    assert counted.non_expert == 187_107_328 + 2 * 7168 + 7168 * 256 + 3 * 7168 * 2048


def test_gpt_oss_120b_layer_and_model_count():
    """GPT-OSS 120B (configs/hf/gpt-oss-120b.json): h 2880, 64 query heads and 8 key/value heads of 64,
    q/k/v/o biases, a sink logit per head, 128 experts of 2880 with biases, a router with a bias."""
    spec = read_hf_config(HF / "gpt-oss-120b.json")
    kind = body_kind(spec, 0)
    # attention: q 2880·4096 + k, v 2880·512 each = 14,745,600 and their biases 5,120; o 4096·2880 =
    # 11,796,480 and its bias 2,880; sinks 64; two RMSNorms 5,760 -> 26,555,904. Router 2880·128 + 128 =
    # 368,768. Non-expert 26,924,672.
    params = body_params(kind)
    assert params.non_expert == 26_924_672
    # each expert: gate_up 2880·5760 + down 2880·2880 = 24,883,200 and biases 5,760 + 2,880 -> 24,891,840;
    # 128 of them 3,186,155,520.
    assert params.expert == 3_186_155_520
    # tp 2, ep 8: 32 query heads (q, o 2880·2048), 4 kv heads (k, v 2880·256), column biases 2,560, o's bias
    # whole 2,880, 32 sinks, norms 5,760 -> 13,282,272, router 368,768; 16 whole experts per rank.
    split = body_params(kind, tp=2, ep=8)
    assert (split.non_expert, split.expert) == (13_651_040, 16 * 24_891_840)
    # The model: 36 such layers + embedding and untied head 2·201,088·2880 + final norm 2,880 =
    # 116,829,156,672: OpenAI's gpt-oss model card (Aug 2025, Table 1) gives 116.83B for gpt-oss-120b.
    total = head_params(head_kind(spec, spec.vocab_size)).total + tail_params(tail_kind(spec, spec.vocab_size)).total
    total += sum(body_params(body_kind(spec, i)).total for i in range(spec.num_layers))
    assert total == 36 * (26_924_672 + 3_186_155_520) + 2 * 201_088 * 2880 + 2880 == 116_829_156_672


def test_gpt_oss_20b_is_the_model_card_s_count():
    """gpt-oss-20b: GptOssConfig's defaults but 24 layers and 32 experts. Each layer: attention, sinks and norms
    26,555,904 (as 120B's), router 2880·32 + 32 = 92,192, experts 32 · 24,891,840 = 796,538,880 -> 823,186,976;
    24 of them + untied tables 2·201,088·2880 + final norm 2880 = 20,914,757,184: OpenAI's model card (Aug 2025,
    Table 1) gives 20.91B for gpt-oss-20b."""
    spec = spec_from_hf({"model_type": "gpt_oss", "num_hidden_layers": 24, "num_local_experts": 32})
    total = head_params(head_kind(spec, spec.vocab_size)).total + tail_params(tail_kind(spec, spec.vocab_size)).total
    total += sum(body_params(body_kind(spec, i)).total for i in range(spec.num_layers))
    assert total == 24 * 823_186_976 + 2 * 201_088 * 2880 + 2880 == 20_914_757_184
