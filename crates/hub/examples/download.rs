//! Downloads one file of a model repository with guidebench's Hub client
//! into the cache, and says where it is, how big it is and how long it
//! took (what `bench/hub-download` times beside `huggingface_hub`).
//!
//! ```text
//! HF_ENDPOINT=http://127.0.0.1:PORT HF_HUB_CACHE=DIR \
//!     cargo run --release -p guidebench-hub --example download -- ORG/NAME FILE
//! ```
//!
//! The settings are the environment's ([`HubSettings::from_env`]:
//! `HF_ENDPOINT`, `HF_HUB_CACHE`, `HF_TOKEN`, ...). Prints three lines,
//! `snapshot=PATH` (the file in the snapshot folder), `bytes=N` (its
//! size) and `seconds=S` (the whole [`Hub::snapshot`] call: the
//! repository-info request, the file's `HEAD`, the download with its
//! SHA-256 check, and the link). A file already in the cache is not
//! downloaded again (`downloaded=0` then, else `downloaded=1`).

use std::process::ExitCode;
use std::time::Instant;

use guidebench_hub::{Error, Hub, HubSettings, RepoKind, RepoRef, block_on};

const USAGE: &str = "usage: download ORG/NAME[@REVISION] FILE";

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let [repo, file] = arguments.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match run(repo, file) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("download: {error}");
            ExitCode::from(if error.is_usage() { 2 } else { 1 })
        }
    }
}

fn run(repo: &str, file: &str) -> Result<(), Error> {
    let (id, revision) = match repo.split_once('@') {
        Some((id, revision)) => (id, Some(revision)),
        None => (repo, None),
    };
    let repo = RepoRef::new(RepoKind::Model, id, revision)?;
    let hub = Hub::new(HubSettings::from_env())?;
    let started = Instant::now();
    let snapshot = block_on(hub.snapshot(&repo, &|listing: &[String]| {
        if listing.iter().any(|f| f == file) {
            Ok(vec![file.to_owned()])
        } else {
            Err(Error::NoMatch {
                kind: RepoKind::Model,
                repo: repo.id.clone(),
                what: format!("no file `{file}` among {} files", listing.len()),
            })
        }
    }))??;
    let seconds = started.elapsed().as_secs_f64();
    let path = snapshot.dir.join(file);
    let bytes = std::fs::metadata(&path)
        .map_err(|e| Error::io(&path, e))?
        .len();
    println!("snapshot={}", path.display());
    println!("bytes={bytes}");
    println!("seconds={seconds:.3}");
    println!("downloaded={}", snapshot.downloaded.len());
    Ok(())
}
