//! Streaming a trace file: plain or xz-compressed text to `Record`s, a line at a time.
//!
//! Sits on `parse`. A file is opened through a 256 KiB `BufReader`; if it starts
//! with the xz magic it is decoded as a stream (`liblzma`, every concatenated xz
//! stream), so a multi-GB trace is never held in memory: only the current line and
//! whatever chunk of records the caller asks for.
//!
//! Malformed lines are counted and the first `max_examples` kept with their line
//! numbers in `ParseStats`; with `strict` the first one ends the read with
//! `TraceError::Malformed` instead.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use serde::Serialize;

use crate::event::{EventCounts, Record};
use crate::parse::{parse_line, Parsed};

/// First bytes of an xz stream.
const XZ_MAGIC: [u8; 6] = [0xFD, b'7', b'z', b'X', b'Z', 0x00];
const BUF_BYTES: usize = 256 << 10;

/// How to treat what does not parse.
#[derive(Clone, Copy, Debug)]
pub struct ReadOptions {
    /// Stop at the first malformed line (default: count it, keep an example, skip).
    pub strict: bool,
    /// Malformed lines kept as examples in `ParseStats`.
    pub max_examples: usize,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            strict: false,
            max_examples: 20,
        }
    }
}

/// A line that did not parse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Malformed {
    /// Line number, from 1.
    pub line: u64,
    /// What was wrong.
    pub reason: String,
    /// The line (lossy UTF-8, cut at 200 bytes).
    pub text: String,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {}", self.line, self.reason, self.text)
    }
}

/// What the reader saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ParseStats {
    /// Lines read.
    pub lines: u64,
    /// Events of the six page-allocator tracepoints, per kind.
    pub events: EventCounts,
    /// Well-formed events of other tracepoints (ignored).
    pub other_events: u64,
    /// Empty and `#` comment lines.
    pub blank_lines: u64,
    /// Lines that did not parse (skipped unless strict).
    pub malformed: u64,
    /// The first malformed lines.
    pub malformed_examples: Vec<Malformed>,
    /// `gfp_flags` symbols with no mapping, and how often each was seen.
    pub unknown_gfp_symbols: BTreeMap<String, u64>,
    /// Whether the input was xz-compressed.
    pub xz: bool,
}

/// Why reading stopped.
#[derive(Debug)]
pub enum TraceError {
    /// Reading or decompressing failed.
    Io(io::Error),
    /// A malformed line, in strict mode.
    Malformed(Malformed),
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io(e) => write!(f, "reading the trace: {e}"),
            TraceError::Malformed(m) => write!(f, "malformed trace {m}"),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io(e) => Some(e),
            TraceError::Malformed(_) => None,
        }
    }
}

impl From<io::Error> for TraceError {
    fn from(e: io::Error) -> TraceError {
        TraceError::Io(e)
    }
}

/// A stream of records from a trace.
pub struct TraceReader {
    input: Box<dyn BufRead>,
    opts: ReadOptions,
    line: Vec<u8>,
    stats: ParseStats,
    done: bool,
}

impl TraceReader {
    /// Opens `path`, decoding xz if the file starts with the xz magic.
    ///
    /// # Errors
    /// The error of opening or first reading the file.
    pub fn open(path: &Path, opts: ReadOptions) -> Result<TraceReader, TraceError> {
        let file = File::open(path)?;
        TraceReader::from_reader(file, opts)
    }

    /// Reads from any byte stream, plain or xz.
    ///
    /// # Errors
    /// The error of the first read.
    pub fn from_reader(
        r: impl Read + 'static,
        opts: ReadOptions,
    ) -> Result<TraceReader, TraceError> {
        let mut buf = BufReader::with_capacity(BUF_BYTES, r);
        let xz = buf.fill_buf()?.starts_with(&XZ_MAGIC);
        let input: Box<dyn BufRead> = if xz {
            Box::new(BufReader::with_capacity(
                BUF_BYTES,
                liblzma::read::XzDecoder::new_multi_decoder(buf),
            ))
        } else {
            Box::new(buf)
        };
        Ok(TraceReader {
            input,
            opts,
            line: Vec::with_capacity(256),
            stats: ParseStats {
                xz,
                ..ParseStats::default()
            },
            done: false,
        })
    }

    /// What has been read so far.
    pub fn stats(&self) -> &ParseStats {
        &self.stats
    }

    /// Consumes the reader, returning its statistics.
    pub fn into_stats(self) -> ParseStats {
        self.stats
    }

    /// The next record, `None` at the end of the trace.
    ///
    /// # Errors
    /// I/O and decompression errors; a malformed line in strict mode.
    pub fn next_record(&mut self) -> Result<Option<Record>, TraceError> {
        while !self.done {
            self.line.clear();
            if self.input.read_until(b'\n', &mut self.line)? == 0 {
                self.done = true;
                break;
            }
            self.stats.lines += 1;
            let line_no = self.stats.lines;
            let unknown = &mut self.stats.unknown_gfp_symbols;
            match parse_line(&self.line, |s| {
                *unknown.entry(s.to_string()).or_default() += 1
            }) {
                Ok(Parsed::Event {
                    cpu,
                    time_ns,
                    event,
                }) => {
                    self.stats.events.add(event.kind());
                    return Ok(Some(Record {
                        line: line_no,
                        cpu,
                        time_ns,
                        event,
                    }));
                }
                Ok(Parsed::Other) => self.stats.other_events += 1,
                Ok(Parsed::Blank) => self.stats.blank_lines += 1,
                Err(e) => {
                    let mut text = String::from_utf8_lossy(&self.line).trim_end().to_string();
                    if text.len() > 200 {
                        let mut cut = 200;
                        while !text.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        text.truncate(cut);
                    }
                    let m = Malformed {
                        line: line_no,
                        reason: e.0,
                        text,
                    };
                    self.stats.malformed += 1;
                    if self.opts.strict {
                        self.done = true;
                        return Err(TraceError::Malformed(m));
                    }
                    if self.stats.malformed_examples.len() < self.opts.max_examples {
                        self.stats.malformed_examples.push(m);
                    }
                }
            }
        }
        Ok(None)
    }

    /// Appends up to `max` records to `out`; returns how many (0 at the end).
    ///
    /// # Errors
    /// As `next_record`.
    pub fn read_chunk(&mut self, out: &mut Vec<Record>, max: usize) -> Result<usize, TraceError> {
        let mut n = 0;
        while n < max {
            match self.next_record()? {
                Some(r) => {
                    out.push(r);
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }
}

impl Iterator for TraceReader {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Reads a whole trace into memory (for small traces and tests).
///
/// # Errors
/// As `TraceReader::next_record`.
pub fn read_all(path: &Path, opts: ReadOptions) -> Result<(Vec<Record>, ParseStats), TraceError> {
    let mut r = TraceReader::open(path, opts)?;
    let mut v = Vec::new();
    r.read_chunk(&mut v, usize::MAX)?;
    Ok((v, r.into_stats()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, EventKind};
    use std::io::{Cursor, Write};

    const TEXT: &str = "\
# comment
 a b 1 [000] 1.000001: kmem:mm_page_alloc: page=0x10 pfn=0x10 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE
 a b 1 [001] 1.000002: kmem:mm_page_free: page=0x10 pfn=0x10 order=0
broken line
 a b 1 [001] 1.000003: kmem:mm_page_free_batched: page=0x10 pfn=0x10 order=0
";

    #[test]
    fn plain_text_streams_and_skips_malformed() {
        let r = TraceReader::from_reader(
            Cursor::new(TEXT.as_bytes().to_vec()),
            ReadOptions::default(),
        )
        .unwrap();
        let recs: Vec<Record> = r.map(Result::unwrap).collect();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[1].line, 3);
        assert!(matches!(recs[2].event, Event::FreeBatched { .. }));
    }

    #[test]
    fn malformed_lines_are_numbered_or_fatal() {
        let mut r = TraceReader::from_reader(
            Cursor::new(TEXT.as_bytes().to_vec()),
            ReadOptions::default(),
        )
        .unwrap();
        let mut v = Vec::new();
        r.read_chunk(&mut v, 100).unwrap();
        let s = r.into_stats();
        assert_eq!(s.malformed, 1);
        assert_eq!(s.malformed_examples[0].line, 4);
        assert_eq!(s.blank_lines, 1);
        assert_eq!(s.events.get(EventKind::Free), 1);

        let strict = ReadOptions {
            strict: true,
            ..ReadOptions::default()
        };
        let mut r =
            TraceReader::from_reader(Cursor::new(TEXT.as_bytes().to_vec()), strict).unwrap();
        let err = r.read_chunk(&mut Vec::new(), 100).unwrap_err();
        assert!(matches!(
            err,
            TraceError::Malformed(Malformed { line: 4, .. })
        ));
    }

    #[test]
    fn xz_is_detected_and_decoded() {
        let mut enc = liblzma::write::XzEncoder::new(Vec::new(), 6);
        enc.write_all(TEXT.as_bytes()).unwrap();
        let xz = enc.finish().unwrap();
        let mut r = TraceReader::from_reader(Cursor::new(xz), ReadOptions::default()).unwrap();
        let mut v = Vec::new();
        r.read_chunk(&mut v, 100).unwrap();
        assert_eq!(v.len(), 3);
        assert!(r.stats().xz);
    }
}
