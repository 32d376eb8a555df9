//! The GGUF fixtures testkit writes as llama.cpp lays them out open as a
//! model folder that agrees with their Hugging Face reference folder: the
//! same decoder description, tokenizer, special tokens and chat template;
//! and core's q/k row map undoes testkit's converter permutation.

use guidebench_core::model::{
    Dtype, ModelFolder, gguf_row_of_hf_row, gguf_rows_are_interleaved, gguf_tensor_hf_name,
    hf_row_of_gguf_row,
};
use guidebench_core::tokenizer::Tokenizer;
use guidebench_testkit::gguf::{
    GGUF_FILE, GgufType, gguf_fixtures, gguf_reference_dir, gguf_tensor_name, permute_rows,
    write_gguf_fixture,
};

#[test]
fn every_gguf_fixture_opens_as_its_reference_folder_does() {
    let texts = [
        "The model streams token 7 to the benchmark, café 東京 🚀.",
        "<|user|>\nhello<|eos|>  trailing  ",
    ];
    for (name, spec) in gguf_fixtures() {
        for ty in [GgufType::F32, GgufType::Q4K] {
            let root = tempfile::tempdir().expect("tempdir");
            let (gguf_dir, hf_dir) = (root.path().join("gguf"), root.path().join("hf"));
            write_gguf_fixture(&gguf_dir, &spec, ty).expect("gguf");
            gguf_reference_dir(&hf_dir, &spec, ty).expect("reference");
            let what = format!("{name} {}", ty.name());
            let gguf = ModelFolder::open(gguf_dir.to_str().expect("utf-8")).expect(&what);
            let hf = ModelFolder::open(hf_dir.to_str().expect("utf-8")).expect(&what);
            assert_eq!(gguf.gguf_file(), Some(gguf_dir.join(GGUF_FILE).as_path()));

            let (g, h) = (gguf.config(), hf.config());
            assert_eq!(g.architecture, h.architecture, "{what}");
            assert_eq!(
                (
                    g.vocab_size,
                    g.hidden_size,
                    g.intermediate_size,
                    g.num_hidden_layers
                ),
                (
                    h.vocab_size,
                    h.hidden_size,
                    h.intermediate_size,
                    h.num_hidden_layers
                ),
                "{what}"
            );
            assert_eq!(
                (g.num_attention_heads, g.num_key_value_heads, g.head_dim),
                (h.num_attention_heads, h.num_key_value_heads, h.head_dim),
                "{what}"
            );
            assert_eq!(
                (g.tie_word_embeddings, g.qkv_bias, g.o_bias, g.qk_norm),
                (h.tie_word_embeddings, h.qkv_bias, h.o_bias, h.qk_norm),
                "{what}"
            );
            assert_eq!(g.rope_theta, h.rope_theta, "{what}");
            assert_eq!(g.inv_freqs(), h.inv_freqs(), "{what}");
            // Stored as f32 in the file, so compared at f32's precision.
            assert!((g.rms_norm_eps - h.rms_norm_eps).abs() < 1e-12, "{what}");

            assert_eq!(gguf.eos_token_ids(), hf.eos_token_ids(), "{what}");
            assert_eq!(gguf.bos_token_id(), hf.bos_token_id(), "{what}");
            assert_eq!(gguf.pad_token_id(), hf.pad_token_id(), "{what}");
            assert_eq!(gguf.chat_template(), hf.chat_template(), "{what}");
            for text in texts {
                for special in [false, true] {
                    assert_eq!(
                        gguf.tokenizer().encode(text, special).expect("encode"),
                        hf.tokenizer().encode(text, special).expect("encode"),
                        "{what}: {text:?}"
                    );
                }
            }
            let stored = gguf.stored_dtype().expect("stored");
            let Dtype::Gguf(types) = &stored.dtype else {
                panic!("{what}: {stored:?}");
            };
            let expected = match ty {
                GgufType::F32 => "F32",
                _ => "Q4_K_M",
            };
            assert_eq!(types.file_type.as_deref(), Some(expected), "{what}");
        }
    }
}

#[test]
fn the_tensor_name_map_inverts_testkits_and_the_row_map_undoes_its_permutation() {
    for hf in [
        "model.embed_tokens.weight",
        "model.norm.weight",
        "lm_head.weight",
        "model.layers.3.input_layernorm.weight",
        "model.layers.3.post_attention_layernorm.weight",
        "model.layers.3.self_attn.q_proj.weight",
        "model.layers.3.self_attn.k_proj.bias",
        "model.layers.3.self_attn.o_proj.weight",
        "model.layers.3.self_attn.q_norm.weight",
        "model.layers.3.mlp.gate_proj.weight",
        "model.layers.3.mlp.down_proj.weight",
    ] {
        let gguf = gguf_tensor_name(hf).expect("a GGUF name");
        let arch = guidebench_core::model::Architecture::from_model_type("llama").expect("llama");
        assert_eq!(gguf_tensor_hf_name(arch, &gguf).as_deref(), Some(hf));
        assert!(gguf_rows_are_interleaved(arch));
    }
    let (heads, head_dim, cols) = (3, 8, 2);
    let rows = heads * head_dim;
    let hf: Vec<f32> = (0..rows * cols).map(|v| v as f32).collect();
    let gguf = permute_rows(&hf, rows, heads, false);
    for gguf_row in 0..rows {
        let hf_row = hf_row_of_gguf_row(gguf_row, head_dim);
        assert_eq!(
            gguf[gguf_row * cols..(gguf_row + 1) * cols],
            hf[hf_row * cols..(hf_row + 1) * cols]
        );
        assert_eq!(gguf_row_of_hf_row(hf_row, head_dim), gguf_row);
    }
}
