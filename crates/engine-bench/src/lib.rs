//! # guidebench-engine-bench
//!
//! What the engine benches share (not published): every engine bench is
//! an example of this crate, and the tests that run two engines side by
//! side are its tests, so that no engine crate depends on another.
//!
//! - [`machine`]: what the benches measure of the machine (CPU name,
//!   load, matrix-multiplication peak, memory bandwidth).
//! - [`roofline`]: the lower bound of a generation the benches divide by
//!   (the model's FLOPs and bytes, attention included, over the measured
//!   peak and bandwidth).
//! - [`workload`]: the benches' workload (prompt and output lengths,
//!   batch sizes, synthetic prompts) and running one batch.
//! - [`torch`] (feature `tch`): libtorch's matrix-multiplication peak.
//!
//! Without features it builds with the candle engine only; `ort` and
//! `tch` add those engines and the benches and tests that need them.
#![deny(missing_docs)]

// builtin:tiny, the model the benches run by default.
use guidebench_builtins as _;

pub mod machine;
pub mod roofline;
#[cfg(feature = "tch")]
pub mod torch;
pub mod workload;

/// The error type of the benches: any error, boxed (and sendable, for
/// the benches that measure on threads of their own).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The median of `values` (the mean of the two middle ones when their
/// number is even; NaN when there are none).
pub fn median(values: impl IntoIterator<Item = impl std::borrow::Borrow<f64>>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().map(|x| *x.borrow()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median([3.0, 1.0, 2.0]), 2.0);
        let values = vec![2.0, 1.0];
        assert_eq!(median(&values), 1.5);
        assert_eq!(values.len(), 2);
        assert!(median(Vec::<f64>::new()).is_nan());
    }
}
