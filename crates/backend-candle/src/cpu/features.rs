//! The one place that asks the CPU what it runs: every kernel family (the
//! f32 dot-product and packed kernels, attention, activations, the
//! quantized kernels, the bf16 dot kernel, and the check of which
//! matrices candle's own quantized kernels take) reads [`Features::get`],
//! detected once per process.
//!
//! Each field is the whole set of instructions one family of kernels
//! enables in its `#[target_feature]` attributes, so a field that is true
//! is the safety condition of calling those kernels. A test or bench that
//! forces a kernel path asks the same fields whether this CPU runs it
//! (`cpu::Path::runs_here`, `quant::Path::runs_here`).

use std::sync::OnceLock;

/// The instruction sets this CPU runs, by the kernels that need them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Features {
    /// AVX2, FMA and F16C: every AVX2 kernel (`cpu/avx2.rs`,
    /// `quant/avx2.rs`, the AVX2 attention and activation kernels, the
    /// AVX2 build of the activation quantization). F16C, the f16
    /// conversions, came before AVX2 on every x86 CPU that has both.
    pub(crate) avx2: bool,
    /// AVX-512F: the f32 AVX-512 kernels (`cpu/avx512.rs`, the AVX-512
    /// activation kernel). The AVX-512 attention kernels also use AVX2,
    /// FMA and F16C, so the AVX-512 path (`cpu::Path::Avx512`) needs
    /// [`Features::avx2`] as well.
    pub(crate) avx512f: bool,
    /// AVX-512F, BW and VNNI: the quantized AVX-512 kernels
    /// (`quant/avx512.rs`, `vpdpbusd` / `vpdpwssd` on 512-bit registers),
    /// and the 512-bit tier of candle's repacked quantized kernels. The
    /// quantized AVX-512 path (`quant::Path::Avx512Vnni`) also needs
    /// [`Features::avx2`].
    pub(crate) avx512_vnni: bool,
    /// AVX-512F, BW and VL with BF16: the `vdpbf16ps` kernel for bf16
    /// weights (`cpu/avx512_bf16.rs`).
    pub(crate) avx512_bf16: bool,
    /// AVX-VNNI (`vpdpbusd` on 256-bit registers, without AVX-512): the
    /// 256-bit VNNI tier of candle's repacked quantized kernels, with
    /// [`Features::avx2`].
    pub(crate) avx_vnni: bool,
}

impl Features {
    /// This CPU's features, detected on the first call and kept.
    pub(crate) fn get() -> Features {
        static FEATURES: OnceLock<Features> = OnceLock::new();
        *FEATURES.get_or_init(Features::detect)
    }

    /// Asks the CPU (`get` keeps the answer).
    fn detect() -> Features {
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            let avx512f = has!("avx512f");
            Features {
                avx2: has!("avx2") && has!("fma") && has!("f16c"),
                avx512f,
                avx512_vnni: avx512f && has!("avx512bw") && has!("avx512vnni"),
                avx512_bf16: avx512f && has!("avx512bw") && has!("avx512vl") && has!("avx512bf16"),
                avx_vnni: has!("avxvnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Features::default()
        }
    }

    /// Whether candle's repacked quantized kernels have a VNNI tier this
    /// CPU runs (its Q8_0 tiles need a real `vpdpbusd`): the 512-bit one
    /// (AVX-512F, BW and VNNI, what its kernels enable) or the 256-bit
    /// one (AVX2, FMA and AVX-VNNI).
    pub(crate) fn candle_vnni(self) -> bool {
        self.avx512_vnni || (self.avx2 && self.avx_vnni)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_features_are_detected_once_and_agree_with_a_fresh_detection() {
        let first = Features::get();
        assert_eq!(first, Features::detect());
        assert_eq!(first, Features::get());
        eprintln!("this CPU: {first:?}");
    }

    #[test]
    fn candles_vnni_tier_needs_avx512_bw_and_vnni_or_avx2_with_avx_vnni() {
        let none = Features::default();
        assert!(!none.candle_vnni());
        assert!(
            Features {
                avx512f: true,
                avx512_vnni: true,
                ..none
            }
            .candle_vnni()
        );
        assert!(
            !Features {
                avx_vnni: true,
                ..none
            }
            .candle_vnni(),
            "AVX-VNNI needs AVX2, FMA and F16C beside it"
        );
        assert!(
            Features {
                avx2: true,
                avx_vnni: true,
                ..none
            }
            .candle_vnni()
        );
        assert!(
            !Features {
                avx2: true,
                avx512f: true,
                ..none
            }
            .candle_vnni(),
            "AVX-512F alone has no vpdpbusd"
        );
    }
}
