//! Checking C's pointers: out parameters, arrays, and text buffers.
//!
//! Beside `handle`, below the exported functions. What can be checked without
//! dereferencing is checked here, before a call changes anything: NULL
//! (`ZONEALLOC_ERR_NULL_POINTER`), misalignment and arrays longer than the
//! address space (`ZONEALLOC_ERR_INVALID_ARGUMENT`). That a pointer really points
//! to enough memory cannot be checked; the header states it for each argument and
//! the functions here take it as their `# Safety` contract.
//!
//! Text goes out in `snprintf`'s convention, without allocating: [`TextBuf`]
//! copies what fits in `cap - 1` bytes, counts the rest, and ends with a NUL.

use core::ffi::c_char;
use core::fmt;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use crate::status::{Failure, Status};

/// An out parameter whose pointer was checked before the call did anything, so
/// that a bad pointer never leaves a block allocated and unreported.
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// A pointer that may not be NULL.
    pub(crate) fn required(p: *mut T) -> Result<Out<T>, Failure> {
        let p = NonNull::new(p).ok_or(Status::NullPointer)?;
        if !p.as_ptr().is_aligned() {
            return Err(Status::InvalidArgument.into());
        }
        Ok(Out(p))
    }

    /// A pointer that may be NULL (the caller does not want the value).
    pub(crate) fn optional(p: *mut T) -> Result<Option<Out<T>>, Failure> {
        if p.is_null() {
            Ok(None)
        } else {
            Out::required(p).map(Some)
        }
    }

    /// Stores `v`.
    ///
    /// # Safety
    /// The pointer this came from is valid for a write of a `T`.
    pub(crate) unsafe fn write(self, v: T) {
        // SAFETY: non-null and aligned (checked when made), and valid for writes
        // by the contract.
        unsafe { self.0.as_ptr().write(v) }
    }
}

/// Checks an array argument of `n` elements at `p` (NULL allowed when `n == 0`).
fn check_array<T>(p: *const T, n: usize) -> Result<(), Failure> {
    if n == 0 {
        return Ok(());
    }
    if p.is_null() {
        return Err(Status::NullPointer.into());
    }
    if !p.is_aligned() || n > isize::MAX as usize / size_of::<T>().max(1) {
        return Err(Status::InvalidArgument.into());
    }
    Ok(())
}

/// The C array of `n` elements at `p` as a slice.
///
/// # Safety
/// When `n > 0`, `p` is valid for reads of `n` initialised `T`s that nothing
/// writes during `'a`.
pub(crate) unsafe fn slice<'a, T>(p: *const T, n: usize) -> Result<&'a [T], Failure> {
    check_array(p, n)?;
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-null, aligned and at most `isize::MAX` bytes (checked above);
    // readable, initialised and unaliased by writers by the contract.
    Ok(unsafe { core::slice::from_raw_parts(p, n) })
}

/// The C array of `n` elements at `p` as a mutable slice.
///
/// # Safety
/// When `n > 0`, `p` is valid for reads and writes of `n` initialised `T`s that
/// nothing else accesses during `'a`.
pub(crate) unsafe fn slice_mut<'a, T>(p: *mut T, n: usize) -> Result<&'a mut [T], Failure> {
    check_array(p, n)?;
    if n == 0 {
        return Ok(&mut []);
    }
    // SAFETY: non-null, aligned and at most `isize::MAX` bytes (checked above);
    // valid and unaliased by the contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(p, n) })
}

/// A caller's text buffer of `cap` bytes, filled as `snprintf` fills one.
pub(crate) struct TextBuf<'a> {
    /// The buffer less its last byte, which is kept for the NUL; `None` when
    /// `cap == 0`.
    room: Option<(&'a mut [MaybeUninit<u8>], &'a mut MaybeUninit<u8>)>,
    /// Bytes the text has, written or not.
    len: usize,
}

impl<'a> TextBuf<'a> {
    /// The buffer `buf` of `cap` bytes (`buf` may be NULL when `cap == 0`).
    ///
    /// # Safety
    /// When `cap > 0`, `buf` is valid for writes of `cap` bytes that nothing else
    /// accesses during `'a`.
    pub(crate) unsafe fn new(buf: *mut c_char, cap: usize) -> Result<TextBuf<'a>, Failure> {
        let buf = buf.cast::<MaybeUninit<u8>>();
        check_array(buf, cap)?;
        if cap == 0 {
            return Ok(TextBuf { room: None, len: 0 });
        }
        // SAFETY: non-null and at most `isize::MAX` bytes (checked above), bytes
        // have no alignment, writable and unaliased by the contract; the bytes
        // may be uninitialised, which `MaybeUninit` allows.
        let all = unsafe { core::slice::from_raw_parts_mut(buf, cap) };
        let (nul, room) = all.split_last_mut().ok_or(Status::InvalidArgument)?;
        Ok(TextBuf {
            room: Some((room, nul)),
            len: 0,
        })
    }

    /// Writes `text` and ends it; returns the text's full length.
    pub(crate) fn put(mut self, text: impl fmt::Display) -> Result<usize, Failure> {
        use fmt::Write as _;
        write!(self, "{text}")
            .map_err(|_| Failure::Panic("a statistics formatter failed".into()))?;
        Ok(self.finish())
    }

    /// Writes the terminating NUL after what fitted; returns the full length.
    fn finish(self) -> usize {
        if let Some((room, nul)) = self.room {
            if self.len < room.len() {
                room[self.len].write(0);
            } else {
                nul.write(0);
            }
        }
        self.len
    }
}

impl fmt::Write for TextBuf<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if let Some((room, _)) = &mut self.room {
            if let Some(free) = room.get_mut(self.len..) {
                let n = free.len().min(s.len());
                for (dst, &b) in free.iter_mut().zip(&s.as_bytes()[..n]) {
                    dst.write(b);
                }
            }
        }
        self.len = self.len.saturating_add(s.len());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` through a `TextBuf` of `cap` bytes: the length answered and what
    /// the buffer holds up to its NUL.
    #[track_caller]
    fn through(text: &str, cap: usize) -> (usize, Vec<u8>) {
        let mut buf = vec![0xaa_u8; cap + 1];
        // SAFETY: `buf` has `cap + 1` writable bytes, nothing else uses it.
        let tb = unsafe { TextBuf::new(buf.as_mut_ptr().cast(), cap) }.unwrap();
        let n = tb.put(text).unwrap();
        assert_eq!(buf[cap], 0xaa, "wrote past cap");
        let shown = buf[..cap]
            .iter()
            .position(|&b| b == 0)
            .map(|end| buf[..end].to_vec());
        (n, shown.unwrap_or_default())
    }

    #[test]
    fn text_is_cut_at_cap_minus_one_and_ends_with_a_nul() {
        assert_eq!(through("hello", 0), (5, vec![]));
        assert_eq!(through("hello", 1), (5, b"".to_vec()));
        assert_eq!(through("hello", 3), (5, b"he".to_vec()));
        assert_eq!(through("hello", 5), (5, b"hell".to_vec()));
        assert_eq!(through("hello", 6), (5, b"hello".to_vec()));
        assert_eq!(through("hello", 64), (5, b"hello".to_vec()));
        assert_eq!(through("", 4), (0, b"".to_vec()));
    }

    #[test]
    fn null_buffers_are_refused_unless_empty() {
        // SAFETY: NULL with cap 0 is never written; NULL with cap 8 is refused
        // before any write.
        unsafe {
            assert!(TextBuf::new(core::ptr::null_mut(), 0).is_ok());
            assert!(TextBuf::new(core::ptr::null_mut(), 8).is_err());
        }
    }
}
