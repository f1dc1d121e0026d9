//! The README names, for each rule of the controller and each mutant a test was
//! written for, the test that pins it. This checks that every test so named exists:
//! a renamed or deleted test would otherwise leave the README pointing at nothing.
//! Guards the sections "How it decides" and "Mutation testing" (rename a test named
//! there and this fails, naming it).

use std::fs;
use std::path::{Path, PathBuf};

/// The text of README.md from the `## ` or `### ` heading `title` to the next
/// heading of the same or a higher level (not counting `#` lines of code blocks).
fn section(readme: &str, title: &str) -> String {
    let mut lines = readme.lines();
    let heading = lines
        .by_ref()
        .find(|l| l.trim_start_matches('#').trim() == title && l.starts_with('#'))
        .unwrap_or_else(|| panic!("README.md has no section {title:?}"));
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut in_code = false;
    lines
        .take_while(|l| {
            if l.starts_with("```") {
                in_code = !in_code;
            }
            let hashes = l.chars().take_while(|c| *c == '#').count();
            in_code || hashes == 0 || hashes > level || !l[hashes..].starts_with(' ')
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Backquoted words that look like test names: lower case with at least three
/// underscores (`next_deadline` or `--route-list-max-age` are not).
fn test_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            w.matches('_').count() >= 3
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `source` declares `fn name(` as a test: `#[test]` among the attributes
/// and comments right above it, or inside a `proptest!` block.
fn declares_test(source: &str, name: &str) -> bool {
    let lines: Vec<&str> = source.lines().collect();
    let declaration = format!("fn {name}(");
    lines.iter().enumerate().any(|(i, line)| {
        if !line.trim_start().starts_with(&declaration) {
            return false;
        }
        let mut attributes = lines[..i]
            .iter()
            .rev()
            .map(|l| l.trim())
            .take_while(|l| l.starts_with("#[") || l.starts_with("//"));
        attributes.any(|l| l.starts_with("#[test]")) || source.contains("proptest!")
    })
}

#[test]
fn every_test_the_readme_names_for_a_rule_or_a_mutant_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = fs::read_to_string(root.join("README.md")).expect("read README.md");
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    rust_files(&root.join("src"), &mut files);
    let sources: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|p| {
            let text = fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect();
    for title in ["How it decides", "Mutation testing"] {
        let names = test_names(&section(&readme, title));
        assert!(
            names.len() >= 10,
            "README section {title:?} names only {names:?}: has the section moved?"
        );
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !sources.iter().any(|(_, s)| declares_test(s, n)))
            .collect();
        assert!(
            missing.is_empty(),
            "README section {title:?} names tests that do not exist (renamed? fix the README): {missing:?}"
        );
        println!("{title}: {} tests named, all exist", names.len());
    }
}
