//! The README names, for each rule of the controller and each mutant a test was
//! written for, the test that pins it. This checks that every test so named exists:
//! a renamed or deleted test would otherwise leave the README pointing at nothing.
//! Guards the sections "How it decides" and "Mutation testing" (rename a test named
//! there and this fails, naming it).

use std::fs;
use std::path::{Path, PathBuf};

/// The READMEs whose sections these checks read: the manual and, beside their code, the
/// accounts of the measurements and of the tests.
const DOCS: [&str; 3] = ["README.md", "benches/README.md", "tests/README.md"];

/// The text of the section `title`, in whichever of `DOCS` holds it: from its heading to
/// the next heading of the same or a higher level (not counting `#` lines of code
/// blocks). Exactly one of them must hold it, so a moved section is followed.
fn section(root: &Path, title: &str) -> String {
    let is_heading = |l: &&str| l.starts_with('#') && l.trim_start_matches('#').trim() == title;
    let holders: Vec<(&str, String)> = DOCS
        .iter()
        .map(|d| {
            let text = fs::read_to_string(root.join(d)).unwrap_or_else(|e| panic!("read {d}: {e}"));
            (*d, text)
        })
        .filter(|(_, text)| text.lines().any(|l| is_heading(&l)))
        .collect();
    let [(_, text)] = holders.as_slice() else {
        let names: Vec<&str> = holders.iter().map(|(d, _)| *d).collect();
        panic!("the section {title:?} must be in exactly one of {DOCS:?}, not in {names:?}");
    };
    let mut lines = text.lines();
    let heading = lines.by_ref().find(is_heading).expect("found above");
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
    for title in ["The rules and the tests that pin them", "Mutation testing"] {
        let names = test_names(&section(root, title));
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

/// The tables of a README section, each with its lead-in: the text between the end of
/// the previous table or the last heading, whichever is later, and the table (the
/// heading included), so that one table's commit cannot stand in for another's.
fn tables_with_lead_ins(section: &str) -> Vec<(String, String)> {
    let mut tables = Vec::new();
    let (mut lead_in, mut table) = (Vec::new(), Vec::new());
    let mut in_code = false;
    for line in section.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('|') {
            table.push(line);
            continue;
        }
        if !table.is_empty() {
            tables.push((lead_in.join("\n"), table.join("\n")));
            lead_in.clear();
            table.clear();
        }
        if !in_code && line.starts_with('#') {
            lead_in.clear();
        }
        lead_in.push(line);
    }
    if !table.is_empty() {
        tables.push((lead_in.join("\n"), table.join("\n")));
    }
    tables
}

/// Backquoted words of exactly 7 lower-case hex digits: the short commits the README
/// cites (`6485324f`, eight digits, is another project's commit and not matched).
fn short_commits(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.len() == 7 && w.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')))
        .collect()
}

/// Whether this repository's git knows `commit` as a commit.
fn git_knows(root: &Path, commit: &str) -> bool {
    let status = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .status()
        .unwrap_or_else(|e| panic!("running git failed ({e}): install git to run this test"));
    status.success()
}

/// Guards the sections "What `simulate` shows" and "Benchmarks": a table of measured
/// figures must say which command prints it and on which commit it was measured, so a
/// reader can re-run it and see what changed since. A table whose lead-in names a
/// `cargo bench` or `simulate` command is measured, and needs a commit that git knows
/// (delete "measured on `…`" above a table, or cite a commit that does not exist, and
/// this fails naming the table); one that names only a `cargo test` holds counts the
/// test asserts, which keeps them true without a commit.
#[test]
fn every_benchmark_table_names_its_command_and_a_commit_git_knows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for title in ["What `simulate` shows", "Benchmarks"] {
        let tables = tables_with_lead_ins(&section(root, title));
        assert!(
            tables.len() >= 2,
            "README section {title:?} has only {} table(s): has the section moved?",
            tables.len()
        );
        for (lead_in, table) in &tables {
            let first_row = table.lines().next().unwrap_or_default();
            let measured = lead_in.contains("`cargo bench")
                || lead_in.contains("`RC_BENCH_")
                || lead_in.contains("-- simulate");
            assert!(
                measured || lead_in.contains("`cargo test"),
                "README section {title:?}: the table {first_row:?} names no command that prints \
                 or asserts it (`cargo bench -- …`, `cargo run --release -- simulate …` or \
                 `cargo test …`) in the text above it"
            );
            if !measured {
                continue;
            }
            let commits = short_commits(lead_in);
            assert!(
                !commits.is_empty(),
                "README section {title:?}: the table {first_row:?} does not say which commit it \
                 was measured on: write \"measured on `abc1234`\" (the commit the bench prints \
                 first) in the text above it"
            );
            let unknown: Vec<&&str> = commits.iter().filter(|c| !git_knows(root, c)).collect();
            assert!(
                unknown.is_empty(),
                "README section {title:?}: the table {first_row:?} cites commits git does not \
                 know: {unknown:?} (a typo, or measured on a commit since rebased away and not \
                 in this clone: re-measure)"
            );
        }
        println!(
            "{title}: {} tables, each with its command and commit",
            tables.len()
        );
    }
}
