//! The roofline counts the bytes the candle decoder reads: the benches take
//! the model's FLOPs and, for ort and tch, its bytes from the config alone
//! ([`ModelCost::of`]), and bench/candle the bytes from the loaded decoder.

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::EngineOptions;
use guidebench_core::open::OpenStep;
use guidebench_engine_bench::roofline::ModelCost;
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

#[test]
fn the_benches_roofline_counts_the_model_as_the_decoder_does() {
    for spec in [
        FixtureSpec::tiny(),
        FixtureSpec::qwen2(),
        FixtureSpec::qwen3(),
        FixtureSpec::tied(),
    ] {
        let dir = tempfile::tempdir().expect("a temp dir");
        write_llama_fixture(dir.path(), &spec).expect("the fixture is written");
        let options = CandleOptions {
            common: EngineOptions {
                dtype: Some("f32".to_owned()),
                threads: Some(1),
                ..EngineOptions::default()
            },
            ..CandleOptions::default()
        };
        let engine = CandleEngine::load(dir.path().to_str(), &options)
            .unwrap_or_else(|e| panic!("candle loads: {e}"));
        let decoder = engine.decoder();
        let cost = ModelCost::of(decoder.config(), 4);
        assert_eq!(
            (cost.weight_bytes, cost.kv_bytes),
            (
                decoder.weight_bytes_per_step() as f64,
                decoder.kv_bytes_per_position() as f64
            ),
            "{}",
            spec.model_type
        );
    }
}
