//! Memory for the packed weights: chunks aligned to 2 MiB that Linux is
//! asked to back with 2 MiB pages (`madvise(MADV_HUGEPAGE)`, for systems
//! whose transparent huge pages are set to `madvise`), from which each
//! weight takes its own range.
//!
//! A decoding step reads every weight once; in 4 KiB pages
//! builtin:tiny's 98.6 MB are some 24,000 pages, more than a TLB's few
//! thousand entries hold, so a stream can wait on a page-table walk
//! every 4 KiB (not counted here; the gain below is measured). On a
//! 2-core Xeon with AVX-512, the 33 products of a builtin:tiny step at 32
//! rows took 7-12 % less time on weights in 2 MiB pages (four runs,
//! medians of 100), and from 0.5 % more to 4 % less at 1, 8 and 128 rows
//! (two runs each).
//! Weights share chunks rather than each having its own allocation: most
//! are not whole 2 MiB pages, and only whole aligned pages can be huge
//! (the same products with only each weight's whole pages huge took from
//! 1 % more to 12 % less time, four runs).

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use crate::cpu::PackedElem;

/// The size and alignment of a huge page.
const HUGE_PAGE: usize = 2 << 20;

/// Values per chunk, unless one weight needs more (64 MiB of f32).
const CHUNK_VALUES: usize = (64 << 20) / std::mem::size_of::<f32>();

/// Values a range starts on a multiple of (64 bytes: a cache line).
const ALIGN_VALUES: usize = 64 / std::mem::size_of::<f32>();

/// Hands out zeroed, 64-byte-aligned ranges of f32 values from shared
/// chunks. Clones share the chunk being filled; a chunk is freed when the
/// last range in it is dropped.
#[derive(Clone, Default)]
pub struct WeightArena {
    current: Arc<Mutex<Option<Filling>>>,
}

/// The chunk being filled.
struct Filling {
    chunk: Arc<Chunk>,
    /// Its values handed out so far (from its start).
    used: usize,
}

impl std::fmt::Debug for WeightArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightArena").finish_non_exhaustive()
    }
}

impl WeightArena {
    /// An arena with no chunk yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `len` zeroed values of their own: from the current chunk where they
    /// fit, else from a new chunk of at least 64 MiB.
    pub fn alloc(&self, len: usize) -> ArenaBuf {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let room = current.as_ref().and_then(|f| {
            let start = f.used.next_multiple_of(ALIGN_VALUES);
            (start + len <= f.chunk.len).then(|| (Arc::clone(&f.chunk), start))
        });
        let (chunk, start) =
            room.unwrap_or_else(|| (Arc::new(Chunk::new(len.max(CHUNK_VALUES))), 0));
        *current = Some(Filling {
            chunk: Arc::clone(&chunk),
            used: start + len,
        });
        // SAFETY: `start + len <= chunk.len`, and no other range handed
        // out overlaps `start..start + len` (each starts past the last).
        unsafe { chunk.ptr.as_ptr().add(start).write_bytes(0, len) };
        ArenaBuf { chunk, start, len }
    }
}

/// One allocation of [`WeightArena`]: aligned to [`HUGE_PAGE`], advised
/// to be backed by huge pages before any of it is touched.
struct Chunk {
    ptr: NonNull<f32>,
    /// Its values.
    len: usize,
    layout: Layout,
}

// SAFETY: a chunk is plain memory; the values in it are reached only
// through `ArenaBuf`s, whose ranges never overlap.
unsafe impl Send for Chunk {}
// SAFETY: as above.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// Room for `len` values (uninitialised; whole huge pages).
    fn new(len: usize) -> Self {
        let bytes = (len.max(1) * std::mem::size_of::<f32>()).next_multiple_of(HUGE_PAGE);
        let layout = match Layout::from_size_align(bytes, HUGE_PAGE) {
            Ok(layout) => layout,
            Err(_) => std::alloc::handle_alloc_error(Layout::new::<f32>()),
        };
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(ptr.cast::<f32>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        advise_huge_pages(ptr, bytes);
        Chunk {
            ptr,
            len: bytes / std::mem::size_of::<f32>(),
            layout,
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: allocated in `Chunk::new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout) };
    }
}

/// Asks Linux to back `bytes` from `ptr` with huge pages: a hint, which
/// fails quietly (a kernel without transparent huge pages keeps 4 KiB
/// pages).
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: NonNull<f32>, bytes: usize) {
    use nix::sys::mman::{MmapAdvise, madvise};
    // SAFETY: `ptr..ptr + bytes` is one allocation of ours; the advice
    // changes how it is backed, never its contents.
    if let Err(e) = unsafe { madvise(ptr.cast(), bytes, MmapAdvise::MADV_HUGEPAGE) } {
        tracing::debug!("madvise(MADV_HUGEPAGE) on the packed weights: {e}");
    }
}

/// Other systems keep their pages as they are.
#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: NonNull<f32>, _bytes: usize) {}

/// A range of values of its own in a [`WeightArena`] chunk.
pub struct ArenaBuf {
    chunk: Arc<Chunk>,
    start: usize,
    len: usize,
}

impl ArenaBuf {
    /// The values.
    pub fn values(&self) -> &[f32] {
        // SAFETY: `start..start + len` is inside the chunk, initialised at
        // `alloc`, and only this buffer reaches it.
        unsafe { std::slice::from_raw_parts(self.chunk.ptr.as_ptr().add(self.start), self.len) }
    }

    /// The values, to write.
    pub fn values_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `values`; `&mut self` makes this the only slice.
        unsafe { std::slice::from_raw_parts_mut(self.chunk.ptr.as_ptr().add(self.start), self.len) }
    }

    /// The range as values of `T` (f32, or two-byte bf16 or f16 values,
    /// twice as many).
    pub(crate) fn typed<T: PackedElem>(&self) -> &[T] {
        let len = self.len * std::mem::size_of::<f32>() / std::mem::size_of::<T>();
        // SAFETY: the range's bytes are inside the chunk and initialised
        // (see `values`); `T` is f32, bf16 or f16 (the trait is sealed),
        // for which every bit pattern is a value and whose alignment is at
        // most the range's (64 bytes).
        unsafe { std::slice::from_raw_parts(self.chunk.ptr.as_ptr().add(self.start).cast(), len) }
    }

    /// [`ArenaBuf::typed`], to write.
    pub(crate) fn typed_mut<T: PackedElem>(&mut self) -> &mut [T] {
        let len = self.len * std::mem::size_of::<f32>() / std::mem::size_of::<T>();
        // SAFETY: as in `typed`; `&mut self` makes this the only slice.
        unsafe {
            std::slice::from_raw_parts_mut(self.chunk.ptr.as_ptr().add(self.start).cast(), len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_zeroed_aligned_and_apart_and_outlive_the_arena() {
        let arena = WeightArena::new();
        let mut a = arena.alloc(100);
        let mut b = arena.clone().alloc(37);
        assert!(a.values().iter().chain(b.values()).all(|&v| v == 0.0));
        a.values_mut().fill(1.0);
        b.values_mut().fill(2.0);
        for buf in [&a, &b] {
            assert_eq!(buf.values().as_ptr() as usize % 64, 0);
        }
        // the first range is untouched by the second
        assert!(a.values().iter().all(|&v| v == 1.0));
        assert!(std::ptr::eq(Arc::as_ptr(&a.chunk), Arc::as_ptr(&b.chunk)));
        drop(arena);
        assert!(b.values().iter().all(|&v| v == 2.0));
    }

    #[test]
    fn a_range_larger_than_a_chunk_gets_a_chunk_of_its_own() {
        let arena = WeightArena::new();
        let small = arena.alloc(10);
        let big = arena.alloc(CHUNK_VALUES + 1);
        assert_eq!(big.values().len(), CHUNK_VALUES + 1);
        assert!(!std::ptr::eq(
            Arc::as_ptr(&small.chunk),
            Arc::as_ptr(&big.chunk)
        ));
        assert_eq!(big.chunk.ptr.as_ptr() as usize % HUGE_PAGE, 0);
        // the next small range goes after the big one, in its chunk's
        // last huge page
        let next = arena.alloc(10);
        assert!(std::ptr::eq(
            Arc::as_ptr(&next.chunk),
            Arc::as_ptr(&big.chunk)
        ));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn chunks_are_advised_to_be_backed_by_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            eprintln!("this kernel has no transparent huge pages: nothing to check");
            return;
        }
        let buf = WeightArena::new().alloc(1000);
        let addr = buf.values().as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        // a mapping's header (`start-end perms ...`), then its fields; the
        // flag `hg` is MADV_HUGEPAGE
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or_default();
            if let Some((start, end)) = first.split_once('-')
                && let (Ok(start), Ok(end)) = (
                    usize::from_str_radix(start, 16),
                    usize::from_str_radix(end, 16),
                )
            {
                inside = (start..end).contains(&addr);
                continue;
            }
            if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
                assert!(
                    flags.split_whitespace().any(|flag| flag == "hg"),
                    "the chunk's mapping is not advised for huge pages: {flags}"
                );
                return;
            }
        }
        panic!("no mapping in /proc/self/smaps holds the chunk at {addr:#x}");
    }
}
