//! `calls.jsonl` written as calls settle: its header line first, then all of the calls, a
//! uniform sample, or none; whatever the selection, the SHA-256 of every call record (as `all`
//! would write them, header excluded) is computed for the run's comparable digest, so
//! record/replay checks do not depend on the selection — unless nothing reads it (validation,
//! calibration, sweep points and benches read only figures; `run` without `--record` has no
//! recording's trailer to write) and the caller skips it with [`CallsDigest::Skipped`].

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use blis_contracts::{CallRecord, CallsHeader, ServedPool};
use blis_kernel::{Streams, Substream};
use sha2::{Digest, Sha256};

/// The largest sample: the sample is held in memory until the run ends (about 1 KB a call).
pub const MAX_SAMPLE: u64 = 1_000_000;

/// Which calls `calls.jsonl` holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallSelection {
    /// Every call (the default).
    #[default]
    All,
    /// A uniform random sample of this many calls (all of them if there are fewer), drawn by
    /// reservoir sampling from the substream `("output/calls", "sample", "")`, in file order.
    Sample(u64),
    /// No call; the file is not written.
    None,
}

impl FromStr for CallSelection {
    type Err = String;

    /// `all`, `none`, or `sample N` (also `sample:N`) with 1 ≤ N ≤ [`MAX_SAMPLE`].
    fn from_str(text: &str) -> Result<CallSelection, String> {
        let words: Vec<&str> = text.split([' ', ':', '=']).filter(|w| !w.is_empty()).collect();
        match words.as_slice() {
            ["all"] => Ok(CallSelection::All),
            ["none"] => Ok(CallSelection::None),
            ["sample", n] => match n.parse::<u64>() {
                Ok(n) if (1..=MAX_SAMPLE).contains(&n) => Ok(CallSelection::Sample(n)),
                _ => Err(format!(
                    "the sample size must be a whole number from 1 to {MAX_SAMPLE} (the sample is held in memory until the run ends), got `{n}`"
                )),
            },
            _ => Err(format!("must be `all`, `sample N` or `none`, got `{text}`")),
        }
    }
}

/// Whether a run digests its call records for the comparable digest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallsDigest {
    /// Every record is serialised and hashed (the default; record/replay checks need it).
    #[default]
    Computed,
    /// Nothing is hashed, and a record is serialised only to be written: for callers that read
    /// only the figures, where the serialisation and hash are a tenth of the run.
    Skipped,
}

/// Why the calls could not be written.
#[derive(Debug)]
pub struct CallsOutError {
    /// The file.
    pub path: PathBuf,
    /// What failed.
    pub error: std::io::Error,
}

impl fmt::Display for CallsOutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write {}: {}", self.path.display(), self.error)
    }
}

/// Where replication 0's records go, as they settle.
pub struct CallsOut {
    header: CallsHeader,
    selection: CallSelection,
    file: Option<ChunkedFile>,
    kept: Vec<CallRecord>,
    reservoir: Vec<(u64, CallRecord)>,
    sampler: Substream,
    seen: u64,
    line: Vec<u8>,
    digest: Option<Sha256>,
}

impl CallsOut {
    /// Records selected by `selection`, streamed into `path` (created or truncated) or, without
    /// a path, kept in memory for the caller, under `header` (its pools filled in by
    /// [`CallsOut::begin`]); `seed` seeds the sample; `digest` says whether every record is
    /// hashed.
    pub fn new(
        selection: CallSelection,
        path: Option<&Path>,
        seed: u64,
        header: CallsHeader,
        digest: CallsDigest,
    ) -> Result<CallsOut, CallsOutError> {
        let file = match path.filter(|_| selection != CallSelection::None) {
            Some(path) => Some(ChunkedFile {
                path: path.to_owned(),
                file: replace(path).map_err(|error| CallsOutError { path: path.to_owned(), error })?,
                pending: Vec::new(),
            }),
            None => None,
        };
        Ok(CallsOut {
            header,
            selection,
            file,
            kept: Vec::new(),
            reservoir: Vec::new(),
            sampler: Streams::new(seed).stream("output/calls", "sample", ""),
            seen: 0,
            line: Vec::new(),
            digest: (digest == CallsDigest::Computed).then(Sha256::new),
        })
    }

    /// Name what serves the calls and write the header line; before any record.
    pub fn begin(&mut self, pools: Vec<ServedPool>) -> Result<(), CallsOutError> {
        self.header.pools = pools;
        if let Some(file) = &mut self.file {
            serde_json::to_writer(&mut file.pending, &self.header)
                .map_err(|error| CallsOutError { path: file.path.clone(), error: error.into() })?;
            file.pending.push(b'\n');
        }
        Ok(())
    }

    /// One record, the next in file order; the record is handed back when nothing keeps it (so
    /// that the thread that made it frees it), a displaced sample record in its place.
    pub fn write(&mut self, record: CallRecord) -> Result<Option<CallRecord>, CallsOutError> {
        match &mut self.file {
            Some(file) if self.selection == CallSelection::All => {
                let line = file.push_line(&record);
                if let Some(digest) = &mut self.digest {
                    digest.update(line);
                }
                file.write_when_full()?;
            }
            _ => {
                if let Some(digest) = &mut self.digest {
                    self.line.clear();
                    record.write_json(&mut self.line);
                    self.line.push(b'\n');
                    digest.update(&self.line);
                }
            }
        }
        let index = self.seen;
        self.seen += 1;
        Ok(match self.selection {
            CallSelection::All => match &self.file {
                Some(_) => Some(record),
                None => {
                    self.kept.push(record);
                    None
                }
            },
            CallSelection::Sample(size) => {
                if index < size {
                    self.reservoir.push((index, record));
                    None
                } else {
                    let slot = self.sampler.below(index + 1);
                    if slot < size {
                        Some(std::mem::replace(&mut self.reservoir[slot as usize], (index, record)).1)
                    } else {
                        Some(record)
                    }
                }
            }
            CallSelection::None => Some(record),
        })
    }

    /// Write out the sample and the lines still pending; the header, the records kept in
    /// memory and the SHA-256 (hex) of every record in file order, unless it was skipped.
    pub fn finish(mut self) -> Result<(CallsHeader, Vec<CallRecord>, Option<String>), CallsOutError> {
        self.reservoir.sort_by_key(|(index, _)| *index);
        for (_, record) in std::mem::take(&mut self.reservoir) {
            match &mut self.file {
                Some(file) => {
                    file.push_line(&record);
                    file.write_when_full()?;
                }
                None => self.kept.push(record),
            }
        }
        if let Some(file) = &mut self.file {
            file.write_pending()?;
        }
        let digest = self.digest.map(|d| d.finalize().iter().map(|b| format!("{b:02x}")).collect());
        Ok((self.header, self.kept, digest))
    }
}

/// The file with the lines not written yet, written in large chunks: records are serialised
/// straight into the chunk, which saves a buffered writer's copy of every byte.
struct ChunkedFile {
    path: PathBuf,
    file: File,
    /// Lines not written yet (at most [`ChunkedFile::CHUNK_BYTES`] and a line).
    pending: Vec<u8>,
}

impl ChunkedFile {
    /// Bytes of lines gathered before they are written in one call.
    const CHUNK_BYTES: usize = 256 * 1024;

    /// Serialise `record` as the next line; the line.
    fn push_line(&mut self, record: &CallRecord) -> &[u8] {
        let start = self.pending.len();
        record.write_json(&mut self.pending);
        self.pending.push(b'\n');
        &self.pending[start..]
    }

    /// Write the pending lines once they fill a chunk.
    fn write_when_full(&mut self) -> Result<(), CallsOutError> {
        if self.pending.len() >= Self::CHUNK_BYTES { self.write_pending() } else { Ok(()) }
    }

    /// Write every pending line.
    fn write_pending(&mut self) -> Result<(), CallsOutError> {
        self.file
            .write_all(&self.pending)
            .map_err(|error| CallsOutError { path: self.path.clone(), error })?;
        self.pending.clear();
        Ok(())
    }
}

/// A new, empty file at `path`: an earlier regular file there is replaced rather than truncated,
/// since ext4 (`auto_da_alloc`, on by default) starts writing back a truncated file's new
/// contents when it is closed, which kept a 100k-request run 40 ms longer (4% of its wall time)
/// whenever it wrote over an earlier run's `calls.jsonl`. Anything else at `path` (a device
/// such as `/dev/null`, a pipe, a link) is opened and truncated as before, never removed.
fn replace(path: &Path) -> std::io::Result<File> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_file() => std::fs::remove_file(path)?,
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    File::create(path)
}

impl Drop for ChunkedFile {
    /// A run that ends in an error still leaves the lines it settled in the file, as a buffered
    /// writer would; the error that ended the run is the one reported.
    fn drop(&mut self) {
        let _ = self.write_pending();
    }
}

#[cfg(test)]
mod tests {
    use blis_contracts::{CALLS_SCHEMA, Fate, Writer};

    use super::*;

    fn header() -> CallsHeader {
        CallsHeader {
            calls: CALLS_SCHEMA.to_owned(),
            writer: Writer::Run,
            blis_actor_version: "0".to_owned(),
            server: None,
            pools: Vec::new(),
            workload_sha256: String::new(),
        }
    }

    fn record(index: u64) -> CallRecord {
        CallRecord {
            replication: 0,
            request_id: format!("r-{index}"),
            request: format!("r-{index}"),
            node: "llm".into(),
            parents: Vec::new(),
            client: "c".into(),
            arrival_us: index,
            input_tokens: 1,
            output_tokens: 200,
            instance: "e".into(),
            cached_tokens: 0,
            preemptions: 0,
            fate: Fate::Completed,
            settled_us: Some(index + 9),
            token_latency_us: (0..200).map(|k| 1_000 + index * k).collect(),
            request_e2e_us: None,
            disaggregated: None,
        }
    }

    fn line(record: &CallRecord) -> Vec<u8> {
        let mut line = Vec::new();
        record.write_json(&mut line);
        line.push(b'\n');
        line
    }

    #[test]
    fn the_file_holds_the_header_and_every_line_in_order_across_many_chunks() {
        // About 2.5 MB of lines: ten chunks and a partial one, and the digest of the lines.
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("calls.jsonl");
        let mut out =
            CallsOut::new(CallSelection::All, Some(&path), 1, header(), CallsDigest::Computed).unwrap();
        out.begin(Vec::new()).unwrap();
        let mut expected = serde_json::to_vec(&header()).unwrap();
        expected.push(b'\n');
        let mut digest = Sha256::new();
        for index in 0..2_000 {
            let record = record(index);
            let line = line(&record);
            expected.extend_from_slice(&line);
            digest.update(&line);
            assert!(out.write(record).unwrap().is_some(), "a written record is handed back");
        }
        let (_, kept, sha) = out.finish().unwrap();
        assert!(kept.is_empty());
        assert!(expected.len() > 9 * ChunkedFile::CHUNK_BYTES);
        assert!(std::fs::read(&path).unwrap() == expected, "the file's bytes differ");
        let hex: String = digest.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(sha, Some(hex));
    }

    #[test]
    fn a_run_that_stops_early_leaves_its_lines_in_the_file() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("calls.jsonl");
        let mut out =
            CallsOut::new(CallSelection::All, Some(&path), 1, header(), CallsDigest::Skipped).unwrap();
        out.begin(Vec::new()).unwrap();
        out.write(record(0)).unwrap();
        drop(out);
        let text = std::fs::read(&path).unwrap();
        assert!(text.ends_with(&line(&record(0))), "the settled line is written when dropped");
    }

    #[test]
    fn an_earlier_file_is_replaced_a_device_or_link_written_through_and_a_folder_refused() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("calls.jsonl");
        std::fs::write(&path, vec![b'x'; 100_000]).unwrap();
        let held = std::fs::File::open(&path).unwrap();
        let mut out =
            CallsOut::new(CallSelection::All, Some(&path), 1, header(), CallsDigest::Skipped).unwrap();
        out.begin(Vec::new()).unwrap();
        out.write(record(0)).unwrap();
        out.finish().unwrap();
        let mut expected = serde_json::to_vec(&header()).unwrap();
        expected.push(b'\n');
        expected.extend_from_slice(&line(&record(0)));
        assert!(std::fs::read(&path).unwrap() == expected, "nothing of the earlier file is left");
        // A reader of the earlier file still reads it whole: the file was replaced, not cut.
        assert_eq!(held.metadata().unwrap().len(), 100_000);

        // A device is written to, never replaced.
        let mut out = CallsOut::new(
            CallSelection::All,
            Some(Path::new("/dev/null")),
            1,
            header(),
            CallsDigest::Skipped,
        )
        .unwrap();
        out.begin(Vec::new()).unwrap();
        out.write(record(0)).unwrap();
        out.finish().unwrap();
        assert!(!std::fs::symlink_metadata("/dev/null").unwrap().file_type().is_file());
        let link = folder.path().join("link.jsonl");
        let target = folder.path().join("target.jsonl");
        std::fs::write(&target, b"old").unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&target, &link).unwrap();
            let mut out =
                CallsOut::new(CallSelection::All, Some(&link), 1, header(), CallsDigest::Skipped).unwrap();
            out.begin(Vec::new()).unwrap();
            out.finish().unwrap();
            assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link is kept");
            assert!(std::fs::read(&target).unwrap().starts_with(b"{"), "written through the link");
        }

        let occupied = folder.path().join("a-folder");
        std::fs::create_dir(&occupied).unwrap();
        let refused = CallsOut::new(CallSelection::All, Some(&occupied), 1, header(), CallsDigest::Skipped);
        let message = refused.err().expect("a folder is not replaced").to_string();
        assert!(message.starts_with(&format!("cannot write {}", occupied.display())), "{message}");
    }

    #[test]
    fn selections_parse_and_refuse() {
        assert_eq!("all".parse(), Ok(CallSelection::All));
        assert_eq!("none".parse(), Ok(CallSelection::None));
        assert_eq!("sample 10".parse(), Ok(CallSelection::Sample(10)));
        assert_eq!("sample:3".parse(), Ok(CallSelection::Sample(3)));
        assert!("sample 0".parse::<CallSelection>().is_err());
        assert_eq!("sample 1000000".parse(), Ok(CallSelection::Sample(MAX_SAMPLE)));
        assert!("sample 1000001".parse::<CallSelection>().is_err());
        assert!("sample".parse::<CallSelection>().is_err());
        assert!("some".parse::<CallSelection>().is_err());
    }
}
