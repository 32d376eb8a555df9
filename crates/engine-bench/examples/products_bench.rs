//! A decoding step's projections alone, libtorch's matmul beside the
//! candle engine's packed kernel, measured in one run (what
//! `bench/products` runs): how far each gets, at the rows of a decoding
//! step, from the peak the roofline divides by.
//!
//! The products are one step's of the model (`builtin:tiny` unless
//! `model=`): per layer the stacked q/k/v projection, the output
//! projection, the stacked gate/up projection and the down projection,
//! then the LM head, on weights of random values (the time does not
//! depend on them), for inputs of each of `rows` rows. Per round, rows by
//! rows, interleaved:
//!
//! - libtorch, `x (m, in) @ w (in, out)` (the tch engine's layout) and
//!   `w (out, in) @ x^T` (its second layout, `dual_layout=true`), each
//!   into outputs kept from one pass to the next, and its rate on a
//!   prefill-shaped product (4096 x 512 by 512 x 2816);
//! - the packed kernel (`guidebench_candle::kernels`), on weights packed
//!   once into one arena, as the candle engine holds them, beside the
//!   `gemm` crate's rate on that prefill-shaped product (the peak
//!   `bench/candle`'s roofline divides by) and a loop of multiply-adds
//!   alone on every thread (testkit's `FmaPeak`: what the cores'
//!   arithmetic allows with nothing read from memory);
//!
//! each product rate the median of `passes` passes over all the products,
//! as FLOP/s and as the rate the weights were read at. The two libraries
//! run in processes of their own, one after the other in every round
//! (each first in every other round):
//! libtorch's OpenMP threads keep spinning after their work (libgomp,
//! `OMP_WAIT_POLICY=ACTIVE`, which this bench sets for libtorch's
//! process unless the caller set it), and in one process they took the
//! cores from the packed kernel's threads (its rate and the
//! multiply-add loop's fell by a third to a half); with them asleep
//! between products (`PASSIVE`) libtorch's own small products fell by
//! up to four times. Printed per row count: the median over the rounds
//! of each rate, of each one's share of the peaks measured in its own
//! process that round, and of each round's packed / libtorch ratio.
//!
//! ```text
//! bench/products [rounds=5] [passes=20] [rows=1,8,32,128] [threads=N] [model=builtin:tiny]
//! cargo run --release -p guidebench-engine-bench --features tch --example products_bench -- [the same]
//! ```

use std::process::Command;
use std::time::Instant;

use guidebench_candle::kernels::{PackedWeight, WeightArena, packed_matmul};
use guidebench_core::model::ModelFolder;
use guidebench_engine_bench::machine::{FmaPeak, FmaWidth, MatmulPeak, cpu_name, load_average};
use guidebench_engine_bench::workload::MODEL;
use guidebench_engine_bench::{BoxError, median};
use tch::{Device, Kind, Tensor};

use guidebench_engine_bench::torch::tch_matmul_peak;

/// One product of a step: `out` outputs from `in` inputs.
#[derive(Clone, Copy)]
struct Shape {
    out: usize,
    inp: usize,
}

/// FLOPs of one pass over `shapes` at `m` rows, per kind of product
/// ([`KINDS`]).
fn flops_by_kind(shapes: &[Shape], m: usize) -> [f64; 5] {
    let mut flops = [0f64; 5];
    for (j, s) in shapes.iter().enumerate() {
        flops[kind_of(j, shapes.len())] += 2.0 * (m * s.out * s.inp) as f64;
    }
    flops
}

/// One step's products, in the order a step runs them.
fn step_shapes(folder: &ModelFolder) -> Vec<Shape> {
    let c = folder.config();
    let (h, q, kv) = (
        c.hidden_size,
        c.num_attention_heads * c.head_dim,
        c.num_key_value_heads * c.head_dim,
    );
    let layer = [
        Shape {
            out: q + 2 * kv,
            inp: h,
        },
        Shape { out: h, inp: q },
        Shape {
            out: 2 * c.intermediate_size,
            inp: h,
        },
        Shape {
            out: h,
            inp: c.intermediate_size,
        },
    ];
    let mut shapes: Vec<Shape> = (0..c.num_hidden_layers).flat_map(|_| layer).collect();
    shapes.push(Shape {
        out: c.vocab_size,
        inp: h,
    });
    shapes
}

/// `len` values in [-1, 1], different for every `seed`.
fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 + seed * 104_729) as f32 * 1e-3).sin())
        .collect()
}

/// One step's weights in each library's layouts.
struct Weights {
    shapes: Vec<Shape>,
    /// `(in, out)`, contiguous: the tch engine's layout.
    in_out: Vec<Tensor>,
    /// `(out, in)`, contiguous: the tch engine's second layout.
    out_in: Vec<Tensor>,
    packed: Vec<PackedWeight>,
}

impl Weights {
    /// `side`'s layouts only.
    fn new(shapes: Vec<Shape>, side: Library) -> Result<Weights, BoxError> {
        let arena = WeightArena::new();
        let (mut in_out, mut out_in, mut packed) = (Vec::new(), Vec::new(), Vec::new());
        for (i, s) in shapes.iter().enumerate() {
            let w = values(s.out * s.inp, i);
            if side == Library::Torch {
                let t = Tensor::f_from_slice(&w)?.f_reshape([s.out as i64, s.inp as i64])?;
                in_out.push(t.f_transpose(0, 1)?.f_contiguous()?);
                out_in.push(t);
            } else {
                packed.push(PackedWeight::pack_in(&w, s.out, s.inp, &arena));
            }
        }
        Ok(Weights {
            shapes,
            in_out,
            out_in,
            packed,
        })
    }
}

/// The inputs and kept outputs of the products at `m` rows.
struct Buffers {
    m: usize,
    /// `(m, in)` per product, libtorch's.
    x: Vec<Tensor>,
    /// `(m, out)` per product.
    y_in_out: Vec<Tensor>,
    /// `(out, m)` per product.
    y_out_in: Vec<Tensor>,
    /// `(m, in)` per product, the packed kernel's.
    xs: Vec<Vec<f32>>,
    /// `(m, out)` per product.
    ys: Vec<Vec<f32>>,
}

impl Buffers {
    /// `side`'s buffers only.
    fn new(weights: &Weights, m: usize, side: Library) -> Result<Buffers, BoxError> {
        let mut b = Buffers {
            m,
            x: Vec::new(),
            y_in_out: Vec::new(),
            y_out_in: Vec::new(),
            xs: Vec::new(),
            ys: Vec::new(),
        };
        for (i, s) in weights.shapes.iter().enumerate() {
            let x = values(m * s.inp, 1000 + i);
            if side == Library::Torch {
                b.x.push(Tensor::f_from_slice(&x)?.f_reshape([m as i64, s.inp as i64])?);
                let zeros = |rows: usize, cols: usize| {
                    Tensor::f_zeros([rows as i64, cols as i64], (Kind::Float, Device::Cpu))
                };
                b.y_in_out.push(zeros(m, s.out)?);
                b.y_out_in.push(zeros(s.out, m)?);
            } else {
                b.xs.push(x);
                b.ys.push(vec![0f32; m * s.out]);
            }
        }
        Ok(b)
    }
}

/// Which library and layout a pass runs.
#[derive(Clone, Copy)]
enum Lib {
    TorchInOut,
    TorchOutIn,
    Packed,
}

/// The kinds of a step's products, in [`step_shapes`]' order: four per
/// layer, then the LM head.
const KINDS: [&str; 5] = ["q/k/v", "output", "gate/up", "down", "LM head"];

/// The kind (an index of [`KINDS`]) of product `j` of `count`.
fn kind_of(j: usize, count: usize) -> usize {
    if j + 1 == count { 4 } else { j % 4 }
}

/// Passes over every product: the median time of a pass, and per kind
/// of product ([`KINDS`]) the median of its products' time in a pass,
/// seconds.
struct Timing {
    pass: f64,
    kinds: [f64; 5],
}

/// `passes` passes of `lib` over every product.
fn median_pass(
    lib: Lib,
    weights: &Weights,
    buffers: &mut Buffers,
    pool: &rayon::ThreadPool,
    passes: usize,
) -> Result<Timing, BoxError> {
    let count = weights.shapes.len();
    let mut times = Vec::with_capacity(passes);
    let mut kinds: [Vec<f64>; 5] = Default::default();
    for _ in 0..passes {
        let mut by_kind = [0f64; 5];
        let start = Instant::now();
        match lib {
            Lib::TorchInOut => {
                let products = buffers.x.iter().zip(&weights.in_out).zip(&buffers.y_in_out);
                for (j, ((x, w), y)) in products.enumerate() {
                    let t = Instant::now();
                    let out = x.f_mm_out(y, w)?;
                    std::hint::black_box(&out);
                    by_kind[kind_of(j, count)] += t.elapsed().as_secs_f64();
                }
            }
            Lib::TorchOutIn => {
                let products = buffers.x.iter().zip(&weights.out_in).zip(&buffers.y_out_in);
                for (j, ((x, w), y)) in products.enumerate() {
                    let t = Instant::now();
                    let out = w.f_mm_out(y, &x.tr())?;
                    std::hint::black_box(&out);
                    by_kind[kind_of(j, count)] += t.elapsed().as_secs_f64();
                }
            }
            Lib::Packed => {
                // only what the packed kernel reads and writes goes to
                // the pool (libtorch's tensors are not `Sync`)
                let (m, xs, ys, packed) =
                    (buffers.m, &buffers.xs, &mut buffers.ys, &weights.packed);
                let by_kind = &mut by_kind;
                pool.install(|| {
                    let products = xs.iter().zip(packed).zip(ys.iter_mut());
                    for (j, ((x, w), y)) in products.enumerate() {
                        let t = Instant::now();
                        packed_matmul(x, m, w, y);
                        std::hint::black_box(&*y);
                        by_kind[kind_of(j, count)] += t.elapsed().as_secs_f64();
                    }
                });
            }
        }
        times.push(start.elapsed().as_secs_f64());
        for (all, t) in kinds.iter_mut().zip(by_kind) {
            all.push(t);
        }
    }
    Ok(Timing {
        pass: median(times),
        kinds: kinds.map(median),
    })
}

/// The libraries' passes: (library, its label).
const LIBS: [(Lib, &str); 3] = [
    (Lib::TorchInOut, "libtorch x @ w(in,out)"),
    (Lib::TorchOutIn, "libtorch w(out,in) @ x^T"),
    (Lib::Packed, "packed kernel"),
];

/// The library a child process measures (`side=torch`, `side=packed`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Library {
    /// libtorch's matmul, both of the `tch` engine's layouts.
    Torch,
    /// The candle engine's packed kernel.
    Packed,
}

impl Library {
    fn name(self) -> &'static str {
        match self {
            Library::Torch => "torch",
            Library::Packed => "packed",
        }
    }

    fn parse(name: &str) -> Result<Library, BoxError> {
        match name {
            "torch" => Ok(Library::Torch),
            "packed" => Ok(Library::Packed),
            other => Err(format!("unknown side `{other}` (torch, packed)").into()),
        }
    }

    /// The passes a child measuring it runs.
    fn passes(self) -> &'static [Lib] {
        match self {
            Library::Torch => &[Lib::TorchInOut, Lib::TorchOutIn],
            Library::Packed => &[Lib::Packed],
        }
    }
}

/// What the bench was asked.
struct Args {
    rounds: usize,
    passes: usize,
    rows: Vec<usize>,
    model: String,
    threads: usize,
    /// Set in a child process: which library it measures.
    side: Option<Library>,
}

impl Args {
    fn parse() -> Result<Args, BoxError> {
        let mut args = Args {
            rounds: 5,
            passes: 20,
            rows: vec![1, 8, 32, 128],
            model: MODEL.to_owned(),
            threads: std::thread::available_parallelism().map_or(1, usize::from),
            side: None,
        };
        for arg in std::env::args().skip(1) {
            let (key, value) = arg.split_once('=').ok_or("expected key=value")?;
            match key {
                "rounds" => args.rounds = value.parse::<usize>()?.max(1),
                "passes" => args.passes = value.parse::<usize>()?.max(1),
                "rows" => args.rows = value.split(',').map(str::parse).collect::<Result<_, _>>()?,
                "model" => args.model = value.to_owned(),
                "threads" => args.threads = value.parse()?,
                "side" => args.side = Some(Library::parse(value)?),
                other => {
                    return Err(format!(
                        "unknown argument `{other}` (rounds, passes, rows, model, threads)"
                    )
                    .into());
                }
            }
        }
        Ok(args)
    }

    /// The arguments a child process measuring `side` gets.
    fn child(&self, side: Library) -> Vec<String> {
        let rows: Vec<String> = self.rows.iter().map(usize::to_string).collect();
        vec![
            format!("passes={}", self.passes),
            format!("rows={}", rows.join(",")),
            format!("model={}", self.model),
            format!("threads={}", self.threads),
            format!("side={}", side.name()),
        ]
    }
}

/// One child's figures: FLOP/s per library it ran, per row count, and
/// the peaks it measured (FLOP/s; `null` where it measured none).
#[derive(serde::Serialize, serde::Deserialize)]
struct Side {
    /// Per row count, per library, FLOP/s of a pass over every product.
    rates: Vec<Vec<f64>>,
    /// Per row count, per library, FLOP/s per kind of product ([`KINDS`]).
    kinds: Vec<Vec<[f64; 5]>>,
    peak: f64,
    fma: Option<f64>,
}

/// A child: one side's products at every row count, and its peaks, as
/// one JSON line.
fn measure(args: &Args, side: Library) -> Result<(), BoxError> {
    let libs = side.passes();
    let _guard = tch::no_grad_guard();
    tch::set_num_threads(i32::try_from(args.threads)?);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build()?;
    let folder = ModelFolder::open(&args.model)?;
    let weights = Weights::new(step_shapes(&folder), side)?;
    let mut buffers: Vec<Buffers> = args
        .rows
        .iter()
        .map(|&m| Buffers::new(&weights, m, side))
        .collect::<Result<_, _>>()?;
    let (mut rates, mut kinds) = (Vec::new(), Vec::new());
    for b in &mut buffers {
        let (mut at_rows, mut kinds_at_rows) = (Vec::new(), Vec::new());
        for &lib in libs {
            // a warm-up as long as the measure: after a single pass, the
            // 1-row products of some runs went at one thread's rate (13-15
            // GFLOP/s against 21-23 on a 2-core Xeon)
            median_pass(lib, &weights, b, &pool, args.passes)?;
            let timing = median_pass(lib, &weights, b, &pool, args.passes)?;
            let flops = flops_by_kind(&weights.shapes, b.m);
            at_rows.push(flops.iter().sum::<f64>() / timing.pass);
            kinds_at_rows.push(std::array::from_fn::<f64, 5, _>(|k| {
                flops[k] / timing.kinds[k]
            }));
        }
        rates.push(at_rows);
        kinds.push(kinds_at_rows);
    }
    let (peak, fma) = if side == Library::Torch {
        (tch_matmul_peak()?, None)
    } else {
        (
            MatmulPeak::new(args.threads)?.measure(3),
            FmaPeak::new(args.threads)?.measure(3),
        )
    };
    println!(
        "{}",
        serde_json::to_string(&Side {
            rates,
            kinds,
            peak,
            fma
        })?
    );
    Ok(())
}

/// Runs this bench's binary as a child measuring `side`.
fn child(args: &Args, side: Library) -> Result<Side, BoxError> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args(args.child(side));
    if side == Library::Torch && std::env::var_os("OMP_WAIT_POLICY").is_none() {
        command.env("OMP_WAIT_POLICY", "ACTIVE");
    }
    let output = command.output()?;
    if !output.status.success() {
        return Err(format!(
            "the {} process failed ({}): {}",
            side.name(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let stdout = String::from_utf8(output.stdout)?;
    let line = stdout.lines().last().ok_or("the child printed nothing")?;
    Ok(serde_json::from_str(line)?)
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse()?;
    if let Some(side) = args.side {
        return measure(&args, side);
    }
    let folder = ModelFolder::open(&args.model)?;
    let shapes = step_shapes(&folder);
    let (count, bytes) = (
        shapes.len(),
        shapes
            .iter()
            .map(|s| 4.0 * (s.out * s.inp) as f64)
            .sum::<f64>(),
    );
    println!(
        "products bench: {}, one decoding step's {count} products ({:.1} MB of f32 weights), \
         threads {}, median of {} passes, {} rounds (libtorch and the packed kernel in \
         processes of their own, alternated)",
        args.model,
        bytes / 1e6,
        args.threads,
        args.passes,
        args.rounds
    );
    println!(
        "cpu: {} ({} cores visible); load average (1 min) at start: {}; packed kernel: {}; \
         multiply-add loop: {}; libtorch's OMP_WAIT_POLICY={}",
        cpu_name(),
        std::thread::available_parallelism().map_or(1, usize::from),
        load_average(),
        guidebench_candle::kernel_path(),
        FmaPeak::width().map_or("none (no AVX2 or AVX-512)", FmaWidth::name),
        std::env::var("OMP_WAIT_POLICY").unwrap_or_else(|_| "ACTIVE".into())
    );
    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        eprintln!("products bench: round {round} of {}", args.rounds);
        // each side first in every other round: a side that always ran
        // second would always meet what the first left behind
        rounds.push(if round % 2 == 1 {
            let torch = child(&args, Library::Torch)?;
            (torch, child(&args, Library::Packed)?)
        } else {
            let packed = child(&args, Library::Packed)?;
            (child(&args, Library::Torch)?, packed)
        });
    }
    let med = |f: &dyn Fn(&Side, &Side) -> f64| median(rounds.iter().map(|(t, p)| f(t, p)));
    let fma = |p: &Side| p.fma.unwrap_or(f64::NAN);
    println!(
        "\npeaks (medians over the rounds, GFLOP/s): libtorch 4096 x 512 x 2816 {:.1}; \
         gemm crate, the same product (the peak bench/candle's roofline divides by) {:.1}; \
         multiply-adds alone {:.1}",
        med(&|t, _| t.peak) / 1e9,
        med(&|_, p| p.peak) / 1e9,
        med(&|_, p| fma(p)) / 1e9,
    );
    println!(
        "\n  rows  {:<26} {:>9} {:>12} {:>12} {:>11}",
        "library", "GFLOP/s", "weights", "of its peak", "of mul-add"
    );
    for (r, &m) in args.rows.iter().enumerate() {
        let flops: f64 = flops_by_kind(&shapes, m).iter().sum();
        let rate = |t: &Side, p: &Side, lib: usize| match lib {
            0 | 1 => t.rates[r][lib],
            _ => p.rates[r][0],
        };
        for (lib, (_, name)) in LIBS.iter().enumerate() {
            let own_peak = |t: &Side, p: &Side| if lib < 2 { t.peak } else { p.peak };
            let gflops = med(&|t, p| rate(t, p, lib));
            println!(
                "  {m:>4}  {name:<26} {:>9.1} {:>7.1} GB/s {:>10.0} % {:>9.0} %",
                gflops / 1e9,
                gflops / flops * bytes / 1e9,
                100.0 * med(&|t, p| rate(t, p, lib) / own_peak(t, p)),
                100.0 * med(&|t, p| rate(t, p, lib) / fma(p)),
            );
        }
        let ratio = |t: &Side, p: &Side| rate(t, p, 2) / rate(t, p, 0).max(rate(t, p, 1));
        let ratios = rounds.iter().map(|(t, p)| ratio(t, p));
        println!(
            "        packed / the faster libtorch layout: {:.2}x (median of the rounds' ratios, \
             range {:.2}-{:.2})",
            med(&ratio),
            ratios.clone().fold(f64::INFINITY, f64::min),
            ratios.fold(0.0, f64::max),
        );
        let by_kind: Vec<String> = KINDS
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let torch = med(&|t, _| t.kinds[r][0][k].max(t.kinds[r][1][k]));
                let packed = med(&|_, p| p.kinds[r][0][k]);
                format!("{name} {:.1} / {:.1}", torch / 1e9, packed / 1e9)
            })
            .collect();
        println!(
            "        by product, GFLOP/s, the faster libtorch layout / packed: {}",
            by_kind.join(", ")
        );
    }
    println!(
        "\n  of its peak: share of the library's own rate on the 4096 x 512 x 2816 product \
         in the same round (the packed kernel's: the gemm crate's, as bench/candle's \
         roofline takes it); of mul-add: share of the loop of multiply-adds alone"
    );
    Ok(())
}
