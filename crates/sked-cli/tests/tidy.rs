//! Tidy checks over the workspace's sources, run as an ordinary test.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_file_starts_with_a_doc_line_and_has_no_dbg() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    rust_files(crates, &mut files);
    assert!(files.len() > 20, "found only {} files", files.len());
    let dbg = ["dbg", "!("].concat();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.starts_with("//!"),
            "{} must start with a `//!` line saying what it is",
            f.display()
        );
        assert!(
            !text.contains(&dbg),
            "{} contains a stray {dbg}",
            f.display()
        );
    }
}
