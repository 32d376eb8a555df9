#!/usr/bin/env python3
"""Writes an ONNX decoder, in the layout Hugging Face Optimum exports, for a
Llama-family model folder of safetensors weights (the testkit fixtures).

Usage: .venv/bin/python scripts/export_onnx_fixture.py DIR [options]

Reads DIR/config.json and DIR/*.safetensors (f32) and writes DIR/model.onnx
with its weights in DIR/model.onnx_data (external data, as Optimum does for
large models). The graph:

  inputs   input_ids        int64 [batch_size, sequence_length]
           attention_mask   int64 [batch_size, past_sequence_length + sequence_length]
           position_ids     int64 [batch_size, sequence_length]
           past_key_values.N.key / .value
                            float [batch_size, kv_heads, past_sequence_length, head_dim]
  outputs  logits           float [batch_size, sequence_length, vocab]
           present.N.key / .value
                            float [batch_size, kv_heads, past_sequence_length + sequence_length, head_dim]

The decoder: token embeddings (Gather), RMS norms, q/k/v projections (with
biases for qwen2), per-head q/k RMS norms (qwen3), rotary embeddings with the
config's theta (tables computed in float64, gathered by position_ids), grouped
query attention over past + current keys with a causal and padding mask
(masked scores get -1e9, so a fully padded row stays finite), SwiGLU MLP,
final norm, lm_head or the tied embeddings.

Options for tests of the engine's error paths:
  --no-past            no past inputs, no present outputs (full recompute)
  --logits-name NAME   call the logits output NAME instead
  --extra-input NAME   add an int64 [batch_size] input the model ignores
  --no-position-ids    no position_ids input (positions from the mask)
  --float16            weights, past/present keys and values and logits in
                       float16 (the arithmetic stays float32: each weight and
                       past is cast up where it is used, each present and the
                       logits cast down, because ONNX Runtime's CPU provider
                       has float16 kernels for few operators)

Needs `onnx` and `numpy` (`scripts/native ort` installs them into .venv/).
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
NEG = -1e9


def read_safetensors(path):
    """The tensors of one safetensors file (f32 only), by name."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{path}: tensor {name} is {info['dtype']}; only F32 is supported")
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype="<f4").reshape(info["shape"])
        tensors[name] = array.astype(np.float32)
    return tensors


def read_weights(model_dir):
    tensors = {}
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        sys.exit(f"{model_dir}: no .safetensors files")
    for f in files:
        tensors.update(read_safetensors(os.path.join(model_dir, f)))
    return tensors


def rope_theta(config):
    if "rope_theta" in config:
        return float(config["rope_theta"])
    return float(config["rope_parameters"]["rope_theta"])


class Graph:
    def __init__(self):
        self.nodes = []
        self.initializers = []
        self.count = 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, name, array):
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type, inputs, hint=None, outputs=None, **attrs):
        out = outputs or [self.name(hint or op_type.lower())]
        self.nodes.append(helper.make_node(op_type, inputs, out, **attrs))
        return out[0] if len(out) == 1 else out


def export(model_dir, args):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    w = read_weights(model_dir)

    hidden = config["hidden_size"]
    layers = config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or hidden // heads
    groups = heads // kv_heads
    eps = float(config["rms_norm_eps"])
    max_pos = config["max_position_embeddings"]
    qk_norm = config["model_type"] == "qwen3"
    embed = w["model.embed_tokens.weight"]
    vocab = embed.shape[0]
    past = not args.no_past

    g = Graph()
    half = args.float16
    dtype = TensorProto.FLOAT16 if half else TensorProto.FLOAT

    def weight(name, array):
        """A weight as a float32 tensor: stored in float16 and cast up when
        --float16, else as it is."""
        if not half:
            return g.const(name, array)
        g.const(f"{name}.f16", np.asarray(array).astype(np.float16))
        return g.op("Cast", [f"{name}.f16"], outputs=[name], to=TensorProto.FLOAT)
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info(
            "attention_mask", TensorProto.INT64, ["batch_size", "past_sequence_length + sequence_length"]
        ),
    ]
    if not args.no_position_ids:
        inputs.append(
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])
        )
    if past:
        for i in range(layers):
            for kind in ("key", "value"):
                inputs.append(
                    helper.make_tensor_value_info(
                        f"past_key_values.{i}.{kind}",
                        dtype,
                        ["batch_size", kv_heads, "past_sequence_length", head_dim],
                    )
                )
    if args.extra_input:
        inputs.append(helper.make_tensor_value_info(args.extra_input, TensorProto.INT64, ["batch_size"]))
    outputs = [
        helper.make_tensor_value_info(args.logits_name, dtype, ["batch_size", "sequence_length", vocab])
    ]

    # Constants.
    g.const("eps", np.array(eps, dtype=np.float32))
    g.const("one_f", np.array(1.0, dtype=np.float32))
    g.const("zero_f", np.array(0.0, dtype=np.float32))
    g.const("neg", np.array(NEG, dtype=np.float32))
    g.const("scale", np.array(1.0 / np.sqrt(head_dim), dtype=np.float32))
    g.const("zero_i", np.array(0, dtype=np.int64))
    g.const("one_i", np.array(1, dtype=np.int64))
    g.const("axes_0", np.array([0], dtype=np.int64))
    g.const("axes_1", np.array([1], dtype=np.int64))
    g.const("axes_2", np.array([2], dtype=np.int64))
    g.const("axes_123", np.array([1, 2, 3], dtype=np.int64))
    g.const("half_split", np.array([head_dim // 2, head_dim // 2], dtype=np.int64))
    g.const("shape_q", np.array([0, 0, heads, head_dim], dtype=np.int64))
    g.const("shape_kv", np.array([0, 0, kv_heads, head_dim], dtype=np.int64))
    g.const("shape_q5", np.array([0, 0, kv_heads, groups, head_dim], dtype=np.int64))
    g.const("shape_out", np.array([0, 0, heads * head_dim], dtype=np.int64))

    # Rotary tables, [max_pos, head_dim], computed in float64.
    inv_freq = 1.0 / rope_theta(config) ** (np.arange(0, head_dim // 2, dtype=np.float64) * 2.0 / head_dim)
    angles = np.outer(np.arange(max_pos, dtype=np.float64), inv_freq)
    angles = np.concatenate([angles, angles], axis=1)
    g.const("rope_cos", np.cos(angles).astype(np.float32))
    g.const("rope_sin", np.sin(angles).astype(np.float32))

    # The mask: [batch, 1, 1, seq, total] additive bias, causal and padding.
    total = g.op("Shape", ["attention_mask"], "total", start=1, end=2)
    seq = g.op("Shape", ["input_ids"], "seq", start=1, end=2)
    total_s = g.op("Squeeze", [total, "axes_0"])
    seq_s = g.op("Squeeze", [seq, "axes_0"])
    past_s = g.op("Sub", [total_s, seq_s], "past_len")
    key_pos = g.op("Range", ["zero_i", total_s, "one_i"], "key_pos")
    query_pos = g.op("Range", [past_s, total_s, "one_i"], "query_pos")
    future = g.op(
        "Greater",
        [g.op("Unsqueeze", [key_pos, "axes_0"]), g.op("Unsqueeze", [query_pos, "axes_1"])],
        "future",
    )
    causal_bias = g.op("Where", [future, "neg", "zero_f"], "causal_bias")
    mask_f = g.op("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    pad_bias = g.op("Mul", [g.op("Sub", ["one_f", mask_f]), "neg"], "pad_bias")
    pad_bias = g.op("Unsqueeze", [pad_bias, "axes_123"])
    bias = g.op("Add", [causal_bias, pad_bias], "attn_bias")

    if args.no_position_ids:
        # Positions from the mask: cumsum - 1 over the current tokens.
        csum = g.op("CumSum", ["attention_mask", "one_i"])
        pos_all = g.op("Sub", [csum, "one_i"])
        pos_all = g.op("Max", [pos_all, "zero_i"])
        positions = g.op("Slice", [pos_all, g.op("Unsqueeze", [past_s, "axes_0"]), total, "axes_1"], "positions")
    else:
        positions = "position_ids"
    cos = g.op("Unsqueeze", [g.op("Gather", ["rope_cos", positions]), "axes_2"], "cos")
    sin = g.op("Unsqueeze", [g.op("Gather", ["rope_sin", positions]), "axes_2"], "sin")

    def rms(x, weight_name, hint):
        sq = g.op("Mul", [x, x])
        ms = g.op("ReduceMean", [sq], axes=[-1], keepdims=1)
        inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, "eps"])])])
        return g.op("Mul", [g.op("Mul", [x, inv]), weight_name], hint)

    def linear(x, prefix, bias=False):
        wt = weight(f"{prefix}.weight_t", np.ascontiguousarray(w[f"{prefix}.weight"].T))
        y = g.op("MatMul", [x, wt])
        if bias and f"{prefix}.bias" in w:
            y = g.op("Add", [y, weight(f"{prefix}.bias", w[f"{prefix}.bias"])])
        return y

    def rotate(x):
        a, b = g.op("Split", [x, "half_split"], outputs=[g.name("ra"), g.name("rb")], axis=-1)
        rotated = g.op("Concat", [g.op("Neg", [b]), a], axis=-1)
        return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])

    x = g.op("Gather", [weight("model.embed_tokens.weight", embed), "input_ids"], "embeds")
    for i in range(layers):
        p = f"model.layers.{i}"
        weight(f"{p}.input_layernorm.weight", w[f"{p}.input_layernorm.weight"])
        weight(f"{p}.post_attention_layernorm.weight", w[f"{p}.post_attention_layernorm.weight"])
        n = rms(x, f"{p}.input_layernorm.weight", f"l{i}_attn_norm")
        q = g.op("Reshape", [linear(n, f"{p}.self_attn.q_proj", True), "shape_q"])
        k = g.op("Reshape", [linear(n, f"{p}.self_attn.k_proj", True), "shape_kv"])
        v = g.op("Reshape", [linear(n, f"{p}.self_attn.v_proj", True), "shape_kv"])
        if qk_norm:
            weight(f"{p}.self_attn.q_norm.weight", w[f"{p}.self_attn.q_norm.weight"])
            weight(f"{p}.self_attn.k_norm.weight", w[f"{p}.self_attn.k_norm.weight"])
            q = rms(q, f"{p}.self_attn.q_norm.weight", f"l{i}_q_norm")
            k = rms(k, f"{p}.self_attn.k_norm.weight", f"l{i}_k_norm")
        q = rotate(q)
        k = rotate(k)
        # q: [b, s, nh, d] -> [b, kv, groups, s, d]; k, v: [b, kv, s, d]
        q = g.op("Transpose", [g.op("Reshape", [q, "shape_q5"])], perm=[0, 2, 3, 1, 4])
        k = g.op("Transpose", [k], perm=[0, 2, 1, 3])
        v = g.op("Transpose", [v], perm=[0, 2, 1, 3])
        if past and half:
            # The cache is float16: the new position is cast down, the
            # whole present cast up for the attention.
            k_h = g.op("Cast", [k], to=TensorProto.FLOAT16)
            v_h = g.op("Cast", [v], to=TensorProto.FLOAT16)
            k_h = g.op("Concat", [f"past_key_values.{i}.key", k_h], outputs=[f"present.{i}.key"], axis=2)
            v_h = g.op("Concat", [f"past_key_values.{i}.value", v_h], outputs=[f"present.{i}.value"], axis=2)
            k = g.op("Cast", [k_h], to=TensorProto.FLOAT)
            v = g.op("Cast", [v_h], to=TensorProto.FLOAT)
        elif past:
            k = g.op("Concat", [f"past_key_values.{i}.key", k], outputs=[f"present.{i}.key"], axis=2)
            v = g.op("Concat", [f"past_key_values.{i}.value", v], outputs=[f"present.{i}.value"], axis=2)
        if past:
            for kind in ("key", "value"):
                outputs.append(
                    helper.make_tensor_value_info(
                        f"present.{i}.{kind}",
                        dtype,
                        ["batch_size", kv_heads, "past_sequence_length + sequence_length", head_dim],
                    )
                )
        k_t = g.op("Transpose", [g.op("Unsqueeze", [k, "axes_2"])], perm=[0, 1, 2, 4, 3])
        scores = g.op("Mul", [g.op("MatMul", [q, k_t]), "scale"])
        probs = g.op("Softmax", [g.op("Add", [scores, bias])], axis=-1)
        attn = g.op("MatMul", [probs, g.op("Unsqueeze", [v, "axes_2"])])
        attn = g.op("Reshape", [g.op("Transpose", [attn], perm=[0, 3, 1, 2, 4]), "shape_out"])
        x = g.op("Add", [x, linear(attn, f"{p}.self_attn.o_proj")], f"l{i}_attn_residual")
        n = rms(x, f"{p}.post_attention_layernorm.weight", f"l{i}_mlp_norm")
        gate = linear(n, f"{p}.mlp.gate_proj")
        up = linear(n, f"{p}.mlp.up_proj")
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
        x = g.op("Add", [x, linear(act, f"{p}.mlp.down_proj")], f"l{i}_mlp_residual")

    weight("model.norm.weight", w["model.norm.weight"])
    x = rms(x, "model.norm.weight", "final_norm")
    if "lm_head.weight" in w:
        head = weight("lm_head.weight_t", np.ascontiguousarray(w["lm_head.weight"].T))
    else:
        head = g.op("Transpose", ["model.embed_tokens.weight"], "tied_head", perm=[1, 0])
    if half:
        logits = g.op("MatMul", [x, head], "logits_f32")
        g.op("Cast", [logits], outputs=[args.logits_name], to=TensorProto.FLOAT16)
    else:
        g.op("MatMul", [x, head], outputs=[args.logits_name])

    graph = helper.make_graph(g.nodes, "decoder", inputs, outputs, g.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="guidebench scripts/export_onnx_fixture.py",
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    out = os.path.join(model_dir, "model.onnx")
    data = "model.onnx_data"
    if os.path.exists(os.path.join(model_dir, data)):
        os.remove(os.path.join(model_dir, data))
    onnx.save_model(
        model,
        out,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data,
        size_threshold=1024,
    )
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="model folder with config.json and *.safetensors")
    parser.add_argument("--no-past", action="store_true")
    parser.add_argument("--logits-name", default="logits")
    parser.add_argument("--extra-input")
    parser.add_argument("--no-position-ids", action="store_true")
    parser.add_argument("--float16", action="store_true")
    args = parser.parse_args()
    print(export(args.dir, args))


if __name__ == "__main__":
    main()
