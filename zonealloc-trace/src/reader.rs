//! Streaming a trace file: plain, xz or gzip text to `Record`s, in one pass.
//!
//! Sits on `parse`. Reading is split over two threads so that decompression and
//! parsing overlap:
//!
//! ```text
//!  decoder thread                              caller's thread
//!  file -> (xz | gzip | plain) -> 1 MiB block  ==channel==>  lines -> parse_line -> Record
//!                                 ending at a '\n'  <==empty blocks back==
//! ```
//!
//! The decoder thread cuts the stream into blocks that end at a line boundary (the
//! rest of a block's last line starts the next block), so the parser walks each
//! block in place, never copying a line. Blocks go back to the decoder for reuse; at
//! most `QUEUE` are in flight, so a multi-GB trace is never held in memory.
//!
//! What is refused, and how:
//! * a file that is not text the reader can decode (zstd, bzip2, lz4, a binary
//!   `perf.data`): `TraceError::Unsupported`, naming the format and the command that
//!   turns it into text;
//! * a line that does not parse, a CPU the traced machine does not have
//!   (`ReadOptions::nr_cpus`), a pfn outside its zones (`ReadOptions::end_pfn`), a
//!   last line cut short (no newline at the end of the file): counted, the first
//!   `max_examples` kept with their line numbers; with `strict` the first one ends
//!   the read with `TraceError::Malformed`;
//! * a file with no page-allocator event at all (empty, a README, random bytes):
//!   `TraceError::NoEvents` at its end, with the first line that did not parse.
//!
//! Every error names the file.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use serde::Serialize;

use crate::event::{EventCounts, Record};
use crate::parse::{parse_line_cached, GfpCache, Parsed};

/// First bytes of an xz stream.
const XZ_MAGIC: &[u8] = &[0xFD, b'7', b'z', b'X', b'Z', 0x00];
/// First bytes of a gzip member.
const GZIP_MAGIC: &[u8] = &[0x1F, 0x8B];
/// Formats recognised only to be refused, with what to do instead.
const REFUSED: &[(&[u8], &str, &str)] = &[
    (
        &[0x28, 0xB5, 0x2F, 0xFD],
        "zstd",
        "decompress it first: zstd -dc FILE > FILE.txt",
    ),
    (
        b"BZh",
        "bzip2",
        "decompress it first: bzip2 -dc FILE > FILE.txt",
    ),
    (
        &[0x04, 0x22, 0x4D, 0x18],
        "lz4",
        "decompress it first: lz4 -dc FILE > FILE.txt",
    ),
    (
        b"PERFILE2",
        "a binary perf.data",
        "turn it into text first: perf script -i FILE > FILE.txt",
    ),
];
/// Bytes read from the file at a time.
const READ_BYTES: usize = 256 << 10;
/// Bytes of decoded text per block handed to the parser.
const BLOCK_BYTES: usize = 1 << 20;
/// Blocks in flight between the two threads: enough for the decoder to run ahead
/// while the caller builds its allocator.
const QUEUE: usize = 16;
/// Bytes of a bad line kept in an example.
const EXAMPLE_BYTES: usize = 200;

/// How to treat what does not parse, and what the traced machine had.
#[derive(Clone, Copy, Debug)]
pub struct ReadOptions {
    /// Stop at the first bad line (default: count it, keep an example, skip).
    pub strict: bool,
    /// Bad lines kept as examples in `ParseStats`.
    pub max_examples: usize,
    /// CPUs of the traced machine: an event on CPU `nr_cpus` or above is a bad line.
    /// `None`: any CPU id is taken.
    pub nr_cpus: Option<usize>,
    /// One past the traced machine's last frame: an event at or above it is a bad
    /// line. `None`: any pfn is taken.
    pub end_pfn: Option<u64>,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            strict: false,
            max_examples: 20,
            nr_cpus: None,
            end_pfn: None,
        }
    }
}

/// A line that was not replayed, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Malformed {
    /// Line number, from 1.
    pub line: u64,
    /// What was wrong.
    pub reason: String,
    /// The line, cut at 200 bytes; one that is not UTF-8 text without control
    /// characters is shown escaped (`\xfe`), after `(not text)`.
    pub text: String,
}

impl Malformed {
    fn new(line: u64, reason: String, bytes: &[u8]) -> Malformed {
        let cut = &bytes[..bytes.len().min(EXAMPLE_BYTES)];
        let text = match core::str::from_utf8(cut) {
            Ok(t) if !t.chars().any(char::is_control) => t.trim_end().to_string(),
            // Not text: escaped, so nothing reaches a terminal but printable ASCII.
            _ => {
                let mut t = format!("(not text) {}", cut.escape_ascii());
                t.truncate(EXAMPLE_BYTES);
                t
            }
        };
        Malformed { line, reason, text }
    }
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
    /// Bytes of text read (after decompression).
    pub bytes: u64,
    /// Events of the six page-allocator tracepoints, per kind (the ones kept).
    pub events: EventCounts,
    /// Well-formed events of other tracepoints (ignored).
    pub other_events: u64,
    /// Empty and `#` comment lines.
    pub blank_lines: u64,
    /// Lines that did not parse (skipped unless strict).
    pub malformed: u64,
    /// Events on a CPU the traced machine does not have (skipped unless strict).
    pub cpu_out_of_range: u64,
    /// Events at a pfn outside the traced machine's zones (skipped unless strict).
    pub pfn_out_of_range: u64,
    /// The last line had no newline: the file was cut short (skipped unless strict).
    pub truncated_last_line: bool,
    /// The first lines skipped, with why.
    pub malformed_examples: Vec<Malformed>,
    /// `gfp_flags` symbols with no mapping, and how often each was seen.
    pub unknown_gfp_symbols: BTreeMap<String, u64>,
    /// Whether the input was xz-compressed.
    pub xz: bool,
    /// Whether the input was gzip-compressed.
    pub gzip: bool,
}

impl ParseStats {
    /// One line for commands that print no report (`map`, `fragbench`): what was
    /// skipped of `file`, or `None` when nothing was.
    pub fn skipped_note(&self, file: &str) -> Option<String> {
        let n = self.skipped();
        (n > 0).then(|| {
            format!(
                "{file}: skipped {n} lines ({} malformed, {} on a CPU out of range, {} at a pfn \
                 outside the zones, {} cut short); `replay` lists them, --strict stops at the first",
                self.malformed,
                self.cpu_out_of_range,
                self.pfn_out_of_range,
                u64::from(self.truncated_last_line)
            )
        })
    }

    /// Lines skipped for any reason.
    pub fn skipped(&self) -> u64 {
        self.malformed
            + self.cpu_out_of_range
            + self.pfn_out_of_range
            + u64::from(self.truncated_last_line)
    }
}

/// Why reading stopped.
#[derive(Debug)]
pub enum TraceError {
    /// Opening, reading or decompressing `file` failed.
    Io {
        /// The trace.
        file: String,
        /// What failed.
        error: io::Error,
    },
    /// `file` is in a format the reader does not decode.
    Unsupported {
        /// The trace.
        file: String,
        /// The format found.
        format: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// A bad line, in strict mode.
    Malformed {
        /// The trace.
        file: String,
        /// The line.
        line: Malformed,
    },
    /// `file` holds no page-allocator event at all.
    NoEvents {
        /// The trace.
        file: String,
        /// What was read instead.
        stats: Box<ParseStats>,
    },
}

impl TraceError {
    /// The file the error is about.
    pub fn file(&self) -> &str {
        match self {
            TraceError::Io { file, .. }
            | TraceError::Unsupported { file, .. }
            | TraceError::Malformed { file, .. }
            | TraceError::NoEvents { file, .. } => file,
        }
    }
}

/// Whether a read error says the (compressed) input ended before its stream did:
/// the xz and gzip decoders report a cut file so.
fn ends_early(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::UnexpectedEof || e.to_string().contains("premature eof")
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io { file, error } if ends_early(error) => write!(
                f,
                "{file}: {error}: the compressed stream ends early (the file is truncated or \
                 was only partly copied)"
            ),
            TraceError::Io { file, error } => write!(f, "{file}: {error}"),
            TraceError::Unsupported { file, format, hint } => {
                write!(f, "{file}: {format} file, which is not read here; {hint}")
            }
            TraceError::Malformed { file, line } => write!(
                f,
                "{file}:{}: {} (strict mode stops here): {}",
                line.line, line.reason, line.text
            ),
            TraceError::NoEvents { file, stats } if stats.bytes == 0 => {
                write!(f, "{file}: the file is empty: no page-allocator events")
            }
            TraceError::NoEvents { file, stats } => {
                write!(
                    f,
                    "{file}: no page-allocator events (kmem:mm_page_*) in {} lines",
                    stats.lines
                )?;
                let s = stats.skipped();
                if s > 0 {
                    write!(f, "; {s} skipped")?;
                }
                if stats.other_events > 0 {
                    write!(f, "; {} events of other tracepoints", stats.other_events)?;
                }
                if let Some(m) = stats.malformed_examples.first() {
                    write!(f, "; first skipped {m}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

// -----------------------------------------------------------------------------
// The decoder thread
// -----------------------------------------------------------------------------

/// A buffer and how many of its bytes are text, ending at a line boundary (or at the
/// end of the input), or the error that ended the input. Buffers keep their full
/// length when recycled, so they are zeroed once, not before every read.
type Block = Result<(Vec<u8>, usize), io::Error>;

/// Fills blocks from `input` until it ends, the receiver hangs up, or an error.
fn decode_blocks(mut input: Box<dyn Read + Send>, tx: SyncSender<Block>, spare: Receiver<Vec<u8>>) {
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let mut block = spare.try_recv().unwrap_or_default();
        if block.len() < BLOCK_BYTES + READ_BYTES {
            block.resize(BLOCK_BYTES + READ_BYTES, 0);
        }
        let mut len = carry.len();
        block[..len].copy_from_slice(&carry);
        carry.clear();
        let mut eof = false;
        while len < BLOCK_BYTES {
            match input.read(&mut block[len..]) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
        if !eof {
            // Keep the unfinished last line for the next block. A block with no
            // newline at all (a "line" over 1 MiB: not a trace) goes as it is, and
            // the parser sees its pieces as separate malformed lines.
            if let Some(nl) = memchr::memrchr(b'\n', &block[..len]) {
                carry.extend_from_slice(&block[nl + 1..len]);
                len = nl + 1;
            }
        }
        if len > 0 && tx.send(Ok((block, len))).is_err() {
            return;
        }
        if eof {
            return;
        }
    }
}

// -----------------------------------------------------------------------------
// The reader
// -----------------------------------------------------------------------------

/// A stream of records from a trace.
pub struct TraceReader {
    file: String,
    blocks: Receiver<Block>,
    spare: SyncSender<Vec<u8>>,
    decoder: Option<JoinHandle<()>>,
    block: Vec<u8>,
    /// Bytes of `block` that hold text.
    len: usize,
    pos: usize,
    opts: ReadOptions,
    stats: ParseStats,
    gfp_cache: GfpCache,
    done: bool,
}

impl TraceReader {
    /// Opens `path`, decoding xz or gzip by the file's first bytes.
    ///
    /// # Errors
    /// `Io` if the file cannot be opened or read, `Unsupported` for a format it does
    /// not decode.
    pub fn open(path: &Path, opts: ReadOptions) -> Result<TraceReader, TraceError> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|error| TraceError::Io {
            file: name.clone(),
            error,
        })?;
        TraceReader::from_reader_named(file, &name, opts)
    }

    /// Reads from any byte stream, plain, xz or gzip; errors call it `(stream)`.
    ///
    /// # Errors
    /// As `open`.
    pub fn from_reader(
        r: impl Read + Send + 'static,
        opts: ReadOptions,
    ) -> Result<TraceReader, TraceError> {
        TraceReader::from_reader_named(r, "(stream)", opts)
    }

    /// Reads from any byte stream; errors name it `name`.
    ///
    /// # Errors
    /// As `open`.
    pub fn from_reader_named(
        r: impl Read + Send + 'static,
        name: &str,
        opts: ReadOptions,
    ) -> Result<TraceReader, TraceError> {
        let io_err = |error| TraceError::Io {
            file: name.to_string(),
            error,
        };
        let mut buf = BufReader::with_capacity(READ_BYTES, r);
        // The first bytes name the format (a pipe's first read may be shorter than
        // the longest magic number; it decides all the same).
        let head = buf.fill_buf().map_err(io_err)?;
        let head = head[..head.len().min(8)].to_vec();
        if let Some(&(_, format, hint)) = REFUSED.iter().find(|(m, _, _)| head.starts_with(m)) {
            return Err(TraceError::Unsupported {
                file: name.to_string(),
                format,
                hint,
            });
        }
        let xz = head.starts_with(XZ_MAGIC);
        let gzip = head.starts_with(GZIP_MAGIC);
        let input: Box<dyn Read + Send> = if xz {
            Box::new(liblzma::read::XzDecoder::new_multi_decoder(buf))
        } else if gzip {
            Box::new(flate2::bufread::MultiGzDecoder::new(buf))
        } else {
            Box::new(buf)
        };
        let (tx, blocks) = mpsc::sync_channel(QUEUE);
        let (spare, spare_rx) = mpsc::sync_channel(QUEUE + 2);
        let decoder = std::thread::Builder::new()
            .name("trace-decoder".into())
            .spawn(move || decode_blocks(input, tx, spare_rx))
            .map_err(io_err)?;
        Ok(TraceReader {
            file: name.to_string(),
            blocks,
            spare,
            decoder: Some(decoder),
            block: Vec::new(),
            len: 0,
            pos: 0,
            opts,
            stats: ParseStats {
                xz,
                gzip,
                ..ParseStats::default()
            },
            gfp_cache: GfpCache::default(),
            done: false,
        })
    }

    /// The file's name, as errors give it.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// What has been read so far.
    pub fn stats(&self) -> &ParseStats {
        &self.stats
    }

    /// The options the reader was opened with (the CPU count as set since).
    pub fn options(&self) -> ReadOptions {
        self.opts
    }

    /// Sets the CPU count of the traced machine (after the reader was opened, when
    /// it is learnt from the first records): later events on other CPUs are skipped.
    pub fn set_nr_cpus(&mut self, nr_cpus: usize) {
        self.opts.nr_cpus = Some(nr_cpus);
    }

    /// Consumes the reader, returning its statistics.
    pub fn into_stats(mut self) -> ParseStats {
        std::mem::take(&mut self.stats)
    }

    /// The next block of text; false at the end of the input.
    fn next_block(&mut self) -> Result<bool, TraceError> {
        let old = std::mem::take(&mut self.block);
        if old.capacity() > 0 {
            let _ = self.spare.try_send(old);
        }
        self.pos = 0;
        self.len = 0;
        match self.blocks.recv() {
            Ok(Ok((b, len))) => {
                self.stats.bytes += len as u64;
                self.block = b;
                self.len = len;
                Ok(true)
            }
            Ok(Err(error)) => {
                self.done = true;
                Err(TraceError::Io {
                    file: self.file.clone(),
                    error,
                })
            }
            Err(_) => Ok(false),
        }
    }

    /// Counts a skipped line; the error to return in strict mode.
    #[cold]
    fn skip(&mut self, line: u64, reason: String, bytes: &[u8]) -> Result<(), TraceError> {
        let m = Malformed::new(line, reason, bytes);
        if self.opts.strict {
            self.done = true;
            return Err(TraceError::Malformed {
                file: self.file.clone(),
                line: m,
            });
        }
        if self.stats.malformed_examples.len() < self.opts.max_examples {
            self.stats.malformed_examples.push(m);
        }
        Ok(())
    }

    /// The next record, `None` at the end of the trace.
    ///
    /// # Errors
    /// I/O and decompression errors; a bad line in strict mode; `NoEvents` at the
    /// end of a trace with no event at all.
    pub fn next_record(&mut self) -> Result<Option<Record>, TraceError> {
        while !self.done {
            if self.pos >= self.len && !self.next_block()? {
                self.done = true;
                if self.stats.events.total() == 0 {
                    return Err(TraceError::NoEvents {
                        file: self.file.clone(),
                        stats: Box::new(self.stats.clone()),
                    });
                }
                break;
            }
            let rest = &self.block[self.pos..self.len];
            let (len, complete) = match memchr::memchr(b'\n', rest) {
                Some(i) => (i, true),
                None => (rest.len(), false),
            };
            let start = self.pos;
            self.pos += len + usize::from(complete);
            self.stats.lines += 1;
            let line_no = self.stats.lines;
            let line = &self.block[start..start + len];
            let unknown = &mut self.stats.unknown_gfp_symbols;
            let parsed = parse_line_cached(line, &mut self.gfp_cache, |s| {
                *unknown.entry(s.to_string()).or_default() += 1
            });
            if !complete && !matches!(parsed, Ok(Parsed::Blank)) {
                // Only the input's last line can lack its newline: the file was cut
                // inside it, and what parses may be a prefix (`order=1` of `order=10`).
                self.stats.truncated_last_line = true;
                let bytes = line.to_vec();
                self.skip(
                    line_no,
                    "cut short: the file ends inside this line (no newline)".into(),
                    &bytes,
                )?;
                continue;
            }
            match parsed {
                Ok(Parsed::Event {
                    cpu,
                    time_ns,
                    event,
                }) => {
                    if self.opts.nr_cpus.is_some_and(|n| cpu as usize >= n) {
                        self.stats.cpu_out_of_range += 1;
                        let bytes = line.to_vec();
                        let n = self.opts.nr_cpus.unwrap_or(0);
                        self.skip(
                            line_no,
                            format!("CPU {cpu}, but the traced machine has {n} CPUs"),
                            &bytes,
                        )?;
                        continue;
                    }
                    if let (Some(end), Some(pfn)) = (self.opts.end_pfn, event.pfn()) {
                        if pfn >= end {
                            self.stats.pfn_out_of_range += 1;
                            let bytes = line.to_vec();
                            self.skip(
                                line_no,
                                format!("pfn {pfn:#x} is past the traced machine's last zone (ends at {end:#x})"),
                                &bytes,
                            )?;
                            continue;
                        }
                    }
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
                    self.stats.malformed += 1;
                    let bytes = line.to_vec();
                    self.skip(line_no, e.0, &bytes)?;
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

impl Drop for TraceReader {
    fn drop(&mut self) {
        // Hang up first, so a decoder blocked on a full queue sees the closed
        // channel and ends; then wait for it.
        let (_, dead) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.blocks, dead));
        if let Some(h) = self.decoder.take() {
            let _ = h.join();
        }
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

    fn reader(bytes: Vec<u8>, opts: ReadOptions) -> Result<TraceReader, TraceError> {
        TraceReader::from_reader_named(Cursor::new(bytes), "t.txt", opts)
    }

    fn read(bytes: Vec<u8>, opts: ReadOptions) -> Result<(Vec<Record>, ParseStats), TraceError> {
        let mut r = reader(bytes, opts)?;
        let mut v = Vec::new();
        r.read_chunk(&mut v, usize::MAX)?;
        Ok((v, r.into_stats()))
    }

    const STRICT: ReadOptions = ReadOptions {
        strict: true,
        max_examples: 20,
        nr_cpus: None,
        end_pfn: None,
    };

    #[test]
    fn plain_text_streams_and_skips_malformed() {
        let r = reader(TEXT.as_bytes().to_vec(), ReadOptions::default()).unwrap();
        let recs: Vec<Record> = r.map(Result::unwrap).collect();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[1].line, 3);
        assert!(matches!(recs[2].event, Event::FreeBatched { .. }));
    }

    #[test]
    fn malformed_lines_are_numbered_or_fatal() {
        let (_, s) = read(TEXT.as_bytes().to_vec(), ReadOptions::default()).unwrap();
        assert_eq!(s.malformed, 1);
        assert_eq!(s.malformed_examples[0].line, 4);
        assert_eq!(s.blank_lines, 1);
        assert_eq!(s.events.get(EventKind::Free), 1);
        assert_eq!(s.bytes, TEXT.len() as u64);

        let err = read(TEXT.as_bytes().to_vec(), STRICT).unwrap_err();
        assert!(
            matches!(
                &err,
                TraceError::Malformed {
                    line: Malformed { line: 4, .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().starts_with("t.txt:4: "), "{err}");
    }

    #[test]
    fn xz_is_detected_and_decoded() {
        let mut enc = liblzma::write::XzEncoder::new(Vec::new(), 6);
        enc.write_all(TEXT.as_bytes()).unwrap();
        let (v, s) = read(enc.finish().unwrap(), ReadOptions::default()).unwrap();
        assert_eq!(v.len(), 3);
        assert!(s.xz);
    }

    #[test]
    fn gzip_is_detected_and_decoded() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(TEXT.as_bytes()).unwrap();
        let (v, s) = read(enc.finish().unwrap(), ReadOptions::default()).unwrap();
        assert_eq!(v.len(), 3);
        assert!(s.gzip && !s.xz);
    }

    #[test]
    fn zstd_bzip2_lz4_and_perf_data_are_named_and_refused() {
        for (magic, format) in [
            (&[0x28u8, 0xB5, 0x2F, 0xFD, 0, 0, 0, 0][..], "zstd"),
            (b"BZh91AY&SY", "bzip2"),
            (&[0x04, 0x22, 0x4D, 0x18, 0x64][..], "lz4"),
            (b"PERFILE2\x68\x00", "a binary perf.data"),
        ] {
            match reader(magic.to_vec(), ReadOptions::default()) {
                Err(e @ TraceError::Unsupported { .. }) => {
                    let s = e.to_string();
                    assert!(s.starts_with("t.txt: ") && s.contains(format), "{s}");
                }
                Err(e) => panic!("{format}: {e}"),
                Ok(_) => panic!("{format} was accepted"),
            }
        }
    }

    #[track_caller]
    fn no_events(bytes: Vec<u8>) -> ParseStats {
        match read(bytes, ReadOptions::default()) {
            Err(TraceError::NoEvents { file, stats }) => {
                assert_eq!(file, "t.txt");
                *stats
            }
            other => panic!("expected NoEvents, got {other:?}"),
        }
    }

    #[test]
    fn empty_file_has_no_events() {
        let s = no_events(Vec::new());
        assert_eq!(s.lines, 0);
    }

    #[test]
    fn prose_has_no_events_and_names_the_first_bad_line() {
        let s = no_events(b"# A README\n\nSome prose about traces.\nMore prose.\n".to_vec());
        assert_eq!((s.lines, s.blank_lines, s.malformed), (4, 2, 2));
        assert_eq!(s.malformed_examples[0].line, 3);
    }

    #[test]
    fn random_bytes_have_no_events_and_print_no_control_characters() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let bytes: Vec<u8> = (0..100_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        let s = no_events(bytes);
        assert!(s.malformed > 0);
        for m in &s.malformed_examples {
            assert!(
                m.text.chars().all(|c| c.is_ascii_graphic() || c == ' '),
                "{m:?}"
            );
        }
    }

    #[test]
    fn a_cut_last_line_is_skipped_not_replayed() {
        let good = " a b 1 [001] 1.000002: kmem:mm_page_free: page=0x10 pfn=0x10 order=0\n";
        let mut text = good.repeat(2).into_bytes();
        // Cut inside `order=10`: the prefix parses as a valid order-1 free.
        text.extend_from_slice(
            b" a b 1 [001] 1.000004: kmem:mm_page_free: page=0x10 pfn=0x10 order=1",
        );
        let (v, s) = read(text.clone(), ReadOptions::default()).unwrap();
        assert_eq!(v.len(), 2);
        assert!(s.truncated_last_line);
        assert_eq!(s.skipped(), 1);
        assert_eq!(s.malformed_examples[0].line, 3);
        let err = read(text, STRICT).unwrap_err();
        assert!(err.to_string().contains("t.txt:3: cut short"), "{err}");
    }

    #[test]
    fn cpus_and_pfns_outside_the_machine_are_skipped_with_their_line() {
        let text = "\
x 1 [000] 1.0: kmem:mm_page_free: pfn=0x10 order=0
x 1 [9999] 1.0: kmem:mm_page_free: pfn=0x10 order=0
x 1 [300] 1.0: kmem:mm_page_free: pfn=0x10 order=0
x 1 [001] 1.0: kmem:mm_page_free: pfn=0x1000 order=0
x 1 [65536] 1.0: kmem:mm_page_free: pfn=0x10 order=0
x 1 [4294967296] 1.0: kmem:mm_page_free: pfn=0x10 order=0
";
        let opts = ReadOptions {
            nr_cpus: Some(2),
            end_pfn: Some(0x1000),
            ..ReadOptions::default()
        };
        let (v, s) = read(text.as_bytes().to_vec(), opts).unwrap();
        assert_eq!(v.len(), 1);
        // A CPU past 16 bits is a CPU out of range like any other; one past 32
        // bits no kernel writes, and is a malformed line.
        assert_eq!((s.cpu_out_of_range, s.pfn_out_of_range), (3, 1));
        assert_eq!(s.malformed, 1);
        let lines: Vec<u64> = s.malformed_examples.iter().map(|m| m.line).collect();
        assert_eq!(lines, [2, 3, 4, 5, 6]);
        assert!(s.malformed_examples[3].reason.contains("CPU 65536"));
        assert!(s.malformed_examples[0].reason.contains("CPU 9999"));
    }

    #[test]
    fn lines_across_block_boundaries_parse_whole() {
        // Enough lines to span several blocks, each parsed exactly once.
        let line = " a b 1 [001] 1.000002: kmem:mm_page_free: page=0x10 pfn=0x10 order=0\n";
        let n = 3 * BLOCK_BYTES / line.len() + 7;
        let (v, s) = read(line.repeat(n).into_bytes(), STRICT).unwrap();
        assert_eq!(v.len(), n);
        assert_eq!(s.lines, n as u64);
        assert_eq!(v.last().map(|r| r.line), Some(n as u64));
    }
}
