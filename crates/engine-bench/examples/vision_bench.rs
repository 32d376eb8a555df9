//! The candle engine on a vision-language model, measured side by side in
//! one run (what `bench/vision` runs), on testkit's LLaVA fixture scaled
//! to a real tower: CLIP ViT-B/16's shape (width 768, 12 layers, 12 heads,
//! MLP 3072, 224-pixel images in 16-pixel patches, 196 image tokens; the
//! second-to-last layer's patches reach the projector) in front of
//! `builtin:tiny`'s text shape, random weights, `f32`, all cores:
//!
//! 1. the vision tower and projector alone at batch 1, 8 and 32: images/s
//!    (the fastest round), and the share of its FLOP bound each reaches
//!    (the tower's FLOPs: the patch product, per layer the q/k/v/out and
//!    MLP products and attention over all positions, and the projector,
//!    over the matrix-multiplication peak measured in the same run);
//! 2. the time to first token of one request (one image, 64 text tokens,
//!    through core's generation loop) split into preparing the image
//!    (decode, resize, crop, normalize), the vision encoder, and the text
//!    prefill, beside the same prompt without its image;
//! 3. the offline backend end to end (`kind=offline`, 32 concurrent
//!    requests, one static batch, 32 output tokens each): output tok/s
//!    with one image per request beside the same prompts without images.
//!
//! Then SmolVLM (Idefics3), on testkit's SmolVLM fixture at
//! SmolVLM-256M-Instruct's shape (SigLIP: 512-pixel tiles in 16-pixel
//! patches, width 768, 12 layers, 12 heads, MLP 3072, pixel shuffle 4: 64
//! image tokens a frame; text: SmolLM2-135M's Llama, width 576, 30 layers,
//! 9 heads, 3 KV heads, MLP 1536, with the fixture's small vocabulary;
//! random weights, f32), the processor's default size (longest edge 2048,
//! split into tiles plus the global view) and one tile (a copy of the
//! folder whose processor neither upsizes nor splits):
//!
//! 4. the SigLIP tower and connector alone: images/s and share of the FLOP
//!    bound at batch 1 and 8 at one tile, batch 1 at the default size;
//! 5. candle beside llama.cpp's `llama-mtmd-cli` on the same weights (the
//!    folder converted by llama.cpp's converter, `gguf=DIR`: `text-f32`,
//!    `text-f16`, `text-Q8_0`, `mmproj-f32`, `mmproj-f16`, and
//!    `mmproj-Q8_0` where llama-quantize takes it), measured alternately
//!    in the same run: the encoder's time per image (llama.cpp: the sum of
//!    its `slice encoded in` lines) and the TTFT of one image and 64 text
//!    tokens (llama.cpp: the encoding plus its `prompt eval time`, which
//!    holds the image tokens' and the text's decoding), at both sizes.
//!
//! The fixtures are written once under `target/bench-models/`.
//!
//! ```text
//! cargo run --release -p guidebench-engine-bench --example vision_bench -- [rounds=3] [gguf=DIR llama=BIN_DIR]
//! cargo run --release -p guidebench-engine-bench --example vision_bench -- smolvlm-dir
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use candle_core::{DType, Device};
use guidebench_candle::loader::SafetensorsFiles;
use guidebench_candle::model::Weights;
use guidebench_candle::vision::VisionTower;
use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::backend::Backend;
use guidebench_core::engine::{Engine, EngineOptions, EngineRequest};
use guidebench_core::model::ModelFolder;
use guidebench_core::open::OpenStep;
use guidebench_core::request::{
    ChatMessage, ContentPart, GenerationRequest, MediaSource, RequestInput,
};
use guidebench_core::sampling::Sampling;
use guidebench_core::tokenizer::Tokenizer;
use guidebench_core::vision::{ImageProcessor, VisionLanguageConfig};
use guidebench_engine_bench::machine::{MatmulPeak, cpu_name, load_average};
use guidebench_engine_bench::{BoxError, median};
use guidebench_testkit::fixtures::FixtureSpec;
use guidebench_testkit::llava::{LlavaSpec, write_fixture_images, write_llava_fixture};
use guidebench_testkit::smolvlm::{SmolVlmSpec, write_smolvlm_fixture, write_smolvlm_images};

/// Text tokens of every prompt (besides its image tokens).
const TEXT_TOKENS: usize = 64;
/// Output tokens of every request in the end-to-end runs.
const OUTPUT: u32 = 32;
/// Requests of the end-to-end runs (one static batch).
const REQUESTS: usize = 32;

/// The fixture's folder, written on first use.
fn model_dir() -> Result<PathBuf, BoxError> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("bench-models/llava-vit-b16-v1");
    if !dir.join("images").is_dir() {
        let spec = LlavaSpec::vit_b16();
        let t = Instant::now();
        write_llava_fixture(&dir, &spec)?;
        write_fixture_images(&dir, &spec)?;
        println!("wrote {} in {:.1?}", dir.display(), t.elapsed());
    }
    Ok(dir)
}

/// The tower's FLOPs for one image: the patch product, per encoder layer
/// run the q/k/v/out products, attention (scores and the weighted sum)
/// and the MLP, and the projector (two per multiply-add).
fn tower_flops(vl: &VisionLanguageConfig) -> f64 {
    let c = &vl.vision;
    let (d, i, p) = (
        c.hidden_size as f64,
        c.intermediate_size as f64,
        c.patch_size as f64,
    );
    let patches = c.patches() as f64;
    let t = c.positions() as f64;
    let per_layer = 2.0 * t * d * 4.0 * d + 2.0 * 2.0 * t * t * d + 2.0 * 2.0 * t * d * i;
    let tokens = vl.image_tokens() as f64;
    let text = vl.text_hidden_size as f64;
    let projector = 2.0 * tokens * (vl.projector_in() as f64) * text + 2.0 * tokens * text * text;
    2.0 * patches * 3.0 * p * p * d + vl.layers_to_run() as f64 * per_layer + projector
}

/// A text of about `n` tokens from the fixture's own vocabulary.
fn text_of(tokenizer: &dyn Tokenizer, n: usize) -> Result<String, BoxError> {
    let words = [
        "sonys",
        "stoustrel",
        "hyguck",
        "treelwurhind",
        "hir",
        "dousbit",
        "gaick",
        "mese",
        "beel",
        "monrun",
        "ritpuhos",
        "mirtorre",
        "kitfair",
    ];
    let mut text = String::new();
    let mut i = 0;
    while tokenizer.count(&text)? < n {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(words[i % words.len()]);
        i += 1;
    }
    Ok(text)
}

fn main() -> Result<(), BoxError> {
    let mut rounds = 3usize;
    let mut gguf: Option<PathBuf> = None;
    let mut llama_bin: Option<PathBuf> = None;
    let mut llava = true;
    for arg in std::env::args().skip(1) {
        match arg.split_once('=') {
            Some(("rounds", n)) => rounds = n.parse()?,
            Some(("gguf", dir)) => gguf = Some(PathBuf::from(dir)),
            Some(("llama", dir)) => llama_bin = Some(PathBuf::from(dir)),
            Some(("only", "smolvlm")) => llava = false,
            None if arg == "smolvlm-dir" => {
                let (dir, _) = smolvlm::model_dirs()?;
                println!("{}", dir.display());
                return Ok(());
            }
            _ => {
                return Err(format!(
                    "unknown argument `{arg}` (rounds=N, gguf=DIR, llama=BIN_DIR, only=smolvlm, smolvlm-dir)"
                )
                .into());
            }
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "CPU: {}, {threads} threads, kernels: {}; load {}",
        cpu_name(),
        guidebench_candle::kernel_path(),
        load_average()
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    let mut peak = MatmulPeak::new(threads)?;
    if llava {
        llava_sections(rounds, threads, &pool, &mut peak)?;
    }

    // 4 and 5. SmolVLM, and llama.cpp beside it.
    let llama = match (gguf, llama_bin) {
        (Some(gguf), Some(bin)) => Some(smolvlm::Llama {
            cli: bin.join("llama-mtmd-cli"),
            gguf,
        }),
        _ => {
            println!(
                "\n(no gguf=DIR llama=BIN_DIR: SmolVLM on candle only; bench/vision passes both)"
            );
            None
        }
    };
    smolvlm::run(rounds, threads, &pool, &mut peak, llama.as_ref())?;
    Ok(())
}

/// Sections 1 to 3: the LLaVA fixture.
fn llava_sections(
    rounds: usize,
    threads: usize,
    pool: &rayon::ThreadPool,
    peak: &mut MatmulPeak,
) -> Result<(), BoxError> {
    let dir = model_dir()?;
    let folder = ModelFolder::from_dir(&dir)?;
    let vl = folder
        .vision()
        .ok_or("the fixture has no vision side")?
        .clone();
    let processor = folder
        .image_processor()
        .ok_or("no image processor")?
        .clone();
    let image_path = dir.join("images/wide.png");
    let source = MediaSource::Path(image_path.clone());
    println!(
        "model: CLIP {}x{} patch {} width {} ({} of {} layers run), {} image tokens; text {} \
         wide, {} layers; image {} (resized and cropped)",
        vl.vision.image_size,
        vl.vision.image_size,
        vl.vision.patch_size,
        vl.vision.hidden_size,
        vl.layers_to_run(),
        vl.vision.num_hidden_layers,
        vl.image_tokens(),
        folder.config().hidden_size,
        folder.config().num_hidden_layers,
        image_path.display()
    );

    // 1. The tower alone.
    let weights = Weights::from_files(
        SafetensorsFiles::open(&folder.weight_files()?)?,
        DType::F32,
        &Device::Cpu,
    );
    let tower = pool.install(|| VisionTower::load(&weights, &vl))?;
    let prepared = processor.prepare(&source)?;
    let prepare_times: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let _ = processor.prepare(&source);
            t.elapsed().as_secs_f64()
        })
        .collect();
    let flops = tower_flops(&vl);
    println!(
        "\nvision tower + projector alone ({:.1} GFLOP per image; matmul peak {:.1} GFLOP/s):",
        flops / 1e9,
        peak.measure(5) / 1e9
    );
    println!("  batch  images/s  ms/image  share of FLOP bound");
    for batch in [1usize, 8, 32] {
        let images = vec![&prepared; batch];
        let mut best = f64::INFINITY;
        for _ in 0..rounds {
            let t = Instant::now();
            let features = pool.install(|| tower.encode(&images))?;
            best = best.min(t.elapsed().as_secs_f64());
            std::hint::black_box(features);
        }
        let peak_now = peak.measure(3);
        let bound = batch as f64 * flops / peak_now;
        println!(
            "  {batch:>5}  {:>8.2}  {:>8.1}  {:>5.1} %",
            batch as f64 / best,
            best * 1e3 / batch as f64,
            100.0 * bound / best
        );
    }
    drop(tower);

    // 2. TTFT split.
    let options = CandleOptions {
        common: EngineOptions {
            threads: i64::try_from(threads).ok(),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    let dir_text = dir.to_str().ok_or("a UTF-8 path")?;
    let mut runner = CandleEngine::runner(Some(dir_text), &options)?;
    let text = text_of(folder.tokenizer().as_ref(), TEXT_TOKENS)?;
    let request = |image: bool| EngineRequest {
        id: 0,
        prompt: if image {
            format!("<image>\n{text}")
        } else {
            text.clone()
        },
        add_special_tokens: true,
        images: if image {
            vec![source.clone()]
        } else {
            Vec::new()
        },
        prepared_images: Vec::new(),
        audio: Vec::new(),
        sampling: Sampling::fixed_length(1).expect("valid sampling"),
    };
    let mut ttft = Vec::new();
    let mut encode = Vec::new();
    let mut prepare = Vec::new();
    let mut text_ttft = Vec::new();
    let mut prompt_tokens = (0, 0);
    for _ in 0..rounds.max(3) {
        let t = Instant::now();
        let out = runner.generate(&[request(true)])?.remove(0)?;
        ttft.push(out.token_instants[0].duration_since(t).as_secs_f64());
        let stats = out.images.ok_or("no image stats")?;
        encode.push(stats.encode.as_secs_f64());
        prepare.push(stats.prepare.as_secs_f64());
        prompt_tokens.0 = out.prompt_tokens;
        let t = Instant::now();
        let out = runner.generate(&[request(false)])?.remove(0)?;
        text_ttft.push(out.token_instants[0].duration_since(t).as_secs_f64());
        prompt_tokens.1 = out.prompt_tokens;
    }
    let (ttft, encode, prepare) = (median(&ttft), median(&encode), median(&prepare));
    let prefill = ttft - encode - prepare;
    let ms = |s: f64| s * 1e3;
    println!(
        "\nTTFT of one request (median of {} rounds; {} prompt tokens with the image, {} without):",
        rounds.max(3),
        prompt_tokens.0,
        prompt_tokens.1
    );
    println!(
        "  with an image  {:>7.1} ms = prepare {:.1} ms ({:.0} %) + vision encoder {:.1} ms ({:.0} %) \
         + text prefill {:.1} ms ({:.0} %)",
        ms(ttft),
        ms(prepare),
        100.0 * prepare / ttft,
        ms(encode),
        100.0 * encode / ttft,
        ms(prefill),
        100.0 * prefill / ttft
    );
    println!(
        "  text alone     {:>7.1} ms (the image adds {:.1}x); preparing alone, off the engine \
         thread: {:.1} ms",
        ms(median(&text_ttft)),
        ttft / median(&text_ttft),
        ms(median(&prepare_times))
    );
    drop(runner);

    // 3. The offline backend end to end.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let spec = format!(
        "kind=offline,engine=candle,model={dir_text},threads={threads},batch_size={REQUESTS},batch_timeout=200ms"
    );
    let mut rates = Vec::new();
    println!(
        "\noffline backend, {REQUESTS} concurrent requests (one static batch), {TEXT_TOKENS} text \
         tokens, {OUTPUT} output tokens each:"
    );
    for image in [true, false] {
        let mut best = 0f64;
        for _ in 0..rounds {
            let rate = runtime.block_on(async {
                let args = guidebench_core::options::parse_kind_args(&spec)?;
                let backend: Arc<dyn Backend> =
                    guidebench_core::registry::create_backend(args)?.into();
                backend.startup().await?;
                backend.validate().await?;
                let t = Instant::now();
                let handles: Vec<_> = (0..REQUESTS)
                    .map(|i| {
                        let mut content = Vec::new();
                        if image {
                            content.push(ContentPart::Image {
                                source: source.clone(),
                            });
                        }
                        content.push(ContentPart::text(text.clone()));
                        let input = RequestInput::Chat(vec![ChatMessage {
                            role: "user".into(),
                            tool: None,
                            content,
                        }]);
                        let sampling = Sampling::fixed_length(OUTPUT).expect("valid sampling");
                        let backend = Arc::clone(&backend);
                        tokio::spawn(async move {
                            backend
                                .resolve(GenerationRequest::new(i as u64, input, sampling))
                                .await
                        })
                    })
                    .collect();
                let mut tokens = 0u64;
                for handle in handles {
                    tokens += u64::from(handle.await??.output_tokens);
                }
                let wall = t.elapsed();
                backend.shutdown().await?;
                Ok::<f64, BoxError>(tokens as f64 / wall.as_secs_f64().max(1e-9))
            })?;
            best = best.max(rate);
        }
        println!(
            "  {:<26} {:>8.1} output tok/s",
            if image {
                "one image per request"
            } else {
                "the same prompts, no image"
            },
            best
        );
        rates.push(best);
    }
    println!(
        "  with images / without: {:.2}x",
        rates[0] / rates[1].max(f64::MIN_POSITIVE)
    );

    Ok(())
}

#[path = "vision_bench/smolvlm.rs"]
mod smolvlm;
