//! The READMEs keep their promises to a reader who follows them. The manual
//! (README.md) sums up; the full accounts live beside their code: the measurements in
//! benches/README.md, the tests, reliability runs and mutation testing in
//! tests/README.md, the plugins' protocol in testdata/plugins/README.md. These checks
//! read all of them, wherever a section now is:
//!
//! - every test they name (for a rule of the controller, a mutant, a fault) exists under
//!   that name: a renamed or deleted test would otherwise leave them pointing at nothing;
//! - every measured table, and every row of the README's headline comparisons, names the
//!   command that prints it and a commit git knows;
//! - every relative link between them reaches a file, and a heading of it by GitHub's
//!   anchor rules;
//! - tests/README.md says what each test file runs against;
//! - the README stays a manual: under 1 500 lines.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The manual, then the accounts beside their code.
const DOCS: [&str; 4] = [
    "README.md",
    "benches/README.md",
    "tests/README.md",
    "testdata/plugins/README.md",
];

/// The README is the operator's and embedder's manual; past this the evidence is
/// creeping back (it was 3 227 lines before the accounts moved beside their code).
const README_MAX_LINES: usize = 1500;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(doc: &str) -> String {
    fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("read {doc}: {e}"))
}

/// The lines of `text` outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut in_code = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            out.push((i + 1, line));
        }
    }
    out
}

/// The heading's level and text, for a Markdown ATX heading (`## Text`).
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    let text = line[level..].strip_prefix(' ')?;
    (level > 0).then_some((level, text.trim()))
}

/// The text of the section `title`, in whichever of `DOCS` holds it: from its heading to
/// the next heading of the same or a higher level (not counting `#` lines of code
/// blocks). Exactly one of them must hold it, so a moved section is followed.
fn section(title: &str) -> String {
    let holders: Vec<(&str, String)> = DOCS
        .iter()
        .map(|d| (*d, read(d)))
        .filter(|(_, text)| {
            prose_lines(text)
                .iter()
                .any(|(_, l)| heading(l).is_some_and(|(_, t)| t == title))
        })
        .collect();
    let [(_, text)] = holders.as_slice() else {
        let names: Vec<&str> = holders.iter().map(|(d, _)| *d).collect();
        panic!("the section {title:?} must be in exactly one of {DOCS:?}, not in {names:?}");
    };
    let mut lines = text.lines();
    let level = lines
        .by_ref()
        .find_map(|l| heading(l).filter(|(_, t)| *t == title).map(|(n, _)| n))
        .expect("found above");
    let mut in_code = false;
    lines
        .take_while(|l| {
            if l.starts_with("```") {
                in_code = !in_code;
            }
            in_code || heading(l).is_none_or(|(n, _)| n > level)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Backquoted words that look like test names: lower case with at least three
/// underscores (`next_deadline` or `--route-list-max-age` are not), starting with a
/// letter (`_on_1_31` is a suffix), and not a metric (`route_controller_…`).
fn test_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            w.matches('_').count() >= 3
                && w.starts_with(|c: char| c.is_ascii_lowercase())
                && !w.starts_with("route_controller_")
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

/// Guards "The rules and the tests that pin them" and "Mutation testing" (each must
/// name at least ten tests, or it has moved out of reach), and every other test the
/// READMEs name: rename a test named there and this fails, naming it and the file.
#[test]
fn every_test_the_readme_names_for_a_rule_or_a_mutant_exists() {
    let mut files = Vec::new();
    rust_files(&root().join("tests"), &mut files);
    rust_files(&root().join("src"), &mut files);
    let sources: Vec<String> = files
        .iter()
        .map(|p| fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect();
    let exists = |name: &String| sources.iter().any(|s| declares_test(s, name));
    for title in ["The rules and the tests that pin them", "Mutation testing"] {
        let names = test_names(&section(title));
        assert!(
            names.len() >= 10,
            "the section {title:?} names only {names:?}: has it moved?"
        );
    }
    for doc in DOCS {
        let names = test_names(&read(doc));
        let missing: Vec<&String> = names.iter().filter(|n| !exists(n)).collect();
        assert!(
            missing.is_empty(),
            "{doc} names tests that do not exist (renamed? fix the text): {missing:?}"
        );
        println!("{doc}: {} tests named, all exist", names.len());
    }
}

/// The tables of a text, each with its lead-in: the text between the end of the
/// previous table or the last heading, whichever is later, and the table (the heading
/// included), so that one table's commit cannot stand in for another's.
fn tables_with_lead_ins(text: &str) -> Vec<(String, String)> {
    let mut tables = Vec::new();
    let (mut lead_in, mut table) = (Vec::new(), Vec::new());
    let mut in_code = false;
    for line in text.lines() {
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
        if !in_code && heading(line).is_some() {
            lead_in.clear();
        }
        lead_in.push(line);
    }
    if !table.is_empty() {
        tables.push((lead_in.join("\n"), table.join("\n")));
    }
    tables
}

/// Backquoted words of exactly 7 lower-case hex digits: the short commits the READMEs
/// cite (`6485324f`, eight digits, is another project's commit and not matched).
fn short_commits(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.len() == 7 && w.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')))
        .collect()
}

/// Whether this repository's git knows `commit` as a commit.
fn git_knows(commit: &str) -> bool {
    let status = std::process::Command::new("git")
        .arg("-C")
        .arg(root())
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .status()
        .unwrap_or_else(|e| panic!("running git failed ({e}): install git to run this test"));
    status.success()
}

/// Whether `text` names a command that prints measured figures.
fn names_a_measuring_command(text: &str) -> bool {
    text.contains("`cargo bench") || text.contains("`RC_BENCH_") || text.contains("-- simulate")
}

/// Checks one measured table or row: a command that prints or asserts it, and for a
/// measured one a commit git knows. `what` names it in the failure.
fn check_command_and_commit(what: &str, text: &str) {
    let measured = names_a_measuring_command(text);
    assert!(
        measured || text.contains("`cargo test") || text.contains("`.ci/mutants"),
        "{what} names no command that prints or asserts it (`cargo bench -- …`, \
         `cargo run --release -- simulate …`, `cargo test …` or `.ci/mutants …`)"
    );
    if !measured {
        return;
    }
    let commits = short_commits(text);
    assert!(
        !commits.is_empty(),
        "{what} does not say which commit it was measured on: write \"measured on \
         `abc1234`\" (the commit the bench prints first)"
    );
    let unknown: Vec<&&str> = commits.iter().filter(|c| !git_knows(c)).collect();
    assert!(
        unknown.is_empty(),
        "{what} cites commits git does not know: {unknown:?} (a typo, or measured on a \
         commit since rebased away and not in this clone: re-measure)"
    );
}

/// Guards every table of benches/README.md, tests/README.md and the README's "Try it": a
/// table of
/// measured figures must say which command prints it and on which commit it was
/// measured, so a reader can re-run it and see what changed since. A table whose
/// lead-in names a `cargo bench` or `simulate` command is measured, and needs a commit
/// that git knows (delete "measured on `…`" above a table, or cite a commit that does
/// not exist, and this fails naming the table); one that names only a `cargo test`
/// holds counts the test asserts, which keeps them true without a commit, and the
/// mutation-testing table names `.ci/mutants`, whose runs its text dates.
#[test]
fn every_benchmark_table_names_its_command_and_a_commit_git_knows() {
    let sources = [
        ("benches/README.md", read("benches/README.md")),
        ("tests/README.md", read("tests/README.md")),
        ("README.md, Try it", section("Try it")),
    ];
    for (doc, text) in &sources {
        let tables = tables_with_lead_ins(text);
        assert!(!tables.is_empty(), "{doc} has no table: has it moved?");
        for (lead_in, table) in &tables {
            let first_row = table.lines().next().unwrap_or_default();
            check_command_and_commit(&format!("{doc}: the table {first_row:?}"), lead_in);
        }
        println!("{doc}: {} tables, each with its command", tables.len());
    }
}

/// Guards the README's "Evidence": each row of its table of headline comparisons names
/// its command and, if measured, a commit git knows, and links to its full account in
/// benches/README.md or tests/README.md (whose anchor the link check below resolves).
#[test]
fn every_headline_row_names_its_command_and_commit_and_links_its_account() {
    let evidence = section("Evidence");
    let tables = tables_with_lead_ins(&evidence);
    let [(_, table)] = tables.as_slice() else {
        panic!(
            "the README's Evidence must hold one table, not {}",
            tables.len()
        );
    };
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert!(
        rows.len() >= 5,
        "the Evidence table has only {} rows",
        rows.len()
    );
    for row in rows {
        let what = row.split('|').nth(1).unwrap_or_default().trim();
        check_command_and_commit(&format!("the Evidence row {what:?}"), row);
        assert!(
            row.contains("](benches/README.md#") || row.contains("](tests/README.md#"),
            "the Evidence row {what:?} links to no full account in benches/README.md or \
             tests/README.md"
        );
    }
}

/// The anchor GitHub gives a heading: its rendered text (inline code and link text
/// kept, their markup dropped) in lower case, spaces made `-`, and every character
/// that is not a letter, a digit, `-` or `_` dropped.
fn anchor(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // A link renders as its text: `[text](target)` → `text`.
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|i| open + i) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|i| close + i) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor of a Markdown text, numbered as GitHub numbers repeats (`-1`, `-2`).
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (_, line) in prose_lines(text) {
        let Some((_, title)) = heading(line) else {
            continue;
        };
        let base = anchor(title);
        let mut candidate = base.clone();
        let mut n = 0;
        while !seen.insert(candidate.clone()) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
    }
    seen
}

/// The link targets of one line of prose: `](target)`, outside inline code.
fn link_targets(line: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 1 {
            continue;
        }
        let mut rest = part;
        while let Some(start) = rest.find("](") {
            rest = &rest[start + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            targets.push(&rest[..end]);
            rest = &rest[end..];
        }
    }
    targets
}

/// Guards the links between the manual and the accounts moved beside their code: every
/// relative link in the READMEs reaches an existing file, and a link with an anchor
/// into one of them reaches one of its headings. Rename a heading, or move a section
/// to another file, and this fails naming each link left pointing at nothing.
#[test]
fn every_relative_link_between_the_readmes_reaches_a_heading() {
    let docs: Vec<(PathBuf, String)> = DOCS.iter().map(|d| (root().join(d), read(d))).collect();
    let anchors_of: Vec<(PathBuf, HashSet<String>)> = docs
        .iter()
        .map(|(path, text)| (path.clone(), anchors(text)))
        .collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for ((path, text), doc) in docs.iter().zip(DOCS) {
        let dir = path.parent().expect("a doc is in a directory");
        for (number, line) in prose_lines(text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
                let file = if file.is_empty() {
                    path.clone()
                } else {
                    dir.join(file)
                };
                let Ok(file) = file.canonicalize() else {
                    broken.push(format!("{doc}:{number}: {target}: no such file"));
                    continue;
                };
                if fragment.is_empty() {
                    continue;
                }
                let known = anchors_of
                    .iter()
                    .find(|(p, _)| p.canonicalize().is_ok_and(|p| p == file));
                match known {
                    Some((_, anchors)) if anchors.contains(fragment) => {}
                    Some(_) => broken.push(format!("{doc}:{number}: {target}: no such heading")),
                    None => broken.push(format!(
                        "{doc}:{number}: {target}: an anchor into a file these checks do not read"
                    )),
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that reach nothing (a heading renamed or moved? fix the link):\n{}",
        broken.join("\n")
    );
    assert!(
        checked >= 50,
        "only {checked} relative links found: is the parser broken?"
    );
    println!("{checked} relative links, each reaching its file and heading");
}

/// The anchors this check computes are GitHub's, on headings of the kinds the READMEs
/// use (code, apostrophes, `--flags`, repeats).
#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(
        anchor("Hetzner Cloud (`--cloud-provider=hcloud`)"),
        "hetzner-cloud---cloud-providerhcloud"
    );
    assert_eq!(
        anchor("Azure: ours beside a model of cloud-provider-azure's route updater"),
        "azure-ours-beside-a-model-of-cloud-provider-azures-route-updater"
    );
    assert_eq!(
        anchor("A real 5 000-node cluster (`cargo bench -- scale`)"),
        "a-real-5-000-node-cluster-cargo-bench----scale"
    );
    assert_eq!(
        anchor("The protocol, `route-controller.plugin/v1`"),
        "the-protocol-route-controllerpluginv1"
    );
    assert_eq!(anchor("See [the docs](x.md#y) now"), "see-the-docs-now");
    let repeated = anchors("## Tests\n\n### Tests\n\n```\n# Tests\n```\n");
    assert_eq!(
        repeated,
        HashSet::from(["tests".to_string(), "tests-1".to_string()])
    );
}

/// Guards tests/README.md's table of what each test file runs against: every file of
/// `tests/*.rs` has its row, and every row names a file that exists. Add a test file
/// without its row, or rename one, and this fails naming it.
#[test]
fn every_test_file_has_a_row_saying_what_it_runs_against() {
    let tables = tables_with_lead_ins(&section("What runs against what"));
    let (_, table) = tables
        .first()
        .expect("tests/README.md's \"What runs against what\" has no table");
    let rows: HashSet<&str> = table
        .lines()
        .skip(2)
        .filter_map(|row| row.split('`').nth(1))
        .collect();
    let files: HashSet<String> = fs::read_dir(root().join("tests"))
        .expect("read tests/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".rs"))
        .map(|name| format!("tests/{name}"))
        .collect();
    let mut without_row: Vec<&String> = files
        .iter()
        .filter(|f| !rows.contains(f.as_str()))
        .collect();
    without_row.sort();
    assert!(
        without_row.is_empty(),
        "tests/README.md's table \"What runs against what\" has no row for {without_row:?}: \
         add one saying what each runs against (a real kube-apiserver, moto, a double, …)"
    );
    let mut stale: Vec<&&str> = rows.iter().filter(|r| !files.contains(**r)).collect();
    stale.sort();
    assert!(
        stale.is_empty(),
        "tests/README.md's table \"What runs against what\" names files that do not exist: \
         {stale:?} (renamed? fix the row)"
    );
    println!(
        "tests/README.md: a row for each of the {} test files",
        files.len()
    );
}

/// Guards the README's size: a manual an operator reads, not lab notes.
#[test]
fn the_readme_stays_under_1500_lines() {
    let lines = read("README.md").lines().count();
    assert!(
        lines < README_MAX_LINES,
        "README.md has {lines} lines, it must stay under {README_MAX_LINES}: move full accounts \
         (measurements, test runs) to benches/README.md or tests/README.md and link to them"
    );
    println!("README.md: {lines} lines");
}

/// The README's table of `run`'s flags, between its two markers.
const FLAG_TABLE_START: &str = "<!-- the table below is `run --help`'s, made by cli::flags::markdown_table; tests/readme_rules.rs keeps it so -->\n";
const FLAG_TABLE_END: &str = "\n<!-- end of run --help's table -->";

/// Guards that the README's flag table says what `run --help` says: both come from
/// the flag table of `run` (names, defaults, meaning). With `RC_UPDATE_README=1` the
/// test writes the table into the README instead of failing.
#[test]
fn the_run_flag_table_is_what_run_help_says() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = fs::read_to_string(&path).expect("read README.md");
    let start = readme
        .find(FLAG_TABLE_START)
        .expect("README.md has the start marker of run's flag table")
        + FLAG_TABLE_START.len();
    let end = start
        + readme[start..]
            .find(FLAG_TABLE_END)
            .expect("README.md has the end marker of run's flag table");
    let expected = route_controller::cli::flags::markdown_table(&route_controller::cli::run::SPEC);
    let expected = expected.trim_end();
    if readme[start..end] == *expected {
        return;
    }
    if std::env::var_os("RC_UPDATE_README").is_some() {
        let updated = format!("{}{expected}{}", &readme[..start], &readme[end..]);
        fs::write(&path, updated).expect("write README.md");
        return;
    }
    panic!(
        "README.md's table of run's flags differs from `run --help` (the flag table in \
         src/cli/run.rs and src/cli/ccm.rs); write it anew with \
         `RC_UPDATE_README=1 cargo test --test readme_rules the_run_flag_table`.\nExpected:\n{expected}"
    );
}
