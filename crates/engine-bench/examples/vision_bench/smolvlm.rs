//! The SmolVLM half of `bench/vision` (sections 4 and 5 of the module
//! docs of `vision_bench.rs`): testkit's SmolVLM fixture at
//! SmolVLM-256M-Instruct's shape, its SigLIP tower alone on candle, and
//! candle's TTFT beside llama.cpp's `llama-mtmd-cli` on the same weights.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use candle_core::{DType, Device};
use guidebench_candle::loader::SafetensorsFiles;
use guidebench_candle::model::Weights;
use guidebench_candle::vision::SmolVlmTower;
use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::{Engine, EngineOptions, EngineRequest};
use guidebench_core::generation::StepRunner;
use guidebench_core::model::ModelFolder;
use guidebench_core::open::OpenStep;
use guidebench_core::request::MediaSource;
use guidebench_core::sampling::Sampling;
use guidebench_core::vision::{SmolVlmConfig, VisionFamily};
use guidebench_engine_bench::machine::{MatmulPeak, load_average};
use guidebench_engine_bench::{BoxError, median};

use super::write_smolvlm_images;
use super::{FixtureSpec, SmolVlmSpec, TEXT_TOKENS, text_of, write_smolvlm_fixture};

/// The image both sides encode: testkit's 64 × 20 strip, which the
/// default processor resizes to 2048 × 640 (4 × 2 tiles and the global
/// view: 9 frames).
const IMAGE: &str = "strip.png";

/// SmolVLM-256M-Instruct's shape (its published `config.json`): SigLIP
/// width 768, MLP 3072, 12 layers, 12 heads, 512-pixel tiles of 16-pixel
/// patches, pixel shuffle 4; SmolLM2-135M's text model (width 576, 30
/// layers, 9 heads, 3 KV heads, MLP 1536, RoPE base 100000, tied
/// embeddings) with the fixture's small vocabulary (the published one has
/// 49,280 tokens: its embedding is not on the path of an image's TTFT
/// but for the last row); the processor's longest edge 2048.
fn spec() -> SmolVlmSpec {
    let tiny = SmolVlmSpec::tiny();
    SmolVlmSpec {
        text: FixtureSpec {
            hidden_size: 576,
            intermediate_size: 1536,
            num_hidden_layers: 30,
            num_attention_heads: 9,
            num_key_value_heads: 3,
            rope_theta: 100_000.0,
            max_position_embeddings: 8192,
            tie_word_embeddings: true,
            ..tiny.text.clone()
        },
        vision_hidden: 768,
        vision_intermediate: 3072,
        vision_layers: 12,
        vision_heads: 12,
        image_size: 512,
        patch_size: 16,
        scale_factor: 4,
        longest_edge: 2048,
        do_image_splitting: true,
        // As the published vocabulary has it: llama.cpp's idefics3 layout
        // writes it before the global view, and stops without it.
        newline_pair_token: true,
        ..tiny
    }
}

/// The fixture's folder (processor defaults) and its one-tile copy (the
/// same files, linked, but for a processor that neither upsizes nor
/// splits: `size.longest_edge` 512, `do_image_splitting` false), written
/// on first use.
pub(super) fn model_dirs() -> Result<(PathBuf, PathBuf), BoxError> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("bench-models/smolvlm-256m-shape-v2");
    let one = target.join("bench-models/smolvlm-256m-shape-v2-one-tile");
    if !dir.join("images").is_dir() {
        let t = Instant::now();
        write_smolvlm_fixture(&dir, &spec())?;
        write_smolvlm_images(&dir)?;
        eprintln!("wrote {} in {:.1?}", dir.display(), t.elapsed());
    }
    if !one.join("preprocessor_config.json").is_file() {
        std::fs::create_dir_all(&one)?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let to = one.join(&name);
            if name == "preprocessor_config.json" || to.exists() {
                continue;
            }
            std::os::unix::fs::symlink(entry.path().canonicalize()?, to)?;
        }
        let mut pre: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
            dir.join("preprocessor_config.json"),
        )?)?;
        pre["do_image_splitting"] = serde_json::json!(false);
        pre["size"] = serde_json::json!({"longest_edge": spec().image_size});
        std::fs::write(
            one.join("preprocessor_config.json"),
            serde_json::to_string_pretty(&pre)?,
        )?;
    }
    Ok((dir, one))
}

/// The SigLIP tower's and connector's FLOPs for one frame (two per
/// multiply-add): the patch product, per layer the q/k/v/out and MLP
/// products and attention over the frame's patches, and the connector.
fn frame_flops(c: &SmolVlmConfig) -> f64 {
    let v = &c.vision;
    let (d, i, p) = (
        v.hidden_size as f64,
        v.intermediate_size as f64,
        v.patch_size as f64,
    );
    let t = v.patches() as f64;
    let per_layer = 2.0 * t * d * 4.0 * d + 2.0 * 2.0 * t * t * d + 2.0 * 2.0 * t * d * i;
    let connector =
        2.0 * c.image_seq_len() as f64 * c.connector_in() as f64 * c.text_hidden_size as f64;
    2.0 * t * 3.0 * p * p * d + v.num_hidden_layers as f64 * per_layer + connector
}

/// llama.cpp's side: `llama-mtmd-cli` and the folder of converted files.
pub(super) struct Llama {
    /// `llama-mtmd-cli`.
    pub cli: PathBuf,
    /// The GGUF files (`text-{f32,f16,Q8_0}.gguf`,
    /// `mmproj[-one-tile]-{f32,f16[,Q8_0]}.gguf`).
    pub gguf: PathBuf,
}

/// One llama.cpp run: frames encoded, their encoding time, the image
/// tokens' decoding, and the prompt's whole evaluation (image and text).
struct LlamaRun {
    slices: usize,
    encode_ms: f64,
    decode_ms: f64,
    prompt_eval_ms: f64,
    prompt_tokens: usize,
    /// Why llama-mtmd-cli stopped after encoding, where it did.
    aborted: Option<String>,
}

impl Llama {
    /// The text and mmproj files of `format` (`f32`, `f16`, `Q8_0`) for
    /// the default processor or `one_tile`; the mmproj's own format
    /// (`Q8_0` falls back to `f16` where llama-quantize made none).
    fn files(&self, format: &str, one_tile: bool) -> (PathBuf, PathBuf, String) {
        let tile = if one_tile { "-one-tile" } else { "" };
        let text = self.gguf.join(format!("text-{format}.gguf"));
        let mmproj = self.gguf.join(format!("mmproj{tile}-{format}.gguf"));
        match mmproj.is_file() {
            true => (text, mmproj, format.to_owned()),
            false => (
                text,
                self.gguf.join(format!("mmproj{tile}-f16.gguf")),
                "f16".to_owned(),
            ),
        }
    }

    /// One `llama-mtmd-cli` run of one image and `prompt`, one new token.
    fn run(
        &self,
        text: &Path,
        mmproj: &Path,
        image: &Path,
        prompt: &str,
        threads: usize,
    ) -> Result<LlamaRun, BoxError> {
        let output = Command::new(&self.cli)
            .arg("-m")
            .arg(text)
            .arg("--mmproj")
            .arg(mmproj)
            .arg("--image")
            .arg(image)
            .args(["-p", prompt, "-n", "1", "--temp", "0", "-c", "4096"])
            .args(["-t", &threads.to_string()])
            // its timings: libllama's perf counters, logged at verbosity 4
            .args(["--perf", "--log-verbosity", "4"])
            .output()
            .map_err(|e| format!("{}: {e}", self.cli.display()))?;
        let log = String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout);
        let ms_after = |line: &str, key: &str| -> Option<f64> {
            let (_, rest) = line.split_once(key)?;
            rest.split_whitespace().next()?.parse().ok()
        };
        let mut run = LlamaRun {
            slices: 0,
            encode_ms: 0.0,
            decode_ms: 0.0,
            prompt_eval_ms: f64::NAN,
            prompt_tokens: 0,
            aborted: None,
        };
        for line in log.lines() {
            // llama-mtmd-cli encodes the media chunks between two text
            // chunks as one batch (`encoding mtmd batch, n_chunks = K`,
            // then `mtmd batch encoding done in N ms`); the helper's
            // single-chunk path prints `slice encoded in N ms`.
            if let Some(k) = ms_after(line, "encoding mtmd batch, n_chunks = ") {
                run.slices += k as usize;
            } else if let Some(ms) = ms_after(line, "mtmd batch encoding done in ") {
                run.encode_ms += ms;
            } else if let Some(ms) = ms_after(line, "slice encoded in ") {
                run.slices += 1;
                run.encode_ms += ms;
            } else if let Some(ms) = line
                .contains("decoded (batch")
                .then(|| ms_after(line, ") in "))
                .flatten()
            {
                run.decode_ms += ms;
            } else if line.contains("prompt eval time") {
                run.prompt_eval_ms = ms_after(line, "= ").unwrap_or(f64::NAN);
                run.prompt_tokens = line
                    .split_once("/ ")
                    .and_then(|(_, r)| r.split_whitespace().next()?.parse().ok())
                    .unwrap_or(0);
            }
        }
        if !output.status.success() {
            let why = log
                .lines()
                .find(|l| l.contains("GGML_ASSERT") || l.contains("error"))
                .unwrap_or("no message")
                .trim();
            // the source file's name, not its whole path
            let why = why.rsplit('/').next().unwrap_or(why).to_owned();
            if run.slices == 0 {
                return Err(format!("llama-mtmd-cli failed ({}): {why}", output.status).into());
            }
            // Encoded, then stopped: the encoder time stands, the TTFT
            // does not.
            run.aborted = Some(why);
        } else if run.slices == 0 || run.prompt_eval_ms.is_nan() {
            return Err(
                format!("no encode or prompt-eval time in llama-mtmd-cli's log:\n{log}").into(),
            );
        }
        Ok(run)
    }
}

/// candle's TTFT of one request: total, image encoding, preparing.
fn candle_ttft(
    runner: &mut StepRunner<CandleEngine>,
    request: &EngineRequest,
) -> Result<(f64, f64, f64, u32), BoxError> {
    let t = Instant::now();
    let out = runner.generate(std::slice::from_ref(request))?.remove(0)?;
    let ttft = out.token_instants[0].duration_since(t).as_secs_f64();
    let stats = out.images.ok_or("no image stats")?;
    Ok((
        ttft,
        stats.encode.as_secs_f64(),
        stats.prepare.as_secs_f64(),
        out.prompt_tokens,
    ))
}

/// Sections 4 and 5.
pub(super) fn run(
    rounds: usize,
    threads: usize,
    pool: &rayon::ThreadPool,
    peak: &mut MatmulPeak,
    llama: Option<&Llama>,
) -> Result<(), BoxError> {
    let (dir, one_dir) = model_dirs()?;
    let open = |d: &Path| ModelFolder::from_dir_with_vision(d, &[VisionFamily::SmolVlm]);
    let (folder, one_folder) = (open(&dir)?, open(&one_dir)?);
    let config = folder
        .smolvlm()
        .ok_or("the fixture has no SmolVLM side")?
        .clone();
    let image = dir.join("images").join(IMAGE);
    let source = MediaSource::Path(image.clone());
    let prepared = folder
        .images()
        .ok_or("no image processor")?
        .prepare(&source)?;
    let one = one_folder
        .images()
        .ok_or("no image processor")?
        .prepare(&source)?;
    let v = &config.vision;
    println!(
        "\nSmolVLM: SigLIP {0}x{0} tiles, patch {1}, width {2}, {3} layers, {4} heads, MLP {5}; \
         {6} image tokens a frame; text {7} wide, {8} layers; image {9}: {10} frames at the \
         default size (longest edge 2048, split), 1 at one tile",
        v.image_size,
        v.patch_size,
        v.hidden_size,
        v.num_hidden_layers,
        v.num_attention_heads,
        v.intermediate_size,
        config.image_seq_len(),
        folder.config().hidden_size,
        folder.config().num_hidden_layers,
        image.display(),
        prepared.frames,
    );

    // 4. The tower alone.
    let weights = Weights::from_files(
        SafetensorsFiles::open(&folder.weight_files()?)?,
        DType::F32,
        &Device::Cpu,
    );
    let tower = pool.install(|| SmolVlmTower::load(&weights, &config))?;
    let flops = frame_flops(&config);
    println!(
        "\nSigLIP tower + connector alone ({:.1} GFLOP per frame; load {}):",
        flops / 1e9,
        load_average()
    );
    println!("  size        batch  frames  images/s  ms/image  share of FLOP bound");
    for (label, image, batch) in [
        ("one tile", &one, 1usize),
        ("one tile", &one, 8),
        ("default", &prepared, 1),
    ] {
        let images = vec![image; batch];
        let mut best = f64::INFINITY;
        for _ in 0..rounds.min(2) {
            let t = Instant::now();
            let features = pool.install(|| tower.encode(&images))?;
            best = best.min(t.elapsed().as_secs_f64());
            std::hint::black_box(features);
        }
        let bound = (batch * image.frames) as f64 * flops / peak.measure(3);
        println!(
            "  {label:<10}  {batch:>5}  {:>6}  {:>8.2}  {:>8.1}  {:>5.1} %",
            batch * image.frames,
            batch as f64 / best,
            best * 1e3 / batch as f64,
            100.0 * bound / best
        );
    }
    drop(tower);

    // 5. TTFT, candle and llama.cpp alternately.
    let options = CandleOptions {
        common: EngineOptions {
            threads: i64::try_from(threads).ok(),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    let text = text_of(folder.tokenizer().as_ref(), TEXT_TOKENS)?;
    let request = EngineRequest {
        id: 0,
        prompt: format!("<image>\n{text}"),
        add_special_tokens: true,
        images: vec![source.clone()],
        prepared_images: Vec::new(),
        audio: Vec::new(),
        sampling: Sampling::fixed_length(1).expect("valid sampling"),
    };
    println!(
        "\nTTFT of one image + {TEXT_TOKENS} text tokens, candle (safetensors, f32) beside \
         llama.cpp's llama-mtmd-cli (median of {} rounds, alternating; load {}):",
        rounds.clamp(1, 3),
        load_average()
    );
    println!(
        "  size      engine / format            frames  encoder ms  ms/frame  TTFT ms  \
         candle / llama.cpp (encoder ms per frame, TTFT)"
    );
    for (label, d, frames) in [
        ("one tile", &one_dir, one.frames),
        ("default", &dir, prepared.frames),
    ] {
        let d = d.to_str().ok_or("a UTF-8 path")?;
        let mut runner = CandleEngine::runner(Some(d), &options)?;
        let formats = ["f32", "f16", "Q8_0"];
        let mut candle = Vec::new();
        let mut llama_runs: Vec<Vec<LlamaRun>> = formats.iter().map(|_| Vec::new()).collect();
        let mut llama_errors: Vec<Option<String>> = formats.iter().map(|_| None).collect();
        let rounds_here = if label == "default" {
            1
        } else {
            rounds.clamp(1, 3)
        };
        // One warm-up of candle's engine (the first request pays for the
        // weights' first touch).
        candle_ttft(&mut runner, &request)?;
        for _ in 0..rounds_here {
            candle.push(candle_ttft(&mut runner, &request)?);
            if let Some(llama) = llama {
                for (i, format) in formats.iter().enumerate() {
                    if llama_errors[i].is_some() {
                        continue;
                    }
                    let (text_gguf, mmproj, _) = llama.files(format, label == "one tile");
                    match llama.run(&text_gguf, &mmproj, &image, &text, threads) {
                        Ok(run) => llama_runs[i].push(run),
                        Err(e) => llama_errors[i] = Some(e.to_string()),
                    }
                }
            }
        }
        drop(runner);
        let c_ttft = median(candle.iter().map(|c| c.0)) * 1e3;
        let c_enc = median(candle.iter().map(|c| c.1)) * 1e3;
        println!(
            "  {label:<8}  candle f32                 {frames:>6}  {c_enc:>10.0}  {:>8.0}  {c_ttft:>7.0}  \
             ({} prompt tokens)",
            c_enc / frames as f64,
            candle[0].3
        );
        let Some(llama) = llama else { continue };
        for (i, format) in formats.iter().enumerate() {
            let (_, _, mm) = llama.files(format, label == "one tile");
            let name = format!("llama.cpp text {format}, mmproj {mm}");
            if let Some(e) = &llama_errors[i] {
                let first = e.lines().next().unwrap_or("");
                println!("  {label:<8}  {name:<26} failed: {first}");
                continue;
            }
            let runs = &llama_runs[i];
            let enc = median(runs.iter().map(|r| r.encode_ms));
            let slices = runs[0].slices;
            let per_slice = enc / slices as f64;
            if let Some(why) = &runs[0].aborted {
                println!(
                    "  {label:<8}  {name:<26} {slices:>6}  {enc:>10.0}  {per_slice:>8.0}  {:>7}  \
                     {:.2}x per frame, TTFT n/a (aborted after encoding: {why})",
                    "n/a",
                    (c_enc / frames as f64) / per_slice,
                );
                continue;
            }
            // libllama's prompt-eval clock runs from the first decode to
            // the prompt's last: the image encodes between text chunks are
            // inside it already.
            let ttft = median(runs.iter().map(|r| r.prompt_eval_ms));
            println!(
                "  {label:<8}  {name:<26} {slices:>6}  {enc:>10.0}  {per_slice:>8.0}  {ttft:>7.0}  \
                 {:.2}x per frame, {:.2}x TTFT  ({} prompt tokens; image decode {:.0} ms)",
                (c_enc / frames as f64) / per_slice,
                c_ttft / ttft,
                runs[0].prompt_tokens,
                median(runs.iter().map(|r| r.decode_ms))
            );
        }
    }
    Ok(())
}
