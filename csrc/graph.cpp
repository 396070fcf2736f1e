#include "graph.h"

#include "exact_ops.h"
#include "own_attention.h"

namespace river {

namespace {

// w x cur, named "<name>-<il>". Where w is packed for our own product, by it: every
// column as it would come alone, in any graph. Otherwise, in an exact graph, where w is in the plain layout (and
// quantized, unless exact_float_weights), each column comes out as it would alone: by
// ggml's kernel where that gives a column the same bits in any batch, else by
// exact_mul_mat.
// cur: [n_in, n_tokens] -> [n_out, n_tokens]
ggml_tensor * mul_mat(const GraphContext & g, ggml_tensor * w, ggml_tensor * cur, const char * name, int64_t il) {
    if (const OwnMatrix * own = g.own ? g.own->find(w) : nullptr) {
        ggml_tensor * out = own_mul_mat(g.ctx, *own, cur, w->ne[1], *g.own_inputs);
        ggml_format_name(out, "%s-%d", name, static_cast<int>(il));
        return out;
    }
    const bool float_weights = w->type == GGML_TYPE_F32 || w->type == GGML_TYPE_F16 || w->type == GGML_TYPE_BF16;
    const bool exact =
        g.exact && (g.exact_float_weights || !float_weights) && exact_mul_mat_supports(w) && !ggml_rows_alike(w->type);
    ggml_tensor * out = exact ? exact_mul_mat(g.ctx, w, cur) : ggml_mul_mat(g.ctx, w, cur);
    ggml_format_name(out, "%s-%d", name, static_cast<int>(il));
    return out;
}

// Attention's products by the cache (K, V), exact_mul_mat where the sequence's rows are exact.
ggml_tensor * cache_mul_mat(const GraphContext & g, const SeqAttention & seq, ggml_tensor * cache, ggml_tensor * cur,
                            const char * name, int64_t il) {
    ggml_tensor * out =
        seq.exact && exact_mul_mat_supports(cache) ? exact_mul_mat(g.ctx, cache, cur) : ggml_mul_mat(g.ctx, cache, cur);
    ggml_format_name(out, "%s-%d", name, static_cast<int>(il));
    return out;
}

ggml_tensor * build_norm(const GraphContext & g, ggml_tensor * cur, ggml_tensor * weight) {
    return ggml_mul(g.ctx, ggml_rms_norm(g.ctx, cur, g.hp.rms_eps), weight);
}

ggml_tensor * add_bias(const GraphContext & g, ggml_tensor * cur, ggml_tensor * bias) {
    return bias ? ggml_add(g.ctx, cur, bias) : cur;
}

ggml_tensor * build_rope(const GraphContext & g, int64_t il, ggml_tensor * cur) {
    const HParams & hp = g.hp;
    const bool swa = hp.is_swa(il);
    return ggml_rope_ext(g.ctx, cur, g.in.positions, g.rope_freqs, static_cast<int>(hp.n_rot), hp.rope_mode,
                         static_cast<int>(hp.n_ctx_train), swa ? hp.rope_freq_base_swa : hp.rope_freq_base,
                         swa ? 1.0f : hp.rope_freq_scale, /*ext_factor*/ 0.0f, /*attn_factor*/ 1.0f,
                         /*beta_fast*/ 32.0f, /*beta_slow*/ 1.0f);
}

ggml_tensor * build_ffn(const GraphContext & g, const LayerWeights & w, int64_t il, ggml_tensor * cur) {
    // down(act(gate(x)) * up(x))
    ggml_tensor * gate = mul_mat(g, w.ffn_gate, cur, "ffn_gate", il);
    ggml_tensor * up = mul_mat(g, w.ffn_up, cur, "ffn_up", il);
    cur = g.hp.ffn_act == FfnActivation::gelu ? ggml_geglu_split(g.ctx, gate, up) : ggml_swiglu_split(g.ctx, gate, up);
    ggml_format_name(cur, "ffn_act-%d", static_cast<int>(il));
    return mul_mat(g, w.ffn_down, cur, "ffn_down", il);
}

// gemma normalizes a sublayer's output before adding it to the residual stream
ggml_tensor * build_post_norm(const GraphContext & g, ggml_tensor * cur, ggml_tensor * weight) {
    return weight ? build_norm(g, cur, weight) : cur;
}

// The scale of queries scaled before attention (HParams::scale_queries).
constexpr float k_unit_scale = 1.0f;

// One sequence's rows attending over its cells, as a batch of those rows alone would: by
// our own attention where the engine chose it for this layer (each row in one order of
// its own, in any batch), else by ggml's products and softmax (exact_mul_mat's where the
// sequence's rows are exact).
// Qcur: [head, n_head, n_tokens of the sequence], rotated (and scaled, with kq_scale 1);
// kq_scale outlives the graph -> [n_embd_q, n_tokens of the sequence]
ggml_tensor * attend(const GraphContext & g, int64_t il, const SeqAttention & seq, ggml_tensor * Qcur,
                     const float * kq_scale) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.hp;
    const int64_t head = hp.n_embd_head, n_kv = seq.n_kv;
    ggml_tensor * cache_k = g.kv.k(il);
    ggml_tensor * cache_v = g.kv.v(il);
    // [head, n_kv, n_head_kv]
    ggml_tensor * k = ggml_view_3d(ctx, cache_k, head, n_kv, hp.n_head_kv, cache_k->nb[1],
                                   ggml_row_size(cache_k->type, head), seq.first_cell * cache_k->nb[1]);
    // transposed: [n_kv, head, n_head_kv]; by rows (quantized): [head, n_kv, n_head_kv], as K
    ggml_tensor * v = g.kv.v_transposed()
                          ? ggml_view_3d(ctx, cache_v, n_kv, head, hp.n_head_kv, cache_v->nb[1], cache_v->nb[1] * head,
                                         seq.first_cell * cache_v->nb[0])
                          : ggml_view_3d(ctx, cache_v, head, n_kv, hp.n_head_kv, cache_v->nb[1],
                                         ggml_row_size(cache_v->type, head), seq.first_cell * cache_v->nb[1]);
    ggml_tensor * mask = hp.is_swa(il) ? seq.kq_mask_swa : seq.kq_mask;
    if (g.own_attention && own_attention_supports(cache_k, cache_v, head)) {
        ggml_tensor * out = own_attention(ctx, Qcur, k, v, mask, kq_scale);
        ggml_format_name(out, "kqv_own-%d", static_cast<int>(il));
        return out;
    }
    // [head, n_tokens, n_head]
    ggml_tensor * q = ggml_permute(ctx, Qcur, 0, 2, 1, 3);

    // softmax(q k^T * attn_scale + mask): [n_kv, n_tokens, n_head]
    ggml_tensor * kq = cache_mul_mat(g, seq, k, q, "kq", il);
    if (kq->op == GGML_OP_MUL_MAT) {
        // F32 accumulation: a GPU backend's default for F16 operands may accumulate in F16
        // (ggml-vulkan does), which attention scores cannot afford (the CPU ignores this).
        ggml_mul_mat_set_prec(kq, GGML_PREC_F32);
    }
    kq = ggml_soft_max_ext(ctx, kq, mask, *kq_scale, 0.0f);
    ggml_format_name(kq, "kq_soft_max-%d", static_cast<int>(il));

    // [head, n_tokens, n_head] -> [head, n_head, n_tokens] -> [n_embd_q, n_tokens]
    ggml_tensor * kqv = cache_mul_mat(g, seq, v, kq, "kqv", il);
    ggml_tensor * cur = ggml_permute(ctx, kqv, 0, 2, 1, 3);
    return ggml_cont_2d(ctx, cur, hp.n_embd_q(), seq.n_tokens);
}

// Writes K/V of this batch into layer il's cache cells, then each sequence's rows
// attend over that sequence's cells. Q/K/V arrive projected, K and Q already rotated.
ggml_tensor * build_attention(const GraphContext & g, int64_t il, ggml_tensor * Qcur, ggml_tensor * Kcur,
                              ggml_tensor * Vcur) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.hp;
    const int64_t n_tokens = g.in.n_tokens;
    const int64_t n_embd_kv = hp.n_embd_kv();
    ggml_tensor * cache_k = g.kv.k(il);
    ggml_tensor * cache_v = g.kv.v(il);

    // K rows by cell (a quantized cache quantizes each row alone, so a position's blocks
    // are the same in any batch); V likewise where it is stored by rows, else, stored
    // transposed, element by element: as a column of single values, element (c, t) of
    // Vcur goes to c * n_cells + cell(t).
    ggml_build_forward_expand(
        g.gf, ggml_set_rows(ctx, cache_k, ggml_reshape_2d(ctx, Kcur, n_embd_kv, n_tokens), g.in.k_rows));
    if (g.kv.v_transposed()) {
        ggml_build_forward_expand(g.gf,
                                  ggml_set_rows(ctx, ggml_reshape_2d(ctx, cache_v, 1, ggml_nelements(cache_v)),
                                                ggml_reshape_2d(ctx, Vcur, 1, n_embd_kv * n_tokens), g.in.v_rows));
    } else {
        ggml_build_forward_expand(
            g.gf, ggml_set_rows(ctx, cache_v, ggml_reshape_2d(ctx, Vcur, n_embd_kv, n_tokens), g.in.k_rows));
    }

    const float * kq_scale = &hp.attn_scale;
    if (hp.scale_queries) {
        Qcur = ggml_scale(ctx, Qcur, hp.attn_scale);
        kq_scale = &k_unit_scale;
    }
    ggml_tensor * cur = nullptr;
    for (const SeqAttention & seq : g.in.seqs) {
        ggml_tensor * q = Qcur;
        if (seq.n_tokens != n_tokens) {   // the sequence's rows of the batch
            q = ggml_view_3d(ctx, Qcur, Qcur->ne[0], Qcur->ne[1], seq.n_tokens, Qcur->nb[1], Qcur->nb[2],
                             seq.first_row * Qcur->nb[2]);
        }
        ggml_tensor * out = attend(g, il, seq, q, kq_scale);
        cur = cur ? ggml_concat(ctx, cur, out, 1) : out;
    }
    ggml_format_name(cur, "kqv_out-%d", static_cast<int>(il));
    return cur;
}

}  // namespace

ggml_tensor * build_layer(const GraphContext & g, const LayerWeights & w, int64_t il, ggml_tensor * inpL) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.hp;
    const int64_t n_tokens = g.in.n_tokens;
    const int il_name = static_cast<int>(il);

    ggml_tensor * inpSA = inpL;
    ggml_tensor * cur = build_norm(g, inpL, w.attn_norm);
    ggml_format_name(cur, "attn_norm-%d", il_name);

    // [n_embd_head, n_head(_kv), n_tokens]
    ggml_tensor * Qcur =
        ggml_reshape_3d(ctx, add_bias(g, mul_mat(g, w.wq, cur, "wq", il), w.bq), hp.n_embd_head, hp.n_head, n_tokens);
    ggml_tensor * Kcur = ggml_reshape_3d(ctx, add_bias(g, mul_mat(g, w.wk, cur, "wk", il), w.bk), hp.n_embd_head,
                                         hp.n_head_kv, n_tokens);
    ggml_tensor * Vcur = add_bias(g, mul_mat(g, w.wv, cur, "wv", il), w.bv);
    if (w.q_norm) {
        Qcur = build_norm(g, Qcur, w.q_norm);
        Kcur = build_norm(g, Kcur, w.k_norm);
    }
    Qcur = build_rope(g, il, Qcur);
    Kcur = build_rope(g, il, Kcur);
    ggml_format_name(Qcur, "Qcur-%d", il_name);
    ggml_format_name(Kcur, "Kcur-%d", il_name);

    cur = build_attention(g, il, Qcur, Kcur, Vcur);
    cur = build_post_norm(g, mul_mat(g, w.wo, cur, "wo", il), w.attn_post_norm);
    ggml_format_name(cur, "attn_out-%d", il_name);

    ggml_tensor * ffn_inp = ggml_add(ctx, cur, inpSA);
    ggml_format_name(ffn_inp, "ffn_inp-%d", il_name);

    cur = build_norm(g, ffn_inp, w.ffn_norm);
    ggml_format_name(cur, "ffn_norm-%d", il_name);
    cur = build_ffn(g, w, il, cur);
    cur = build_post_norm(g, cur, w.ffn_post_norm);
    ggml_format_name(cur, "ffn_out-%d", il_name);

    cur = ggml_add(ctx, cur, ffn_inp);
    ggml_format_name(cur, "l_out-%d", il_name);
    return cur;
}

ggml_tensor * build_state_similarity(ggml_context * ctx, StateSignal signal, ggml_tensor * before,
                                     ggml_tensor * after) {
    ggml_tensor * aa = ggml_sum_rows(ctx, ggml_sqr(ctx, before));
    ggml_tensor * sim = nullptr;
    if (signal == StateSignal::cosine) {
        // (a . b) / sqrt(|a|^2 |b|^2), per column
        ggml_tensor * dot = ggml_sum_rows(ctx, ggml_mul(ctx, before, after));
        ggml_tensor * bb = ggml_sum_rows(ctx, ggml_sqr(ctx, after));
        sim = ggml_div(ctx, dot, ggml_sqrt(ctx, ggml_mul(ctx, aa, bb)));
    } else {
        // 1 - sqrt(|b - a|^2 / |a|^2), per column
        ggml_tensor * dd = ggml_sum_rows(ctx, ggml_sqr(ctx, ggml_sub(ctx, after, before)));
        sim = ggml_scale_bias(ctx, ggml_sqrt(ctx, ggml_div(ctx, dd, aa)), -1.0f, 1.0f);
    }
    ggml_set_name(sim, "state_similarity");
    return sim;
}

ggml_tensor * build_head(const GraphContext & g, ggml_tensor * output_norm, ggml_tensor * output, ggml_tensor * cur) {
    cur = build_norm(g, cur, output_norm);
    ggml_set_name(cur, "result_norm");
    cur = mul_mat(g, output, cur, "output", 0);
    if (g.hp.logit_softcap > 0.0f) {
        cur =
            ggml_scale(g.ctx, ggml_tanh(g.ctx, ggml_scale(g.ctx, cur, 1.0f / g.hp.logit_softcap)), g.hp.logit_softcap);
    }
    ggml_set_name(cur, "result_output");
    return cur;
}

}  // namespace river
