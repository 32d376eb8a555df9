//! The tests of the quantized products: the guarantees the module
//! documentation lists, each against candle's quantizer and dequantizer or
//! the portable path's bits.

use candle_core::quantized::GgmlDType;
use candle_core::quantized::k_quants::{
    BlockQ4_0, BlockQ4K, BlockQ5_0, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
};

use super::*;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in (-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    }
}

/// Values of varying size: most in (-1, 1), some blocks scaled up or
/// down, a few zeros.
fn values(rng: &mut Rng, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let scale = [1.0, 0.01, 3.0, 1.0][(i / 32) % 4];
            if rng.next().is_multiple_of(97) {
                0.0
            } else {
                rng.unit() * scale
            }
        })
        .collect()
}

/// The bytes of candle's blocks.
fn as_bytes<T>(blocks: &[T]) -> Vec<u8> {
    // SAFETY: candle's blocks are `repr(C)` with no padding (their
    // sizes are asserted to be the ggml block sizes): plain bytes.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
    }
    .to_vec()
}

/// Blocks of `T` read from bytes.
fn from_bytes<T: GgmlType>(bytes: &[u8]) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    bytes
        .chunks_exact(size)
        .map(|chunk| {
            // SAFETY: `size` bytes; any bytes are a value of candle's
            // blocks (integers and f16).
            unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<T>()) }
        })
        .collect()
}

/// candle's quantization of `x` (rows of `k`) to `T`, as bytes.
fn candle_quantize<T: GgmlType>(x: &[f32]) -> Vec<u8> {
    let mut blocks = vec![T::zeros(); x.len() / T::BLCK_SIZE];
    T::from_float(x, &mut blocks);
    as_bytes(&blocks)
}

/// candle's dequantization of blocks of `T`.
fn candle_dequantize<T: GgmlType>(bytes: &[u8]) -> Vec<f32> {
    let blocks = from_bytes::<T>(bytes);
    let mut out = vec![0f32; blocks.len() * T::BLCK_SIZE];
    T::to_float(&blocks, &mut out);
    out
}

fn candle_quantize_as(ty: QuantType, x: &[f32]) -> Vec<u8> {
    match ty {
        QuantType::Q8_0 => candle_quantize::<BlockQ8_0>(x),
        QuantType::Q4_0 => candle_quantize::<BlockQ4_0>(x),
        QuantType::Q5_0 => candle_quantize::<BlockQ5_0>(x),
        QuantType::Q4K => candle_quantize::<BlockQ4K>(x),
        QuantType::Q5K => candle_quantize::<BlockQ5K>(x),
        QuantType::Q6K => candle_quantize::<BlockQ6K>(x),
    }
}

fn candle_dequantize_as(ty: QuantType, bytes: &[u8]) -> Vec<f32> {
    match ty {
        QuantType::Q8_0 => candle_dequantize::<BlockQ8_0>(bytes),
        QuantType::Q4_0 => candle_dequantize::<BlockQ4_0>(bytes),
        QuantType::Q5_0 => candle_dequantize::<BlockQ5_0>(bytes),
        QuantType::Q4K => candle_dequantize::<BlockQ4K>(bytes),
        QuantType::Q5K => candle_dequantize::<BlockQ5K>(bytes),
        QuantType::Q6K => candle_dequantize::<BlockQ6K>(bytes),
    }
}

/// Random bytes for `blocks` blocks of `ty`, every f16 scale set to
/// a finite value of either sign between 1e-3 and 0.1 (the minimums'
/// scale positive): every bit pattern of the values and 6-bit scales.
fn random_blocks(rng: &mut Rng, ty: QuantType, blocks: usize) -> Vec<u8> {
    let size = ty.block_bytes();
    let mut bytes: Vec<u8> = (0..blocks * size).map(|_| rng.next() as u8).collect();
    for block in bytes.chunks_exact_mut(size) {
        let mut scale = |signed: bool| {
            let v = 1e-3 + 0.099 * (rng.unit() + 1.0) / 2.0;
            let v = if signed && rng.next().is_multiple_of(2) {
                -v
            } else {
                v
            };
            half::f16::from_f32(v).to_le_bytes()
        };
        match ty {
            QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q5_0 => {
                block[..2].copy_from_slice(&scale(true));
            }
            QuantType::Q4K | QuantType::Q5K => {
                block[..2].copy_from_slice(&scale(true));
                block[2..4].copy_from_slice(&scale(false));
            }
            QuantType::Q6K => block[208..].copy_from_slice(&scale(true)),
        }
    }
    bytes
}

#[test]
fn each_path_is_taken_only_where_the_cpu_has_every_feature_its_kernels_use() {
    let avx2 = Features {
        avx2: true,
        ..Features::default()
    };
    let vnni_alone = Features {
        avx512f: true,
        avx512_vnni: true,
        ..Features::default()
    };
    let vnni = Features {
        avx512f: true,
        avx512_vnni: true,
        ..avx2
    };
    assert_eq!(Path::best_on(Features::default()), Path::Portable);
    assert_eq!(Path::best_on(avx2), Path::Avx2);
    assert_eq!(Path::best_on(vnni_alone), Path::Portable);
    assert_eq!(Path::best_on(vnni), Path::Avx512Vnni);
    assert_eq!(Path::best(), Path::best_on(Features::get()));
    for path in Path::ALL {
        assert_eq!(path.runs_here(), path.runs_on(Features::get()));
    }
}

/// Every path this CPU runs, saying which it cannot.
fn paths() -> Vec<Path> {
    Path::ALL
        .into_iter()
        .filter(|p| {
            let runs = p.runs_here();
            if !runs {
                eprintln!(
                    "this CPU does not run the {} kernels: not tested here",
                    p.name()
                );
            }
            runs
        })
        .collect()
}

fn one_thread() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a thread pool")
}

/// Row lengths for `ty`: an odd and an even number of blocks.
fn lengths(ty: QuantType) -> [usize; 2] {
    match ty.block_values() {
        32 => [96, 512],
        _ => [256, 768],
    }
}

#[test]
fn block_sizes_and_names_are_ggmls() {
    for (ty, dtype) in [
        (QuantType::Q8_0, GgmlDType::Q8_0),
        (QuantType::Q4_0, GgmlDType::Q4_0),
        (QuantType::Q5_0, GgmlDType::Q5_0),
        (QuantType::Q4K, GgmlDType::Q4K),
        (QuantType::Q5K, GgmlDType::Q5K),
        (QuantType::Q6K, GgmlDType::Q6K),
    ] {
        assert_eq!(QuantType::from_ggml(dtype), Some(ty));
        assert_eq!(ty.block_values(), dtype.block_size(), "{ty}");
        assert_eq!(ty.block_bytes(), dtype.type_size(), "{ty}");
    }
    assert_eq!(QuantType::from_ggml(GgmlDType::F16), None);
    let names: Vec<&str> = QuantType::ALL.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q5_K", "Q6_K"]);
}

#[test]
fn dequantized_rows_give_the_bits_of_candles_to_float_for_every_type() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    // A whole group of repacked rows and rows past it.
    let (n, k) = (GROUP + 5, 512);
    for ty in QuantType::ALL {
        // Blocks candle makes from random values, and random bytes.
        let made = candle_quantize_as(ty, &values(&mut rng, n * k));
        let random = random_blocks(&mut rng, ty, n * k / ty.block_values());
        for bytes in [made, random] {
            let want = candle_dequantize_as(ty, &bytes);
            let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
            assert_eq!(w.stored_bytes(), bytes.len());
            let mut row = vec![f32::NAN; k + 3];
            for j in 0..n {
                w.dequantize_row(j, &mut row);
                for c in 0..k {
                    assert_eq!(
                        row[c].to_bits(),
                        want[j * k + c].to_bits(),
                        "{ty}: row {j}, value {c}: {} against {}",
                        row[c],
                        want[j * k + c]
                    );
                }
                assert!(row[k].is_nan(), "{ty}: wrote past k");
            }
        }
    }
}

/// What was left in the output's other columns.
const UNTOUCHED: f32 = -7.25;

/// `w` times `x` (`m` rows) on `path`, into rows of `ldo`.
fn product(path: Path, x: &[f32], m: usize, w: &QuantWeight, ldo: usize) -> Vec<f32> {
    let mut out = vec![UNTOUCHED; m * ldo];
    quant_matmul_with(path, x, m, w, &mut out, ldo);
    out
}

/// Tight tolerance: against the dequantized weight times the
/// quantized-dequantized activations, summed in f64, the product is
/// off by at most `1e-6 * sum |x^| |w^|` (its only errors are f32
/// roundings: of the blocks' scales, of each block's integer sum, of
/// the sum over at most 24 blocks, and the reference's own rounding of
/// each dequantized weight; the worst seen here is under 1e-7).
const TIGHT: f64 = 1e-6;

/// Loose tolerance: against the dequantized weight times the
/// activations as given, at most `1e-2 * sum |x| |w^|`. Quantizing a
/// value moves it by at most `max |x| / 254` of its block, under
/// 0.4 % of the values here (uniform in (-1, 1) times the block's
/// size) and so under 1 % of the sum of the products' sizes.
const LOOSE: f64 = 1e-2;

/// A task's weight rows longer than one cache run ([`BLOCK_BYTES`])
/// are gone through run after run: on one thread (tasks of a quarter
/// of the rows), a repacked type (Q8_0, 4,003 rows of 256: runs of 60
/// groups) and a row-wise one (Q4_0, 7,301 rows: runs of 1,820 rows)
/// give every output its own product, on every path.
#[test]
fn rows_past_the_first_cache_run_get_their_own_products() {
    let mut rng = Rng(0x5eed_0fc0_ffee);
    let k = 256;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool");
    for (ty, n) in [(QuantType::Q8_0, 4003), (QuantType::Q4_0, 7301)] {
        let bytes = random_blocks(&mut rng, ty, n * k / ty.block_values());
        let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
        let x = values(&mut rng, k);
        let acts = Acts::quantize(&x, 1, k, ty.block_values());
        let xq: Vec<f64> = (0..k)
            .map(|c| f64::from(acts.qs[c]) * f64::from(acts.d[c / acts.block]))
            .collect();
        let mut row = vec![0f32; k];
        for path in paths() {
            let out = pool.install(|| product(path, &x, 1, &w, n));
            for (j, got) in out.iter().enumerate() {
                w.dequantize_row(j, &mut row);
                let (exact, size) = row.iter().zip(&xq).fold((0f64, 0f64), |(e, s), (w, x)| {
                    (e + f64::from(*w) * x, s + (f64::from(*w) * x).abs())
                });
                assert!(
                    (f64::from(*got) - exact).abs() <= TIGHT * size,
                    "{ty}, {}: output {j} of {n}: {got} against {exact}",
                    path.name()
                );
            }
        }
    }
}

#[test]
fn every_type_and_path_matches_the_product_of_dequantized_values() {
    let mut rng = Rng(0x0bad_5eed_cafe_f00d);
    let n = 37;
    let ldo = n + 5;
    for ty in QuantType::ALL {
        for k in lengths(ty) {
            let bytes = random_blocks(&mut rng, ty, n * k / ty.block_values());
            let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
            let mut wf = vec![0f32; n * k];
            for (j, row) in wf.chunks_exact_mut(k).enumerate() {
                w.dequantize_row(j, row);
            }
            for m in [1usize, 3, 8, 33] {
                let x = values(&mut rng, m * k);
                let acts = Acts::quantize(&x, m, k, ty.block_values());
                let xq: Vec<f64> = (0..m * k)
                    .map(|i| {
                        let (row, c) = (i / k, i % k);
                        let d = acts.d[row * (k / acts.block) + c / acts.block];
                        f64::from(acts.qs[i]) * f64::from(d)
                    })
                    .collect();
                for path in paths() {
                    let out = product(path, &x, m, &w, ldo);
                    for i in 0..m {
                        for j in 0..n {
                            let got = f64::from(out[i * ldo + j]);
                            let (mut exact, mut size) = (0f64, 0f64);
                            let (mut plain, mut plain_size) = (0f64, 0f64);
                            for c in 0..k {
                                let wv = f64::from(wf[j * k + c]);
                                exact += xq[i * k + c] * wv;
                                size += (xq[i * k + c] * wv).abs();
                                plain += f64::from(x[i * k + c]) * wv;
                                plain_size += (f64::from(x[i * k + c]) * wv).abs();
                            }
                            let what = format!(
                                "{ty}, {}: k {k}, {m} rows: row {i}, output {j}: {got}",
                                path.name()
                            );
                            assert!(
                                (got - exact).abs() <= TIGHT * size,
                                "{what} against {exact} (quantized activations)"
                            );
                            assert!(
                                (got - plain).abs() <= LOOSE * plain_size,
                                "{what} against {plain} (activations as given)"
                            );
                        }
                        for j in n..ldo {
                            assert_eq!(
                                out[i * ldo + j].to_bits(),
                                UNTOUCHED.to_bits(),
                                "{ty}, {}: row {i}, column {j} past the outputs was written",
                                path.name()
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Activation rows of 32-value blocks whose `max |x|` is `amax[r][b]`
/// (the block's value 5, negative in odd blocks); every other value is
/// `amax * t / 127` with `|t| <= 126.3` and `t` at least 0.2 from a
/// tie (`t` an integer in -126..=126 plus a multiple of 0.1 in
/// -0.3..=0.3), so its i8 is the same whether it is divided by
/// `amax / 127` or by that rounded to f16.
fn q8_0_rows(amax: &[&[f32]]) -> Vec<f32> {
    let mut x = Vec::new();
    for row in amax {
        for (b, &amax) in row.iter().enumerate() {
            for i in 0..32 {
                x.push(if i == 5 {
                    if b % 2 == 1 { -amax } else { amax }
                } else {
                    let q = ((i * 29 + b * 13) % 253) as f32 - 126.0;
                    let frac = ((i % 7) as f32 - 3.0) * 0.1;
                    amax * (q + frac) / 127.0
                });
            }
        }
    }
    x
}

/// Maxima whose `amax / 127` is not an f16: rounding it to f16 moves
/// it by 3.8e-4 of itself for 0.3 and 0.6, 1.8e-4 for 0.4 and 1.5e-4
/// for 0.9.
const ROUNDED_MAXIMA: [f32; 4] = [0.3, 0.6, 0.4, 0.9];

/// A 32-value activation block keeps the scale ggml's `block_q8_0`
/// stores: `max |x| / 127` rounded to f16 (llama.cpp's products use
/// that rounded scale), not the f32 quotient.
#[test]
fn a_32_value_activation_block_s_scale_is_max_over_127_rounded_to_f16() {
    let m = ROUNDED_MAXIMA;
    let x = q8_0_rows(&[&m[..2], &m[2..]]);
    let acts = Acts::quantize(&x, 2, 64, 32);
    for (b, block) in x.chunks_exact(32).enumerate() {
        let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
        let quotient = amax / 127.0;
        let want = half::f16::from_f32(quotient).to_f32();
        assert_ne!(
            want.to_bits(),
            quotient.to_bits(),
            "block {b}: {quotient} is an f16"
        );
        assert_eq!(
            acts.d[b].to_bits(),
            want.to_bits(),
            "block {b}: scale {} where ggml keeps {want} (max {amax})",
            acts.d[b]
        );
    }
}

/// A Q8_0 product is ggml's arithmetic: over the blocks, the weight's
/// f16 scale times the activations' f16 scale times the exact sum of
/// the blocks' i8 products, the activations' i8 being `round(x / d)`
/// with `d = max |x| / 127` (ggml's `quantize_row_q8_0_ref` divides
/// by the f32 quotient and keeps it rounded to f16). Computed here by
/// hand on hand-made weight blocks (a repacked group of 16 rows and a
/// row past it), on every path, within [`TIGHT`]: the f32 quotient as
/// the activations' scale is off by over 100 times that.
#[test]
fn a_q8_0_product_is_ggmls_sum_of_f16_scales_times_exact_integer_sums() {
    let (n, k, m) = (GROUP + 1, 96, 2);
    let m3 = ROUNDED_MAXIMA;
    let rows: [&[f32]; 2] = [&m3[..3], &[m3[1], m3[3], m3[0]]];
    let x = q8_0_rows(&rows);
    // ggml's reference quantization of each activation block.
    let mut xq = vec![0i32; m * k];
    let mut x_scale = vec![0f64; m * k / 32];
    let mut x_quotient = vec![0f64; m * k / 32];
    for (b, block) in x.chunks_exact(32).enumerate() {
        let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = 1.0 / d;
        let rounded = half::f16::from_f32(d).to_f32();
        for (c, v) in block.iter().enumerate() {
            let q = (v * id).round();
            assert_eq!(q, (v / rounded).round(), "block {b}, value {c}: near a tie");
            xq[b * 32 + c] = q as i32;
        }
        x_scale[b] = f64::from(rounded);
        x_quotient[b] = f64::from(d);
    }
    // Hand-made weight blocks: an f16 scale, and i8 that follow the
    // activations' so that the sums do not cancel.
    let mut bytes = Vec::new();
    let mut w_scale = vec![0f64; n * k / 32];
    let mut wq = vec![0i32; n * k];
    for j in 0..n {
        for b in 0..k / 32 {
            let d = half::f16::from_f32(0.01 + 0.002 * j as f32 + 0.0007 * b as f32);
            w_scale[j * (k / 32) + b] = f64::from(d.to_f32());
            bytes.extend_from_slice(&d.to_le_bytes());
            for c in b * 32..(b + 1) * 32 {
                let q = (xq[c] / 2 + ((j + c) % 5) as i32 - 2).clamp(-127, 127);
                wq[j * k + c] = q;
                bytes.push(q as i8 as u8);
            }
        }
    }
    let w = QuantWeight::new(QuantType::Q8_0, n, k, &bytes).expect("a weight");
    for path in paths() {
        let out = product(path, &x, m, &w, n);
        for i in 0..m {
            for j in 0..n {
                let (mut ggml, mut quotient, mut size) = (0f64, 0f64, 0f64);
                for b in 0..k / 32 {
                    let isum: i32 = (b * 32..(b + 1) * 32)
                        .map(|c| wq[j * k + c] * xq[i * k + c])
                        .sum();
                    let wd = w_scale[j * (k / 32) + b];
                    let xb = i * (k / 32) + b;
                    ggml += wd * x_scale[xb] * f64::from(isum);
                    quotient += wd * x_quotient[xb] * f64::from(isum);
                    size += (wd * x_scale[xb] * f64::from(isum)).abs();
                }
                let got = f64::from(out[i * n + j]);
                let what = format!("{}: row {i}, output {j}: {got}", path.name());
                assert!(
                    (quotient - ggml).abs() > 100.0 * TIGHT * size,
                    "{what}: the f32 quotient gives {quotient}, as ggml's {ggml}"
                );
                assert!(
                    (got - ggml).abs() <= TIGHT * size,
                    "{what} against ggml's {ggml} (with the f32 quotient: {quotient})"
                );
            }
        }
    }
}

#[test]
fn every_path_gives_the_bits_of_the_portable_path() {
    let mut rng = Rng(0x5151_2323_aaaa_0101);
    let pool = one_thread();
    for ty in QuantType::ALL {
        for k in lengths(ty) {
            let n = 21;
            let bytes = random_blocks(&mut rng, ty, n * k / ty.block_values());
            let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
            for m in [1usize, 2, 5, 8, 9, 33, 70] {
                let x = values(&mut rng, m * k);
                let want = product(Path::Portable, &x, m, &w, n);
                for path in paths() {
                    for got in [
                        product(path, &x, m, &w, n),
                        pool.install(|| product(path, &x, m, &w, n)),
                    ] {
                        for (e, (g, want)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(
                                g.to_bits(),
                                want.to_bits(),
                                "{ty}, {}: k {k}, {m} rows: row {}, output {}: {g} against {want}",
                                path.name(),
                                e / n,
                                e % n
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_row_alone_gives_the_bits_it_gets_in_a_batch() {
    let mut rng = Rng(0x7777_1111_3333_9999);
    let pool = one_thread();
    let (n, m) = (19, 33);
    for ty in QuantType::ALL {
        let k = lengths(ty)[1];
        let bytes = random_blocks(&mut rng, ty, n * k / ty.block_values());
        let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
        let x = values(&mut rng, m * k);
        for path in paths() {
            let batch = product(path, &x, m, &w, n);
            for i in 0..m {
                let row = &x[i * k..(i + 1) * k];
                for alone in [
                    product(path, row, 1, &w, n),
                    pool.install(|| product(path, row, 1, &w, n)),
                ] {
                    for j in 0..n {
                        assert_eq!(
                            alone[j].to_bits(),
                            batch[i * n + j].to_bits(),
                            "{ty}, {}: row {i}, output {j}",
                            path.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_weight_of_the_wrong_size_is_refused() {
    for ty in QuantType::ALL {
        let (n, k) = (3, 2 * ty.block_values());
        let len = n * 2 * ty.block_bytes();
        let bytes = vec![0u8; len + 1];
        assert!(QuantWeight::new(ty, n, k, &bytes[..len]).is_ok(), "{ty}");
        for wrong in [len - 1, len + 1, 0] {
            let err = QuantWeight::new(ty, n, k, &bytes[..wrong]).expect_err("refused");
            assert!(matches!(err, QuantError::WrongLength { .. }), "{ty}: {err}");
            assert!(
                matches!(err, QuantError::WrongLength { want, got, .. } if want == len && got == wrong),
                "{ty}: {err}"
            );
        }
        let err = QuantWeight::new(ty, n, k + 16, &bytes[..len]).expect_err("refused");
        assert!(
            matches!(err, QuantError::NotWholeBlocks { .. }),
            "{ty}: {err}"
        );
    }
}

#[test]
fn an_empty_product_writes_zeros_or_nothing() {
    let w = QuantWeight::new(QuantType::Q8_0, 4, 0, &[]).expect("a weight");
    let mut out = vec![UNTOUCHED; 2 * 6];
    quant_matmul(&[], 2, &w, &mut out, 6);
    assert_eq!(&out[..4], &[0.0; 4]);
    assert_eq!(&out[6..10], &[0.0; 4]);
    assert_eq!(out[4], UNTOUCHED);
    quant_matmul(&[], 0, &w, &mut [], 6);
}

/// One input meets weights of three activation formats' worth of types
/// (Q4_K and Q6_K take 256-value blocks, Q8_0 and Q5_0 32-value ones):
/// its rows are quantized once per format, and every product gives the
/// bits it gets with the input quantized for it alone.
#[test]
fn an_input_is_quantized_once_per_activation_format_for_all_its_weights() {
    let mut rng = Rng(0x5151_2727_8383_4949);
    let (n, m, k) = (24, 9, 512);
    let x = values(&mut rng, m * k);
    let mut input = QuantInput::new(&x, m, k);
    assert_eq!(input.quantizations(), 0);
    for (ty, formats) in [
        (QuantType::Q4K, 1),
        (QuantType::Q6K, 1),
        (QuantType::Q4K, 1),
        (QuantType::Q8_0, 2),
        (QuantType::Q5_0, 2),
        (QuantType::Q6K, 2),
    ] {
        let bytes = random_blocks(&mut rng, ty, n * k / ty.block_values());
        let w = QuantWeight::new(ty, n, k, &bytes).expect("a weight");
        let mut shared = vec![f32::NAN; m * n];
        quant_matmul_input(&mut input, &w, &mut shared, n);
        assert_eq!(input.quantizations(), formats, "after {ty}");
        let mut alone = vec![f32::NAN; m * n];
        quant_matmul(&x, m, &w, &mut alone, n);
        assert!(
            shared
                .iter()
                .zip(&alone)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{ty}"
        );
    }
}
